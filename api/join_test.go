package api

import (
	"fmt"
	"github.com/mlstream/mlstream/kinds/heavyhitters"
	"github.com/mlstream/mlstream/kinds/join"
	"strings"
	"testing"
	"time"
)

// TestJoinOverHTTP declares a join with PUT, posts both streams, and reads
// the matches over HTTP, the WebSocket feed and /metrics.
func TestJoinOverHTTP(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("conv", `{"kind":"join","left":"impressions","right":"clicks","partitions":2,
		"params":{"left_on":"ad","right_on":"ad_id","within":"30s","allowed_lateness":"5m","value":"cost","max_state":"4MiB"}}`)
	ws := ts.dialWS("jobs=conv&types=match")
	var imp, clk strings.Builder
	for i := range 100 {
		fmt.Fprintf(&imp, `{"ad":"a%d","ts":%d,"cost":%d}`+"\n", i, 1_000_000+i*1000, i)
	}
	// Clicks on even ads, 5 s after the impression: 50 matches. The clicks
	// arrive after all impressions: a lateness of 5 minutes lets them join.
	for i := 0; i < 100; i += 2 {
		fmt.Fprintf(&clk, `{"ad_id":"a%d","ts":%d}`+"\n", i, 1_005_000+i*1000)
	}
	for stream, body := range map[string]string{"impressions": imp.String(), "clicks": clk.String()} {
		if code, out := ts.post(stream, body); code != 202 {
			t.Fatalf("post %s: %d %v", stream, code, out)
		}
	}
	var m map[string]any
	waitFor(t, "the join to see every event", 10*time.Second, func() bool {
		_, _, m = ts.do("GET", "/v1/jobs/conv/matches?limit=3", "", nil)
		return m["seen"] == 150.0
	})
	est := m["estimate"].(map[string]any)
	count := est["count"].(map[string]any)
	if m["matches"] != 50.0 || count["estimate"] != 50.0 || count["low"] != 50.0 || est["exact"] != true {
		t.Fatalf("matches %v, estimate %v", m["matches"], est)
	}
	// SUM of cost over the matched impressions: 0+2+…+98.
	if sum := est["sum"].(map[string]any)["estimate"]; sum != 2450.0 {
		t.Fatalf("sum %v", sum)
	}
	if recent := m["recent"].([]any); len(recent) != 3 {
		t.Fatalf("recent %v", recent)
	}
	if m["state_bytes"].(float64) > m["max_state_bytes"].(float64) || m["max_state_bytes"] != float64(4<<20) {
		t.Fatalf("state %v of %v", m["state_bytes"], m["max_state_bytes"])
	}
	msg := readMessage(t, ws, 5*time.Second)
	match, _ := msg["match"].(map[string]any)
	if msg["type"] != "match" || msg["job"] != "conv" || match["right_ts"].(float64)-match["left_ts"].(float64) != 5000 {
		t.Fatalf("websocket: %v", msg)
	}
	if st := ts.job("conv"); join.StatusOf(st) == nil || join.StatusOf(st).Join == nil || join.StatusOf(st).Join.Matches != 50 {
		t.Fatalf("job status join %+v", join.StatusOf(st))
	}
	if !strings.Contains(ts.metrics(), `mlstream_join_matches_total{job="conv"} 50`) {
		t.Fatal("metrics lack the join's matches")
	}
	// Errors: a bad window, a bad limit, a join query on another kind, an
	// event without its join key.
	ts.putJob("users", `{"kind":"distinct","input":"clicks","params":{"field":"ad_id"}}`)
	for _, c := range []struct{ path, field string }{
		{"/v1/jobs/conv/matches?window=soon", "window"},
		{"/v1/jobs/conv/matches?limit=-1", "limit"},
		{"/v1/jobs/users/matches", ""},
	} {
		code, _, out := ts.do("GET", c.path, "", nil)
		if code != 400 || out["field"] != nilIfEmpty(c.field) {
			t.Errorf("%s: %d %v", c.path, code, out)
		}
	}
	code, out := ts.post("impressions", `{"ad":"a1","ts":1,"cost":1}`+"\n"+`{"ts":2,"cost":1}`)
	if code != 400 || out["line"] != 2.0 || out["field"] != "ad" {
		t.Fatalf("event without key: %d %v", code, out)
	}
	for _, c := range []struct{ spec, field string }{
		{`{"kind":"join","left":"a","params":{"on":"k","within":"1s"}}`, "right"},
		{`{"kind":"join","left":"a","right":"b","params":{"on":"k"}}`, "params.within"},
		{`{"kind":"join","left":"a","right":"b","params":{"on":"k","within":"1s","max_state":"lots"}}`, "params.max_state"},
	} {
		code, _, body := ts.do("PUT", "/v1/jobs/j", "", []byte(c.spec))
		if code != 400 || body["field"] != c.field {
			t.Errorf("%s: %d %v, want field %s", c.spec, code, body, c.field)
		}
	}
}

// With load shedding on, a 202 says how many events each job dropped, and
// status and /metrics count them, with those shed late.
func TestShedIsReportedInTheResponse(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("top", `{"kind":"heavy_hitters","input":"clicks","partitions":1,"params":{"field":"item"},"shed":{"max_delay":"1ms"}}`)
	var body strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&body, `{"item":"i%d"}`+"\n", i%50)
	}
	// The first request teaches the partition its drain rate; then the job
	// is held, its queue grows, and later requests shed.
	if code, out := ts.post("clicks", body.String()); code != 202 || out["shed"] != nil {
		t.Fatalf("first post: %d %v", code, out)
	}
	ts.waitProcessed("top")
	j, _ := ts.engine.Job("top")
	j.Pause()
	var shed float64
	for range 10 {
		code, out := ts.post("clicks", body.String())
		if code != 202 || out["accepted"] != 2000.0 {
			t.Fatalf("post: %d %v", code, out)
		}
		if m, ok := out["shed"].(map[string]any); ok {
			shed += m["top"].(float64)
		}
	}
	j.Resume()
	if shed == 0 {
		t.Fatal("no response reported shed events")
	}
	ts.waitProcessed("top")
	// Batches that waited out the pause are shed late, as the partition
	// reaches them: no response reports those, status and metrics do.
	st := ts.job("top")
	if st.Shed == nil || st.Shed.Late == 0 || float64(st.Shed.Shed-st.Shed.Late) != shed || heavyhitters.StatusOf(st).TopK.Shed != st.Shed.Shed {
		t.Fatalf("status shed %+v, topk shed %d; responses said %v", st.Shed, heavyhitters.StatusOf(st).TopK.Shed, shed)
	}
	if want := fmt.Sprintf(`mlstream_events_shed_total{job="top"} %v`, st.Shed.Shed); !strings.Contains(ts.metrics(), want) {
		t.Fatalf("metrics lack %q", want)
	}
}
