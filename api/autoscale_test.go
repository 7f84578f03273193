package api

import (
	"context"
	"io"
	"math"
	"net/http"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/mlstream/mlstream/runtime"
)

// An autoscale section is checked field by field.
func TestAutoscaleSpecRefusals(t *testing.T) {
	ts := newTestServer(t)
	for _, c := range []struct{ autoscale, field string }{
		{`{"min":0.5}`, "autoscale.min"},
		{`{"min":3,"max":2}`, "autoscale.max"},
		{`{"target_utilization":2}`, "autoscale.target_utilization"},
		{`{"cooldown":"later"}`, "autoscale.cooldown"},
		{`{"min":1,"max":2,"every":"1s"}`, "every"}, // unknown fields are named alone
	} {
		spec := `{"kind":"logreg","input":"mail","partitions":1,"autoscale":` + c.autoscale + `}`
		code, _, body := ts.do("PUT", "/v1/jobs/a", "application/json", []byte(spec))
		if code != http.StatusBadRequest || body["field"] != c.field {
			t.Errorf("autoscale %s: %d %v, want 400 naming %s", c.autoscale, code, body, c.field)
		}
	}
	ts.putJob("a", `{"kind":"logreg","input":"mail","autoscale":{"min":1,"max":2}}`)
	if code, _, body := ts.do("PATCH", "/v1/jobs/a", "application/json", []byte(`{"partitions":3}`)); code != http.StatusBadRequest || body["field"] != "partitions" {
		t.Fatalf("PATCH past the autoscale max: %d %v", code, body)
	}
}

// The autoscaler's decision, with its inputs, is in the job status, in
// the rescale message and in /metrics.
func TestAutoscaleDecisionIsVisible(t *testing.T) {
	if goruntime.GOMAXPROCS(0) < 2 {
		prev := goruntime.GOMAXPROCS(2)
		t.Cleanup(func() { goruntime.GOMAXPROCS(prev) })
	}
	ts := newTestServer(t, func(c *runtime.Config, _ *Config) { c.AutoscaleInterval = -1 })
	ts.putJob("spam", `{"kind":"logreg","input":"mail","autoscale":{"min":1,"max":2,"cooldown":"0s"}}`)
	ws := ts.dialWS("jobs=spam&types=rescale")
	t0 := time.Now()
	if _, err := ts.engine.AutoscaleTick(context.Background(), "spam", t0); err != nil {
		t.Fatal(err)
	}
	if code, body := ts.post("mail", logregEventLines(500)); code != http.StatusAccepted {
		t.Fatalf("ingest: %d %v", code, body)
	}
	ts.waitProcessed("spam")
	// 500 events in a simulated 10µs: far more than one partition's rate.
	d, err := ts.engine.AutoscaleTick(context.Background(), "spam", t0.Add(10*time.Microsecond))
	if err != nil || d.Action != "up" || d.Target != 2 || math.Abs(d.InputRate-5e7) > 1 || d.TrueRate <= 0 || d.Error != "" {
		t.Fatalf("decision %+v, %v", d, err)
	}
	msg := readMessage(t, ws, 5*time.Second)
	r := msg["rescale"].(map[string]any)
	dec, _ := r["decision"].(map[string]any)
	if r["to"] != 2.0 || dec == nil || math.Abs(dec["input_rate"].(float64)-5e7) > 1 || !strings.HasPrefix(r["reason"].(string), "autoscale up") {
		t.Fatalf("rescale message %v", msg)
	}
	code, _, body := ts.do("GET", "/v1/jobs/spam", "", nil)
	auto := body["elastic"].(map[string]any)["autoscale"].(map[string]any)
	if code != 200 || len(auto["decisions"].([]any)) != 2 || auto["effective_max"] != 2.0 {
		t.Fatalf("status: %d %v", code, body["elastic"])
	}
	resp, err := http.Get(ts.http.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	for _, series := range []string{`mlstream_job_partitions{job="spam"} 2`, `mlstream_job_rescales_total{job="spam"} 1`,
		`mlstream_autoscale_target_partitions{job="spam"} 2`, `mlstream_autoscale_input_rate{job="spam"} `, `mlstream_autoscale_true_rate{job="spam"}`} {
		if !strings.Contains(string(text), series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
}
