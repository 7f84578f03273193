package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// replayPeer is a stand-in ingest server. It records the keys of every accepted batch; answer, when
// set, decides the reply to request number i (0-based) from its events, and returns 0 to accept.
type replayPeer struct {
	t      *testing.T
	mu     sync.Mutex
	reqs   int
	stream string
	batch  [][]int // keys (as ints) of each accepted batch, in arrival order
	answer func(w http.ResponseWriter, i int, keys []int) (handled bool)
	srv    *httptest.Server
}

func newReplayPeer(t *testing.T, answer func(w http.ResponseWriter, i int, keys []int) bool) *replayPeer {
	p := &replayPeer{t: t, answer: answer, stream: "clicks"}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *replayPeer) serve(w http.ResponseWriter, r *http.Request) {
	want := "/v1/streams/" + p.stream + "/events"
	if r.Method != http.MethodPost || r.URL.Path != want {
		http.Error(w, `{"error":"unknown stream"}`, http.StatusNotFound)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		p.t.Errorf("Content-Type = %q", ct)
	}
	var keys []int
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var ev struct {
			Key string `json:"key"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			p.t.Errorf("bad line in body: %q: %v", sc.Text(), err)
		}
		k, _ := strconv.Atoi(ev.Key)
		keys = append(keys, k)
	}
	p.mu.Lock()
	i := p.reqs
	p.reqs++
	p.mu.Unlock()
	if p.answer != nil && p.answer(w, i, keys) {
		return
	}
	p.mu.Lock()
	p.batch = append(p.batch, keys)
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	fmt.Fprintf(w, `{"accepted": %d}`, len(keys))
}

// checkExactlyOnce asserts that keys 1..n arrived once each, and in order within each batch.
func (p *replayPeer) checkExactlyOnce(t *testing.T, n int) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := make(map[int]int)
	for _, b := range p.batch {
		for j, k := range b {
			seen[k]++
			if j > 0 && k != b[j-1]+1 {
				t.Errorf("batch out of order: %v", b)
				break
			}
		}
	}
	for k := 1; k <= n; k++ {
		if seen[k] != 1 {
			t.Errorf("event %d arrived %d times", k, seen[k])
		}
	}
	if len(seen) != n {
		t.Errorf("got %d distinct events, want %d", len(seen), n)
	}
}

func (p *replayPeer) maxBatch() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := 0
	for _, b := range p.batch {
		m = max(m, len(b))
	}
	return m
}

// events returns n NDJSON lines with keys "1".."n".
func replayEvents(n int) string {
	var sb strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&sb, `{"key":"%d","label":%d,"features":{"x":%d}}`+"\n", i, i%2, i)
	}
	return sb.String()
}

func replayWriteFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "events.ndjson")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func doReplay(t *testing.T, ctx context.Context, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = runReplay(ctx, args, &out, &errOut)
	return out.String(), errOut.String(), err
}

// replaySummaryValue returns the value of a summary row, e.g. replaySummaryValue(out, "accepted").
func replaySummaryValue(t *testing.T, out, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` +(\S+)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("summary has no %q row:\n%s", name, out)
	}
	return m[1]
}

func wantReplaySummary(t *testing.T, out string, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := replaySummaryValue(t, out, k); got != v {
			t.Errorf("summary %q = %s, want %s\n%s", k, got, v, out)
		}
	}
}

