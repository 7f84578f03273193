package runtime

import (
	"context"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mlstream/mlstream/ft"
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
	if len(h) != 1 || !reflect.DeepEqual(h[0], HistoryPoint{At: 5000}) {
		t.Fatalf("history %+v", h)
	}
}

// A job with fault tolerance has it in every history point: divergence,
// θ and the backups written so far, as its status has them; a logreg
// job's own series (accuracy, log loss) are named and valued.
func TestHistoryHasFaultToleranceAndTheKindsSeries(t *testing.T) {
	e := ftEngine(t, t.TempDir())
	defer e.Close(context.Background())
	j := mustPut(t, e, ftJobSpec(ft.ModeApprox, 40))
	if _, err := ingest(e, "s", events(200, 0)...); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, j)
	var last HistoryPoint
	deadline := time.Now().Add(10 * time.Second)
	for {
		h := j.History()
		if len(h) > 0 {
			last = h[len(h)-1]
		}
		if last.FT != nil && last.FT.Backups >= 1 && len(last.Kind) == 4 && !math.IsNaN(float64(last.Kind[1])) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no history point with the backups and the model's metrics after 10 s: %+v (ft %+v)", last, last.FT)
		}
		time.Sleep(10 * time.Millisecond)
	}
	st := j.Status(false).FT
	if last.FT.Theta != st.State.Theta || last.FT.Backups > st.Backups.Full+st.Backups.Delta || last.FT.BackupBytes <= 0 {
		t.Fatalf("history ft %+v, status θ %v, backups %+v", last.FT, st.State.Theta, st.Backups)
	}
	if got := j.HistorySeries(); !slices.Equal(got, []string{"accuracy_recent", "accuracy_all", "log_loss_recent", "log_loss_all"}) {
		t.Fatalf("series %v", got)
	}
	b, err := json.Marshal(HistoryPoint{Kind: []ChartValue{ChartValue(math.NaN()), 0.5}})
	if err != nil || !strings.Contains(string(b), `"kind":[null,0.5]`) {
		t.Fatalf("a value not there yet is null: %s %v", b, err)
	}
}
