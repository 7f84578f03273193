package api

import (
	"fmt"
	"github.com/mlstream/mlstream/kinds/logreg"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/mlstream/mlstream/internal/gen"
	"github.com/mlstream/mlstream/runtime"
)

// genBody returns n generated labelled events as NDJSON.
func genBody(seed int64, n int) string {
	g := gen.New(gen.Config{Seed: seed})
	var b []byte
	for range n {
		ev := g.Next()
		b = ev.AppendJSON(b)
		b = append(b, '\n')
	}
	return string(b)
}

func TestBadInputIsRefusedAndLeavesStateUntouched(t *testing.T) {
	ts := newTestServer(t, func(_ *runtime.Config, c *Config) {
		c.MaxBodyBytes = 64 << 10
		c.MaxEventBytes = 1 << 10
	})
	ts.putJob("spam", logregSpec)
	good := `{"key":"a","label":1,"features":{"x":1}}`
	big := `{"label":1,"features":{"x":"` + strings.Repeat("y", 2000) + `"}}`
	cases := []struct {
		name, stream, ctype, body string
		status, line              int
		field, msg                string
	}{
		{"not json", "mail", "", "this is not json", 400, 1, "", "not valid JSON"},
		{"bad second line", "mail", "", good + "\n{\"label\":1,", 400, 2, "", "not valid JSON"},
		{"event not an object", "mail", "", "[1,2]", 400, 1, "", "must be a JSON object"},
		{"features wrong type", "mail", "", good + "\n" + `{"label":1,"features":5}`, 400, 2, "features", "must be an object"},
		{"features missing", "mail", "", `{"label":1}`, 400, 1, "features", "required"},
		{"feature value nested", "mail", "", `{"label":1,"features":{"a":[1]}}`, 400, 1, "features.a", "number, string or boolean"},
		{"array feature not a string", "mail", "", `{"label":1,"features":["a",1]}`, 400, 1, "features[1]", "must be a string"},
		{"label 2", "mail", "", good + "\n" + good + "\n" + `{"label":2,"features":{"x":1}}`, 400, 3, "label", "must be 0, 1, true or false"},
		{"label string", "mail", "", `{"label":"yes","features":{"x":1}}`, 400, 1, "label", "must be 0, 1, true or false"},
		{"key an object", "mail", "", `{"key":{},"label":1,"features":{"x":1}}`, 400, 1, "key", "string or a number"},
		{"ts not a time", "mail", "", `{"ts":"yesterday","label":1,"features":{"x":1}}`, 400, 1, "ts", "RFC 3339"},
		{"array with a bad element", "mail", "application/json", "[" + good + `,{"label":0.5,"features":{}}]`, 400, 2, "label", "must be 0, 1"},
		{"empty body", "mail", "", "", 400, 0, "", "empty"},
		{"empty array", "mail", "", "[]", 400, 0, "", "empty"},
		{"event too large", "mail", "", good + "\n" + big, 413, 2, "", "over the limit"},
		{"body too large", "mail", "", strings.Repeat(good+"\n", 2000), 413, 0, "", "over the limit"},
		{"unknown stream", "nope", "", good, 404, 0, "", "no job reads stream"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, body := ts.do("POST", "/v1/streams/"+c.stream+"/events", c.ctype, []byte(c.body))
			if code != c.status {
				t.Fatalf("status %d, want %d: %v", code, c.status, body)
			}
			msg, _ := body["error"].(string)
			if !strings.Contains(msg, c.msg) {
				t.Errorf("error %q does not say %q", msg, c.msg)
			}
			if line, _ := body["line"].(float64); int(line) != c.line {
				t.Errorf("line %v, want %d (%v)", body["line"], c.line, body)
			}
			if field, _ := body["field"].(string); field != c.field {
				t.Errorf("field %q, want %q", field, c.field)
			}
		})
	}
	st := ts.job("spam")
	if st.Accepted != 0 || st.Processed != 0 || logreg.StatusOf(st).Model.Version != 0 || logreg.StatusOf(st).Model.Updates != 0 {
		t.Fatalf("state changed by refused input: accepted %d processed %d model %+v", st.Accepted, st.Processed, logreg.StatusOf(st).Model)
	}
	for _, path := range []string{"/v1/jobs/nope", "/v1/jobs/nope/model"} {
		if code, _, body := ts.do("GET", path, "", nil); code != 404 || !strings.Contains(body["error"].(string), `no job "nope"`) {
			t.Errorf("GET %s: %d %v", path, code, body)
		}
	}
	if code, _, _ := ts.do("POST", "/v1/jobs/nope/predict", "", []byte(good)); code != 404 {
		t.Errorf("predict on unknown job: %d", code)
	}
	// The refusals are counted.
	code, _, _ := ts.do("GET", "/metrics", "", nil)
	if code != 200 || !strings.Contains(ts.metrics(), `mlstream_events_rejected_total{reason="bad_input",stream="mail"}`) {
		t.Errorf("rejections not in /metrics")
	}
	// And a good request still goes through.
	if code, body := ts.post("mail", good); code != 202 || body["accepted"] != 1.0 {
		t.Fatalf("good event: %d %v", code, body)
	}
}

