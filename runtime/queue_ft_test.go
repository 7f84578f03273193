package runtime

import (
	"context"
	"errors"
	"testing"

	"github.com/mlstream/mlstream/ft"
)

// A batch whose item backup fails is refused, and does not count as
// pending: the pending count (and L's hold-back) is what the queue holds.
func TestRefusedBatchIsNotPending(t *testing.T) {
	e := ftEngine(t, t.TempDir())
	defer e.Close(context.Background())
	j := mustPut(t, e, ftJobSpec(ft.ModeApprox, 40)) // l = 20
	j.Pause()
	for r := range 3 {
		if _, err := ingest(e, "s", events(5, 5*r)...); err != nil {
			t.Fatal(err)
		}
	}
	pending := func() int64 { return j.ft.status(j).Partitions[0].Pending }
	if p := pending(); p != 15 {
		t.Fatalf("pending %d, want 15", p)
	}
	log := itemLog(j.ft.parts[0])
	log.SetAppendHook(func(uint64, uint64) error { return errors.New("injected write error") })
	// 25 > l: the push must log what is pending, and cannot.
	if _, err := ingest(e, "s", events(10, 15)...); !errors.Is(err, ErrDurability) {
		t.Fatalf("ingest with a failing item log: %v", err)
	}
	if p := pending(); p != 15 {
		t.Fatalf("pending %d after a refused batch, want the 15 queued", p)
	}
	log.SetAppendHook(nil)
	if _, err := ingest(e, "s", events(10, 15)...); err != nil {
		t.Fatal(err)
	}
	if p := pending(); p != 0 {
		t.Fatalf("pending %d after the item backup, want 0", p)
	}
	j.Resume()
	waitIdle(t, j)
	if p := pending(); p != 0 {
		t.Fatalf("pending %d once processed, want 0", p)
	}
}

// itemLog is the ft.ItemLog a partition appends to now.
func itemLog(p *partFT) *ft.ItemLog {
	l, err := p.log.(*healingLog).current()
	if err != nil {
		panic(err)
	}
	return l.(*ft.ItemLog)
}
