package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/mlstream/mlstream/kinds/logreg"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mlstream/mlstream/runtime"
)

// rawRequest opens a connection to addr and writes a POST's headers
// announcing contentLength bytes, and the first bytes of the body.
func rawRequest(t *testing.T, addr, path string, contentLength int, first string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\nContent-Length: %d\r\n\r\n%s", path, contentLength, first)
	return c
}

// readResponse reads the answer on a raw connection: status and JSON body.
func readResponse(t *testing.T, c net.Conn, timeout time.Duration) (int, map[string]any) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("status %d, body not JSON: %v", resp.StatusCode, err)
	}
	return resp.StatusCode, out
}

// counter returns the value of one series of /metrics (0 if absent).
func (ts *testServer) counter(series string) float64 {
	ts.t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(ts.metrics())
	if m == nil {
		return 0
	}
	var v float64
	fmt.Sscan(m[1], &v)
	return v
}

// healthy checks that the service still answers: /healthz, a normal
// ingest, and GET /v1/jobs with a complete JSON body whose models are
// finite (a NaN weight once made it answer 200 with an empty body).
func (ts *testServer) healthy(stream string) {
	ts.t.Helper()
	if code, _, _ := ts.do("GET", "/healthz", "", nil); code != 200 {
		ts.t.Fatalf("/healthz: %d", code)
	}
	if code, body := ts.post(stream, `{"key":"k","label":1,"features":{"x":1,"y":2}}`); code != http.StatusAccepted {
		ts.t.Fatalf("a normal post after the hostile one: %d %v", code, body)
	}
	req, _ := http.NewRequest("GET", ts.http.URL+"/v1/jobs", nil)
	ts.authorize(req.Header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct{ Jobs []runtime.JobStatus }
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != 200 || len(list.Jobs) == 0 {
		ts.t.Fatalf("GET /v1/jobs: %d, %d jobs, %v", resp.StatusCode, len(list.Jobs), err)
	}
	for _, j := range list.Jobs {
		if ls := logreg.StatusOf(j); ls == nil || ls.Model == nil {
			continue
		}
		code, _, m := ts.do("GET", "/v1/jobs/"+j.Name+"/model?weights=true&limit=10000", "", nil)
		if code != 200 || m == nil {
			ts.t.Fatalf("model of %s: %d %v", j.Name, code, m)
		}
	}
}

// The hostile inputs of the "safe on a network" issue, through the real
// HTTP server: each is refused with a located JSON error and counted, and
// leaves the service answering and its models intact.
func TestHostileInput(t *testing.T) {
	SetBodyLimits(BodyLimits{Timeout: 500 * time.Millisecond})
	t.Cleanup(func() { SetBodyLimits(BodyLimits{}) })
	ts := newTestServer(t, func(_ *runtime.Config, c *Config) {
		c.MaxBodyBytes = 1 << 20
		c.MaxEventBytes = 1 << 10
	})
	ts.putJob("spam", `{"kind":"logreg","input":"mail","partitions":2,"queue_size":100,"params":{"hash_bits":12}}`)
	ts.putJob("pairs", `{"kind":"join","left":"clicks","right":"buys","params":{"on":"user","within":"1m","value":"amount"}}`)
	good := `{"key":"a","label":1,"features":{"x":1}}`
	huge := `{"label":1,"features":{"x":"` + strings.Repeat("y", 2000) + `"}}`
	lines := func(n int, last string) string { return strings.Repeat(good+"\n", n-1) + last }
	type result struct {
		status, line int
		field, msg   string
	}
	post := func(stream, ctype, body string) func(t *testing.T) (int, map[string]any) {
		return func(t *testing.T) (int, map[string]any) {
			code, _, out := ts.do("POST", "/v1/streams/"+stream+"/events", ctype, []byte(body))
			return code, out
		}
	}
	predict := func(body string) func(t *testing.T) (int, map[string]any) {
		return func(t *testing.T) (int, map[string]any) {
			code, _, out := ts.do("POST", "/v1/jobs/spam/predict", "", []byte(body))
			return code, out
		}
	}
	cases := []struct {
		name   string
		send   func(t *testing.T) (int, map[string]any)
		want   result
		reason string // counted under mlstream_events_rejected_total{stream="mail"}
	}{
		{"slow body", func(t *testing.T) (int, map[string]any) {
			c := rawRequest(t, ts.http.Listener.Addr().String(), "/v1/streams/mail/events", 1000, `{"label":1,`)
			go func() { // one byte every 50ms, until the server hangs up
				for range 100 {
					time.Sleep(50 * time.Millisecond)
					if _, err := c.Write([]byte(" ")); err != nil {
						return
					}
				}
			}()
			return readResponse(t, c, 10*time.Second)
		}, result{408, 0, "", "did not arrive within 500ms"}, "timeout"},
		{"announced 16 MiB, sent 20 bytes", func(t *testing.T) (int, map[string]any) {
			c := rawRequest(t, ts.http.Listener.Addr().String(), "/v1/streams/mail/events", 16<<20, `{"label":1,"features"`)
			c.(*net.TCPConn).CloseWrite()
			return readResponse(t, c, 10*time.Second)
		}, result{413, 0, "", "over the limit of 1048576 bytes"}, "too_large"},
		{"announced 1 MiB, sent 20 bytes", func(t *testing.T) (int, map[string]any) {
			c := rawRequest(t, ts.http.Listener.Addr().String(), "/v1/streams/mail/events", 1<<20, `{"label":1,"features"`)
			c.(*net.TCPConn).CloseWrite()
			return readResponse(t, c, 10*time.Second)
		}, result{400, 0, "", "unexpected EOF"}, "bad_input"},
		{"array with an oversized element", post("mail", "application/json", "["+good+","+huge+","+good+"]"),
			result{413, 2, "", "event of 1025 bytes is over the limit of 1024"}, "too_large"},
		// Over the limit and not even JSON: the size is checked first.
		{"array with an oversized broken element", post("mail", "", "["+good+",\n"+good+", {\"a\":["+strings.Repeat("[1,", 5000)),
			result{413, 3, "", "over the limit of 1024"}, "too_large"},
		{"array element unterminated", post("mail", "", "["+good+`,{"label":1,"features":{"x":"a]}}]`),
			result{400, 2, "", "ends inside event 2"}, "bad_input"},
		{"array with a stray bracket", post("mail", "", "["+good+"]]"),
			result{400, 0, "", "after the array"}, "bad_input"},
		{"array with garbage between events", post("mail", "", "["+good+" x "+good+"]"),
			result{400, 1, "", "expected ',' or ']' after event 1"}, "bad_input"},
		// 2 partitions × 100 events: 201 can never be queued, and the
		// body is refused before its broken last line is parsed.
		{"body over the queues' capacity", post("mail", "", lines(201, "{not json")),
			result{413, 0, "", `more than the queues of the jobs reading stream "mail" can take in one request (200)`}, "too_large"},
		{"array over the queues' capacity", post("mail", "", "["+strings.Repeat(good+",", 200)+good+"]"),
			result{413, 0, "", "(200)"}, "too_large"},
		{"feature 1e400", post("mail", "", lines(3, `{"label":1,"features":{"amount":1e400}}`)),
			result{400, 3, "features.amount", "magnitude over the limit of 1e+12: 1e400"}, "bad_input"},
		{"feature -1e300", post("mail", "", `{"label":1,"features":{"amount":-1e300}}`),
			result{400, 1, "features.amount", "magnitude over the limit"}, "bad_input"},
		{"feature NaN", post("mail", "", `{"label":1,"features":{"amount":NaN}}`),
			result{400, 1, "features.amount", "not a valid number"}, "bad_input"},
		{"feature -Inf", post("mail", "", `{"label":1,"features":{"amount":-Inf}}`),
			result{400, 1, "features.amount", "magnitude over the limit"}, "bad_input"},
		{"feature 1.2.3", post("mail", "", `{"label":1,"features":{"amount":1.2.3}}`),
			result{400, 1, "features.amount", "not a valid number"}, "bad_input"},
		{"feature in an array body", post("mail", "", "["+good+`,{"label":1,"features":{"amount":1e400}}]`),
			result{400, 2, "features.amount", "magnitude over the limit"}, "bad_input"},
		{"label 1e400", post("mail", "", `{"label":1e400,"features":{"x":1}}`),
			result{400, 1, "label", "must be 0, 1, true or false"}, "bad_input"},
		{"label 1.0.0", post("mail", "", `{"label":1.0.0,"features":{"x":1}}`),
			result{400, 1, "label", "must be 0, 1, true or false"}, "bad_input"},
		{"ts 1e400", post("mail", "", `{"ts":1e400,"label":1,"features":{"x":1}}`),
			result{400, 1, "ts", "out of range"}, "bad_input"},
		{"ts -1e300", post("mail", "", `{"ts":-1e300,"label":1,"features":{"x":1}}`),
			result{400, 1, "ts", "out of range"}, "bad_input"},
		{"ts NaN", post("mail", "", `{"ts":nan,"label":1,"features":{"x":1}}`),
			result{400, 1, "ts", "not a valid number"}, "bad_input"},
		{"ts year 0", post("mail", "", `{"ts":"0000-01-01T00:00:00Z","label":1,"features":{"x":1}}`),
			result{400, 1, "ts", "out of range"}, "bad_input"},
		{"join value 1e400", post("clicks", "", `{"user":"u","amount":1e400}`),
			result{400, 1, "amount", "magnitude over the limit"}, ""},
		{"join value -1e300", post("clicks", "", `{"user":"u","amount":-1e300}`),
			result{400, 1, "amount", "magnitude over the limit"}, ""},
		{"predict with 1e400", predict(good + "\n" + `{"features":{"x":1e400}}`),
			result{400, 2, "features.x", "magnitude over the limit"}, ""},
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			series := `mlstream_events_rejected_total{reason="` + c.reason + `",stream="mail"}`
			before := ts.counter(series)
			code, body := c.send(t)
			if code != c.want.status {
				t.Fatalf("status %d, want %d: %v", code, c.want.status, body)
			}
			if msg, _ := body["error"].(string); !strings.Contains(msg, c.want.msg) {
				t.Errorf("error %q does not say %q", msg, c.want.msg)
			}
			if line, _ := body["line"].(float64); int(line) != c.want.line {
				t.Errorf("line %v, want %d (%v)", body["line"], c.want.line, body)
			}
			if field, _ := body["field"].(string); field != c.want.field {
				t.Errorf("field %q, want %q", field, c.want.field)
			}
			if c.reason != "" {
				if after := ts.counter(series); after <= before {
					t.Errorf("%s: %v before, %v after: the refusal is not counted", series, before, after)
				}
			}
			ts.healthy("mail")
		})
	}
	// Values that are finite but tiny are accepted, and do not poison the
	// adaptive scales.
	if code, body := ts.post("mail", `{"label":1,"features":{"t":5e-324}}`+"\n"+`{"label":0,"features":{"t":1e12}}`); code != http.StatusAccepted {
		t.Fatalf("tiny and large values: %d %v", code, body)
	}
	st := ts.waitProcessed("spam")
	if logreg.StatusOf(st).Model.Skipped != 0 {
		t.Errorf("the model skipped %d updates", logreg.StatusOf(st).Model.Skipped)
	}
	ts.healthy("mail")
}