func (ts *testServer) metrics() string {
	ts.t.Helper()
	req, err := http.NewRequest("GET", ts.http.URL+"/metrics", nil)
	if err != nil {
		ts.t.Fatal(err)
	}
	ts.authorize(req.Header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String()
}

func TestIngestFormats(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("spam", logregSpec)
	e := `{"key":"k%d","label":%d,"features":{"x":%d,"city":"paris","vip":true}}`
	cases := []struct {
		name, ctype, body string
		want              int
	}{
		{"one object", "application/json", fmt.Sprintf(e, 1, 1, 1), 1},
		{"array", "application/json", "[" + fmt.Sprintf(e, 1, 1, 1) + "," + fmt.Sprintf(e, 2, 0, 2) + "]", 2},
		{"ndjson", "application/x-ndjson", fmt.Sprintf(e, 1, 1, 1) + "\n\n" + fmt.Sprintf(e, 2, 0, 2) + "\r\n" + fmt.Sprintf(e, 3, 1, 3) + "\n", 3},
		{"pretty object, no content type", "", "{\n  \"label\": true,\n  \"features\": [\"a\", \"b\"]\n}\n", 1},
		{"array of strings as features, unlabelled", "", `{"features":["a","b"],"ts":"2026-11-29T10:00:00Z"}`, 1},
	}
	total := 0
	for _, c := range cases {
		code, _, body := ts.do("POST", "/v1/streams/mail/events", c.ctype, []byte(c.body))
		if code != 202 || body["accepted"] != float64(c.want) {
			t.Fatalf("%s: %d %v, want 202 accepted %d", c.name, code, body, c.want)
		}
		total += c.want
	}
	st := ts.waitProcessed("spam")
	if st.Processed != uint64(total) {
		t.Fatalf("processed %d, want %d", st.Processed, total)
	}
	waitFor(t, "progressive validation of the labelled events", 10*time.Second, func() bool {
		return logreg.StatusOf(ts.job("spam")).Metrics.All.Count == int64(total-1)
	})
}

func TestJobSpecErrorsNameTheField(t *testing.T) {
	ts := newTestServer(t)
	cases := []struct{ name, spec, field string }{
		{"not json", `{`, ""},
		{"unknown kind", `{"kind":"svm","input":"x"}`, "kind"},
		{"missing kind", `{"input":"x"}`, "kind"},
		{"missing input", `{"kind":"logreg"}`, "input"},
		{"wrong param type", `{"kind":"logreg","input":"x","params":{"hash_bits":"big"}}`, "params.hash_bits"},
		{"param out of range", `{"kind":"logreg","input":"x","params":{"hash_bits":40}}`, "params.hash_bits"},
		{"param not an integer", `{"kind":"logreg","input":"x","params":{"sync_every":2.5}}`, "params.sync_every"},
		{"unknown optimizer", `{"kind":"logreg","input":"x","params":{"optimizer":"adam"}}`, "params.optimizer"},
		{"unknown param", `{"kind":"logreg","input":"x","params":{"hashbits":20}}`, "params.hashbits"},
		{"negative l2", `{"kind":"logreg","input":"x","params":{"l2":-1}}`, "params.l2"},
		{"partitions wrong type", `{"kind":"logreg","input":"x","partitions":"two"}`, "partitions"},
		{"partitions negative", `{"kind":"logreg","input":"x","partitions":-1}`, "partitions"},
		{"unknown field", `{"kind":"logreg","input":"x","paramz":{}}`, "paramz"},
		{"name differs", `{"name":"other","kind":"logreg","input":"x"}`, "name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, body := ts.do("PUT", "/v1/jobs/j1", "application/json", []byte(c.spec))
			if code != 400 {
				t.Fatalf("status %d, want 400: %v", code, body)
			}
			if f, _ := body["field"].(string); f != c.field {
				t.Errorf("field %q, want %q (%v)", f, c.field, body["error"])
			}
			if msg, _ := body["error"].(string); c.field != "" && !strings.Contains(msg, c.field) {
				t.Errorf("message %q does not name %q", msg, c.field)
			}
		})
	}
	if n := len(ts.engine.Jobs()); n != 0 {
		t.Fatalf("%d jobs after refused specs", n)
	}
}

