package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/gorilla/websocket"
	"github.com/mlstream/mlstream/runtime"
	"github.com/prometheus/client_golang/prometheus"
)

// testServer is a real engine behind a real HTTP server on loopback.
type testServer struct {
	t      testing.TB
	engine *runtime.Engine
	api    *Server
	http   *httptest.Server
	reg    *prometheus.Registry
	// token, when set, goes with every request of do, metrics and dialWS.
	token string
}

// noContentType makes do send a body without a Content-Type; an empty
// content type sends NDJSON's.
const noContentType = "-"

type serverOpt func(*runtime.Config, *Config)

func newTestServer(t testing.TB, opts ...serverOpt) *testServer {
	t.Helper()
	reg := prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ecfg := runtime.Config{Partitions: 2, Registry: reg, Logger: log}
	acfg := Config{Gatherer: reg, Registerer: reg, Logger: log, StatsInterval: 50 * time.Millisecond}
	for _, o := range opts {
		o(&ecfg, &acfg)
	}
	e := runtime.NewEngine(ecfg)
	acfg.Engine = e
	s := New(acfg)
	s.SetReady(true)
	hs := httptest.NewServer(s)
	ts := &testServer{t: t, engine: e, api: s, http: hs, reg: reg}
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("engine close: %v", err)
		}
	})
	return ts
}

// do sends a request and returns the status and the decoded JSON body.
func (ts *testServer) do(method, path, contentType string, body []byte) (int, http.Header, map[string]any) {
	ts.t.Helper()
	code, hdr, data := ts.sendRaw(method, path, contentType, body)
	var out map[string]any
	if len(bytes.TrimSpace(data)) > 0 && strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(data, &out); err != nil {
			ts.t.Fatalf("%s %s: body is not JSON: %v: %s", method, path, err, data)
		}
	}
	return code, hdr, out
}

// sendRaw is do returning the body as it came.
func (ts *testServer) sendRaw(method, path, contentType string, body []byte) (int, http.Header, []byte) {
	ts.t.Helper()
	req, err := http.NewRequest(method, ts.http.URL+path, bytes.NewReader(body))
	if err != nil {
		ts.t.Fatal(err)
	}
	switch {
	case contentType == noContentType:
	case contentType != "":
		req.Header.Set("Content-Type", contentType)
	case len(body) > 0:
		req.Header.Set("Content-Type", "application/x-ndjson")
	}
	ts.authorize(req.Header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		ts.t.Fatal(err)
	}
	checkExchange(ts.t, req, body, resp, data)
	return resp.StatusCode, resp.Header, data
}

func (ts *testServer) putJob(name, spec string) {
	ts.t.Helper()
	code, _, body := ts.do("PUT", "/v1/jobs/"+name, "application/json", []byte(spec))
	if code != http.StatusCreated {
		ts.t.Fatalf("PUT job %s: %d %v", name, code, body)
	}
}

func (ts *testServer) post(stream, body string) (int, map[string]any) {
	ts.t.Helper()
	code, _, out := ts.do("POST", "/v1/streams/"+stream+"/events", "application/x-ndjson", []byte(body))
	return code, out
}