func TestReplayRetries429ThenDeliversExactlyOnce(t *testing.T) {
	p := newReplayPeer(t, func(w http.ResponseWriter, i int, keys []int) bool {
		if i < 2 {
			w.Header().Set("Retry-After", "1") // the body's 5 ms must win over this
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"error":"queue full","retry_after_ms":5}`)
			return true
		}
		return false
	})
	path := replayWriteFile(t, replayEvents(1000))
	out, errOut, err := doReplay(t, t.Context(), path, "--stream", "clicks", "--url", p.srv.URL, "--batch", "100")
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, errOut)
	}
	p.checkExactlyOnce(t, 1000)
	wantReplaySummary(t, out, map[string]string{
		"events read": "1000", "events sent": "1000", "accepted": "1000", "rejected": "0",
		"retries on 429": "2", "retries on errors": "0",
	})
	for _, row := range []string{"elapsed", "events/s"} {
		replaySummaryValue(t, out, row)
	}
	if strings.Contains(out, "not sent") {
		t.Errorf("unexpected 'not sent' row:\n%s", out)
	}
	if p.maxBatch() != 100 {
		t.Errorf("largest batch = %d, want 100", p.maxBatch())
	}
}

// A bad line costs only itself: the rest of its batch is sent again
// without it, it goes to --bad-lines with its line number, and the summary
// counts both.
func TestReplayBadLineLeftOut(t *testing.T) {
	p := newReplayPeer(t, func(w http.ResponseWriter, i int, keys []int) bool {
		for j, k := range keys {
			if k == 0 { // the bad line has no key
				w.WriteHeader(http.StatusBadRequest)
				fmt.Fprintf(w, `{"error":"label must be 0 or 1","line":%d,"field":"label"}`, j+1)
				return true
			}
		}
		return false
	})
	// Lines: 1-3 events 1-3, 4 blank, 5 event 4, 6 bad, 7.. events 5-8. Batches of 3 events:
	// [1,2,3] [4,bad,5] [6,7,8]; the bad event is on file line 6.
	lines := strings.Split(strings.TrimSuffix(replayEvents(8), "\n"), "\n")
	content := strings.Join(lines[:3], "\n") + "\n   \n" + lines[3] + "\n" + `{"label":7}` + "\n" +
		strings.Join(lines[4:], "\r\n") // CRLF and no final newline
	path := replayWriteFile(t, content)
	badPath := filepath.Join(t.TempDir(), "bad.ndjson")
	out, errOut, err := doReplay(t, t.Context(), "--stream=clicks", "--url", p.srv.URL+"/", "--batch", "3", "--concurrency", "1", "--bad-lines", badPath, path)
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, errOut)
	}
	wantReplaySummary(t, out, map[string]string{"events read": "9", "events sent": "9", "accepted": "8", "bad lines": "1", "rejected": "0", "bad lines file": badPath})
	if want := `bad line 6, left out: label must be 0 or 1 (field "label")`; !strings.Contains(errOut, want) {
		t.Errorf("stderr lacks %q:\n%s", want, errOut)
	}
	p.mu.Lock()
	got := fmt.Sprint(p.batch)
	p.mu.Unlock()
	if got != "[[1 2 3] [4 5] [6 7 8]]" {
		t.Errorf("accepted batches %s", got)
	}
	b, err := os.ReadFile(badPath)
	if want := `{"line":6,"error":"label must be 0 or 1","field":"label","event":"{\"label\":7}"}` + "\n"; err != nil || string(b) != want {
		t.Errorf("--bad-lines holds %q (%v), want %q", b, err, want)
	}
}

func TestReplayAllRejectedIsAnError(t *testing.T) {
	p := newReplayPeer(t, func(w http.ResponseWriter, i int, keys []int) bool {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":"no job reads this stream"}`)
		return true
	})
	out, errOut, err := doReplay(t, t.Context(), replayWriteFile(t, replayEvents(30)), "--stream", "clicks", "--url", p.srv.URL, "--batch", "2")
	if err == nil || !strings.Contains(err.Error(), "all 30 events were rejected") {
		t.Fatalf("err = %v", err)
	}
	wantReplaySummary(t, out, map[string]string{"rejected": "30", "accepted": "0"})
	if n := strings.Count(errOut, "no job reads this stream"); n != replayMaxShownProblems {
		t.Errorf("printed %d problems, want %d:\n%s", n, replayMaxShownProblems, errOut)
	}
	if !strings.Contains(errOut, "further problems are not shown") {
		t.Errorf("no suppression notice:\n%s", errOut)
	}
}

