package synopses

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestWindowBoundaries(t *testing.T) {
	h := NewWindowedHH(10, time.Second, 2)
	type step struct {
		ts                   int64
		late, closed         bool
		cur                  Span
		lateN, dropN, closeN uint64
	}
	steps := []step{
		{ts: 0, cur: Span{0, 1000}},
		{ts: 999, cur: Span{0, 1000}},
		{ts: 1000, closed: true, cur: Span{1000, 2000}, closeN: 1},
		{ts: 500, late: true, cur: Span{1000, 2000}, lateN: 1, closeN: 1},
		{ts: 5_500, closed: true, cur: Span{5000, 6000}, lateN: 1, closeN: 2},
		{ts: 1_500, cur: Span{5000, 6000}, lateN: 1, dropN: 1, closeN: 2},             // window 1 < 5-2
		{ts: 3_000, late: true, cur: Span{5000, 6000}, lateN: 2, dropN: 1, closeN: 2}, // window 3 never had events
		{ts: -1, cur: Span{5000, 6000}, lateN: 2, dropN: 2, closeN: 2},
	}
	for i, s := range steps {
		late, closed := h.Update("x", 1, s.ts)
		sp, _ := h.Current()
		if late != s.late || closed != s.closed || sp != s.cur || h.Late() != s.lateN || h.Dropped() != s.dropN || h.ClosedCount() != s.closeN {
			t.Fatalf("step %d (ts %d): late %v closed %v span %v late %d dropped %d closed %d", i, s.ts, late, closed, sp, h.Late(), h.Dropped(), h.ClosedCount())
		}
	}
	sp, last := h.Last()
	if sp != (Span{4000, 5000}) || last.Total() != 0 {
		t.Fatalf("last %v %d", sp, last.Total())
	}
	sp, all := h.All()
	if sp != (Span{3000, 6000}) || all.Total() != 2 {
		t.Fatalf("all %v %d", sp, all.Total())
	}
	// Window 0 held ts 0, 999 and the late 500 before it aged out.
	g := NewWindowedHH(10, time.Second, 2)
	for _, ts := range []int64{0, 999, 1000, 500} {
		g.Update("x", 1, ts)
	}
	if sp, last := g.Last(); sp != (Span{0, 1000}) || last.Total() != 3 {
		t.Fatalf("last %v total %d", sp, last.Total())
	}
	// Negative times floor.
	n := NewWindowedHH(10, time.Second, 1)
	n.Update("x", 1, -1)
	if sp, _ := n.Current(); sp != (Span{-1000, 0}) {
		t.Fatalf("span of -1: %v", sp)
	}
}

type tsEvent struct {
	key string
	ts  int64
}

// tsStream is a Zipf stream over time with jitter: mostly in order, some
// events late by up to 3 windows.
func tsStream(seed uint64, n int) []tsEvent {
	r := rand.New(rand.NewPCG(seed, 1))
	ev := zipfStream(seed, n, 5_000, 1.1)
	out := make([]tsEvent, n)
	for i, e := range ev {
		ts := int64(i) * 10
		if r.IntN(20) == 0 {
			ts -= int64(r.IntN(4000))
		}
		out[i] = tsEvent{e.key, ts}
	}
	return out
}

func windowTruth(ev []tsEvent, size int64) map[int64]map[string]uint64 {
	m := map[int64]map[string]uint64{}
	for _, e := range ev {
		i := floorDiv(e.ts, size)
		if m[i] == nil {
			m[i] = map[string]uint64{}
		}
		m[i][e.key]++
	}
	return m
}

// TestWindowedCrashRecovery: backups at every window close (as the runtime
// must: window ends are punctuation) and every few hundred events, full or
// delta; a crash loses the events after the last backup; the recovered
// windows, widened by the weight lost, contain every true count of every
// kept window.
func TestWindowedCrashRecovery(t *testing.T) {
	const size = 1000
	for seed := range uint64(20) {
		ev := tsStream(seed, 30_000)
		r := rand.New(rand.NewPCG(seed, 2))
		h := NewWindowedHH(50, size*time.Millisecond, 3)
		var backups [][]byte
		last := 0
		every := 100 + r.IntN(900)
		crashAt := 1000 + r.IntN(len(ev)-1000)
		backup := func(i int) {
			var buf bytes.Buffer
			full := len(backups)%3 == 0
			if err := h.BackupState(&buf, full); err != nil {
				t.Fatal(err)
			}
			if full {
				backups = backups[:0]
			}
			backups = append(backups, buf.Bytes())
			last = i + 1
			if h.StateDivergence() != 0 {
				t.Fatal("divergence after backup")
			}
		}
		before := seed%2 == 1 // back up at a window end before the event that ends it
		for i, e := range ev[:crashAt] {
			if n := h.w.newest(); before && n != nil && floorDiv(e.ts, size) > n.idx {
				backup(i - 1)
			}
			_, closed := h.Update(e.key, 1, e.ts)
			if (closed && !before) || (i+1)%every == 0 {
				backup(i)
			}
		}
		lost := uint64(crashAt - last)
		rec := NewWindowedHH(50, size*time.Millisecond, 3)
		for _, b := range backups {
			if err := rec.RecoverState(bytes.NewReader(b)); err != nil {
				t.Fatal(err)
			}
		}
		// The recovered state is the state at the last backup.
		want := NewWindowedHH(50, size*time.Millisecond, 3)
		for _, e := range ev[:last] {
			want.Update(e.key, 1, e.ts)
		}
		_, a := rec.All()
		_, b := want.All()
		if !slices.Equal(a.Items(), b.Items()) || rec.Late() != want.Late() || rec.Dropped() != want.Dropped() {
			t.Fatalf("seed %d: recovered windows differ from the last backup", seed)
		}
		rec.Widen(lost)
		// Go on a little (the windows around the crash are still kept).
		end := min(len(ev), crashAt+r.IntN(300))
		for _, e := range ev[crashAt:end] {
			rec.Update(e.key, 1, e.ts)
		}
		tr := windowTruth(ev[:end], size)
		for _, x := range rec.w.list() {
			exact := tr[x.idx]
			for k, c := range exact {
				it, _ := x.s.Get(k)
				if c < it.Lower || c > it.Upper {
					t.Fatalf("seed %d window %d: %q true %d outside [%d, %d]", seed, x.idx, k, c, it.Lower, it.Upper)
				}
			}
		}
	}
}

