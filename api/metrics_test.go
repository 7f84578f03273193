package api

import (
	"net/http"
	"strings"
	"testing"
)

// /metrics carries the synopses' answers (distinct estimate, top-k size,
// the join's COUNT), the latency histogram in a few readable buckets, and
// ratio metrics named _ratio.
func TestMetricsOfAnswers(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("users", `{"kind":"distinct","input":"s","partitions":1,"params":{"field":"u"}}`)
	ts.putJob("top", `{"kind":"heavy_hitters","input":"s","partitions":1,"params":{"field":"u","k":2}}`)
	ts.putJob("pairs", `{"kind":"join","left":"a","right":"b","partitions":1,"params":{"on":"k","within":"1m"}}`)
	if code, body := ts.post("s", "{\"u\":\"x\"}\n{\"u\":\"y\"}\n{\"u\":\"x\"}\n{\"u\":\"z\"}"); code != http.StatusAccepted {
		t.Fatalf("post: %d %v", code, body)
	}
	for _, s := range []string{"a", "b"} {
		if code, body := ts.post(s, `{"k":"1","ts":1000}`); code != http.StatusAccepted {
			t.Fatalf("post %s: %d %v", s, code, body)
		}
	}
	ts.waitProcessed("users")
	ts.waitProcessed("top")
	ts.waitProcessed("pairs")
	for _, series := range []string{
		`mlstream_distinct_estimate{bound="estimate",job="users"}`,
		`mlstream_topk_items{job="top"}`,
		`mlstream_topk_events{job="top"}`,
		`mlstream_join_count_estimate{bound="estimate",job="pairs"}`,
	} {
		want := map[string]float64{"users": 3, "top": 2, "pairs": 1}
		job := series[strings.Index(series, `job="`)+5 : strings.LastIndex(series, `"`)]
		if strings.HasPrefix(series, "mlstream_topk_events") {
			want["top"] = 4
		}
		if got := ts.counter(series); got != want[job] {
			t.Errorf("%s = %v, want %v", series, got, want[job])
		}
	}
	m := ts.metrics()
	if n := strings.Count(m, `mlstream_processing_latency_seconds_bucket{job="users"`); n != 11+1 {
		t.Errorf("%d latency buckets for a job, want %d: 11 readable ones and +Inf", n, 11+1)
	}
	if !strings.Contains(m, `mlstream_processing_latency_seconds_bucket{job="users",le="0.001"}`) {
		t.Errorf("no readable latency bucket le=0.001")
	}
	if strings.Contains(m, "mlstream_group_overhead{") || !strings.Contains(m, "mlstream_group_overhead_ratio{") {
		t.Errorf("the overhead share is not named _ratio")
	}
}

// Query parameters a route does not take are refused with 400 naming them.
func TestUnknownQueryParametersAreRefused(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("users", `{"kind":"distinct","input":"s","partitions":1,"params":{"field":"u"}}`)
	for _, c := range []struct{ method, path, field string }{
		{"GET", "/v1/jobs?detail=1", "detail"},
		{"GET", "/v1/jobs/users?verbose=true", "verbose"},
		{"POST", "/v1/streams/s/events?sync=1", "sync"},
		{"GET", "/v1/jobs/users/distinct?windw=all", "windw"},
		{"GET", "/v1/ws?job=users", "job"},
		{"DELETE", "/v1/jobs/users?force=1", "force"},
	} {
		var body []byte
		if c.method == "POST" {
			body = []byte(`{"u":"x"}`)
		}
		code, _, out := ts.do(c.method, c.path, "", body)
		if code != http.StatusBadRequest || out["field"] != c.field {
			t.Errorf("%s %s: %d %v, want 400 naming %q", c.method, c.path, code, out, c.field)
		}
	}
	if code, _, _ := ts.do("GET", "/v1/jobs/users", "", nil); code != 200 {
		t.Fatalf("the job after the refused DELETE: %d", code)
	}
}

// A plain GET of the feed is a JSON 400 like every other refusal, and
// /metrics answers GET only.
func TestFeedAndMetricsAnswerLikeTheRest(t *testing.T) {
	ts := newTestServer(t)
	code, hdr, body := ts.do("GET", "/v1/ws", "", nil)
	if code != http.StatusBadRequest || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") || body["error"] == nil {
		t.Errorf("GET /v1/ws without an upgrade: %d %q %v", code, hdr.Get("Content-Type"), body)
	}
	if code, _, body := ts.do("POST", "/metrics", "application/json", []byte("{}")); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %d %v, want 405", code, body)
	}
}