func TestJobLifecycle(t *testing.T) {
	ts := newTestServer(t)
	spec := `{"kind":"logreg","input":"mail","params":{"hash_bits":12,"optimizer":"adagrad"}}`
	if code, _, body := ts.do("PUT", "/v1/jobs/a", "", []byte(spec)); code != 201 || body["name"] != "a" {
		t.Fatalf("create: %d %v", code, body)
	}
	if code, _, _ := ts.do("PUT", "/v1/jobs/a", "", []byte(spec)); code != 200 {
		t.Fatalf("same spec again: %d, want 200", code)
	}
	if code, _, body := ts.do("PUT", "/v1/jobs/a", "", []byte(`{"kind":"logreg","input":"other"}`)); code != 409 {
		t.Fatalf("different spec: %d %v, want 409", code, body)
	}
	code, _, body := ts.do("GET", "/v1/jobs", "", nil)
	jobs, _ := body["jobs"].([]any)
	if code != 200 || len(jobs) != 1 || jobs[0].(map[string]any)["name"] != "a" {
		t.Fatalf("list: %d %v", code, body)
	}
	if code, _ := ts.post("mail", genBody(1, 100)); code != 202 {
		t.Fatalf("post: %d", code)
	}
	if code, _, body := ts.do("DELETE", "/v1/jobs/a", "", nil); code != 200 || body["deleted"] != "a" {
		t.Fatalf("delete: %d %v", code, body)
	}
	if code, _, _ := ts.do("GET", "/v1/jobs/a", "", nil); code != 404 {
		t.Fatalf("get after delete: %d", code)
	}
	if code, _ := ts.post("mail", genBody(1, 1)); code != 404 {
		t.Fatalf("post to a stream nobody reads: %d", code)
	}
	if code, _, _ := ts.do("DELETE", "/v1/jobs/a", "", nil); code != 404 {
		t.Fatalf("second delete: %d", code)
	}
}

func TestPredictAndModel(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("spam", logregSpec)
	if code, body := ts.post("mail", genBody(2, 5000)); code != 202 {
		t.Fatalf("post: %d %v", code, body)
	}
	ts.waitProcessed("spam")
	// A partition merges at the end of its group of batches or when its
	// queue runs dry, just after the events count as processed.
	var code int
	var body map[string]any
	waitFor(t, "the first merge", 5*time.Second, func() bool {
		code, _, body = ts.do("POST", "/v1/jobs/spam/predict", "", []byte(`{"key":"u1","features":{"amount":120,"country":"de"}}`))
		v, _ := body["model_version"].(float64)
		return code != 200 || v >= 1
	})
	if code != 200 {
		t.Fatalf("predict one: %d %v", code, body)
	}
	preds := body["predictions"].([]any)
	p := preds[0].(map[string]any)
	if len(preds) != 1 || p["key"] != "u1" || p["p"].(float64) <= 0 || p["p"].(float64) >= 1 || body["model_version"].(float64) < 1 {
		t.Fatalf("predict one: %v", body)
	}
	code, _, body = ts.do("POST", "/v1/jobs/spam/predict", "", []byte(genBody(3, 7)))
	if code != 200 || len(body["predictions"].([]any)) != 7 {
		t.Fatalf("predict many: %d %v", code, body)
	}
	code, _, body = ts.do("POST", "/v1/jobs/spam/predict", "", []byte(`{"features":{"a":{}}}`))
	if code != 400 || body["field"] != "features.a" {
		t.Fatalf("predict bad: %d %v", code, body)
	}
	code, _, body = ts.do("GET", "/v1/jobs/spam/model?weights=true&limit=5", "", nil)
	if code != 200 || len(body["weights"].([]any)) != 5 || body["nonzero_weights"].(float64) < 5 || body["version"].(float64) < 1 {
		t.Fatalf("model: %d %v", code, body)
	}
	metrics := body["metrics"].(map[string]any)["all"].(map[string]any)
	if metrics["count"].(float64) != 5000 || metrics["accuracy"].(float64) < 0.6 {
		t.Fatalf("model metrics: %v", metrics)
	}
	if code, _, _ := ts.do("GET", "/v1/jobs/spam/model?weights=maybe", "", nil); code != 400 {
		t.Fatalf("bad weights param: %d", code)
	}
}

