package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/mlstream/mlstream/ft"
)

// waitBackedUp polls until nothing of the job is at risk or waiting for a
// backup: its state has gone idle and been backed up.
func waitBackedUp(t *testing.T, j *Job) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for st := j.Status(false).FT; st.SinceBackup != 0 || st.AtRisk != 0; st = j.Status(false).FT {
		if time.Now().After(deadline) {
			t.Fatalf("the idle job was not backed up: %d events since the last backup, %d at risk", st.SinceBackup, st.AtRisk)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A heavy-hitters job that has gone idle is backed up: a crash then loses
// nothing, and the upper bounds are not widened for a loss that did not
// happen.
func TestIdleJobHasNothingAtRisk(t *testing.T) {
	dir := t.TempDir()
	spec := Spec{Name: "j", Kind: "heavy_hitters", Input: "s", Partitions: 1, Params: map[string]any{"field": "u"},
		FT: FTSpec{Mode: ft.ModeApprox, MaxDivergence: 1000, MaxPending: 1000, MaxUnacked: 1000}}
	e := ftEngine(t, dir)
	j := mustPut(t, e, spec)
	waitFullBackup(t, j)
	const sent = 60
	lines := make([]string, sent)
	for i := range lines {
		lines[i] = `{"u":"a"}`
	}
	if _, err := ingest(e, "s", lines...); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, j)
	waitBackedUp(t, j)

	e1 := ftEngine(t, dir) // the crash
	defer e1.Close(context.Background())
	j1 := mustPut(t, e1, spec)
	if rep := j1.Recovery(); rep == nil || rep.Lost != 0 {
		t.Fatalf("recovery %+v: the idle job lost events", rep)
	}
	top, err := j1.TopK("all", 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Items) == 0 || top.Items[0].Estimate != sent || top.Items[0].Upper > sent {
		t.Fatalf("after the crash: %+v, want %q counted %d with an upper bound of at most %d", top, "a", sent, sent)
	}
}

// The same for a logreg job of two partitions, whose one unit of state the
// idle partitions back up under the job's merge lock.
func TestIdleLogregJobHasNothingAtRisk(t *testing.T) {
	dir, spec, e, j := twoPartitionJob(t, ft.ModeApprox, 1000)
	if _, err := ingest(e, "s", events(40, 0)...); err != nil {
		t.Fatal(err)
	}
	waitCount(t, j, 40)
	waitBackedUp(t, j)

	e1 := ftEngine(t, dir) // the crash
	defer e1.Close(context.Background())
	j1 := mustPut(t, e1, spec)
	if rep := j1.Recovery(); rep == nil || rep.Lost != 0 || rep.Replayed != 0 {
		t.Fatalf("recovery %+v: the idle job lost or replayed events", rep)
	}
	if n := sec(j1.Status(false)).Metrics.All.Count; n != 40 {
		t.Fatalf("after the crash the job counts %d events, want 40", n)
	}
}
