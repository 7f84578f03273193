package runtime

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mlstream/mlstream/ft"
)

// crashRescaleAt starts a rescale of job name in e that "crashes" at
// point: the rescale stops there for good (its engine is abandoned, as
// kill -9 leaves it). It returns once the rescale got there.
func crashRescaleAt(t *testing.T, e *Engine, name string, to int, point string) {
	t.Helper()
	reached := make(chan struct{})
	hook := func(job, p string) {
		if job == name && p == point {
			close(reached)
			select {} // the process is gone
		}
	}
	rescaleHook.Store(&hook)
	t.Cleanup(func() { rescaleHook.Store(nil) })
	go func() { _, _ = e.Rescale(context.Background(), name, to, "test") }()
	select {
	case <-reached:
	case <-time.After(10 * time.Second):
		t.Fatalf("the rescale never reached %s", point)
	}
	rescaleHook.Store(nil)
}

func ftHHSpec(partitions int) Spec {
	return Spec{Name: "hh", Kind: "heavy_hitters", Input: "s", Partitions: partitions, Params: map[string]any{"field": "u", "counters": 200},
		FT: FTSpec{Mode: "exact", MaxDivergence: 1000, MaxPending: 1000, MaxUnacked: 1000}}
}

// A crash at any point of a rescale recovers the old layout (before the
// new one is the job's) or the new one (after), whole: every event
// accepted is counted once, and the job takes more and rescales again.
func TestRescaleCrashRecoversOneLayout(t *testing.T) {
	for _, c := range []struct {
		point string
		want  int // partitions after the recovery
	}{
		{pointParked, 2},
		{pointBackedUp, 2},
		{pointCommitted, 5},
		{pointStarted, 5},
	} {
		t.Run(c.point, func(t *testing.T) {
			dir := t.TempDir()
			e := ftEngine(t, dir)
			j := mustPut(t, e, ftHHSpec(2))
			waitFullBackup(t, j)
			if _, err := ingest(e, "s", hhEvents(500, 0)...); err != nil {
				t.Fatal(err)
			}
			waitTotal(t, j, 500) // published: the top k read next is whole
			want := sec(j.Status(false)).TopK
			crashRescaleAt(t, e, "hh", 5, c.point)

			// The restart: the spec says 2 partitions, the data decides.
			e2 := ftEngine(t, dir) // abandoned later: not closed
			j2 := mustPut(t, e2, ftHHSpec(2))
			if n := len(j2.parts); n != c.want || j2.Spec().Partitions != c.want {
				t.Fatalf("recovered %d partitions (spec %d), want %d", n, j2.Spec().Partitions, c.want)
			}
			// (A crash widens the upper bounds, as after any crash.)
			got := sec(j2.Status(false)).TopK
			g, w := got.Items[0], want.Items[0]
			if got.Total != 500 || g.Key != w.Key || g.Estimate != w.Estimate || g.Lower != w.Lower {
				t.Fatalf("recovered total %d top %+v, want 500 and %+v", got.Total, got.Items[0], want.Items[0])
			}
			// It goes on: more events, another rescale (into the place the
			// crashed one may have left half written), another crash.
			if _, err := ingest(e2, "s", hhEvents(500, 500)...); err != nil {
				t.Fatal(err)
			}
			mustRescale(t, e2, "hh", 3)
			j2 = latestJob(t, e2, "hh")
			waitTotal(t, j2, 1000)
			waitFullBackup(t, j2)
			e3 := ftEngine(t, dir) // e2 abandoned: a crash after the rescale
			t.Cleanup(func() { _ = e3.Close(context.Background()) })
			j3 := mustPut(t, e3, ftHHSpec(2))
			if n := len(j3.parts); n != 3 {
				t.Fatalf("recovered %d partitions after the second rescale, want 3", n)
			}
			if total := sec(j3.Status(false)).TopK.Total; total != 1000 {
				t.Fatalf("recovered total %d after the second rescale, want 1000", total)
			}
		})
	}
}

// waitTotal waits until heavy hitters job j counted n events.
func waitTotal(t *testing.T, j *Job, n uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for sec(j.Status(false)).TopK.Total != n {
		if time.Now().After(deadline) {
			t.Fatalf("counted %d events, want %d", sec(j.Status(false)).TopK.Total, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A job created at run time and rescaled comes back after a restart with
// its new partition count and its state; its record says so.
func TestRescaledJobRestoredFromItsRecord(t *testing.T) {
	dir := t.TempDir()
	e, jobs := recordingEngine(t, dir, nil)
	j := mustPut(t, e, hhSpec())
	if _, err := ingest(e, "s", hhEvents(300, 0)...); err != nil {
		t.Fatal(err)
	}
	waitProcessed(t, j, 300)
	mustRescale(t, e, "hh", 3)
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs, _, err := jobs.Load()
	if err != nil || len(recs) != 1 {
		t.Fatalf("records %v, %v", recs, err)
	}
	if spec, err := DecodeSpec(recs[0].Spec); err != nil || spec.Partitions != 3 {
		t.Fatalf("recorded spec %s, %v", recs[0].Spec, err)
	}
	e2, _ := recordingEngine(t, dir, nil)
	j2 := latestJob(t, e2, "hh")
	if n := len(j2.parts); n != 3 {
		t.Fatalf("restored with %d partitions, want 3", n)
	}
	if total := topTotal(t, e2); total != 300 {
		t.Fatalf("restored total %d, want 300", total)
	}
}

// failingStore refuses every backup while fail is set.
type failingStore struct {
	ft.Store
	fail atomic.Bool
}

func (s *failingStore) Put(key ft.Key, meta ft.BackupMeta, data []byte) (ft.BackupMeta, error) {
	if s.fail.Load() {
		return meta, errors.New("disk full")
	}
	return s.Store.Put(key, meta, data)
}

// A rescale whose new layout cannot be backed up does not happen: the
// job goes on with its partitions and its state, takes events, and
// rescales once the store works again.
func TestRescaleThatCannotBackUpLeavesTheJob(t *testing.T) {
	dir := t.TempDir()
	ds, err := ft.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	store := &failingStore{Store: ds}
	e := testEngine(t, Config{Partitions: 1, Store: store, DataDir: dir})
	j := mustPut(t, e, ftHHSpec(2))
	if _, err := ingest(e, "s", hhEvents(200, 0)...); err != nil {
		t.Fatal(err)
	}
	waitTotal(t, j, 200)
	store.fail.Store(true)
	if _, err := e.Rescale(context.Background(), "hh", 4, "test"); !errors.Is(err, ErrRescaleFailed) {
		t.Fatalf("rescale with a failing store: %v, want ErrRescaleFailed", err)
	}
	store.fail.Store(false)
	if cur := latestJob(t, e, "hh"); cur != j || len(cur.parts) != 2 {
		t.Fatalf("after the failed rescale the job has %d partitions (same job: %v)", len(cur.parts), cur == j)
	}
	if _, err := ingest(e, "s", hhEvents(100, 200)...); err != nil {
		t.Fatal(err)
	}
	waitTotal(t, j, 300)
	mustRescale(t, e, "hh", 4)
	waitTotal(t, latestJob(t, e, "hh"), 300)
}
