package learners_test

import (
	"io"
	"testing"

	"github.com/mlstream/mlstream/internal/gen"
	"github.com/mlstream/mlstream/learners"
)

// BenchmarkDeltaBackup is the cost of one delta backup of the global model
// after a merge of 1,000 events: the tracker's bookkeeping and the write.
func BenchmarkDeltaBackup(b *testing.B) {
	m, _ := learners.NewModel(learners.Config{HashBits: 18})
	feats, labels := gen.FeatureEvents(4096, 4000)
	l := m.NewLearner()
	tr := learners.NewTracker(m)
	i := 0
	for b.Loop() {
		for range 1000 {
			l.Learn(feats[i%4096], labels[i%4096])
			i++
		}
		l.SyncTracked(tr)
		if _, err := m.WriteDelta(io.Discard, tr.BackedUp()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSyncTracked is a merge of 1,000 events with and without the
// divergence tracking.
func BenchmarkSyncTracked(b *testing.B) {
	feats, labels := gen.FeatureEvents(4096, 4000)
	for _, tracked := range []bool{false, true} {
		name := "plain"
		if tracked {
			name = "tracked"
		}
		b.Run(name, func(b *testing.B) {
			m, _ := learners.NewModel(learners.Config{HashBits: 18})
			l := m.NewLearner()
			tr := learners.NewTracker(m)
			i := 0
			for b.Loop() {
				b.StopTimer()
				for range 1000 {
					l.Learn(feats[i%4096], labels[i%4096])
					i++
				}
				b.StartTimer()
				if tracked {
					l.SyncTracked(tr)
				} else {
					l.Sync()
				}
			}
		})
	}
}