func TestReplayRateLimit(t *testing.T) {
	p := newReplayPeer(t, nil)
	path := replayWriteFile(t, replayEvents(1000))
	start := time.Now()
	out, errOut, err := doReplay(t, t.Context(), path, "--stream", "clicks", "--url", p.srv.URL, "--rate", "2000")
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, errOut)
	}
	p.checkExactlyOnce(t, 1000)
	// 1000 events at 2000/s in batches of 200 (rate/10): batches leave at 0, .1, .2, .3, .4 s.
	if elapsed < 400*time.Millisecond {
		t.Errorf("1000 events at --rate 2000 took %v, want >= 400ms", elapsed)
	}
	if m := p.maxBatch(); m != 200 {
		t.Errorf("largest batch = %d, want 200 (rate/10)", m)
	}
	wantReplaySummary(t, out, map[string]string{"accepted": "1000"})
}

func TestReplayStdin(t *testing.T) {
	p := newReplayPeer(t, nil)
	old := replayStdin
	replayStdin = strings.NewReader("\n" + replayEvents(25) + "\n\n")
	t.Cleanup(func() { replayStdin = old })
	out, errOut, err := doReplay(t, t.Context(), "--stream", "clicks", "--url", p.srv.URL, "--batch", "10", "--progress", "on", "-")
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, errOut)
	}
	p.checkExactlyOnce(t, 25)
	wantReplaySummary(t, out, map[string]string{"events sent": "25", "accepted": "25"})
	// Size unknown: the progress line has counts but no percentage.
	if !strings.Contains(errOut, "\rsent 25 events") || strings.Contains(errOut, "%") {
		t.Errorf("progress line for stdin: %q", errOut)
	}
}

func TestReplayProgressShowsPercent(t *testing.T) {
	p := newReplayPeer(t, nil)
	_, errOut, err := doReplay(t, t.Context(), replayWriteFile(t, replayEvents(50)), "--stream", "clicks", "--url", p.srv.URL, "--progress=on")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut, "\r100.0%  sent 50 events") || !strings.Contains(errOut, "events/s  ETA 0s  bad lines 0  rejected 0") || !strings.HasSuffix(errOut, "\n") {
		t.Errorf("progress: %q", errOut)
	}
}

func TestReplayUnknownStreamStops(t *testing.T) {
	p := newReplayPeer(t, nil)
	out, _, err := doReplay(t, t.Context(), replayWriteFile(t, replayEvents(100)), "--stream", "nope", "--url", p.srv.URL, "--batch", "10")
	if err == nil || !strings.Contains(err.Error(), `stream "nope" not found`) {
		t.Fatalf("err = %v", err)
	}
	wantReplaySummary(t, out, map[string]string{"accepted": "0"})
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reqs > 3 { // at most the requests in flight (2) and one already handed to a worker
		t.Errorf("%d requests after a 404", p.reqs)
	}
}

func TestReplayTooLarge(t *testing.T) {
	p := newReplayPeer(t, func(w http.ResponseWriter, i int, keys []int) bool {
		if len(keys) > 4 {
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			return true
		}
		return false
	})
	out, errOut, err := doReplay(t, t.Context(), replayWriteFile(t, replayEvents(12)), "--stream", "clicks", "--url", p.srv.URL, "--batch", "5")
	if err != nil {
		t.Fatal(err)
	}
	wantReplaySummary(t, out, map[string]string{"accepted": "2", "rejected": "10"})
	if !strings.Contains(errOut, "lower --batch") {
		t.Errorf("no hint:\n%s", errOut)
	}
}

