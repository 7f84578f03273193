package main

import (
	"encoding/json"
	"testing"

	"github.com/mlstream/mlstream/internal/gen"
)

// joinView is GET /v1/jobs/{job}/matches.
type joinView struct {
	Seen, Matches, Late uint64
	Lost                float64
	Recoveries          int
	Estimate            struct {
		Count     struct{ Estimate, Low, High float64 }
		Unbounded bool
		Widened   float64
	}
}

// After kill -9 crashes of a sampled join (Ripple Join, p = 0.5), the
// widened COUNT interval still contains the true COUNT of every event
// posted, lost ones included, and each recovery's loss is within its bound.
func TestKill9JoinIntervalHolds(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, `{"jobs":[{"name":"conv","kind":"join","left":"imp","right":"clk","partitions":2,
		"params":{"on":"ad","within":"100ms","allowed_lateness":"1h","sample":0.5,"value":"cost"}}]}`)
	const perRun, runs = 20000, 3
	evs := gen.JoinEvents(5, perRun*runs, 400, 1_700_000_000_000)
	for run := 0; run <= runs; run++ {
		p := start(t, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", dir)
		url := p.url()
		if run > 0 {
			truth := float64(gen.JoinCount(evs[:perRun*run], 100))
			var v ftView
			getJob(t, url, "conv", &v)
			jm, err := clientOf(t, url).Matches(t.Context(), "conv", "", 0)
			if err != nil {
				t.Fatal(err)
			}
			var m joinView
			if err := json.Unmarshal(jm.Raw, &m); err != nil {
				t.Fatal(err)
			}
			rec := v.FT.Recovery
			if rec == nil || !rec.Within || rec.Lost > rec.Bound.Events {
				t.Fatalf("run %d: recovery %+v", run, rec)
			}
			c := m.Estimate.Count
			t.Logf("run %d: lost %d events (bound %d); COUNT %.0f in [%.0f, %.0f], true %.0f, widened ×%.3f",
				run, rec.Lost, rec.Bound.Events, c.Estimate, c.Low, c.High, truth, m.Estimate.Widened)
			if m.Estimate.Unbounded || truth < c.Low || truth > c.High {
				t.Fatalf("run %d: true COUNT %.0f outside [%.0f, %.0f]", run, truth, c.Low, c.High)
			}
			if m.Late != 0 {
				t.Fatalf("run %d: %d late events", run, m.Late)
			}
		}
		if run == runs {
			break
		}
		streams, bodies := gen.JoinBodies(evs[perRun*run:perRun*(run+1)], 500, "imp", "clk")
		for i, b := range bodies {
			postNDJSON(t, url, streams[i], b)
		}
		kill9(t, p)
	}
}
