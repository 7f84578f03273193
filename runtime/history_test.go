package runtime

import (
	"testing"
	"time"
)

// The history keeps the last HistoryLen points, oldest first, each with
// what the status said at that sample: rates over the sampling window,
// the queue depth and the group.
func TestHistoryRingIsBoundedAndOrdered(t *testing.T) {
	var s sampler
	t0 := time.UnixMilli(1_000_000)
	n := HistoryLen + 75
	for i := range n {
		s.add(sample{at: t0.Add(time.Duration(i) * time.Second), accepted: uint64(100 * i), processed: uint64(90 * i),
			depth: int64(i), group: &GroupStatus{Size: float64(i % 7), Overhead: 0.25}})
	}
	h := s.history()
	if len(h) != HistoryLen {
		t.Fatalf("%d points, want %d", len(h), HistoryLen)
	}
	first := n - HistoryLen
	for k, p := range h {
		i := first + k
		if want := t0.Add(time.Duration(i) * time.Second).UnixMilli(); p.At != want {
			t.Fatalf("point %d at %d, want %d", k, p.At, want)
		}
		if p.Accepted != 100 || p.Processed != 90 || p.QueueDepth != int64(i) || p.GroupSize != float64(i%7) || p.Overhead != 0.25 {
			t.Fatalf("point %d: %+v", k, p)
		}
	}
	// The newest point says what the status says now.
	r, _ := s.recent()
	if last := h[len(h)-1]; last.Accepted != r.Accepted || last.Processed != r.Processed {
		t.Fatalf("newest point %+v, status rates %+v", last, r)
	}
}

// A job's first sample has no rate yet and no group: zeros, not junk.
func TestHistoryFirstPoint(t *testing.T) {
	var s sampler
	s.add(sample{at: time.UnixMilli(5000)})
	h := s.history()
	if len(h) != 1 || h[0] != (HistoryPoint{At: 5000}) {
		t.Fatalf("history %+v", h)
	}
}
