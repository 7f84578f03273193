package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The memory tests measure the real binary, built without the race
// detector (which multiplies memory), through /proc/PID/status: an
// in-process test would measure the test too.

// plainBinary returns an mlstream binary built without -race.
func plainBinary(t *testing.T) string {
	t.Helper()
	if !raceEnabled {
		return binary
	}
	bin := filepath.Join(t.TempDir(), "mlstream")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building mlstream: %v\n%s", err, out)
	}
	return bin
}

// startPlain starts `mlstream serve` from the plain binary with one logreg
// job reading stream mail and no fault tolerance.
func startPlain(t *testing.T, extra ...string) *proc {
	t.Helper()
	cfg := writeConfig(t, "jobs:\n  - {name: spam, kind: logreg, input: mail, partitions: 2, params: {hash_bits: 16}}\n")
	// start runs the package's binary; the tests of this package do not
	// run in parallel, so it can be swapped for the call.
	raced := binary
	binary = plainBinary(t)
	defer func() { binary = raced }()
	return start(t, append([]string{"serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", ""}, extra...)...)
}

// memKB reads a field of /proc/PID/status (VmRSS, VmHWM) in KiB.
func memKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q", field, line)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

func mib(kb int64) int64 { return kb >> 10 }

// answers checks that the service answers /healthz and takes a normal
// post.
func answers(t *testing.T, url string) {
	t.Helper()
	if err := clientOf(t, url).Healthz(t.Context()); err != nil {
		t.Fatalf("/healthz: %v", err)
	}
	postNDJSON(t, url, "mail", []byte(`{"label":1,"features":{"x":1}}`+"\n"))
}

// One 16 MiB body costs well under 100 MB at its peak, and the memory
// goes back to the system afterwards.
func TestLargeBodyMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("memory of the real binary")
	}
	p := startPlain(t)
	url := p.url()
	pid := p.cmd.Process.Pid
	answers(t, url)
	var body []byte
	for i := 0; len(body) < 16<<20-400; i++ {
		body = fmt.Appendf(body, `{"key":"k%d","label":%d,"features":{"amount":%d,"country":"c%d","word":"w%d","verb":"v%d","pad":"%s"}}`+"\n",
			i, i%2, i%1000, i%50, i%5000, i%300, strings.Repeat("p", 150))
	}
	base := memKB(t, pid, "VmRSS")
	postNDJSON(t, url, "mail", body)
	peak := memKB(t, pid, "VmHWM")
	t.Logf("16 MiB body: RSS %d MiB before, peak %d MiB", mib(base), mib(peak))
	if grown := mib(peak - base); grown >= 100 {
		t.Errorf("peak RSS grew by %d MiB for one 16 MiB body", grown)
	}
	// The queued events are learned and their memory freed; RSS goes back
	// to within 32 MiB of where it was.
	var rss int64
	deadline := time.Now().Add(60 * time.Second)
	for rss = memKB(t, pid, "VmRSS"); mib(rss-base) > 32; rss = memKB(t, pid, "VmRSS") {
		if time.Now().After(deadline) {
			t.Fatalf("RSS still %d MiB (%d before the body) after 60s", mib(rss), mib(base))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("RSS back to %d MiB", mib(rss))
	answers(t, url)
}

// 300 clients that announce 16 MiB bodies and trickle them a byte a
// second cost a few MiB, while the service keeps answering; the body
// deadline then cuts them off with 408.
func TestSlowClientsMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("memory of the real binary")
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < 2048 {
		lim.Cur = min(lim.Max, 2048)
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	const clients = 300
	p := startPlain(t, "--body-timeout", "8s")
	url := p.url()
	addr := strings.TrimPrefix(url, "http://")
	pid := p.cmd.Process.Pid
	answers(t, url)
	conns := openSlowBodies(t, addr, clients)
	stopTrickle := trickle(conns)
	// For 5 seconds, the service answers and its memory stays small.
	var worst int64
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
		answers(t, url)
		worst = max(worst, memKB(t, pid, "VmRSS"))
		time.Sleep(200 * time.Millisecond)
	}
	hwm := memKB(t, pid, "VmHWM")
	t.Logf("%d slow clients: RSS at most %d MiB, peak %d MiB", clients, mib(worst), mib(hwm))
	if mib(hwm) >= 300 {
		t.Errorf("peak RSS %d MiB with %d slow clients", mib(hwm), clients)
	}
	// The body deadline (--body-timeout 8s) cuts every one of them off.
	statuses := answersTo(conns)
	stopTrickle()
	if statuses[http.StatusRequestTimeout] != clients {
		t.Errorf("answers to the slow clients: %v, want %d × 408", statuses, clients)
	}
	answers(t, url)
	var metrics bytes.Buffer
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = metrics.ReadFrom(resp.Body)
	resp.Body.Close()
	if !strings.Contains(metrics.String(), `mlstream_events_rejected_total{reason="timeout",stream="mail"} 300`) {
		t.Errorf("the 408s are not counted in /metrics")
	}
}

// openSlowBodies opens n connections, each posting a request that
// announces a 16 MiB body and sends its first byte only.
func openSlowBodies(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "POST /v1/streams/mail/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-ndjson\r\nContent-Length: %d\r\n\r\n{", 16<<20)
		conns = append(conns, c)
	}
	return conns
}

// trickle writes a byte a second on every connection until it is closed
// or stop is called; stop returns once every writer has.
func trickle(conns []net.Conn) (stop func()) {
	var wg sync.WaitGroup
	done := make(chan struct{})
	for _, c := range conns {
		wg.Go(func() {
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
					if _, err := c.Write([]byte(" ")); err != nil {
						return
					}
				}
			}
		})
	}
	return func() {
		close(done)
		wg.Wait()
	}
}

// answersTo reads the answer on every connection (waiting up to a minute)
// and counts them by status; 0 counts a connection closed without one.
func answersTo(conns []net.Conn) map[int]int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for _, c := range conns {
		wg.Go(func() {
			_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
			status := 0
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				status = resp.StatusCode
				resp.Body.Close()
			}
			mu.Lock()
			statuses[status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return statuses
}
