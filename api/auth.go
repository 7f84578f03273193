package api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Scope is what a bearer token may do. admin implies read and ingest;
// read and ingest imply nothing else.
type Scope string

const (
	ScopeIngest Scope = "ingest" // POST events
	ScopeRead   Scope = "read"   // GET jobs, models, synopses, predict, the feed, /metrics
	ScopeAdmin  Scope = "admin"  // PUT and DELETE jobs
)

// MinTokenLen is the shortest token accepted: shorter ones are guessable.
const MinTokenLen = 16

// TokensEnv is the environment variable that may hold tokens, as
// "scope:token,scope:token".
const TokensEnv = "MLSTREAM_TOKENS"

// grants reports whether a token of scope have may do what need asks.
func (have Scope) grants(need Scope) bool { return have == need || have == ScopeAdmin }

func parseScope(s string) (Scope, error) {
	switch sc := Scope(s); sc {
	case ScopeIngest, ScopeRead, ScopeAdmin:
		return sc, nil
	}
	return "", fmt.Errorf("unknown scope %q (want ingest, read or admin)", s)
}

// tokenEntry keeps a token's SHA-256, not the token: every comparison is
// then over 32 bytes, so neither the length nor a prefix leaks through
// timing.
type tokenEntry struct {
	sum   [sha256.Size]byte
	scope Scope
}

// validToken checks a token's length and characters. The characters are
// those of an HTTP token (RFC 9110) without the rarely safe ones, so a
// token fits a Sec-WebSocket-Protocol value and a shell line unquoted.
func validToken(tok string) error {
	if len(tok) < MinTokenLen {
		return fmt.Errorf("token of %d characters is shorter than %d (make one with: openssl rand -hex 32)", len(tok), MinTokenLen)
	}
	for _, c := range []byte(tok) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~+", c) >= 0
		if !ok {
			return fmt.Errorf("token holds a character other than letters, digits and -._~+")
		}
	}
	return nil
}

func newEntry(scope, tok string) (tokenEntry, error) {
	sc, err := parseScope(scope)
	if err != nil {
		return tokenEntry{}, err
	}
	if err := validToken(tok); err != nil {
		return tokenEntry{}, err
	}
	return tokenEntry{sum: sha256.Sum256([]byte(tok)), scope: sc}, nil
}

// parseTokenFile reads "scope token" lines; blank lines and lines
// starting with # are skipped. Errors name the line, never the token.
//
// Every line must end with a newline: a file read while it is being
// written ends inside a line, and its last token may be a prefix of the
// real one, itself long enough to be valid. Refusing the file keeps the
// previous tokens until the writer is done (writing a new file and
// renaming it over the old avoids the window altogether).
func parseTokenFile(data []byte) ([]tokenEntry, error) {
	if i := bytes.LastIndexByte(data, '\n'); len(bytes.TrimSpace(data[i+1:])) > 0 {
		return nil, fmt.Errorf("line %d does not end with a newline: the file may be half-written (end every line with a newline, and replace the file by renaming a new one over it)",
			bytes.Count(data, []byte{'\n'})+1)
	}
	var out []tokenEntry
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: want \"scope token\", got %d fields", n, len(f))
		}
		e, err := newEntry(f[0], f[1])
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("no tokens (want lines of \"scope token\")")
	}
	return out, nil
}

// parseTokenEnv reads "scope:token,scope:token".
func parseTokenEnv(v string) ([]tokenEntry, error) {
	var out []tokenEntry
	for i, item := range splitList(v) {
		scope, tok, ok := strings.Cut(item, ":")
		if !ok {
			return nil, fmt.Errorf("item %d: want scope:token", i+1)
		}
		e, err := newEntry(strings.TrimSpace(scope), strings.TrimSpace(tok))
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i+1, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// Auth holds the bearer tokens of a server: from a file, re-read when it
// changes (Watch) or on demand (Reload, for SIGHUP), and from the
// environment. Safe for concurrent use. A nil *Auth lets everyone in.
type Auth struct {
	file  string
	fixed []tokenEntry // from the environment and Ephemeral; kept on reloads
	log   *slog.Logger

	mu      sync.Mutex // serialises reloads
	stamp   fileStamp  // of the file last loaded; guarded by mu
	entries atomic.Pointer[[]tokenEntry]
	checks  atomic.Int64 // of the file by Watch, for tests
}

type fileStamp struct {
	size    int64
	modTime time.Time
}

// NewAuth loads tokens from file (empty: none) and from env (the value of
// MLSTREAM_TOKENS; empty: none). It returns nil, nil when both are empty:
// then the service has no authentication. A bad file or value is an error.
func NewAuth(file, env string, log *slog.Logger) (*Auth, error) {
	if file == "" && strings.TrimSpace(env) == "" {
		return nil, nil
	}
	if log == nil {
		log = slog.Default()
	}
	fixed, err := parseTokenEnv(env)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", TokensEnv, err)
	}
	a := &Auth{file: file, fixed: fixed, log: log}
	if err := a.load(); err != nil {
		return nil, err
	}
	return a, nil
}

// load reads the file (if any) and replaces the token set; on an error the
// set stays as it was.
func (a *Auth) load() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	entries := append([]tokenEntry(nil), a.fixed...)
	if a.file != "" {
		st, err := os.Stat(a.file)
		if err != nil {
			return fmt.Errorf("--auth-file: %w", err)
		}
		data, err := os.ReadFile(a.file)
		if err != nil {
			return fmt.Errorf("--auth-file: %w", err)
		}
		fromFile, err := parseTokenFile(data)
		if err != nil {
			return fmt.Errorf("--auth-file %s: %w", a.file, err)
		}
		entries = append(entries, fromFile...)
		a.stamp = fileStamp{st.Size(), st.ModTime()}
		if perm := st.Mode().Perm(); perm&0o077 != 0 {
			a.log.Warn("--auth-file is readable or writable by other users: anyone who reads it holds the tokens; make it private with chmod 600",
				"file", a.file, "mode", perm.String())
		}
	}
	a.entries.Store(&entries)
	return nil
}

