package api

import (
	"bytes"
	"context"
	"crypto/subtle"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/mlstream/mlstream/runtime"
)

const (
	adminTok  = "admin-token-0123456789"
	readTok   = "read-token-0123456789"
	ingestTok = "ingest-token-0123456789"
)

// withAuth gives the test server the tokens of env (MLSTREAM_TOKENS form).
func withAuth(t testing.TB, env string) serverOpt {
	a, err := NewAuth("", env, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return func(_ *runtime.Config, c *Config) { c.Auth = a }
}

func threeTokens(t testing.TB) serverOpt {
	return withAuth(t, "admin:"+adminTok+", read:"+readTok+",ingest:"+ingestTok)
}

// wsURL is the feed's URL on the test server.
func (ts *testServer) wsURL(query string) string {
	return "ws" + strings.TrimPrefix(ts.http.URL, "http") + "/v1/ws?" + query
}

// Every route class takes the tokens of its scope (admin taking all) and
// refuses the others: 401 with WWW-Authenticate without a valid token, 403
// naming the scope with a weaker one. Health stays open.
func TestTokensAndScopesOnEveryRouteClass(t *testing.T) {
	ts := newTestServer(t, threeTokens(t))
	ts.token = adminTok
	ts.putJob("spam", logregSpec)
	ts.token = ""
	routes := []struct {
		method, path, body string
		need               Scope // "" = open
	}{
		{"GET", "/healthz", "", ""},
		{"GET", "/readyz", "", ""},
		{"POST", "/v1/streams/mail/events", `{"label":1,"features":{"x":1}}`, ScopeIngest},
		{"GET", "/v1/jobs", "", ScopeRead},
		{"GET", "/v1/jobs/spam", "", ScopeRead},
		{"GET", "/v1/jobs/spam/model?weights=true", "", ScopeRead},
		{"POST", "/v1/jobs/spam/predict", `{"features":{"x":1}}`, ScopeRead},
		{"GET", "/v1/jobs/spam/model/export", "", ScopeRead},
		{"POST", "/v1/jobs/spam/explain", `{"features":{"x":1}}`, ScopeRead},
		{"PUT", "/v1/jobs/spam/model", "not a model", ScopeAdmin},
		{"GET", "/metrics", "", ScopeRead},
		{"PUT", "/v1/jobs/other", `{"kind":"distinct","input":"mail","params":{"field":"key"}}`, ScopeAdmin},
		{"DELETE", "/v1/jobs/other", "", ScopeAdmin},
	}
	tokens := []struct {
		name, tok string
		scope     Scope
	}{{"none", "", ""}, {"unknown", "unknown-token-0123456789", ""}, {"ingest", ingestTok, ScopeIngest}, {"read", readTok, ScopeRead}, {"admin", adminTok, ScopeAdmin}}
	for _, rt := range routes {
		for _, tk := range tokens {
			t.Run(rt.method+" "+rt.path+" with "+tk.name, func(t *testing.T) {
				ts.token = tk.tok
				code, hdr, body := ts.do(rt.method, rt.path, "", []byte(rt.body))
				switch {
				case rt.need == "" || tk.scope != "" && tk.scope.grants(rt.need):
					if code == 401 || code == 403 || code >= 500 {
						t.Fatalf("status %d, want it let through: %v", code, body)
					}
				case tk.scope == "":
					if code != 401 || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") || body["error"] == nil {
						t.Fatalf("status %d, WWW-Authenticate %q, body %v; want 401 with a Bearer challenge and a JSON error", code, hdr.Get("WWW-Authenticate"), body)
					}
				default:
					if code != 403 || body["scope"] != string(rt.need) || !strings.Contains(body["error"].(string), string(rt.need)) {
						t.Fatalf("status %d %v; want 403 naming scope %q", code, body, rt.need)
					}
				}
			})
		}
	}
	ts.token = ""
	// The feed: the header, or the subprotocol a browser can send.
	for _, c := range []struct {
		name   string
		header string
		protos []string
		status int
	}{
		{"no token", "", nil, 401},
		{"ingest token", "Bearer " + ingestTok, nil, 403},
		{"read token in the header", "Bearer " + readTok, nil, 101},
		{"read token as subprotocol", "", []string{"mlstream", "bearer." + readTok}, 101},
		{"admin token as subprotocol", "", []string{"mlstream", "bearer." + adminTok}, 101},
		{"bad token as subprotocol", "", []string{"mlstream", "bearer.nope-nope-nope-nope"}, 401},
	} {
		t.Run("ws "+c.name, func(t *testing.T) {
			d := websocket.Dialer{Subprotocols: c.protos}
			h := http.Header{}
			if c.header != "" {
				h.Set("Authorization", c.header)
			}
			conn, resp, err := d.Dial(ts.wsURL("types=stats"), h)
			if resp == nil || resp.StatusCode != c.status {
				t.Fatalf("dial: %v, %+v; want status %d", err, resp, c.status)
			}
			if c.status != 101 {
				return
			}
			defer conn.Close()
			if c.protos != nil && conn.Subprotocol() != "mlstream" {
				t.Errorf("selected subprotocol %q, want mlstream", conn.Subprotocol())
			}
			if m := readMessage(t, conn, 5*time.Second); m["type"] != "stats" {
				t.Errorf("first message %v", m)
			}
		})
	}
	// Refusals are counted.
	ts.token = readTok
	m := ts.metrics()
	for _, reason := range []string{"auth_missing", "auth_invalid", "auth_scope"} {
		if !strings.Contains(m, `mlstream_http_refused_total{reason="`+reason+`"}`) {
			t.Errorf("no %s in /metrics", reason)
		}
	}
}

