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
func itemLog(p *partFT) *ft.ItemLog { return p.log.(*healingLog).cur.(*ft.ItemLog) }

// A partition's item log that failed is opened again at the next append,
// and a commit of records appended to the failed log fails even once the
// new one works; a closed log stays closed.
func TestHealingLog(t *testing.T) {
	dir := t.TempDir()
	key := ft.Key{Job: "j", Partition: 0}
	h, err := openHealingLog(func() (ft.PartitionLog, error) { return ft.OpenItemLog(dir, key) })
	if err != nil {
		t.Fatal(err)
	}
	frame := func(seq uint64) *ft.Frame {
		var f ft.Frame
		f.Reset(seq, nil)
		f.Add([]byte("event"))
		return &f
	}
	if err := h.AppendFrame(frame(1)); err != nil {
		t.Fatal(err)
	}
	if err := h.commitThrough(1); err != nil {
		t.Fatal(err)
	}
	broken := errors.New("injected write error")
	itemLogOf(t, h).SetAppendHook(func(uint64, uint64) error { return broken })
	if err := h.AppendFrame(frame(2)); !errors.Is(err, broken) {
		t.Fatalf("append to the failing log: %v", err)
	}
	// The next append reopens the log; seq 2 was never appended.
	if err := h.AppendFrame(frame(3)); err != nil {
		t.Fatalf("append after the failure: %v", err)
	}
	if err := h.commitThrough(3); err != nil {
		t.Fatal(err)
	}
	if h.reopens.Load() != 1 {
		t.Fatalf("%d reopens", h.reopens.Load())
	}
	// A record appended to a log that then fails is never durable, even
	// when a reopened log commits.
	if err := h.AppendFrame(frame(4)); err != nil {
		t.Fatal(err)
	}
	h.failed(itemLogOf(t, h), broken)
	if err := h.AppendFrame(frame(5)); err != nil {
		t.Fatal(err)
	}
	if err := h.commitThrough(4); err == nil {
		t.Fatal("seq 4, appended to the failed log, committed")
	}
	if err := h.commitThrough(5); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.AppendFrame(frame(6)); !errors.Is(err, ft.ErrClosed) {
		t.Fatalf("append after Close: %v", err)
	}
}

func itemLogOf(_ *testing.T, h *healingLog) *ft.ItemLog { return h.cur.(*ft.ItemLog) }
