package learners_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/mlstream/mlstream/learners"
)

// benchEvents returns n events of exactly 20 non-zero features from a
// realistic vocabulary: 4000 word features drawn Zipf(1.1) (one-hot, 16 per
// event, distinct) plus 4 numeric fields with raw values, labelled by a
// hidden linear model.
func benchEvents(n int) ([][]learners.Feature, []bool) {
	const vocab = 4000
	r := rand.New(rand.NewPCG(42, 43))
	cdf := make([]float64, vocab)
	var s float64
	for k := range cdf {
		s += math.Pow(float64(k+1), -1.1)
		cdf[k] = s
	}
	words := make([]uint64, vocab)
	wts := make([]float64, vocab)
	for k := range words {
		words[k] = learners.HashName(fmt.Sprintf("word%d", k))
		wts[k] = r.NormFloat64()
	}
	nums := []uint64{learners.HashName("amount"), learners.HashName("links"), learners.HashName("age"), learners.HashName("score")}
	feats := make([][]learners.Feature, n)
	labels := make([]bool, n)
	for i := range feats {
		f := make([]learners.Feature, 0, 20)
		var z float64
		var picked []int
		for len(picked) < 16 {
			k, _ := slices.BinarySearch(cdf, r.Float64()*s)
			k = min(k, vocab-1)
			if slices.Contains(picked, k) {
				continue
			}
			picked = append(picked, k)
			f = append(f, learners.Feature{Hash: words[k], Value: 1})
			z += wts[k] / 4
		}
		for j, h := range nums {
			v := math.Round(r.ExpFloat64() * math.Pow(10, float64(j)))
			if v == 0 {
				v = 1
			}
			f = append(f, learners.Feature{Hash: h, Value: v})
		}
		feats[i] = f
		labels[i] = r.Float64() < 1/(1+math.Exp(-z))
	}
	return feats, labels
}

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
