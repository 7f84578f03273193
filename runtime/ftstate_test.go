package runtime

import (
	"context"
	"encoding/json"
	"net/url"
	"testing"

	"github.com/mlstream/mlstream/ft"
)

// feedQuietly ingests n events from from in requests of size events,
// waiting for each to be learned, so that none waits in a queue long
// enough to be item-logged: they are at risk until a backup holds them.
func feedQuietly(t *testing.T, e *Engine, j *Job, from, n, size int) {
	t.Helper()
	for at := from; at < from+n; at += size {
		if _, err := ingest(e, "s", events(size, at)...); err != nil {
			t.Fatal(err)
		}
		waitCount(t, j, int64(at+size))
	}
}

// A logreg job's metrics are part of its backups, deltas included: after a
// crash they count what the model holds, within the events reported lost
// (they were reset to the last full backup, the job's start, before).
func TestLogregMetricsSurviveACrash(t *testing.T) {
	dir := t.TempDir()
	spec := ftJobSpec(ft.ModeApprox, 40) // l = 20: every other request backs up
	e := ftEngine(t, dir)
	j := mustPut(t, e, spec)
	waitFullBackup(t, j)
	const sent = 400
	feedQuietly(t, e, j, 0, sent, 10)
	if st := j.Status(false).FT.Backups; st.Delta == 0 {
		t.Fatalf("no delta backup: %+v", st)
	}
	waitIdle(t, j)
	j.Pause()

	e1 := ftEngine(t, dir) // the crash: e is abandoned
	defer e1.Close(context.Background())
	j1 := mustPut(t, e1, spec)
	rep := j1.Recovery()
	if rep == nil {
		t.Fatal("no recovery")
	}
	st := sec(j1.Status(false))
	got := st.Metrics.All.Count
	if got < sent-rep.Lost || got > sent {
		t.Fatalf("after the crash the metrics count %d events of %d sent, %d lost", got, sent, rep.Lost)
	}
	if uint64(got) != st.Model.Updates {
		t.Fatalf("the metrics count %d events, the model %d", got, st.Model.Updates)
	}
}

// topNames returns the feature names of the job's top weights (GET
// .../model?top=N), without the intercept's.
func topNames(t *testing.T, j *Job) []string {
	t.Helper()
	out, err := j.Query("model", url.Values{"top": {"5"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(out)
	var v struct {
		Top []struct {
			Names []struct{ Name string } `json:"names"`
		} `json:"top"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, w := range v.Top {
		for _, n := range w.Names {
			if n.Name != "(intercept)" {
				names = append(names, n.Name)
			}
		}
	}
	return names
}

// eachRestart runs body as a subtest over a fresh data directory and a
// started job of ftJobSpec, for a graceful restart and for a crash.
func eachRestart(t *testing.T, body func(t *testing.T, dir string, e *Engine, j *Job, graceful bool)) {
	for _, graceful := range []bool{true, false} {
		t.Run(map[bool]string{true: "restart", false: "crash"}[graceful], func(t *testing.T) {
			dir := t.TempDir()
			e := ftEngine(t, dir)
			j := mustPut(t, e, ftJobSpec(ft.ModeApprox, 40))
			waitFullBackup(t, j)
			body(t, dir, e, j, graceful)
		})
	}
}

// The feature names come back with the state, after a restart (full
// backup) as after a crash (delta backups).
func TestFeatureNamesSurviveARestart(t *testing.T) {
	eachRestart(t, func(t *testing.T, dir string, e *Engine, j *Job, graceful bool) {
		feedQuietly(t, e, j, 0, 400, 10)
		before := topNames(t, j)
		if len(before) == 0 {
			t.Fatal("no names before the restart")
		}
		if graceful {
			if err := e.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
		} else {
			waitIdle(t, j)
			j.Pause()
		}
		e1 := ftEngine(t, dir)
		defer e1.Close(context.Background())
		j1 := mustPut(t, e1, j.spec)
		if after := topNames(t, j1); len(after) == 0 {
			t.Fatalf("no names after the restart (%v before)", before)
		}
	})
}
