package api

import (
	"encoding/json"
	"errors"
	"github.com/mlstream/mlstream/kinds/logreg"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/mlstream/mlstream/runtime"
	"github.com/mlstream/mlstream/web"
)

// POST and PUT take JSON and NDJSON only: what a page of another origin
// can send without a preflight (text/plain, forms) gets 415.
func TestBodiesMustBeJSON(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("spam", logregSpec)
	event := `{"label":1,"features":{"x":1}}`
	for _, c := range []struct {
		method, path, ctype string
		status              int
	}{
		{"POST", "/v1/streams/mail/events", "text/plain", 415},
		{"POST", "/v1/streams/mail/events", "text/plain;charset=UTF-8", 415},
		{"POST", "/v1/streams/mail/events", "application/x-www-form-urlencoded", 415},
		{"POST", "/v1/streams/mail/events", "multipart/form-data; boundary=x", 415},
		{"POST", "/v1/streams/mail/events", "application/jsonfoo", 415},
		{"POST", "/v1/streams/mail/events", noContentType, 415},
		{"POST", "/v1/jobs/spam/predict", "text/plain", 415},
		{"PUT", "/v1/jobs/spam", "text/plain", 415},
		{"POST", "/v1/streams/mail/events", "application/json", 202},
		{"POST", "/v1/streams/mail/events", "application/json; charset=utf-8", 202},
		{"POST", "/v1/streams/mail/events", "application/x-ndjson", 202},
		{"POST", "/v1/streams/mail/events", "application/ndjson", 202},
		{"POST", "/v1/streams/mail/events", "application/jsonl", 202},
		{"POST", "/v1/streams/mail/events", "Application/Vnd.Events+JSON", 202},
		{"POST", "/v1/jobs/spam/predict", "application/json", 200},
	} {
		t.Run(c.method+" "+c.ctype, func(t *testing.T) {
			body := event
			if c.method == "PUT" {
				body = logregSpec
			}
			code, _, out := ts.do(c.method, c.path, c.ctype, []byte(body))
			if code != c.status {
				t.Fatalf("status %d, want %d: %v", code, c.status, out)
			}
			if code == 415 && (!strings.Contains(out["error"].(string), "application/json") || !strings.Contains(out["error"].(string), "application/x-ndjson")) {
				t.Fatalf("415 does not name the types to use: %v", out)
			}
		})
	}
	// A body-less POST needs no type: it gets the handler's own answer.
	if code, _, out := ts.do("POST", "/v1/streams/mail/events", noContentType, nil); code != 400 {
		t.Fatalf("empty POST: %d %v", code, out)
	}
	if !strings.Contains(ts.metrics(), `mlstream_http_refused_total{reason="content_type"}`) {
		t.Error("415s not counted")
	}
}

// On loopback without tokens, a Host that is not a loopback name is a DNS
// rebinding attempt: 421.
func TestHostCheckOnLoopback(t *testing.T) {
	ts := newTestServer(t, func(_ *runtime.Config, c *Config) { c.LoopbackHosts = true })
	_, port, _ := net.SplitHostPort(ts.http.Listener.Addr().String())
	for _, c := range []struct {
		host   string
		status int
	}{
		{"localhost:" + port, 200}, {"localhost", 200}, {"app.localhost:" + port, 200}, {"LOCALHOST.", 200},
		{"127.0.0.1:" + port, 200}, {"127.9.8.7", 200}, {"[::1]:" + port, 200},
		{"evil.example:" + port, 421}, {"evil.example", 421}, {"localhost.evil.example", 421},
		{"10.0.0.1:" + port, 421}, {"[::2]:" + port, 421}, {"127.0.0.1.nip.io", 421},
	} {
		t.Run(c.host, func(t *testing.T) {
			req, _ := http.NewRequest("GET", ts.http.URL+"/v1/jobs", nil)
			req.Host = c.host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var out map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&out)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %v", resp.StatusCode, c.status, out)
			}
			if c.status == 421 && !strings.Contains(out["error"].(string), "loopback") {
				t.Fatalf("421 body: %v", out)
			}
		})
	}
	// Without the setting (tokens, or a public listener) any Host goes.
	plain := newTestServer(t)
	req, _ := http.NewRequest("GET", plain.http.URL+"/v1/jobs", nil)
	req.Host = "mlstream.example.com"
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("no host check: %v %v", err, resp)
	}
	resp.Body.Close()
}