func TestWebSocketPredictionsAndStats(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("spam", logregSpec)
	c := ts.dialWS("jobs=spam&types=prediction")
	// The subscription is registered before the upgrade completes.
	if code, _ := ts.post("mail", genBody(4, 10)); code != 202 {
		t.Fatal(code)
	}
	keys := map[string]bool{}
	for range 10 {
		m := readMessage(t, c, 5*time.Second)
		if m["type"] != "prediction" || m["job"] != "spam" || m["model_version"] == nil || m["ts"] == nil {
			t.Fatalf("prediction message: %v", m)
		}
		if p := m["p"].(float64); p <= 0 || p >= 1 {
			t.Fatalf("p = %v", p)
		}
		if l := m["label"].(float64); l != 0 && l != 1 {
			t.Fatalf("label = %v", l)
		}
		keys[m["key"].(string)] = true
	}
	if len(keys) < 2 {
		t.Errorf("keys %v", keys)
	}
	s := ts.dialWS("types=stats")
	m := readMessage(t, s, 5*time.Second)
	if m["type"] != "stats" || m["job"] != "spam" || m["dropped"] != 0.0 {
		t.Fatalf("stats message: %v", m)
	}
	if st := m["stats"].(map[string]any); st["accepted"].(float64) != 10 {
		t.Fatalf("stats: %v", st)
	}
	for _, q := range []struct {
		query  string
		status int
	}{{"jobs=nope", 404}, {"types=gossip", 400}} {
		_, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(ts.http.URL, "http")+"/v1/ws?"+q.query, nil)
		if err == nil || resp == nil || resp.StatusCode != q.status {
			t.Errorf("%s: err %v, resp %v, want status %d", q.query, err, resp, q.status)
		}
	}
}

// A full queue makes ingest answer 429 with Retry-After and accept nothing
// of that request; everything that got a 202 is processed.
func TestFullQueueAnswers429AndLosesNothing(t *testing.T) {
	ts := newTestServer(t, func(e *runtime.Config, _ *Config) { e.IngestWait = 20 * time.Millisecond })
	ts.putJob("spam", `{"kind":"logreg","input":"mail","partitions":2,"queue_size":300,"params":{"hash_bits":12}}`)
	j, _ := ts.engine.Job("spam")
	j.Pause()
	accepted, refused := 0, 0
	for i := 0; refused < 3 && i < 100; i++ {
		code, hdr, body := ts.do("POST", "/v1/streams/mail/events", "", []byte(genBody(int64(i), 100)))
		switch code {
		case 202:
			accepted += int(body["accepted"].(float64))
		case 429:
			refused++
			if ra, err := strconv.Atoi(hdr.Get("Retry-After")); err != nil || ra < 1 {
				t.Fatalf("Retry-After %q", hdr.Get("Retry-After"))
			}
			if body["retry_after_ms"].(float64) <= 0 || !strings.Contains(body["error"].(string), "nothing of this request was accepted") {
				t.Fatalf("429 body: %v", body)
			}
		default:
			t.Fatalf("status %d: %v", code, body)
		}
	}
	if refused == 0 || accepted == 0 || accepted > 600 {
		t.Fatalf("accepted %d, refused %d requests", accepted, refused)
	}
	if st := ts.job("spam"); st.Accepted != uint64(accepted) || st.QueueDepth != int64(accepted) {
		t.Fatalf("job says accepted %d depth %d, clients got 202 for %d", st.Accepted, st.QueueDepth, accepted)
	}
	j.Resume()
	st := ts.waitProcessed("spam")
	if st.Processed != uint64(accepted) {
		t.Fatalf("processed %d, accepted %d", st.Processed, accepted)
	}
	// Metrics are published when the partition goes idle.
	waitFor(t, "metrics of every event", 10*time.Second, func() bool { return logreg.StatusOf(ts.job("spam")).Metrics.All.Count == int64(accepted) })
	if !strings.Contains(ts.metrics(), `mlstream_events_rejected_total{reason="busy",stream="mail"}`) {
		t.Error("429s not counted in /metrics")
	}
}

