package learners_test

import (
	"math"
	"testing"

	"github.com/mlstream/mlstream/learners"
)

// Shared learners whose deltas are applied in one order, each only after
// its partition learned on (the round trip of cluster mode, here as long
// as the other partitions' turns), learn as well as one learner on the
// whole stream: a partition has one delta in flight, which stays in its
// learner's view until applied.
func TestSharedPartitionsMatchSingle(t *testing.T) {
	events := genStream(t)[:100_000]
	single := runSerial(newModel(t, learners.Config{}), events, 1000)
	for _, every := range []int{250, 20} {
		m := newModel(t, learners.Config{})
		const parts = 4
		ls := make([]*learners.Learner, parts)
		for i := range ls {
			ls[i] = m.NewLearner()
			ls[i].SetShared()
		}
		type sent struct {
			part, labelled int
			delta          []byte
		}
		var queue []sent // the stream: applied parts-1 sends later
		inFlight := make([]bool, parts)
		version := uint64(0)
		pr := learners.NewProgressive(learners.DefaultWindow)
		for i, e := range events {
			p := i % parts
			l := ls[p]
			pr.Observe(l.Learn(e.feats, e.label), e.label)
			if l.Pending() < every || inFlight[p] {
				continue
			}
			d, n := l.AppendDelta(nil)
			queue, inFlight[p] = append(queue, sent{p, n, d}), true
			for len(queue) >= parts {
				version++
				s := queue[0]
				if err := m.ApplyDelta(s.delta, uint64(s.labelled), version, nil); err != nil {
					t.Fatal(err)
				}
				ls[s.part].ClearInFlight()
				queue, inFlight[s.part] = queue[1:], false
			}
		}
		got := pr.Summary()
		t.Logf("every %d: single %.4f, shared %.4f (all %.4f vs %.4f)", every, single.Recent.Accuracy, got.Recent.Accuracy, single.All.Accuracy, got.All.Accuracy)
		if d := math.Abs(got.Recent.Accuracy - single.Recent.Accuracy); d > 0.01 {
			t.Errorf("every %d: shared recent accuracy %.4f differs from single %.4f by %.4f", every, got.Recent.Accuracy, single.Recent.Accuracy, d)
		}
	}
}
