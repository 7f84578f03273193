package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mlstream/mlstream/client"
	"github.com/mlstream/mlstream/internal/gen"
)

// binary is the mlstream binary built once for the end-to-end tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mlstream-e2e")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "mlstream")
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building mlstream: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running mlstream subprocess whose log lines are collected.
type proc struct {
	t    *testing.T
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs bytes.Buffer
	addr chan string
	done chan error
	base string // the URL, once known
}

var servingRE = regexp.MustCompile(`msg="mlstream serving" addr=(\S+)`)

func start(t *testing.T, args ...string) *proc {
	t.Helper()
	return startEnv(t, nil, args...)
}

// startEnv starts mlstream with env added to the test's environment.
func startEnv(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startCmd(t, env, binary, args...)
}

// startCmd starts the command name (the binary, or a wrapper that execs
// it, such as ip netns exec) as a proc.
func startCmd(t *testing.T, env []string, name string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, cmd: exec.Command(name, args...), addr: make(chan string, 1), done: make(chan error, 1)}
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout = &lockedWriter{mu: &p.mu, w: &p.logs}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.logs.WriteString(line + "\n")
			p.mu.Unlock()
			if m := servingRE.FindStringSubmatch(line); m != nil {
				p.addr <- "http://" + m[1]
			}
		}
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("mlstream output:\n%s", p.output())
		}
	})
	return p
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

func (p *proc) url() string {
	p.t.Helper()
	if p.base != "" {
		return p.base
	}
	select {
	case u := <-p.addr:
		p.base = u
		return u
	case err := <-p.done:
		p.t.Fatalf("mlstream exited before serving: %v\n%s", err, p.output())
	case <-time.After(60 * time.Second):
		p.t.Fatalf("mlstream did not start\n%s", p.output())
	}
	return ""
}

func (p *proc) wait() {
	p.t.Helper()
	select {
	case err := <-p.done:
		if err != nil {
			p.t.Fatalf("mlstream exited with %v\n%s", err, p.output())
		}
	case <-time.After(60 * time.Second):
		p.t.Fatalf("mlstream did not exit\n%s", p.output())
	}
}

// clients are the tests' clients by server URL, one each, so that polling
// reuses connections.
var clients = struct {
	sync.Mutex
	m map[string]*client.Client
}{m: map[string]*client.Client{}}

// clientOf is a client of the server at url that retries nothing: a
// refused or failed request fails at once, and the test with it.
func clientOf(t *testing.T, url string) *client.Client {
	t.Helper()
	clients.Lock()
	defer clients.Unlock()
	c := clients.m[url]
	if c == nil {
		var err error
		if c, err = client.New(url, client.Config{Retry: client.RetryPolicy{MaxRetries: -1}}); err != nil {
			t.Fatal(err)
		}
		clients.m[url] = c
	}
	return c
}

// getJob returns a job's status; view, when not nil, also receives the
// whole status, for the sections the client does not type (ft, ...).
func getJob(t *testing.T, url, job string, view any) *client.JobStatus {
	t.Helper()
	st, err := clientOf(t, url).Job(t.Context(), job)
	if err != nil {
		t.Fatalf("job %s: %v", job, err)
	}
	if view != nil {
		if err := json.Unmarshal(st.Raw, view); err != nil {
			t.Fatalf("job %s: %v", job, err)
		}
	}
	return st
}

// postNDJSON posts one NDJSON body to a stream, insists that it is
// accepted, and returns how many events were.
func postNDJSON(t *testing.T, url, stream string, body []byte) int {
	t.Helper()
	in, err := clientOf(t, url).PostEvents(t.Context(), stream, body)
	if err != nil {
		t.Fatalf("post to %s: %v", stream, err)
	}
	return in.Accepted
}

// checkReady insists that the server answers /readyz with 200.
func checkReady(t *testing.T, url string) {
	t.Helper()
	if ok, err := clientOf(t, url).Ready(t.Context()); !ok || err != nil {
		t.Fatalf("readyz: ready %v, %v", ok, err)
	}
}