// Every response carries the browser-facing security headers; unknown
// paths are JSON 404s, under /v1 and in the dashboard alike.
func TestSecurityHeadersAndJSON404(t *testing.T) {
	ts := newTestServer(t, func(_ *runtime.Config, c *Config) { c.Dashboard = web.Handler(NotFound) })
	for _, c := range []struct {
		path   string
		status int
	}{
		{"/", 200}, {"/app.js", 200}, {"/vendor/uPlot.iife.min.js", 200}, {"/v1/jobs", 200}, {"/healthz", 200},
		{"/nope", 404}, {"/v1/nope", 404}, {"/v1/jobs/x/y/z", 404}, {"/vendor/", 404}, {"/vendor/nope.js", 404}, {"/../etc/passwd", 404},
	} {
		t.Run(c.path, func(t *testing.T) {
			resp, err := http.Get(ts.http.URL + c.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, body)
			}
			h := resp.Header
			csp := h.Get("Content-Security-Policy")
			if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") || !strings.Contains(csp, "frame-ancestors 'none'") {
				t.Errorf("Content-Security-Policy %q", csp)
			}
			for k, want := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"} {
				if h.Get(k) != want {
					t.Errorf("%s: %q, want %q", k, h.Get(k), want)
				}
			}
			if c.status == 404 {
				var e map[string]any
				if err := json.Unmarshal(body, &e); err != nil || !strings.Contains(e["error"].(string), "no route") {
					t.Fatalf("404 body is not the JSON error: %s", body)
				}
			}
		})
	}
}

// A panicking handler answers a JSON 500 and logs one line without the
// stack; http.ErrAbortHandler still just drops the connection.
func TestPanicIsAJSON500(t *testing.T) {
	var logs syncBuffer
	s := New(Config{Engine: runtime.NewEngine(runtime.Config{}), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	h := s.recoverer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/abort" {
			panic(http.ErrAbortHandler)
		}
		panic("kaboom")
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	srv.Config.ErrorLog = nil
	resp, err := http.Get(srv.URL + "/boom?x=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 500 || resp.Header.Get("Content-Type") != "application/json" || strings.TrimSpace(string(body)) != `{"error":"internal error"}` {
		t.Fatalf("panic answered %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	l := logs.String()
	if strings.Count(l, "\n") != 1 || !strings.Contains(l, "method=GET") || !strings.Contains(l, "path=/boom") || !strings.Contains(l, "panic=kaboom") || strings.Contains(l, "goroutine") {
		t.Fatalf("log of the panic: %q", l)
	}
	if _, err := http.Get(srv.URL + "/abort"); err == nil {
		t.Fatal("ErrAbortHandler answered instead of dropping the connection")
	}
	if strings.Count(logs.String(), "\n") != 1 {
		t.Fatalf("ErrAbortHandler logged: %q", logs.String())
	}
}

// A value JSON cannot encode is a 500 naming the problem, not a cut 200.
func TestEncodeErrorIsA500(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]float64{"accuracy": math.NaN()})
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatalf("body is not JSON: %v", err)
	}
	if resp.StatusCode != 500 || !strings.Contains(e["error"].(string), "NaN") {
		t.Fatalf("%d %v, want a 500 naming NaN", resp.StatusCode, e)
	}
}

// The feed keeps gorilla's Origin check: a page of another origin cannot
// open it (with the browser's cookies or not); the service's own origin
// and non-browser clients (no Origin) can.
func TestWebSocketOriginCheck(t *testing.T) {
	ts := newTestServer(t)
	for _, c := range []struct {
		origin string
		status int
	}{{"http://evil.example", 403}, {"http://localhost.evil.example", 403}, {ts.http.URL, 101}, {"", 101}} {
		h := http.Header{}
		if c.origin != "" {
			h.Set("Origin", c.origin)
		}
		conn, resp, err := websocket.DefaultDialer.Dial(ts.wsURL("types=stats"), h)
		if resp == nil || resp.StatusCode != c.status {
			t.Fatalf("Origin %q: %v %+v, want %d", c.origin, err, resp, c.status)
		}
		if conn != nil {
			conn.Close()
		}
	}
}

