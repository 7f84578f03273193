package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mlstream/mlstream/runtime"
)

func logregEventLines(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"key":"u%d","label":%d,"features":{"amount":%d}}`+"\n", i, i%2, i%13)
	}
	return b.String()
}

// PATCH rescales a running job: counts stay, predictions go on, a rescale
// message reaches the feed; a PUT of the spec with another partition
// count rescales it too.
func TestPatchRescalesAJob(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("spam", logregSpec)
	ws := ts.dialWS("jobs=spam&types=rescale")
	if code, body := ts.post("mail", logregEventLines(200)); code != http.StatusAccepted {
		t.Fatalf("ingest: %d %v", code, body)
	}
	ts.waitProcessed("spam")
	code, _, body := ts.do("PATCH", "/v1/jobs/spam", "application/json", []byte(`{"partitions": 5}`))
	if code != http.StatusOK {
		t.Fatalf("PATCH: %d %v", code, body)
	}
	if n := len(body["partitions"].([]any)); n != 5 {
		t.Fatalf("PATCH answered %d partitions, want 5", n)
	}
	if p := body["processed"].(float64); p != 200 {
		t.Fatalf("processed %v after the rescale, want 200", p)
	}
	msg := readMessage(t, ws, 5*time.Second)
	r, _ := msg["rescale"].(map[string]any)
	if msg["type"] != "rescale" || r["from"] != 2.0 || r["to"] != 5.0 || r["reason"] != "api" {
		t.Fatalf("rescale message %v", msg)
	}
	if code, _, body := ts.do("POST", "/v1/jobs/spam/predict", "", []byte(`{"features":{"amount":3}}`)); code != http.StatusOK {
		t.Fatalf("predict after the rescale: %d %v", code, body)
	}
	spec := strings.Replace(logregSpec, `"partitions":2`, `"partitions":3`, 1)
	if code, _, body := ts.do("PUT", "/v1/jobs/spam", "application/json", []byte(spec)); code != http.StatusOK || len(body["partitions"].([]any)) != 3 {
		t.Fatalf("PUT with 3 partitions: %d %v", code, body)
	}
	if code, body := ts.post("mail", logregEventLines(100)); code != http.StatusAccepted {
		t.Fatalf("ingest after the rescales: %d %v", code, body)
	}
	waitFor(t, "300 events processed", 10*time.Second, func() bool { return ts.job("spam").Processed == 300 })
	if st := ts.job("spam"); st.Elastic.Rescales != 2 || st.Elastic.MaxPartitions != runtime.MaxPartitions {
		t.Fatalf("elastic status %+v", st.Elastic)
	}
}

// Hostile PATCH bodies get a 4xx naming the field; the job is untouched.
func TestPatchRefusals(t *testing.T) {
	ts := newTestServer(t, func(c *runtime.Config, _ *Config) { c.MaxPartitions = 16 })
	ts.putJob("spam", logregSpec)
	for _, c := range []struct {
		path, body string
		status     int
		field      string
	}{
		{"/v1/jobs/spam", `{}`, 400, "partitions"},
		{"/v1/jobs/spam", `{"partitions":"4"}`, 400, "partitions"},
		{"/v1/jobs/spam", `{"partitions":1.5}`, 400, "partitions"},
		{"/v1/jobs/spam", `{"partitions":0}`, 400, "partitions"},
		{"/v1/jobs/spam", `{"partitions":-3}`, 400, "partitions"},
		{"/v1/jobs/spam", `{"partitions":17}`, 400, "partitions"},
		{"/v1/jobs/spam", `{"partitions":1e300}`, 400, "partitions"},
		{"/v1/jobs/spam", `{"partitions":4,"kind":"distinct"}`, 400, "kind"},
		{"/v1/jobs/spam", `{"partitions":4} {"partitions":5}`, 400, ""},
		{"/v1/jobs/spam", `[4]`, 400, ""},
		{"/v1/jobs/spam", `partitions=4`, 400, ""},
		{"/v1/jobs/spam", `{"partitions":4, "pad":"` + strings.Repeat("x", 5000) + `"}`, 413, ""},
		{"/v1/jobs/nope", `{"partitions":4}`, 404, ""},
	} {
		code, _, body := ts.do("PATCH", c.path, "application/json", []byte(c.body))
		if code != c.status || body["error"] == nil || c.field != "" && body["field"] != c.field {
			t.Errorf("PATCH %s %.40s: %d %v, want %d naming %q", c.path, c.body, code, body, c.status, c.field)
		}
	}
	if n := len(ts.job("spam").Partitions); n != 2 {
		t.Fatalf("the refusals left %d partitions, want 2", n)
	}
}

// PATCH needs the admin scope, as PUT does.
func TestPatchNeedsAdmin(t *testing.T) {
	ts := newTestServer(t, threeTokens(t))
	ts.token = adminTok
	ts.putJob("spam", logregSpec)
	for _, tok := range []string{readTok, ingestTok} {
		ts.token = tok
		if code, _, body := ts.do("PATCH", "/v1/jobs/spam", "application/json", []byte(`{"partitions":3}`)); code != http.StatusForbidden || body["scope"] != "admin" {
			t.Fatalf("PATCH with a %.4s token: %d %v", tok, code, body)
		}
	}
	ts.token = ""
	if code, _, _ := ts.do("PATCH", "/v1/jobs/spam", "application/json", []byte(`{"partitions":3}`)); code != http.StatusUnauthorized {
		t.Fatalf("PATCH without a token: %d", code)
	}
	ts.token = adminTok
	if code, _, body := ts.do("PATCH", "/v1/jobs/spam", "application/json", []byte(`{"partitions":3}`)); code != http.StatusOK {
		t.Fatalf("PATCH with the admin token: %d %v", code, body)
	}
}

// noCluster is a cluster that takes jobs and events and does nothing.
type noCluster struct{}

func (noCluster) Attach(*runtime.Job) error { return nil }
func (noCluster) Detach(*runtime.Job)       {}
func (noCluster) Publish(context.Context, *runtime.Job, [][]runtime.Record) error {
	return nil
}

// An engine in cluster mode refuses to rescale a job by itself (the
// cluster node, the server's JobAdmin there, does it) with a 409 that
// says so.
func TestPatchOfAClusteredEngineIsAConflict(t *testing.T) {
	ts := newTestServer(t, func(c *runtime.Config, _ *Config) { c.Cluster = noCluster{} })
	ts.putJob("spam", logregSpec)
	code, _, body := ts.do("PATCH", "/v1/jobs/spam", "application/json", []byte(`{"partitions":3}`))
	if code != http.StatusConflict || body["field"] != "partitions" || !strings.Contains(body["error"].(string), "rescaled by its cluster") {
		t.Fatalf("PATCH in cluster mode: %d %v", code, body)
	}
}

// In cluster mode a spec with an autoscale section is refused, naming it.
func TestAutoscaleInClusterModeIsRefused(t *testing.T) {
	ts := newTestServer(t, func(c *runtime.Config, _ *Config) { c.Cluster = noCluster{} })
	code, _, body := ts.do("PUT", "/v1/jobs/a", "application/json", []byte(`{"kind":"logreg","input":"mail","autoscale":{"max":2}}`))
	if code != http.StatusBadRequest || body["field"] != "autoscale" {
		t.Fatalf("PUT with autoscale in cluster mode: %d %v", code, body)
	}
}
