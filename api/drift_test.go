package api

import (
	"strings"
	"testing"
	"time"

	"github.com/mlstream/mlstream/internal/gen"
	"github.com/mlstream/mlstream/kinds/logreg"
)

// driftBody returns n generated labelled events whose true model changes
// after driftAfter, as NDJSON.
func driftBody(seed int64, driftAfter, n int) string {
	g := gen.New(gen.Config{Seed: seed, DriftAfter: driftAfter})
	var b []byte
	for range n {
		b = g.Next().AppendJSON(b)
		b = append(b, '\n')
	}
	return string(b)
}

// A change of the generator's true model is reported in the status, on
// the WebSocket and in /metrics, and nothing is reported before it.
func TestLogregDriftReported(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("spam", logregSpec)
	c := ts.dialWS("jobs=spam&types=drift")
	const driftAfter, n = 16000, 24000
	lines := strings.SplitAfter(driftBody(5, driftAfter, n), "\n")
	ts.feed("mail", strings.Join(lines[:driftAfter], ""), 2000, "spam")
	if d := logreg.StatusOf(ts.job("spam")).Drift; d == nil || d.Drifts != 0 || d.OnDrift != "none" || d.Detector != "page_hinkley" {
		t.Fatalf("before the change: %+v", d)
	}
	ts.feed("mail", strings.Join(lines[driftAfter:], ""), 2000, "spam")
	d := logreg.StatusOf(ts.job("spam")).Drift
	if d.Drifts == 0 || d.Last == nil {
		t.Fatalf("no drift in %d events after the change: %+v", n-driftAfter, d)
	}
	m := readMessage(t, c, 5*time.Second)
	if m["type"] != "drift" || m["job"] != "spam" || m["on_drift"] != "none" || m["drifts"].(float64) < 1 || m["events"].(float64) < 1 {
		t.Errorf("drift message %v", m)
	}
	if v := ts.counter(`mlstream_model_drifts_total{job="spam"}`); v != float64(d.Drifts) {
		t.Errorf("/metrics has %v drifts, status %d", v, d.Drifts)
	}
}

// on_drift values the service cannot carry out are refused, naming the
// param.
func TestLogregOnDriftRefusesUnimplemented(t *testing.T) {
	ts := newTestServer(t)
	for _, v := range []string{"reset_rates", "reset", "restart"} {
		code, _, body := ts.do("PUT", "/v1/jobs/j", "", []byte(`{"kind":"logreg","input":"x","params":{"on_drift":"`+v+`"}}`))
		if code != 400 || body["field"] != "params.on_drift" {
			t.Errorf("on_drift %s: %d %v", v, code, body)
		}
	}
	if code, _, body := ts.do("PUT", "/v1/jobs/j", "", []byte(`{"kind":"logreg","input":"x","params":{"on_drift":"none"}}`)); code != 201 {
		t.Errorf("on_drift none: %d %v", code, body)
	}
}