func (ts *testServer) job(name string) runtime.JobStatus {
	ts.t.Helper()
	j, err := ts.engine.Job(name)
	if err != nil {
		ts.t.Fatal(err)
	}
	return j.Status(false)
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitProcessed waits until the job has processed everything it accepted.
func (ts *testServer) waitProcessed(name string) runtime.JobStatus {
	ts.t.Helper()
	var st runtime.JobStatus
	waitFor(ts.t, "queues of "+name+" to drain", 20*time.Second, func() bool {
		st = ts.job(name)
		return st.Processed == st.Accepted
	})
	return st
}

func (ts *testServer) dialWS(query string) *websocket.Conn {
	ts.t.Helper()
	url := "ws" + strings.TrimPrefix(ts.http.URL, "http") + "/v1/ws?" + query
	before := ts.engine.Hub().Subscribers()
	hdr := http.Header{}
	ts.authorize(hdr)
	c, resp, err := websocket.DefaultDialer.Dial(url, hdr)
	if err != nil {
		if resp != nil {
			ts.t.Fatalf("dial %s: %v (status %d)", url, err, resp.StatusCode)
		}
		ts.t.Fatalf("dial %s: %v", url, err)
	}
	if req, err := http.NewRequest("GET", ts.http.URL+"/v1/ws?"+query, nil); err == nil {
		checkExchange(ts.t, req, nil, resp, nil)
	}
	ts.t.Cleanup(func() { c.Close() })
	// The server subscribes after the handshake: wait for it, so that
	// events posted next are seen by this connection.
	waitFor(ts.t, "the WebSocket subscription", 5*time.Second, func() bool { return ts.engine.Hub().Subscribers() > before })
	return c
}

// authorize adds the server's token, if any, to a request's headers.
func (ts *testServer) authorize(h http.Header) {
	if ts.token != "" {
		h.Set("Authorization", "Bearer "+ts.token)
	}
}

// readMessage reads one JSON message with a deadline.
func readMessage(t *testing.T, c *websocket.Conn, timeout time.Duration) map[string]any {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	_, data, err := c.ReadMessage()
	if err != nil {
		t.Fatalf("reading websocket: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("websocket message is not JSON: %v: %s", err, data)
	}
	return m
}

const logregSpec = `{"kind":"logreg","input":"mail","partitions":2,"params":{"hash_bits":16}}`

func specFor(name string) runtime.Spec {
	return runtime.Spec{Name: name, Kind: "logreg", Input: "mail", Partitions: 2, Params: map[string]any{"hash_bits": 18}}
}

// openAPIRouter is the router over the OpenAPI description the server
// serves, loaded and validated once for all tests.
var openAPIRouter = sync.OnceValues(func() (routers.Router, error) {
	for _, t := range bodyTypes[1:] {
		openapi3filter.RegisterBodyDecoder(t, ndjsonBody)
	}
	doc, err := openapi3.NewLoader().LoadFromData(openAPISpec)
	if err != nil {
		return nil, fmt.Errorf("loading openapi.json: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("openapi.json is not a valid OpenAPI 3 description: %w", err)
	}
	return gorillamux.NewRouter(doc)
})

// ndjsonBody decodes a body sent as NDJSON for the validator: as the
// string it is where the description says events (the server checks their
// lines), as JSON where it says one object (a job spec, which the server
// takes under any of the JSON media types).
func ndjsonBody(body io.Reader, _ http.Header, schema *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	b, err := io.ReadAll(body)
	if err != nil || schema == nil || schema.Value == nil || schema.Value.Type.Is(openapi3.TypeString) {
		return string(b), err
	}
	var v any
	err = json.Unmarshal(b, &v)
	return v, err
}

// asDescribed gives a request the media type the description names for
// it: the server takes any "+json" type as JSON, which OpenAPI cannot
// name (the description says so in words).
func asDescribed(req *http.Request) {
	mt, _, err := mime.ParseMediaType(req.Header.Get("Content-Type"))
	if err == nil && strings.HasSuffix(mt, "+json") {
		req.Header.Set("Content-Type", "application/json")
	}
}

// specOptions: the tests send real tokens; the server, not the
// validator, checks them.
var specOptions = &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}

// checkExchange holds one request and its response to the OpenAPI
// description, for the routes the description has: the response must match
// it, and a request it refuses must not be answered with success. (Tests
// send hostile requests on purpose; the server refusing them is right.)
// Routes the description lacks are caught by TestOpenAPICoversRoutes.
func checkExchange(t testing.TB, req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) {
	t.Helper()
	router, err := openAPIRouter()
	if err != nil {
		t.Fatal(err)
	}
	route, params, err := router.FindRoute(req)
	if err != nil {
		return
	}
	ctx := context.Background()
	sent := req.Clone(ctx)
	sent.Body = io.NopCloser(bytes.NewReader(reqBody))
	asDescribed(sent)
	in := &openapi3filter.RequestValidationInput{Request: sent, PathParams: params, Route: route, Options: specOptions}
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil && resp.StatusCode < 400 {
		t.Errorf("%s %s: the server answered %d to a request the OpenAPI description refuses: %v", req.Method, req.URL.RequestURI(), resp.StatusCode, err)
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Body: io.NopCloser(bytes.NewReader(respBody)), Options: specOptions,
	}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		t.Errorf("%s %s: the response %d does not match the OpenAPI description: %v\nbody: %.2000s", req.Method, req.URL.RequestURI(), resp.StatusCode, err, respBody)
	}
}
