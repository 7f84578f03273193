package api

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/go-chi/chi/v5"
	"github.com/mlstream/mlstream/runtime"
)

// pendingRoutes are routes of the router that the OpenAPI description does
// not have yet; each is a debt, to be described when it lands.
var pendingRoutes = []string{}

// The description is served without a token, is the embedded file, and is
// a valid OpenAPI 3 document.
func TestOpenAPIServedWithoutToken(t *testing.T) {
	ts := newTestServer(t, threeTokens(t))
	code, hdr, body := ts.do("GET", "/v1/openapi.json", "", nil)
	if code != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
		t.Fatalf("GET /v1/openapi.json without a token: %d %q", code, hdr.Get("Content-Type"))
	}
	if body["openapi"] != "3.0.3" {
		t.Errorf("openapi: %v", body["openapi"])
	}
	if _, err := openAPIRouter(); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := ts.do("GET", "/v1/openapi.json?x=1", "", nil); code != http.StatusBadRequest {
		t.Errorf("an unknown query parameter: %d, want 400", code)
	}
}

// routeKey names a route as "METHOD /path/{param}".
func routeKey(method, path string) string { return method + " " + path }

// chiRoutes lists the routes of a server's router. A handler mounted with
// Handle answers every method; the description has its GET.
func chiRoutes(t *testing.T, s *Server) []string {
	methods := map[string][]string{}
	var paths []string
	err := chi.Walk(s.router, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		route = strings.TrimSuffix(route, "/")
		if methods[route] == nil {
			paths = append(paths, route)
		}
		methods[route] = append(methods[route], method)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, path := range paths {
		if ms := methods[path]; len(ms) >= 9 && slices.Contains(ms, "TRACE") {
			methods[path] = []string{"GET"}
		}
		for _, m := range methods[path] {
			out = append(out, routeKey(m, path))
		}
	}
	return out
}

// specRoutes lists the operations of the OpenAPI description.
func specRoutes(t *testing.T) []string {
	doc, err := openapi3.NewLoader().LoadFromData(openAPISpec)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, routeKey(method, path))
		}
	}
	return out
}

// Every route of the router is in the description (but the pending ones),
// and the description has no route the router lacks.
func TestOpenAPICoversRoutes(t *testing.T) {
	ts := newTestServer(t, func(_ *runtime.Config, c *Config) { c.Dashboard = http.NotFoundHandler() })
	routes, described := chiRoutes(t, ts.api), specRoutes(t)
	for _, r := range routes {
		if r == "GET /*" { // the dashboard's pages, not the API
			continue
		}
		if !slices.Contains(described, r) && !slices.Contains(pendingRoutes, r) {
			t.Errorf("route %s is not in api/openapi.json", r)
		}
	}
	for _, d := range described {
		if !slices.Contains(routes, d) {
			t.Errorf("api/openapi.json describes %s, which the router does not have", d)
		}
	}
	if len(routes) < 20 {
		t.Errorf("chi.Walk found only %d routes: %v", len(routes), routes)
	}
}

// recordingTB records the errors checkExchange reports instead of failing.
type recordingTB struct {
	testing.TB
	errs []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// exchange makes a request and a response for checkExchange.
func exchange(t *testing.T, method, path, contentType, reqBody string, status int, respBody string) (*http.Request, *http.Response) {
	req, err := http.NewRequest(method, "http://127.0.0.1"+path, strings.NewReader(reqBody))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp := &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader([]byte(respBody)))}
	return req, resp
}