// Tokens are compared with crypto/subtle against every entry, with no
// early exit on a match.
func TestTokenCompareIsConstantTime(t *testing.T) {
	if reflect.ValueOf(compareTokens).Pointer() != reflect.ValueOf(subtle.ConstantTimeCompare).Pointer() {
		t.Fatal("tokens are not compared with subtle.ConstantTimeCompare")
	}
	a, err := NewAuth("", "admin:"+adminTok+",read:"+readTok+",ingest:"+ingestTok, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	calls := 0
	compareTokens = func(x, y []byte) int {
		mu.Lock()
		calls++
		mu.Unlock()
		return subtle.ConstantTimeCompare(x, y)
	}
	t.Cleanup(func() { compareTokens = subtle.ConstantTimeCompare })
	for _, tok := range []string{adminTok, ingestTok, "wrong-token-0123456789", "x"} {
		calls = 0
		a.lookup(tok)
		if calls != 3 {
			t.Errorf("lookup of %.5s…: %d comparisons, want 3 (one per token)", tok, calls)
		}
	}
}

// A changed file is picked up by the watcher and by Reload (SIGHUP); a bad
// file keeps the old tokens and logs a line without any token.
func TestAuthFileReload(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	// Written as the docs advise, a new file renamed over the old: the
	// watcher could otherwise read it truncated (a bad file of no tokens)
	// and report that too.
	write := func(s string) {
		t.Helper()
		tmp := file + ".new"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write("# the first token\nread " + readTok + "\n")
	var logs syncBuffer
	a, err := NewAuth(file, "", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, func(_ *runtime.Config, c *Config) { c.Auth = a })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.Watch(ctx, 10*time.Millisecond)
	status := func(tok string) int {
		ts.token = tok
		code, _, _ := ts.do("GET", "/v1/jobs", "", nil)
		return code
	}
	if status(readTok) != 200 || status(adminTok) != 401 {
		t.Fatalf("first file: read %d, admin %d", status(readTok), status(adminTok))
	}
	// The file changes: the watcher swaps the tokens.
	write("admin " + adminTok + "\n")
	waitFor(t, "the new token", 10*time.Second, func() bool { return status(adminTok) == 200 })
	if status(readTok) != 401 {
		t.Fatalf("the removed token still works")
	}
	// A bad file: the old tokens stay, the log says why without tokens.
	const secret = "secret-in-a-bad-file-0123"
	write("admin " + adminTok + "\nsuperuser " + secret + "\n")
	waitFor(t, "the reload error in the log", 10*time.Second, func() bool { return strings.Contains(logs.String(), "not reloaded") })
	if status(adminTok) != 200 {
		t.Fatal("a bad file dropped the tokens")
	}
	if l := logs.String(); strings.Contains(l, secret) || strings.Contains(l, adminTok) || !strings.Contains(l, "line 2") {
		t.Fatalf("log of the bad reload: %s", l)
	}
	// The bad file is reported once, not at every check.
	checked := a.checks.Load()
	waitFor(t, "more checks of the file", 5*time.Second, func() bool { return a.checks.Load() >= checked+5 })
	if n := strings.Count(logs.String(), "not reloaded"); n != 1 {
		t.Fatalf("the bad file was reported %d times", n)
	}
	// SIGHUP calls Reload: it applies a good file at once.
	cancel()
	write("ingest " + ingestTok + "\nread " + readTok + "\n")
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if status(readTok) != 200 || status(adminTok) != 401 {
		t.Fatalf("after Reload: read %d, admin %d", status(readTok), status(adminTok))
	}
}

// Bad token sources are refused at start, naming the line but not the
// token.
func TestBadTokensRefusedAtStart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	for _, c := range []struct{ name, file, env, want string }{
		{"unknown scope", "read " + readTok + "\nroot " + adminTok + "\n", "", "line 2: unknown scope"},
		{"short token", "read short\n", "", "line 1: token of 5 characters"},
		{"three fields", "read " + readTok + " extra\n", "", "line 1: want \"scope token\""},
		{"bad character", "read " + readTok + "/\n", "", "line 1: token holds a character"},
		{"no tokens", "# nothing\n\n", "", "no tokens"},
		{"env without colon", "", adminTok, "item 1: want scope:token"},
		{"env bad scope", "", "read:" + readTok + ",boss:" + adminTok, "item 2: unknown scope"},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := ""
			if c.file != "" {
				name = file
				if err := os.WriteFile(file, []byte(c.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, err := NewAuth(name, c.env, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to say %q", err, c.want)
			}
			for _, tok := range []string{readTok, adminTok} {
				if strings.Contains(err.Error(), tok) {
					t.Fatalf("the error shows a token: %v", err)
				}
			}
		})
	}
	if _, err := NewAuth(filepath.Join(t.TempDir(), "missing"), "", nil); err == nil {
		t.Fatal("a missing file is accepted")
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A token file read while it is being written (here: cut inside its last
// line, as a writer that writes in place leaves it for a moment) never
// makes a prefix of a token valid: the reload is refused and the old
// tokens stay. A whole file that is then written goes in.
func TestAuthFileHalfWritten(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("read "+readTok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	a, err := NewAuth(file, "", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, func(_ *runtime.Config, c *Config) { c.Auth = a })
	status := func(tok string) int {
		ts.token = tok
		code, _, _ := ts.do("GET", "/v1/jobs", "", nil)
		return code
	}
	prefix := adminTok[:MinTokenLen+2]
	whole := "read " + readTok + "\nadmin " + adminTok + "\n"
	if err := os.WriteFile(file, []byte(whole[:strings.Index(whole, prefix)+len(prefix)]), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err == nil || !strings.Contains(err.Error(), "line 2 does not end with a newline") {
		t.Fatalf("reload of a half-written file: %v", err)
	}
	if got := status(prefix); got != 401 {
		t.Fatalf("a prefix of a token answered %d", got)
	}
	if got := status(readTok); got != 200 {
		t.Fatalf("the old token answered %d after the refused reload", got)
	}
	if err := os.WriteFile(file, []byte(whole), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if status(adminTok) != 200 || status(prefix) != 401 {
		t.Fatalf("after the whole file: admin %d, prefix %d", status(adminTok), status(prefix))
	}
	if strings.Contains(logs.String(), prefix) {
		t.Fatalf("the log shows a token: %s", logs.String())
	}
}

// A token file others may read gets a warning naming the fix; a private
// one none.
func TestAuthFileModeWarning(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	for _, c := range []struct {
		mode os.FileMode
		warn bool
	}{{0o600, false}, {0o400, false}, {0o644, true}, {0o660, true}} {
		if err := os.WriteFile(file, []byte("read "+readTok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(file, c.mode); err != nil {
			t.Fatal(err)
		}
		var logs syncBuffer
		if _, err := NewAuth(file, "", slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(logs.String(), "chmod 600"); got != c.warn {
			t.Errorf("mode %v: warning %v, want %v (log: %s)", c.mode, got, c.warn, logs.String())
		}
	}
}