// Reload re-reads the token file. On an error it keeps the tokens it had
// and logs one line (naming the line of the file, never a token).
func (a *Auth) Reload() error {
	if a == nil {
		return nil
	}
	if err := a.load(); err != nil {
		a.log.Error("auth tokens not reloaded; keeping the previous ones", "err", err)
		return err
	}
	a.log.Info("auth tokens reloaded", "tokens", a.Count())
	return nil
}

// Watch reloads the file whenever its size or modification time changes,
// checking every interval, until ctx ends.
func (a *Auth) Watch(ctx context.Context, interval time.Duration) {
	if a == nil || a.file == "" {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	a.mu.Lock()
	seen := a.stamp // what was tried last: a bad file is tried (and logged) once
	a.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.checks.Add(1)
		st, err := os.Stat(a.file)
		if err != nil {
			continue // a file being replaced; the next tick sees the new one
		}
		if now := (fileStamp{st.Size(), st.ModTime()}); now != seen {
			seen = now
			_ = a.Reload()
		}
	}
}

// Count is the number of tokens.
func (a *Auth) Count() int {
	if a == nil {
		return 0
	}
	return len(*a.entries.Load())
}

// Ephemeral makes a random token of the given scope that lives as long as
// the process (the demo's generator posts with one).
func (a *Auth) Ephemeral(scope Scope) string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	tok := hex.EncodeToString(b)
	e := tokenEntry{sum: sha256.Sum256([]byte(tok)), scope: scope}
	a.mu.Lock()
	a.fixed = append(a.fixed, e)
	entries := append(append([]tokenEntry(nil), *a.entries.Load()...), e)
	a.entries.Store(&entries)
	a.mu.Unlock()
	return tok
}

// compareTokens compares two token hashes; a variable so a test can count
// the comparisons.
var compareTokens = subtle.ConstantTimeCompare

// lookup returns the scopes of tok. It compares the token's hash with
// every entry in constant time, with no early exit, so the time taken
// says nothing about which entry (if any) matched.
func (a *Auth) lookup(tok string) (scopes []Scope) {
	sum := sha256.Sum256([]byte(tok))
	for _, e := range *a.entries.Load() {
		if compareTokens(sum[:], e.sum[:]) == 1 {
			scopes = append(scopes, e.scope)
		}
	}
	return scopes
}

// wsTokenPrefix marks the Sec-WebSocket-Protocol value that carries a
// token: browsers cannot set headers on a WebSocket.
const (
	wsTokenPrefix = "bearer."
	wsProtocol    = "mlstream"
)

// requestToken finds the bearer token of r: the Authorization header, or
// for a WebSocket handshake a "bearer.<token>" subprotocol.
func requestToken(r *http.Request) (string, bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok), true
		}
		return "", false
	}
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range splitList(h) {
			if tok, ok := strings.CutPrefix(p, wsTokenPrefix); ok {
				return tok, true
			}
		}
	}
	return "", false
}

// require answers requests without a token granting scope need: 401 with
// WWW-Authenticate when the token is missing or unknown, 403 naming the
// scope when it is too weak. Without tokens configured it lets all pass.
func (s *Server) require(need Scope) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if s.cfg.Auth == nil {
			return next
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tok, ok := requestToken(r)
			if !ok {
				s.countRefusal("auth_missing")
				w.Header().Set("WWW-Authenticate", `Bearer realm="mlstream"`)
				writeError(w, http.StatusUnauthorized, apiError{Error: "missing bearer token: send the header \"Authorization: Bearer <token>\" (a WebSocket may offer the subprotocols \"mlstream, bearer.<token>\")"})
				return
			}
			scopes := s.cfg.Auth.lookup(tok)
			if len(scopes) == 0 {
				s.countRefusal("auth_invalid")
				w.Header().Set("WWW-Authenticate", `Bearer realm="mlstream", error="invalid_token"`)
				writeError(w, http.StatusUnauthorized, apiError{Error: "invalid bearer token"})
				return
			}
			for _, sc := range scopes {
				if sc.grants(need) {
					next.ServeHTTP(w, r)
					return
				}
			}
			s.countRefusal("auth_scope")
			writeError(w, http.StatusForbidden, apiError{Error: fmt.Sprintf("this token lacks the scope %q needed for %s %s", need, r.Method, r.URL.Path), Scope: string(need)})
		})
	}
}
