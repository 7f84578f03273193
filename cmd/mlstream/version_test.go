package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	goruntime "runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"
)

// `mlstream version` of the real binary names the Go version it was built
// with, and /metrics carries the same build as mlstream_build_info.
func TestVersionAndBuildInfoMetric(t *testing.T) {
	out, err := exec.Command(binary, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary's Go is the one that built mlstream. The version is
	// dev, or with VCS stamping the pseudo-version go build derives.
	want := readBuildInfo()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "mlstream ") || !strings.HasPrefix(lines[1], "commit  ") ||
		lines[2] != "go      "+want.goVersion {
		t.Fatalf("mlstream version printed\n%s", out)
	}
	printed := strings.TrimPrefix(lines[0], "mlstream ")
	p := start(t, "serve", "--addr", "127.0.0.1:0", "--data", "")
	resp, err := http.Get(p.url() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var line string
	for l := range strings.Lines(string(body)) {
		if strings.HasPrefix(l, "mlstream_build_info{") {
			line = strings.TrimSpace(l)
		}
	}
	if !strings.HasSuffix(line, "} 1") || !strings.Contains(line, `goversion="`+want.goVersion+`"`) ||
		!strings.Contains(line, `version="`+printed+`"`) || !strings.Contains(line, `revision="`) {
		t.Fatalf("/metrics: build info line %q", line)
	}
}

// The commit, its time and whether the tree was modified come from what
// go build stamped; the main module's version stands in for an unset
// -X main.version.
func TestBuildInfoFromStamp(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "v1.4.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.time", Value: "2026-11-30T10:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	b := buildInfoOf(bi)
	var out bytes.Buffer
	b.print(&out)
	want := "mlstream v1.4.0\ncommit  0123456789abcdef (2026-11-30T10:00:00Z, modified)\ngo      go1.99.1\n"
	if out.String() != want {
		t.Fatalf("printed\n%s\nwant\n%s", out.String(), want)
	}
	if dev := buildInfoOf(&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}); dev.version != "dev" || dev.goVersion != goruntime.Version() {
		t.Fatalf("unstamped build: %+v", dev)
	}
}

// Durations are logged as "1.5s" in JSON as in text, not as nanoseconds;
// fields with the unit in their name stay numbers.
func TestLogDurationsAreStrings(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		var buf bytes.Buffer
		log, err := newLogger(&buf, "info", format)
		if err != nil {
			t.Fatal(err)
		}
		log.Info("x", "drain", 1500*time.Millisecond, "duration_ms", int64(1500), slog.Group("g", "wait", 2*time.Minute))
		got := buf.String()
		if format == "text" {
			if !strings.Contains(got, "drain=1.5s duration_ms=1500 g.wait=2m0s") {
				t.Errorf("text log %q", got)
			}
			continue
		}
		var m struct {
			Drain      any `json:"drain"`
			DurationMs any `json:"duration_ms"`
			G          struct{ Wait any }
		}
		if err := json.Unmarshal([]byte(got), &m); err != nil {
			t.Fatal(err)
		}
		if m.Drain != "1.5s" || m.DurationMs != float64(1500) || m.G.Wait != "2m0s" {
			t.Errorf("json log %q", got)
		}
	}
}

// The real binary's JSON log of a shutdown gives the drain time as a
// duration string.
func TestJSONLogDurationOfShutdown(t *testing.T) {
	p := start(t, "serve", "--addr", "127.0.0.1:0", "--data", "", "--log-format", "json")
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(p.output(), `"msg":"mlstream serving"`); {
		if time.Now().After(deadline) {
			t.Fatalf("mlstream did not start\n%s", p.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	p.wait()
	for l := range strings.Lines(p.output()) {
		var m struct {
			Msg   string `json:"msg"`
			Drain any    `json:"drain"`
		}
		if json.Unmarshal([]byte(l), &m) != nil || m.Msg != "stopped" {
			continue
		}
		s, ok := m.Drain.(string)
		if _, err := time.ParseDuration(s); !ok || err != nil {
			t.Fatalf("drain logged as %#v: %s", m.Drain, l)
		}
		return
	}
	t.Fatalf("no stopped line in\n%s", p.output())
}
