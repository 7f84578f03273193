package logreg

import (
	"fmt"
	"testing"

	"github.com/mlstream/mlstream/runtime"
)

// Predictions held for delayed labels move, on a rescale, to the
// partition their id (the label's routing key) goes to now; the label
// counts add up.
func TestRescaleMovesHeldPredictions(t *testing.T) {
	j := pendingJob(2)
	var ids []string
	for i := range 40 {
		id := fmt.Sprintf("e%d", i)
		ids = append(ids, id)
		j.parts[runtime.PartitionOf(id, 2)].pend.hold(id, int64(i), 0.5, feats)
	}
	for _, p := range j.parts {
		p.commitPending()
	}
	nj := pendingJob(5)
	j.movePending(nj)
	nj.restorePending()
	held := 0
	for q, p := range nj.parts {
		for id := range p.pend.live {
			if want := runtime.PartitionOf(id, 5); want != q {
				t.Fatalf("%s held in partition %d, its labels go to %d", id, q, want)
			}
		}
		held += len(p.pend.live)
	}
	if held != len(ids) || nj.parts[0].pend.counts.Held != int64(len(ids)) {
		t.Fatalf("%d held after the move (counts %+v), want %d", held, nj.parts[0].pend.counts, len(ids))
	}
	if e := nj.parts[runtime.PartitionOf("e7", 5)].pend.take("e7", 100); e == nil || e.prob != 0.5 {
		t.Fatalf("the label of e7 finds %+v", e)
	}
}

// The drift counts and the last drift carry over a rescale.
func TestRescaleKeepsDriftCounts(t *testing.T) {
	var d, nd drifts
	d.count.Store(3)
	d.resets.Store(2)
	d.epoch.Store(2)
	d.last = &LastDrift{Seq: 9}
	d.copyTo(&nd)
	if st := nd.status(); st.Drifts != 3 || st.Actions != 2 || st.Last == nil || st.Last.Seq != 9 || nd.epoch.Load() != 2 {
		t.Fatalf("after the copy: %+v, epoch %d", st, nd.epoch.Load())
	}
}