// A body is never allocated from its announced length: connections that
// announce 16 MiB and send a few bytes cost a few KiB each.
func TestAnnouncedLengthIsNotAllocated(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("spam", logregSpec)
	var entered atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered.Add(1)
		ts.api.ServeHTTP(w, r)
	}))
	defer hs.Close()
	const conns = 40
	goruntime.GC()
	var before goruntime.MemStats
	goruntime.ReadMemStats(&before)
	var cs []net.Conn
	for range conns {
		cs = append(cs, rawRequest(t, hs.Listener.Addr().String(), "/v1/streams/mail/events", 16<<20, `{"label":1,`))
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	waitFor(t, "the requests to reach the handler", 10*time.Second, func() bool { return entered.Load() == conns })
	// The old code grew each buffer to the announced length as soon as it
	// started reading: watch the heap for a while.
	for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); {
		var now goruntime.MemStats
		goruntime.ReadMemStats(&now)
		if grown := int64(now.HeapAlloc) - int64(before.HeapAlloc); grown > 32<<20 {
			t.Fatalf("heap grew by %d MiB for %d requests announcing 16 MiB", grown>>20, conns)
		}
	}
	ts.healthy("mail")
}

// Requests to streams no job reads create no series: 20,000 random names
// leave /metrics as it was.
func TestRandomStreamNamesCreateNoMetrics(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("spam", logregSpec)
	ts.post("no-such-stream", `{"label":1,"features":{"x":1}}`) // the one series of unknown streams
	size := len(ts.metrics())
	var wg sync.WaitGroup
	names := make(chan string)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range names {
				resp, err := http.Post(ts.http.URL+"/v1/streams/"+name+"/events", "application/x-ndjson", strings.NewReader(`{"label":1,"features":{"x":1}}`))
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusNotFound {
					t.Errorf("stream %s: %d", name, resp.StatusCode)
				}
			}
		}()
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		names <- fmt.Sprintf("s%016x", r.Uint64())
	}
	close(names)
	wg.Wait()
	text := ts.metrics()
	if grown := len(text) - size; grown > 4<<10 {
		t.Errorf("/metrics grew by %d bytes after 20,000 random stream names", grown)
	}
	if v := ts.counter(`mlstream_events_rejected_total{reason="unknown_stream",stream=""}`); v != 20001 {
		t.Errorf("unknown-stream refusals counted %v, want 20001", v)
	}
}

