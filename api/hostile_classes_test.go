package api

import (
	"strings"
	"testing"

	"github.com/mlstream/mlstream/runtime"
)

// One hostile request of each class of the "safe on a network" issue,
// through one real server with tokens, a memory budget and a job limit:
// each is refused with its status and a JSON error that says what (and,
// where it applies, which field), and the service answers normally after
// every one. The classes' own tests go deeper (auth_test, security_test,
// hostile_test, restart_test, rss_test, ft and runtime tests).
func TestEveryHostileClass(t *testing.T) {
	ts := newTestServer(t, threeTokens(t), func(e *runtime.Config, _ *Config) {
		e.MaxMemory = 256 << 20
		e.MaxJobs = 3
	})
	ts.token = adminTok
	ts.putJob("spam", `{"kind":"logreg","input":"mail","partitions":2,"queue_size":100,"params":{"hash_bits":12}}`)

	type request struct {
		method, path, token, ctype, host, body string
	}
	cases := []struct {
		class string
		req   request
		want  int
		field string // the error's field, when the class names one
		says  string // a piece of the error message
	}{
		{"auth: no token", request{"GET", "/v1/jobs", "-", "", "", ""}, 401, "", "bearer token"},
		{"auth: unknown token", request{"GET", "/v1/jobs", "not-a-token-0123456789", "", "", ""}, 401, "", "invalid"},
		{"auth: ingest token reads", request{"GET", "/v1/jobs/spam", ingestTok, "", "", ""}, 403, "", "read"},
		{"auth: read token deletes", request{"DELETE", "/v1/jobs/spam", readTok, "", "", ""}, 403, "", "admin"},
		{"auth: metrics need read", request{"GET", "/metrics", "-", "", "", ""}, 401, "", "bearer token"},
		{"csrf: form post", request{"POST", "/v1/streams/mail/events", ingestTok, "application/x-www-form-urlencoded", "", "a=1"}, 415, "Content-Type", "application/json"},
		{"csrf: text/plain job", request{"PUT", "/v1/jobs/x", "", "text/plain", "", `{"kind":"distinct","input":"s","params":{"field":"u"}}`}, 415, "Content-Type", "application/json"},
		{"body: event too large", request{"POST", "/v1/streams/mail/events", ingestTok, "", "", `{"label":1,"features":{"x":"` + strings.Repeat("y", 2<<20) + `"}}`}, 413, "", "over the limit"},
		{"body: more events than the queues take", request{"POST", "/v1/streams/mail/events", ingestTok, "", "", strings.Repeat(`{"label":1,"features":{"x":1}}`+"\n", 201)}, 413, "", "can take"},
		{"names: bad job name", request{"PUT", "/v1/jobs/a..b%2Fc", "", "application/json", "", `{"kind":"distinct","input":"s","params":{"field":"u"}}`}, 400, "name", "name"},
		{"names: bad stream name", request{"PUT", "/v1/jobs/x", "", "application/json", "", `{"kind":"distinct","input":"a/b","params":{"field":"u"}}`}, 400, "input", "stream name"},
		{"names: unknown path", request{"GET", "/v1/nope", "", "", "", ""}, 404, "", "no route"},
		{"numbers: 1e400 feature", request{"POST", "/v1/streams/mail/events", ingestTok, "", "", `{"label":1,"features":{"x":1e400}}`}, 400, "features.x", ""},
		{"numbers: NaN label", request{"POST", "/v1/streams/mail/events", ingestTok, "", "", `{"label":NaN,"features":{"x":1}}`}, 400, "label", ""},
		{"numbers: ts out of range", request{"POST", "/v1/streams/mail/events", ingestTok, "", "", `{"ts":1e300,"label":1,"features":{"x":1}}`}, 400, "ts", ""},
		{"resources: hash_bits out of range", request{"PUT", "/v1/jobs/big", "", "application/json", "", `{"kind":"logreg","input":"s","params":{"hash_bits":28}}`}, 400, "params.hash_bits", ""},
		{"resources: over the memory budget", request{"PUT", "/v1/jobs/big", "", "application/json", "", `{"kind":"logreg","input":"s","params":{"hash_bits":26}}`}, 507, "params.hash_bits", "budget"},
		{"resources: model page too large", request{"GET", "/v1/jobs/spam/model?weights=true&limit=100000", "", "", "", ""}, 400, "limit", ""},
	}
	for _, c := range cases {
		t.Run(c.class, func(t *testing.T) {
			code, body := ts.send(c.req.method, c.req.path, c.req.token, c.req.ctype, c.req.body)
			if code != c.want {
				t.Fatalf("status %d, want %d: %v", code, c.want, body)
			}
			msg, _ := body["error"].(string)
			if msg == "" {
				t.Fatalf("no JSON error: %v", body)
			}
			if f, _ := body["field"].(string); c.field != "" && f != c.field {
				t.Errorf("field %q, want %q (%s)", f, c.field, msg)
			}
			if !strings.Contains(msg, c.says) {
				t.Errorf("error %q does not say %q", msg, c.says)
			}
			ts.healthy("mail")
		})
	}
	// The job limit: spam and two more fill it.
	ts.putJob("b", `{"kind":"distinct","input":"s","params":{"field":"u"}}`)
	ts.putJob("c", `{"kind":"distinct","input":"s","params":{"field":"u"}}`)
	if code, body := ts.send("PUT", "/v1/jobs/d", "", "application/json", `{"kind":"distinct","input":"s","params":{"field":"u"}}`); code != 507 || !strings.Contains(body["error"].(string), "max-jobs") {
		t.Fatalf("a job past --max-jobs: %d %v", code, body)
	}
	ts.healthy("mail")
}

// send is do with a token of the caller's choice: "" is the server's,
// "-" none.
func (ts *testServer) send(method, path, token, ctype, body string) (int, map[string]any) {
	ts.t.Helper()
	saved := ts.token
	defer func() { ts.token = saved }()
	switch token {
	case "-":
		ts.token = ""
	case "":
	default:
		ts.token = token
	}
	code, _, out := ts.do(method, path, ctype, []byte(body))
	if out == nil {
		out = map[string]any{}
	}
	return code, out
}