func TestReplayRetries5xxWithBackoff(t *testing.T) {
	old := replayBackoffBase
	replayBackoffBase = time.Millisecond
	t.Cleanup(func() { replayBackoffBase = old })
	p := newReplayPeer(t, func(w http.ResponseWriter, i int, keys []int) bool {
		if i < 3 {
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	out, errOut, err := doReplay(t, t.Context(), replayWriteFile(t, replayEvents(40)), "--stream", "clicks", "--url", p.srv.URL, "--batch", "10", "--concurrency", "1")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	p.checkExactlyOnce(t, 40)
	wantReplaySummary(t, out, map[string]string{"retries on errors": "3", "retries on 429": "0", "accepted": "40"})
	if !strings.Contains(errOut, "503 Service Unavailable: overloaded") {
		t.Errorf("stderr: %s", errOut)
	}
}

func TestReplayGivesUpAfterMaxRetries(t *testing.T) {
	p := newReplayPeer(t, func(w http.ResponseWriter, i int, keys []int) bool {
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":"busy","retry_after_ms":0}`)
		return true
	})
	out, _, err := doReplay(t, t.Context(), replayWriteFile(t, replayEvents(10)), "--stream", "clicks", "--url", p.srv.URL, "--max-retries", "3", "--concurrency", "1")
	if err == nil || !strings.Contains(err.Error(), "giving up on lines 1-10 after 3 retries") {
		t.Fatalf("err = %v", err)
	}
	wantReplaySummary(t, out, map[string]string{"retries on 429": "3", "not sent": "10"})
}

func TestReplayNetworkErrorGivesUp(t *testing.T) {
	old := replayBackoffBase
	replayBackoffBase = time.Millisecond
	t.Cleanup(func() { replayBackoffBase = old })
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	out, errOut, err := doReplay(t, t.Context(), replayWriteFile(t, replayEvents(3)), "--stream", "clicks", "--url", url, "--max-retries", "2")
	if err == nil || !strings.Contains(err.Error(), "after 2 retries") {
		t.Fatalf("err = %v", err)
	}
	wantReplaySummary(t, out, map[string]string{"retries on errors": "2", "accepted": "0"})
	if !strings.Contains(errOut, "retrying in") {
		t.Errorf("stderr: %s", errOut)
	}
}

func TestReplayInterruptPrintsSummary(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	p := newReplayPeer(t, func(w http.ResponseWriter, i int, keys []int) bool {
		if i == 0 {
			cancel() // Ctrl-C while the first batch is in flight: it still completes
		}
		return false
	})
	out, _, err := doReplay(t, ctx, replayWriteFile(t, replayEvents(1000)), "--stream", "clicks", "--url", p.srv.URL, "--batch", "10", "--concurrency", "1")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	wantReplaySummary(t, out, map[string]string{"accepted": "10", "events sent": "10"})
}

func TestReplayLongLines(t *testing.T) {
	p := newReplayPeer(t, nil)
	big := `{"key":"2","features":{"pad":"` + strings.Repeat("x", 1<<20) + `"}}`
	path := replayWriteFile(t, `{"key":"1"}`+"\n"+big+"\n"+`{"key":"3"}`+"\n")
	out, errOut, err := doReplay(t, t.Context(), path, "--stream", "clicks", "--url", p.srv.URL)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	p.checkExactlyOnce(t, 3)
	wantReplaySummary(t, out, map[string]string{"accepted": "3"})

	old := replayMaxLineBytes
	replayMaxLineBytes = 1000
	t.Cleanup(func() { replayMaxLineBytes = old })
	_, _, err = doReplay(t, t.Context(), path, "--stream", "clicks", "--url", p.srv.URL)
	if err == nil || !strings.Contains(err.Error(), "line 2 is longer than 1000 bytes") {
		t.Fatalf("err = %v", err)
	}
}

func TestReplayBatchBytes(t *testing.T) {
	p := newReplayPeer(t, nil)
	out, _, err := doReplay(t, t.Context(), replayWriteFile(t, replayEvents(20)), "--stream", "clicks", "--url", p.srv.URL, "--batch-bytes", "1")
	if err != nil {
		t.Fatal(err)
	}
	p.checkExactlyOnce(t, 20)
	if m := p.maxBatch(); m != 1 {
		t.Errorf("largest batch %d, want 1", m)
	}
	wantReplaySummary(t, out, map[string]string{"accepted": "20"})
}

func TestParseReplayArgs(t *testing.T) {
	for _, args := range [][]string{
		{"f.ndjson", "--stream", "s"},
		{"--stream", "s", "f.ndjson"},
		{"-stream=s", "f.ndjson", "--rate", "10"},
		{"--stream", "s", "--", "f.ndjson"},
	} {
		o, err := parseReplayArgs(args, new(bytes.Buffer))
		if err != nil {
			t.Errorf("%q: %v", args, err)
			continue
		}
		if o.file != "f.ndjson" || o.stream != "s" || o.batch != 500 || o.concurrency != 2 ||
			o.url != "http://localhost:8080" || o.maxRetries != 100 || o.giveUp != 30*time.Second {
			t.Errorf("%q: %+v", args, o)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--stream", "s"}, "missing FILE"},
		{[]string{"f"}, "--stream is required"},
		{[]string{"f", "g", "--stream", "s"}, "expected one FILE"},
		{[]string{"f", "--stream", "s", "--batch", "0"}, "--batch"},
		{[]string{"f", "--stream", "s", "--rate", "-1"}, "--rate"},
		{[]string{"f", "--stream", "s", "--url", "localhost:8080"}, "--url"},
		{[]string{"f", "--stream", "s", "--progress", "maybe"}, "--progress"},
		{[]string{"f", "--stream", "s", "--give-up", "-1s"}, "--give-up"},
		{[]string{"f", "--stream", "s", "--nope"}, "not defined"},
	} {
		_, err := parseReplayArgs(tc.args, new(bytes.Buffer))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want %q", tc.args, err, tc.want)
		}
	}
	if _, err := parseReplayArgs([]string{"-h"}, new(bytes.Buffer)); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

// Against a URL where nothing listens, replay stops after --give-up and says why.
func TestReplayGivesUpOnDeadURL(t *testing.T) {
	old := replayBackoffBase
	replayBackoffBase = 10 * time.Millisecond
	t.Cleanup(func() { replayBackoffBase = old })
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	start := time.Now()
	out, _, err := doReplay(t, t.Context(), replayWriteFile(t, replayEvents(30)), "--stream", "clicks", "--url", url, "--batch", "10", "--give-up", "300ms")
	if elapsed := time.Since(start); elapsed > 3*time.Second {
		t.Errorf("gave up after %v, want about 300ms", elapsed)
	}
	if err == nil || !strings.Contains(err.Error(), "no request succeeded for") || !strings.Contains(err.Error(), "--give-up 300ms") ||
		!strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("err = %v", err)
	}
	wantReplaySummary(t, out, map[string]string{"accepted": "0", "events sent": "0"})
}

// The bearer token comes from --token, else from $MLSTREAM_TOKEN.
func TestReplaySendsToken(t *testing.T) {
	for _, tc := range []struct{ flag, env, want string }{
		{"flag-token", "env-token", "Bearer flag-token"},
		{"", "env-token", "Bearer env-token"},
		{"", "", ""},
	} {
		var mu sync.Mutex
		var got []string
		p := newReplayPeer(t, nil)
		p.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			got = append(got, r.Header.Get("Authorization"))
			mu.Unlock()
			p.serve(w, r)
		})
		t.Setenv("MLSTREAM_TOKEN", tc.env)
		args := []string{replayWriteFile(t, replayEvents(5)), "--stream", "clicks", "--url", p.srv.URL}
		if tc.flag != "" {
			args = append(args, "--token", tc.flag)
		}
		if _, errOut, err := doReplay(t, t.Context(), args...); err != nil {
			t.Fatalf("%v\n%s", err, errOut)
		}
		mu.Lock()
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("flag %q env %q: Authorization %q, want %q", tc.flag, tc.env, got, tc.want)
		}
		mu.Unlock()
	}
}