// Deleting the last job that reads a stream deletes the stream's series;
// the job's own series go with it.
func TestDeletedJobLabelsDisappear(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("spam", logregSpec)
	ts.putJob("other", `{"kind":"logreg","input":"gone","partitions":1,"params":{"hash_bits":8}}`)
	if code, _ := ts.post("gone", `{"label":1,"features":{"x":1}}`); code != http.StatusAccepted {
		t.Fatal(code)
	}
	if code, _ := ts.post("gone", `{"label":2,"features":{"x":1}}`); code != http.StatusBadRequest {
		t.Fatal(code)
	}
	ts.waitProcessed("other")
	if text := ts.metrics(); !strings.Contains(text, `stream="gone"`) || !strings.Contains(text, `job="other"`) {
		t.Fatalf("no series of stream gone or job other before the delete")
	}
	if code, _, body := ts.do("DELETE", "/v1/jobs/other", "", nil); code/100 != 2 {
		t.Fatalf("delete: %d %v", code, body)
	}
	text := ts.metrics()
	for _, gone := range []string{`stream="gone"`, `job="other"`} {
		if strings.Contains(text, gone) {
			t.Errorf("/metrics still has %s after the job was deleted", gone)
		}
	}
	// Posting to the stream now counts under the unknown stream.
	ts.post("gone", `{"label":1,"features":{"x":1}}`)
	if strings.Contains(ts.metrics(), `stream="gone"`) {
		t.Errorf("a post to the deleted stream created its series again")
	}
	ts.healthy("mail")
}

// A 16 MiB body leaves no 16 MiB buffer in the pool.
func TestLargeBodyBufferIsNotPooled(t *testing.T) {
	ts := newTestServer(t, func(ec *runtime.Config, _ *Config) { ec.QueueSize = 1 << 20 })
	ts.putJob("spam", logregSpec)
	ev := `{"label":1,"features":{"x":1,"y":"` + strings.Repeat("z", 200) + `"}}` + "\n"
	body := bytes.Repeat([]byte(ev), (15<<20)/len(ev))
	if code, _, out := ts.do("POST", "/v1/streams/mail/events", "", body); code != http.StatusAccepted {
		t.Fatalf("%d %v", code, out)
	}
	ts.waitProcessed("spam")
	for range 8 {
		b := bodyBufs.Get().(*bytes.Buffer)
		if b.Cap() > DefaultBodyPoolMax {
			t.Fatalf("a buffer of %d bytes stayed in the pool", b.Cap())
		}
	}
}