// A WebSocket client that reads nothing gets its messages dropped and
// counted; ingest and processing go on at full speed.
func TestSlowWebSocketClientDoesNotSlowIngest(t *testing.T) {
	ts := newTestServer(t, func(_ *runtime.Config, c *Config) { c.WSBacklog = 16 })
	ts.putJob("spam", logregSpec)
	// A tiny kernel receive buffer, so the server's writes block soon.
	d := websocket.Dialer{NetDial: func(network, addr string) (net.Conn, error) {
		c, err := net.Dial(network, addr)
		if err == nil {
			_ = c.(*net.TCPConn).SetReadBuffer(4096)
		}
		return c, err
	}, ReadBufferSize: 1024}
	slow, _, err := d.Dial("ws"+strings.TrimPrefix(ts.http.URL, "http")+"/v1/ws?types=prediction,stats", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	const batches, per = 40, 1000
	body := genBody(5, per)
	for range batches {
		if code, out := ts.post("mail", body); code != 202 {
			t.Fatalf("ingest with a slow client: %d %v", code, out)
		}
	}
	st := ts.waitProcessed("spam")
	if st.Processed != batches*per {
		t.Fatalf("processed %d", st.Processed)
	}
	if ts.engine.Hub().Dropped() == 0 {
		t.Fatal("nothing dropped for a client that reads nothing")
	}
	// Once the client reads, it learns how much it missed.
	deadline := time.Now().Add(20 * time.Second)
	for {
		m := readMessage(t, slow, time.Until(deadline))
		if m["type"] == "stats" && m["dropped"].(float64) > 0 {
			break
		}
	}
}

// A paused job takes events until its queues are full, then ingest
// answers 429; resumed, it processes what was queued.
func TestPauseAndResumeOverHTTP(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("p", `{"kind":"distinct","input":"s","partitions":1,"queue_size":4,"params":{"field":"u"}}`)
	if code, _, body := ts.do("POST", "/v1/jobs/p/pause", "", nil); code != 200 || body["paused"] != true {
		t.Fatalf("pause: %d %v", code, body)
	}
	lines := `{"u":"a"}` + "\n" + `{"u":"b"}` + "\n" + `{"u":"c"}` + "\n" + `{"u":"d"}`
	if code, body := ts.post("s", lines); code != http.StatusAccepted {
		t.Fatalf("filling the queue: %d %v", code, body)
	}
	if code, body := ts.post("s", `{"u":"e"}`); code != http.StatusTooManyRequests {
		t.Fatalf("a post to a paused job's full queue: %d %v, want 429", code, body)
	}
	if code, _, body := ts.do("POST", "/v1/jobs/p/resume", "", nil); code != 200 || body["paused"] != false {
		t.Fatalf("resume: %d %v", code, body)
	}
	if st := ts.waitProcessed("p"); st.Processed != 4 {
		t.Fatalf("processed %d after resume, want 4", st.Processed)
	}
	if code, _, _ := ts.do("POST", "/v1/jobs/nope/pause", "", nil); code != 404 {
		t.Fatalf("pause of an unknown job: %d", code)
	}
}
