package runtime_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlstream/mlstream/api"
	"github.com/mlstream/mlstream/ft"
	"github.com/mlstream/mlstream/runtime"
)

// node is an engine over the data directory dir behind a real HTTP
// server. A test "crashes" it with crash: the server goes, the engine is
// abandoned without Close, as kill -9 leaves it.
type node struct {
	t      *testing.T
	engine *runtime.Engine
	http   *httptest.Server
}

func startNode(t *testing.T, dir string) *node {
	t.Helper()
	store, err := ft.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e := runtime.NewEngine(runtime.Config{Partitions: 1, Storage: ft.NewDir(dir, store), Logger: log})
	srv := api.New(api.Config{Engine: e, Logger: log})
	srv.SetReady(true)
	return &node{t: t, engine: e, http: httptest.NewServer(srv)}
}

func (n *node) close() {
	n.http.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.engine.Close(ctx); err != nil {
		n.t.Errorf("engine close: %v", err)
	}
}

func (n *node) crash() { n.http.Close() }

// client times out, so that a request the engine's lock would hold fails
// the test instead of hanging it.
var client = &http.Client{Timeout: 10 * time.Second}

// do sends a request and returns the status and the body.
func (n *node) do(method, path, body string) (int, string, error) {
	req, err := http.NewRequest(method, n.http.URL+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	switch {
	case method == "POST":
		req.Header.Set("Content-Type", "application/x-ndjson")
	case body != "":
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// want sends a request and fails the test unless it is answered status.
func (n *node) want(status int, method, path, body string) string {
	n.t.Helper()
	code, resp, err := n.do(method, path, body)
	if err != nil {
		n.t.Fatalf("%s %s: %v", method, path, err)
	}
	if code != status {
		n.t.Fatalf("%s %s: %d %s, want %d", method, path, code, resp, status)
	}
	return resp
}

const slowSpec = `{"kind":"logreg","input":"a","partitions":1,"params":{"hash_bits":10},
	"ft":{"mode":"exact","max_divergence":1000,"max_pending":1000,"max_unacked":1000}}`

func logregEvents(n int) string {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, `{"key":"k%d","label":%d,"features":{"x":%d}}`+"\n", i, i%2, i%7)
	}
	return b.String()
}

// crashedWithLog leaves in dir a job "slow" (stream a, mode exact) that
// crashed with events in its item log: its next PUT recovers them.
func crashedWithLog(t *testing.T, dir string, events int) {
	n := startNode(t, dir)
	n.want(http.StatusCreated, "PUT", "/v1/jobs/slow", slowSpec)
	n.want(http.StatusAccepted, "POST", "/v1/streams/a/events", logregEvents(events))
	n.crash()
}

// heldRecovery holds the recoveries of job in the item-log replay until
// release is called; entered is closed when one got there.
func heldRecovery(t *testing.T, job string) (entered <-chan struct{}, release func()) {
	in, out := make(chan struct{}), make(chan struct{})
	var once, rel sync.Once
	runtime.SetReplayHook(t, func(j string, _ int) {
		if j != job {
			return
		}
		once.Do(func() { close(in) })
		<-out
	})
	release = func() { rel.Do(func() { close(out) }) }
	t.Cleanup(release)
	return in, release
}

type putResult struct {
	code int
	body string
	err  error
}

func (n *node) putAsync(path, body string) <-chan putResult {
	ch := make(chan putResult, 1)
	go func() {
		code, resp, err := n.do("PUT", path, body)
		ch <- putResult{code, resp, err}
	}()
	return ch
}

// PutJob recovers outside the engine's lock: while a job replays its
// item log, ingest into another job is answered, the other job can be
// read, and a second PUT of the recovering name is refused with 409.
func TestIngestGoesOnWhileAJobRecovers(t *testing.T) {
	dir := t.TempDir()
	crashedWithLog(t, dir, 50)
	n := startNode(t, dir)
	t.Cleanup(n.close) // after the recovery's release: cleanups run last first
	n.want(http.StatusCreated, "PUT", "/v1/jobs/fast", `{"kind":"heavy_hitters","input":"b","partitions":1,"params":{"field":"key"},"ft":{"mode":"none"}}`)
	entered, release := heldRecovery(t, "slow")
	put := n.putAsync("/v1/jobs/slow", slowSpec)
	select {
	case <-entered:
	case r := <-put:
		t.Fatalf("PUT returned before its recovery replayed: %+v", r)
	}

	n.want(http.StatusAccepted, "POST", "/v1/streams/b/events", `{"key":"x"}`+"\n"+`{"key":"y"}`)
	n.want(http.StatusOK, "GET", "/v1/jobs/fast", "")
	body := n.want(http.StatusConflict, "PUT", "/v1/jobs/slow", slowSpec)
	if !strings.Contains(body, "being created") {
		t.Errorf("409 body %s does not say the name is being created", body)
	}
	// Not published before it recovered: its stream has no reader yet.
	n.want(http.StatusNotFound, "POST", "/v1/streams/a/events", logregEvents(1))

	release()
	if r := <-put; r.err != nil || r.code != http.StatusCreated {
		t.Fatalf("PUT of the recovering job: %+v", r)
	}
	var st struct {
		FT struct {
			Recovery struct{ Replayed int } `json:"recovery"`
		} `json:"ft"`
	}
	if err := json.Unmarshal([]byte(n.want(http.StatusOK, "GET", "/v1/jobs/slow", "")), &st); err != nil {
		t.Fatal(err)
	}
	if st.FT.Recovery.Replayed != 50 {
		t.Errorf("replayed %d events, want the 50 of the item log", st.FT.Recovery.Replayed)
	}
	n.want(http.StatusAccepted, "POST", "/v1/streams/a/events", logregEvents(1))
}

// A DELETE of a job that is still recovering waits for the recovery, then
// removes the job and its data; the PUT that created it gets 409, and the
// name is free again, with nothing of the old data.
func TestDeleteWhileRecovering(t *testing.T) {
	dir := t.TempDir()
	crashedWithLog(t, dir, 20)
	n := startNode(t, dir)
	t.Cleanup(n.close) // after the recovery's release: cleanups run last first
	entered, release := heldRecovery(t, "slow")
	put := n.putAsync("/v1/jobs/slow", slowSpec)
	<-entered
	del := make(chan putResult, 1)
	go func() {
		code, resp, err := n.do("DELETE", "/v1/jobs/slow", "")
		del <- putResult{code, resp, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !n.engine.DeleteWaiting("slow") {
		if time.Now().After(deadline) {
			t.Fatal("the DELETE never reached the engine")
		}
		time.Sleep(time.Millisecond)
	}
	release()
	if r := <-put; r.err != nil || r.code != http.StatusConflict || !strings.Contains(r.body, "deleted while") {
		t.Errorf("PUT of a job deleted while it recovered: %+v, want 409", r)
	}
	if r := <-del; r.err != nil || r.code != http.StatusOK {
		t.Errorf("DELETE of a recovering job: %+v, want 200", r)
	}
	n.want(http.StatusNotFound, "GET", "/v1/jobs/slow", "")
	if _, err := os.Stat(filepath.Join(dir, "slow")); !os.IsNotExist(err) {
		t.Errorf("the deleted job's data is still there: %v", err)
	}
	n.want(http.StatusCreated, "PUT", "/v1/jobs/slow", slowSpec)
	var st struct {
		FT struct {
			Recovery *struct{ Replayed int } `json:"recovery"`
		} `json:"ft"`
	}
	if err := json.Unmarshal([]byte(n.want(http.StatusOK, "GET", "/v1/jobs/slow", "")), &st); err != nil {
		t.Fatal(err)
	}
	if st.FT.Recovery != nil {
		t.Errorf("the new job recovered %+v of the deleted one's data", *st.FT.Recovery)
	}
}

// Close waits for a job being created, which is then stopped gracefully
// and its PUT answered 503: its data is kept, and the next start finds
// nothing lost.
func TestCloseWhileRecovering(t *testing.T) {
	dir := t.TempDir()
	crashedWithLog(t, dir, 30)
	n := startNode(t, dir)
	entered, release := heldRecovery(t, "slow")
	put := n.putAsync("/v1/jobs/slow", slowSpec)
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- n.engine.Close(context.Background()) }()
	other := `{"kind":"heavy_hitters","input":"b","params":{"field":"key"},"ft":{"mode":"none"}}`
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body, err := n.do("PUT", "/v1/jobs/other", other)
		if err != nil {
			t.Fatal(err)
		}
		if code == http.StatusServiceUnavailable {
			break
		}
		if code != http.StatusCreated && code != http.StatusOK || time.Now().After(deadline) {
			t.Fatalf("PUT while closing: %d %s", code, body)
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a job was being created", err)
	default:
	}
	release()
	if r := <-put; r.err != nil || r.code != http.StatusServiceUnavailable {
		t.Errorf("PUT of a job recovering when the engine closed: %+v, want 503", r)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	n.crash()

	n2 := startNode(t, dir)
	t.Cleanup(n2.close)
	n2.want(http.StatusCreated, "PUT", "/v1/jobs/slow", slowSpec)
	var st struct {
		FT struct {
			Recovery *struct {
				Clean bool
				Lost  int64
			} `json:"recovery"`
		} `json:"ft"`
	}
	if err := json.Unmarshal([]byte(n2.want(http.StatusOK, "GET", "/v1/jobs/slow", "")), &st); err != nil {
		t.Fatal(err)
	}
	if r := st.FT.Recovery; r != nil && (!r.Clean || r.Lost != 0) {
		t.Errorf("after a close during recovery: %+v, want a clean start", *r)
	}
}
