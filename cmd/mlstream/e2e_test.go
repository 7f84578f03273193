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
	p := &proc{t: t, cmd: exec.Command(binary, args...), addr: make(chan string, 1), done: make(chan error, 1)}
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

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

type jobView struct {
	Accepted, Processed uint64
	Metrics             struct {
		All, Recent struct {
			Count    int64
			Accuracy float64
		}
	}
}

// postNDJSON posts one NDJSON body to a stream, insists on 202, and
// returns how many events were accepted.
func postNDJSON(t *testing.T, url, stream string, body []byte) int {
	t.Helper()
	resp, err := http.Post(url+"/v1/streams/"+stream+"/events", "application/x-ndjson", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct{ Accepted int }
	_ = json.NewDecoder(resp.Body).Decode(&r)
	if resp.StatusCode != 202 {
		t.Fatalf("post to %s: status %d", stream, resp.StatusCode)
	}
	return r.Accepted
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
	var j jobView
	for {
		getJSON(t, url+"/v1/jobs/"+demoJob, &j)
		if j.Metrics.All.Count >= 20000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo learned from only %d events", j.Metrics.All.Count)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if j.Metrics.Recent.Accuracy < 0.7 {
		t.Errorf("demo recent accuracy %.3f", j.Metrics.Recent.Accuracy)
	}
	// The demo's join pairs purchases with the events before them.
	var m joinView
	getJSON(t, url+"/v1/jobs/conversions/matches", &m)
	if m.Matches == 0 || m.Late*100 > m.Seen {
		t.Errorf("demo join: %d matches, %d of %d events late", m.Matches, m.Late, m.Seen)
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
	var j jobView
	deadline := time.Now().Add(30 * time.Second)
	for getJSON(t, url+"/v1/jobs/cancer", &j); j.Processed < 569; getJSON(t, url+"/v1/jobs/cancer", &j) {
		if time.Now().After(deadline) {
			t.Fatalf("processed %d", j.Processed)
		}
		time.Sleep(20 * time.Millisecond)
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
