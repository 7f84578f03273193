package api

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// GET /v1/jobs/{job}/history: the job's stats of the last seconds, one
// point a second, oldest first, with the events it processed; 404 with a
// JSON error for a job that does not exist.
func TestJobHistory(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("spam", logregSpec)
	if code, _ := ts.post("mail", genBody(1, 500)); code != http.StatusAccepted {
		t.Fatalf("post: %d", code)
	}
	ts.waitProcessed("spam")
	var points []any
	waitFor(t, "two history points after the events", 10*time.Second, func() bool {
		code, _, body := ts.do("GET", "/v1/jobs/spam/history", "", nil)
		if code != http.StatusOK || body["job"] != "spam" || body["interval_ms"] != 1000.0 {
			t.Fatalf("history: %d %v", code, body)
		}
		points, _ = body["points"].([]any)
		if len(points) < 2 {
			return false
		}
		last := points[len(points)-1].(map[string]any)
		// The partitions publish their metrics as they go idle, just
		// after their events count as processed: a point may lag.
		kind, _ := last["kind"].([]any)
		return last["processed_per_s"].(float64) > 0 && len(kind) == 4 && kind[1] != nil
	})
	// The kind's own series: named once, a value each in every point.
	_, _, body := ts.do("GET", "/v1/jobs/spam/history", "", nil)
	if got := fmt.Sprint(body["series"]); got != "[accuracy_recent accuracy_all log_loss_recent log_loss_all]" {
		t.Fatalf("series %s", got)
	}
	kind := points[len(points)-1].(map[string]any)["kind"].([]any)
	if acc, loss := kind[1].(float64), kind[3].(float64); acc < 0.5 || acc > 1 || loss <= 0 || loss > 1 {
		t.Fatalf("whole-run accuracy %v and log loss %v after 500 events of a learnable stream", acc, loss)
	}
	if _, ok := points[0].(map[string]any)["ft"]; ok {
		t.Fatalf("a job without fault tolerance has ft in its history: %v", points[0])
	}
	var prev float64
	for i, p := range points {
		pt := p.(map[string]any)
		at := pt["ts"].(float64)
		if at <= prev {
			t.Fatalf("point %d at %v, not after %v: %v", i, at, prev, points)
		}
		prev = at
		for _, k := range []string{"accepted_per_s", "processed_per_s", "p50_ms", "p99_ms", "queue_depth", "group_size", "overhead", "total_overhead"} {
			if _, ok := pt[k].(float64); !ok {
				t.Fatalf("point %d has no %s: %v", i, k, pt)
			}
		}
	}
	if code, _, body := ts.do("GET", "/v1/jobs/nope/history", "", nil); code != http.StatusNotFound || body["error"] == nil {
		t.Fatalf("history of an unknown job: %d %v", code, body)
	}
}
