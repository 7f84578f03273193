package runtime

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/mlstream/mlstream/ft"
)

// ftEngine is an engine with a backup store in dir. A test "crashes" it
// by abandoning it without Close: nothing more is written once its
// partitions are idle or paused, which is what kill -9 leaves behind.
func ftEngine(t testing.TB, dir string) *Engine {
	t.Helper()
	store, err := ft.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	return NewEngine(Config{Partitions: 1, Store: store, DataDir: dir, IngestWait: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

func ftJobSpec(mode string, pending int) Spec {
	return Spec{Name: "j", Kind: "logreg", Input: "s", Partitions: 1, Params: map[string]any{"hash_bits": 10},
		FT: FTSpec{Mode: mode, MaxDivergence: 1000, MaxPending: pending, MaxUnacked: 1000}}
}

func events(n, from int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(`{"key":"k%d","label":%d,"features":{"x":%d}}`, from+i, (from+i)%2, (from+i)%7)
	}
	return out
}

func waitIdle(t *testing.T, j *Job) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for j.depth() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("queue did not drain")
		}
		time.Sleep(time.Millisecond)
	}
}

// AF-Stream's item backup rule: events pending in a queue are written to
// the item log only once more than l of them wait; fewer are at risk.
func TestPendingEventsAreLoggedPastL(t *testing.T) {
	// L = 40 with one partition: l = L/2 = 20.
	for _, c := range []struct {
		name     string
		requests int
		wantLost int64
	}{
		{"below l: at risk", 3, 15}, // 15 pending <= 20: no item backup
		{"past l: logged", 5, 0},    // the 5th request makes 25 > 20: all are logged
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			e := ftEngine(t, dir)
			j := mustPut(t, e, ftJobSpec(ft.ModeApprox, 40))
			j.Pause()
			for r := range c.requests {
				if _, err := ingest(e, "s", events(5, 5*r)...); err != nil {
					t.Fatal(err)
				}
			}
			// Crash with everything still queued.
			e2 := ftEngine(t, dir)
			defer e2.Close(context.Background())
			j2 := mustPut(t, e2, ftJobSpec(ft.ModeApprox, 40))
			rep := j2.Recovery()
			if rep == nil || rep.Lost != c.wantLost || rep.Failures != 1 || !rep.Within {
				t.Fatalf("recovery %+v, want lost %d", rep, c.wantLost)
			}
			if c.wantLost > 0 && (len(rep.LostRanges[0]) != 1 || rep.LostRanges[0][0] != [2]uint64{1, 15}) {
				t.Fatalf("lost ranges %v", rep.LostRanges)
			}
			waitIdle(t, j2)
			if got := j2.Status(false).Metrics.All.Count; got != int64(5*c.requests)-c.wantLost {
				t.Fatalf("learned %d events", got)
			}
		})
	}
}

// Exact mode: what was accepted survives a crash at any point, and new
// events continue the sequence numbers.
func TestExactModeLosesNothing(t *testing.T) {
	dir := t.TempDir()
	e := ftEngine(t, dir)
	j := mustPut(t, e, ftJobSpec(ft.ModeExact, 1000))
	if _, err := ingest(e, "s", events(30, 0)...); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, j)
	j.Pause()
	if _, err := ingest(e, "s", events(20, 30)...); err != nil {
		t.Fatal(err)
	}
	e2 := ftEngine(t, dir)
	defer e2.Close(context.Background())
	j2 := mustPut(t, e2, ftJobSpec(ft.ModeExact, 1000))
	if rep := j2.Recovery(); rep == nil || rep.Lost != 0 || rep.Replayed == 0 {
		t.Fatalf("recovery %+v", rep)
	}
	if _, err := ingest(e2, "s", events(10, 50)...); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, j2)
	// The metrics are published when the partition goes idle, just after
	// its queue drains.
	deadline := time.Now().Add(5 * time.Second)
	st := j2.Status(false)
	for st.Metrics.All.Count != 60 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
		st = j2.Status(false)
	}
	if st.Metrics.All.Count != 60 || st.Partitions[0].LastSeq != 60 {
		t.Fatalf("learned %d, last seq %d", st.Metrics.All.Count, st.Partitions[0].LastSeq)
	}
}

// A spec whose kind cannot back up is refused with a field error, and so
// are bad bounds.
func TestFTSpecErrors(t *testing.T) {
	e := ftEngine(t, t.TempDir())
	defer e.Close(context.Background())
	for _, c := range []struct {
		ft    FTSpec
		field string
	}{
		{FTSpec{Mode: "always"}, "ft.mode"},
		{FTSpec{MaxDivergence: -1}, "ft.max_divergence"},
		{FTSpec{MaxPending: -5}, "ft.max_pending"},
		{FTSpec{CompactEvery: -1}, "ft.compact_every"},
	} {
		s := ftJobSpec("", 0)
		s.FT = c.ft
		_, err := e.PutJob(s)
		se, ok := err.(*SpecError)
		if !ok || se.Field != c.field {
			t.Errorf("%+v: %v, want field %s", c.ft, err, c.field)
		}
	}
}

// Windowed heavy hitters: windows close at their event-time boundaries,
// late events go to their window and are counted, too-late ones are
// counted as dropped, and every window end is backed up.
func TestWindowedHeavyHitters(t *testing.T) {
	e := ftEngine(t, t.TempDir())
	defer e.Close(context.Background())
	spec := Spec{Name: "hh", Kind: "heavy_hitters", Input: "s", Partitions: 1,
		Params: map[string]any{"field": "item", "k": 5, "counters": 50, "window": "1s", "keep": 1}}
	j := mustPut(t, e, spec)
	ev := func(item string, ts int) string { return fmt.Sprintf(`{"item":%q,"ts":%d}`, item, ts) }
	for _, batch := range [][]string{
		{ev("a", 100), ev("a", 200), ev("b", 900)}, // window 0
		{ev("c", 1100)}, // opens window 1, closes 0
		{ev("a", 500)},  // late: window 0 is kept
		{ev("d", 2500)}, // opens window 2, closes 1; window 0 leaves
		{ev("z", 300)},  // older than every kept window: dropped
	} {
		if _, err := ingest(e, "s", batch...); err != nil {
			t.Fatal(err)
		}
		waitIdle(t, j)
	}
	var cur, last TopK
	var backups BackupStats
	waitFor := func(cond func() bool) {
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("current %+v, last %+v, backups %+v", cur, last, backups)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor(func() bool {
		cur, _ = j.TopK(WindowCurrent, 5)
		last, _ = j.TopK(WindowLast, 5)
		return cur.Total == 1 && last.Total == 1 && cur.Late == 1 && cur.Dropped == 1
	})
	if cur.Items[0].Key != "d" || cur.Start != 2000 || cur.End != 3000 || last.Items[0].Key != "c" {
		t.Fatalf("current %+v, last %+v", cur, last)
	}
	// Two window ends and the first window's start, each backed up (written
	// by the backup goroutine, so polled).
	waitFor(func() bool {
		backups = j.Status(false).FT.Backups
		return backups.Delta+backups.Full >= 3
	})
}