func TestWindowedDistinct(t *testing.T) {
	d, err := NewWindowedDistinct(12, time.Minute, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewWindowedDistinct(2, time.Minute, 2); err == nil {
		t.Fatal("precision 2 accepted")
	}
	for i := range 30_000 {
		d.InsertString(fmt.Sprint("u", i%20_000), int64(i)*6) // 3 minutes
	}
	sp, cur := d.Current()
	if sp != (Span{120_000, 180_000}) || d.ClosedCount() != 2 {
		t.Fatalf("span %v closed %d", sp, d.ClosedCount())
	}
	_, all := d.All()
	if e := all.Estimate(); e < 19_000 || e > 21_000 {
		t.Fatalf("all: %d", e)
	}
	if e := cur.Estimate(); e < 9_500 || e > 10_500 {
		t.Fatalf("current: %d", e)
	}
	var buf bytes.Buffer
	if err := d.BackupState(&buf, false); err != nil {
		t.Fatal(err)
	}
	d.InsertString("late", 1)
	if d.Late() != 1 {
		t.Fatal("late not counted")
	}
	var buf2 bytes.Buffer
	if err := d.BackupState(&buf2, false); err != nil {
		t.Fatal(err)
	}
	r, _ := NewWindowedDistinct(12, time.Minute, 2)
	for _, b := range [][]byte{buf.Bytes(), buf2.Bytes()} {
		if err := r.RecoverState(bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
	_, ra := r.All()
	_, da := d.All()
	if ra.Estimate() != da.Estimate() || r.Late() != 1 {
		t.Fatalf("recovered %d, want %d", ra.Estimate(), da.Estimate())
	}
}

// Windows is Current, Last and All at once; over one window, All is
// Current's copy itself (one copy fewer per publish), and the copies do not
// follow later updates.
func TestWindowsCopies(t *testing.T) {
	same := func(what string, w Window[*HeavyHitters], span Span, sum *HeavyHitters) {
		t.Helper()
		if w.Span != span || !slices.Equal(w.Sum.Items(), sum.Items()) || w.Sum.Total() != sum.Total() || w.Sum.MaxUntracked() != sum.MaxUntracked() {
			t.Fatalf("%s: %v %v, want %v %v", what, w.Span, w.Sum.Items(), span, sum.Items())
		}
	}
	check := func(h *WindowedHH) (cur, all Window[*HeavyHitters]) {
		t.Helper()
		cur, last, all := h.Windows()
		sp, s := h.Current()
		same("current", cur, sp, s)
		sp, s = h.Last()
		same("last", last, sp, s)
		sp, s = h.All()
		same("all", all, sp, s)
		return cur, all
	}
	whole := NewWindowedHH(10, time.Duration(1<<62), 3)
	for i := range 100 {
		whole.Update(keyNames[i%13], 1, int64(i))
	}
	cur, all := check(whole)
	if cur.Sum != all.Sum {
		t.Fatal("one window: all is not the current window's copy")
	}
	before := cur.Sum.Items()
	whole.Update("new", 50, 100)
	if !slices.Equal(cur.Sum.Items(), before) {
		t.Fatal("the copy followed an update")
	}

	tumbling := NewWindowedHH(10, time.Second, 3)
	for i := range 3000 {
		tumbling.Update(keyNames[i%13], 1, int64(i))
	}
	if cur, all := check(tumbling); cur.Sum == all.Sum {
		t.Fatal("several windows: all is the current window's copy")
	}
}

// The copies Windows makes for queries leave out the index and the backup
// bookkeeping, and answer like a full copy: Get (tracked, evicted and
// never seen items) and as a Merge source.
func TestWindowsCopiesAreLight(t *testing.T) {
	h := NewWindowedHH(10, time.Duration(1<<62), 3)
	for i := range 500 {
		h.Update(keyNames[(i*i)%len(keyNames)], uint64(1+i%3), int64(i))
	}
	cur, _, _ := h.Windows()
	_, full := h.Current()
	if cur.Sum.index.words != nil || cur.Sum.pos != nil || cur.Sum.dirty != nil {
		t.Fatal("the query copy carries the index or the bookkeeping")
	}
	for _, k := range append(slices.Clone(keyNames), "never") {
		got, ok := cur.Sum.Get(k)
		want, wok := full.Get(k)
		if got != want || ok != wok {
			t.Fatalf("Get(%q) = %+v %t, want %+v %t", k, got, ok, want, wok)
		}
	}
	a, b := NewHeavyHitters(10), NewHeavyHitters(10)
	a.Merge(cur.Sum)
	b.Merge(full)
	if !slices.Equal(a.Items(), b.Items()) || a.MaxUntracked() != b.MaxUntracked() {
		t.Fatalf("merged %v, want %v", a.Items(), b.Items())
	}
}