// The check the helpers run on every exchange fails a test on a response
// unlike the description, and on success answered to a request the
// description refuses; it passes a refusal of a hostile request, and routes
// it does not know.
func TestOpenAPICheckCatchesMismatches(t *testing.T) {
	cases := []struct {
		name                   string
		method, path, ct, body string
		status                 int
		resp                   string
		wantErr                string
	}{
		{"status of wrong type", "GET", "/v1/jobs/a", "", "", 200, `{"name":1}`, "does not match"},
		{"error without error", "GET", "/v1/jobs/a", "", "", 404, `{"line":2}`, "does not match"},
		{"401 without WWW-Authenticate", "GET", "/v1/jobs", "", "", 401, `{"error":"no token"}`, "does not match"},
		{"403 without scope", "GET", "/v1/jobs", "", "", 403, `{"error":"no"}`, "does not match"},
		{"ingest answer", "POST", "/v1/streams/s/events", "application/x-ndjson", "{}\n", 202, `{"accepted":-1}`, "does not match"},
		{"success to a bad request", "POST", "/v1/streams/s/events", "text/plain", "x", 202, `{"accepted":1}`, "refuses"},
		{"refused bad request", "POST", "/v1/streams/s/events", "text/plain", "x", 415, `{"error":"no","field":"Content-Type"}`, ""},
		{"unknown route", "GET", "/v1/nowhere", "", "", 200, `{"anything":true}`, ""},
		{"method the route lacks", "GET", "/v1/jobs/a/pause", "", "", 405, `{"job":1}`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, resp := exchange(t, c.method, c.path, c.ct, c.body, c.status, c.resp)
			rec := &recordingTB{TB: t}
			checkExchange(rec, req, []byte(c.body), resp, []byte(c.resp))
			switch {
			case c.wantErr == "" && len(rec.errs) > 0:
				t.Errorf("unexpected: %v", rec.errs)
			case c.wantErr != "" && (len(rec.errs) != 1 || !strings.Contains(rec.errs[0], c.wantErr)):
				t.Errorf("want one error with %q, got %v", c.wantErr, rec.errs)
			}
		})
	}
}

// The answers the other tests seldom provoke match the description too:
// not ready, the WebSocket limit, unknown jobs on every job route, a query
// the kind lacks, and a status with every kind's section.
func TestOpenAPIRareAnswers(t *testing.T) {
	ts := newTestServer(t, func(_ *runtime.Config, c *Config) { c.MaxWSClients = 1 })
	ts.api.SetReady(false)
	if code, _, _ := ts.do("GET", "/readyz", "", nil); code != http.StatusServiceUnavailable {
		t.Errorf("readyz while starting: %d", code)
	}
	for _, r := range []struct{ method, path string }{
		{"GET", "/v1/jobs/nope"}, {"DELETE", "/v1/jobs/nope"}, {"GET", "/v1/jobs/nope/history"},
		{"POST", "/v1/jobs/nope/pause"}, {"POST", "/v1/jobs/nope/resume"}, {"GET", "/v1/jobs/nope/query/model"},
		{"GET", "/v1/jobs/nope/topk"}, {"GET", "/v1/jobs/nope/distinct"}, {"GET", "/v1/jobs/nope/matches"},
		{"GET", "/v1/ws?jobs=nope"},
	} {
		if code, _, _ := ts.do(r.method, r.path, "", nil); code != http.StatusNotFound {
			t.Errorf("%s %s: %d, want 404", r.method, r.path, code)
		}
	}
	ts.putJob("hh", `{"kind":"heavy_hitters","input":"clicks","params":{"field":"page"}}`)
	ts.putJob("dc", `{"kind":"distinct","input":"clicks","params":{"field":"user"}}`)
	ts.putJob("jn", `{"kind":"join","left":"views","right":"buys","params":{"on":"user","within":"1m","value":"amount"}}`)
	ts.putJob("lr", logregSpec)
	if code, _ := ts.post("clicks", `{"page":"a","user":"u1"}`+"\n"+`{"page":"b","user":"u2"}`); code != http.StatusAccepted {
		t.Fatalf("post clicks: %d", code)
	}
	ts.waitProcessed("hh")
	ts.waitProcessed("dc")
	if code, _, _ := ts.do("GET", "/v1/jobs", "", nil); code != http.StatusOK {
		t.Errorf("list: %d", code)
	}
	if code, _, _ := ts.do("GET", "/v1/jobs/hh/query/model", "", nil); code != http.StatusNotFound {
		t.Errorf("a query the kind lacks: %d, want 404", code)
	}
	if code, _, _ := ts.do("GET", "/v1/jobs/lr/model?weights=true&limit=1", "", nil); code != http.StatusOK {
		t.Errorf("model with weights: %d", code)
	}
	// A plain GET of the feed is not an upgrade: 400, in plain text from
	// the WebSocket library (unlike every other error).
	if code, _, _ := ts.do("GET", "/v1/ws", "", nil); code != http.StatusBadRequest {
		t.Errorf("GET /v1/ws without an upgrade: %d, want 400", code)
	}
	ts.dialWS("")
	code, hdr, _ := ts.do("GET", "/v1/ws", "", nil)
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
		t.Errorf("a WebSocket past the limit: %d, Retry-After %q", code, hdr.Get("Retry-After"))
	}
}
