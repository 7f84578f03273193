package runtime

import (
	"context"
	"testing"
	"time"
)

// hasPointsAt says whether the history holds points at each of times.
func hasPointsAt(h []HistoryPoint, times ...time.Time) bool {
	seen := map[int64]bool{}
	for _, p := range h {
		seen[p.At] = true
	}
	for _, at := range times {
		if !seen[at.UnixMilli()] {
			return false
		}
	}
	return true
}

// A job's chart history comes back after a restart, graceful or not
// (what the last write held: it is written at the first sample, every
// historySaveEvery and at a graceful stop).
func TestHistorySurvivesARestart(t *testing.T) {
	eachRestart(t, func(t *testing.T, dir string, e *Engine, j *Job, graceful bool) {
		t0 := time.Now().Add(time.Hour).Truncate(time.Second) // past any save the engine made
		at := []time.Time{t0}
		if graceful {
			at = append(at, t0.Add(time.Second), t0.Add(2*time.Second))
		}
		for _, now := range at {
			j.sample(now)
		}
		if graceful {
			if err := e.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		e1 := ftEngine(t, dir) // after a crash, e is abandoned
		defer e1.Close(context.Background())
		j1 := mustPut(t, e1, j.spec)
		if h := j1.History(); !hasPointsAt(h, at...) {
			t.Fatalf("after the restart the history has %d points, not those at %v", len(h), at)
		}
	})
}
