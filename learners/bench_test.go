package learners_test

import (
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/mlstream/mlstream/internal/gen"
	"github.com/mlstream/mlstream/learners"
)

// benchEvents returns n events of exactly 20 non-zero features from a
// realistic vocabulary of 4,000 words (gen.FeatureEvents).
func benchEvents(n int) ([][]learners.Feature, []bool) { return gen.FeatureEvents(n, 4000) }

const benchN = 1 << 12

func BenchmarkLearn(b *testing.B) {
	feats, labels := benchEvents(benchN)
	for _, opt := range []string{"ftrl", "adagrad", "sgd"} {
		b.Run(opt, func(b *testing.B) {
			m, _ := learners.NewModel(learners.Config{Optimizer: opt})
			l := m.NewLearner()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				j := i & (benchN - 1)
				l.Learn(feats[j], labels[j])
				if l.Pending() == 1000 {
					l.Sync()
				}
				i++
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkLearnParallel runs one Learner per goroutine on one Model,
// syncing every 1000 events, as the partitions of a job do.
func BenchmarkLearnParallel(b *testing.B) {
	feats, labels := benchEvents(benchN)
	m, _ := learners.NewModel(learners.Config{})
	var seed atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		l := m.NewLearner()
		i := int(seed.Add(7919))
		for pb.Next() {
			j := i & (benchN - 1)
			l.Learn(feats[j], labels[j])
			if l.Pending() == 1000 {
				l.Sync()
			}
			i++
		}
		l.Sync()
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkPredict(b *testing.B) {
	feats, labels := benchEvents(benchN)
	m, _ := learners.NewModel(learners.Config{})
	l := m.NewLearner()
	for i := range feats {
		l.Learn(feats[i], labels[i])
	}
	l.Sync()
	b.Run("model", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			m.Predict(feats[i&(benchN-1)])
			i++
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("learner", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			l.Predict(feats[i&(benchN-1)])
			i++
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
}

// BenchmarkSync measures one Sync after 250 learned events (the partition
// share of a 1000-event sync group with 4 partitions); learning is not timed.
func BenchmarkSync(b *testing.B) {
	feats, labels := benchEvents(benchN)
	m, _ := learners.NewModel(learners.Config{})
	l := m.NewLearner()
	b.ReportAllocs()
	i := 0
	for range b.N {
		b.StopTimer()
		for range 250 {
			j := i & (benchN - 1)
			l.Learn(feats[j], labels[j])
			i++
		}
		b.StartTimer()
		l.Sync()
	}
	b.ReportMetric(250*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkPredictOptimizers measures Model.Predict for each optimizer,
// after learning the benchmark events once.
func BenchmarkPredictOptimizers(b *testing.B) {
	feats, labels := benchEvents(benchN)
	for _, opt := range []string{"ftrl", "adagrad", "sgd"} {
		b.Run(opt, func(b *testing.B) {
			m, _ := learners.NewModel(learners.Config{Optimizer: opt})
			l := m.NewLearner()
			for i := range feats {
				l.Learn(feats[i], labels[i])
			}
			l.Sync()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				m.Predict(feats[i&(benchN-1)])
				i++
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkLearnVocab is the learning target's case: one Learner, FTRL with
// the defaults (2^20 weights, adaptive scales), 20 features an event, over
// distinct events drawn from a Zipf(1.1) vocabulary of 4k words (4k events)
// and of 100k words (100k events: the slots touched outgrow the caches),
// syncing every 1,000 events; "prefetch" calls Learner.Prefetch with the
// next event before each Learn, as a loop over a batch can; "4k/raw" is
// the 4k case with normalize none, the default before sqrt (its values
// are counts > 1 on 4 of the 20 features: 4 square roots an event).
// events/cpu-s divides by the CPU time of the benchmark's thread (locked
// to it), which on a shared machine varies less than wall time.
func BenchmarkLearnVocab(b *testing.B) {
	for _, c := range []struct {
		name          string
		events, vocab int
		normalize     string
	}{{"4k", benchN, 4000, ""}, {"4k/raw", benchN, 4000, learners.NormalizeNone}, {"100k", 100_000, 100_000, ""}} {
		feats, labels := gen.FeatureEvents(c.events, c.vocab)
		for _, prefetch := range []bool{false, true} {
			name := c.name
			if prefetch {
				name += "/prefetch"
			}
			b.Run(name, func(b *testing.B) {
				m, _ := learners.NewModel(learners.Config{Normalize: c.normalize})
				l := m.NewLearner()
				b.ReportAllocs()
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				cpu0 := threadCPU()
				i := 0
				for b.Loop() {
					next := i + 1
					if next == len(feats) {
						next = 0
					}
					if prefetch {
						l.Prefetch(feats[next])
					}
					l.Learn(feats[i], labels[i])
					if l.Pending() == 1000 {
						l.Sync()
					}
					i = next
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
				if cpu := threadCPU() - cpu0; cpu > 0 {
					b.ReportMetric(float64(b.N)/cpu, "events/cpu-s")
				}
			})
		}
	}
}
