package api

import (
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
		return last["processed_per_s"].(float64) > 0
	})
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