func writeConfig(t *testing.T, doc string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "jobs.yaml")
	if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// SIGTERM stops taking requests, processes everything accepted, and exits 0.
func TestGracefulShutdownProcessesEverythingAccepted(t *testing.T) {
	cfg := writeConfig(t, "jobs:\n  - {name: spam, kind: logreg, input: mail, partitions: 2, params: {hash_bits: 16}}\n")
	p := start(t, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", t.TempDir())
	url := p.url()
	g := gen.New(gen.Config{Seed: 7})
	var body []byte
	for range 2000 {
		ev := g.Next()
		body = append(ev.AppendJSON(body), '\n')
	}
	accepted := 0
	for range 20 {
		accepted += postNDJSON(t, url, "mail", body)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.wait()
	m := regexp.MustCompile(`msg=stopped processed=(\d+)`).FindStringSubmatch(p.output())
	if m == nil {
		t.Fatalf("no shutdown summary in the log")
	}
	if n, _ := strconv.Atoi(m[1]); n != accepted {
		t.Fatalf("processed %d of %d accepted events", n, accepted)
	}
}

// The demo serves a learning job fed by its generator.
func TestDemoLearns(t *testing.T) {
	p := start(t, "demo", "--addr", "127.0.0.1:0", "--rate", "5000", "--data", t.TempDir())
	url := p.url()
	deadline := time.Now().Add(60 * time.Second)
	var m client.ModelMetrics
	for {
		if j := getJob(t, url, demoJob, nil); j.Metrics != nil {
			m = *j.Metrics
		}
		if m.All.Count >= 20000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo learned from only %d events", m.All.Count)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if m.Recent.Accuracy < 0.7 {
		t.Errorf("demo recent accuracy %.3f", m.Recent.Accuracy)
	}
	// The demo's join pairs purchases with the events before them.
	jm, err := clientOf(t, url).Matches(t.Context(), "conversions", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if jm.Matches == 0 || jm.Late*100 > jm.Seen {
		t.Errorf("demo join: %d matches, %d of %d events late", jm.Matches, jm.Late, jm.Seen)
	}
	resp, err := http.Get(url + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("dashboard: %v %v", err, resp)
	}
	resp.Body.Close()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	p.wait()
}

// Real data: the breast-cancer set replayed into a job with default
// settings, unscaled as shipped, is learned well.
func TestReplayBreastCancer(t *testing.T) {
	cfg := writeConfig(t, `{"jobs":[{"name":"cancer","kind":"logreg","input":"cancer","partitions":1}]}`)
	p := start(t, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", t.TempDir())
	url := p.url()
	var out bytes.Buffer
	cmd := exec.Command(binary, "replay", "../../benchmarks/data/breast_cancer.ndjson", "--stream", "cancer", "--url", url, "--batch", "50")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("replay: %v\n%s", err, out.String())
	}
	if !regexp.MustCompile(`accepted\s+569`).MatchString(out.String()) {
		t.Fatalf("replay summary:\n%s", out.String())
	}
	deadline := time.Now().Add(30 * time.Second)
	j := getJob(t, url, "cancer", nil)
	for ; j.Processed < 569; j = getJob(t, url, "cancer", nil) {
		if time.Now().After(deadline) {
			t.Fatalf("processed %d", j.Processed)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if j.Metrics == nil {
		t.Fatal("no metrics in the status of a logreg job")
	}
	// One pass, progressive (every event predicted before it is learned),
	// on the unscaled values as shipped. scikit-learn's SGDClassifier
	// (log loss) fed the same way reaches 0.68 (0.95 only when a scaler has
	// seen the whole data set first); ours, thanks to the adaptive
	// per-feature scales, 0.83-0.87.
	if j.Metrics.All.Accuracy < 0.8 {
		t.Fatalf("progressive accuracy on breast cancer %.3f, want >= 0.8", j.Metrics.All.Accuracy)
	}
	t.Logf("breast cancer, one pass, progressive accuracy %.3f", j.Metrics.All.Accuracy)
}