// Past --max-ws-clients the upgrade answers 503; a closed connection frees
// its slot.
func TestWebSocketCap(t *testing.T) {
	ts := newTestServer(t, func(_ *runtime.Config, c *Config) { c.MaxWSClients = 2 })
	a, b := ts.dialWS("types=stats"), ts.dialWS("types=stats")
	_ = b
	_, resp, err := websocket.DefaultDialer.Dial(ts.wsURL("types=stats"), nil)
	if err == nil || resp == nil || resp.StatusCode != 503 {
		t.Fatalf("third client: %v %+v, want 503", err, resp)
	}
	var e map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&e)
	if msg, _ := e["error"].(string); !strings.Contains(msg, "limit is 2") {
		t.Fatalf("503 body %v", e)
	}
	if !strings.Contains(ts.metrics(), `mlstream_http_refused_total{reason="ws_full"} 1`) {
		t.Error("the refusal is not counted")
	}
	a.Close()
	waitFor(t, "the slot to free", 10*time.Second, func() bool {
		c, _, err := websocket.DefaultDialer.Dial(ts.wsURL("types=stats"), nil)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// A client that reads, but slower than its messages come, keeps losing
// them; after WSSlowTimeout it is closed with a close frame saying why.
func TestSlowSubscriberIsClosed(t *testing.T) {
	ts := newTestServer(t, func(_ *runtime.Config, c *Config) {
		c.WSBacklog = 4
		c.WSSlowTimeout = 300 * time.Millisecond
	})
	ts.putJob("spam", logregSpec)
	d := websocket.Dialer{NetDial: func(network, addr string) (net.Conn, error) {
		c, err := net.Dial(network, addr)
		if err == nil {
			_ = c.(*net.TCPConn).SetReadBuffer(4096)
		}
		return c, err
	}, ReadBufferSize: 1024}
	conn, _, err := d.Dial(ts.wsURL("types=prediction"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var closed atomic.Bool
	fed := make(chan struct{})
	go func() { // feed predictions until the client is closed
		defer close(fed)
		body := genBody(9, 2000)
		for !closed.Load() {
			if code, out := ts.post("mail", body); code != 202 && code != 429 {
				t.Errorf("ingest: %d %v", code, out)
				return
			}
		}
	}()
	defer func() {
		closed.Store(true)
		<-fed
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_ = conn.SetReadDeadline(deadline)
		_, _, err := conn.ReadMessage()
		if err == nil {
			time.Sleep(time.Millisecond) // a slow reader: the point of the test
			continue
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation || !strings.Contains(ce.Text, "too slow") {
			t.Fatalf("read: %v, want a close frame 1008 saying too slow", err)
		}
		break
	}
	if !strings.Contains(ts.metrics(), `mlstream_http_refused_total{reason="ws_slow"}`) {
		t.Error("the close is not counted")
	}
}

// Weights come in pages: limit (default 100, at most 10,000), offset, and
// a link to the next page; all pages together are the whole model.
func TestModelWeightsArePaged(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("spam", logregSpec)
	if code, out := ts.post("mail", genBody(4, 3000)); code != 202 {
		t.Fatalf("ingest: %d %v", code, out)
	}
	ts.waitProcessed("spam")
	// Wait for the model to stop changing (the last sync).
	var nonzero float64
	waitFor(t, "a settled model", 20*time.Second, func() bool {
		_, _, a := ts.do("GET", "/v1/jobs/spam/model", "", nil)
		time.Sleep(50 * time.Millisecond)
		_, _, b := ts.do("GET", "/v1/jobs/spam/model", "", nil)
		nonzero = b["nonzero_weights"].(float64)
		return a["version"] == b["version"] && nonzero > 250
	})
	_, _, first := ts.do("GET", "/v1/jobs/spam/model?weights=true", "", nil)
	if n := len(first["weights"].([]any)); n != logreg.DefaultWeightsLimit {
		t.Fatalf("default page of %d weights", n)
	}
	seen := map[float64]bool{}
	last := math.Inf(1)
	next := "/v1/jobs/spam/model?weights=true&limit=120"
	pages := 0
	for next != "" {
		code, _, page := ts.do("GET", next, "", nil)
		if code != 200 {
			t.Fatalf("GET %s: %d %v", next, code, page)
		}
		pages++
		for _, x := range page["weights"].([]any) {
			e := x.(map[string]any)
			slot, w := e["slot"].(float64), math.Abs(e["weight"].(float64))
			if seen[slot] || w > last {
				t.Fatalf("page %d: slot %v repeated or out of order (|w| %v after %v)", pages, slot, w, last)
			}
			seen[slot], last = true, w
		}
		next, _ = page["next"].(string)
		if next != "" && page["next_offset"].(float64) != float64(pages*120) {
			t.Fatalf("next_offset %v after %d pages", page["next_offset"], pages)
		}
	}
	if len(seen) != int(nonzero) || pages != (int(nonzero)+119)/120 {
		t.Fatalf("%d weights in %d pages, the model has %v non-zero", len(seen), pages, nonzero)
	}
	for _, q := range []string{"limit=0", "limit=10001", "limit=x", "offset=-1", "offset=y"} {
		code, _, out := ts.do("GET", "/v1/jobs/spam/model?weights=true&"+q, "", nil)
		field := strings.Split(q, "=")[0]
		if code != 400 || out["field"] != field || !strings.Contains(out["error"].(string), field) {
			t.Errorf("%s: %d %v, want 400 naming %s", q, code, out, field)
		}
	}
	if code, _, out := ts.do("GET", "/v1/jobs/spam/model?weights=true&limit=10000", "", nil); code != 200 || len(out["weights"].([]any)) != int(nonzero) || out["next"] != nil {
		t.Fatalf("limit=10000: %d, %v weights, next %v", code, len(out["weights"].([]any)), out["next"])
	}
}
