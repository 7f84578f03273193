package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlstream/mlstream/internal/gen"
)

func genEvents(seed int64, n int) []any {
	g := gen.New(gen.Config{Seed: seed})
	out := make([]any, n)
	for i := range out {
		ev := g.Next()
		out[i] = json.RawMessage(ev.AppendJSON(nil))
	}
	return out
}

// predictions returns a job's probabilities for events.
func predictions(t *testing.T, url, job string, events []any) []float64 {
	t.Helper()
	p, err := clientOf(t, url).Predict(t.Context(), job, events...)
	if err != nil {
		t.Fatalf("predict %s: %v", job, err)
	}
	out := make([]float64, len(p.Predictions))
	for i, x := range p.Predictions {
		out[i] = x.P
	}
	return out
}

// The command line exports a trained job's model, imports it into another
// job, which then predicts exactly the same, and inspects the file.
func TestModelCommands(t *testing.T) {
	cfg := writeConfig(t, `jobs:
  - {name: a, kind: logreg, input: a, partitions: 1, params: {hash_bits: 14}}
  - {name: b, kind: logreg, input: b, partitions: 1, params: {hash_bits: 14}}
  - {name: c, kind: logreg, input: b, partitions: 1, params: {hash_bits: 15}}
`)
	p := start(t, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", "")
	url := p.url()
	var body []byte
	for _, ev := range genEvents(1, 3000) {
		body = append(append(body, ev.(json.RawMessage)...), '\n')
	}
	n := postNDJSON(t, url, "a", body)
	deadline := time.Now().Add(30 * time.Second)
	for getJob(t, url, "a", nil).Processed != uint64(n) {
		if time.Now().After(deadline) {
			t.Fatal("a did not process its events")
		}
		time.Sleep(10 * time.Millisecond)
	}

	file := filepath.Join(t.TempDir(), "a.mlsmodel")
	var stdout, stderr bytes.Buffer
	cmd := func(args ...string) int {
		stdout.Reset()
		stderr.Reset()
		return run(t.Context(), append([]string{"model"}, args...), &stdout, &stderr)
	}
	if code := cmd("export", "--url", url, "--job", "a", "-o", file); code != 0 {
		t.Fatalf("export: %d %s", code, stderr.String())
	}
	if code := cmd("import", "--url", url, "--job", "b", file); code != 0 {
		t.Fatalf("import: %d %s", code, stderr.String())
	}
	probe := genEvents(2, 10000)
	pa, pb := predictions(t, url, "a", probe), predictions(t, url, "b", probe)
	for i := range pa {
		if pa[i] != pb[i] {
			t.Fatalf("event %d: a %v, b %v", i, pa[i], pb[i])
		}
	}
	if code := cmd("import", "--url", url, "--job", "c", file); code != 1 || !strings.Contains(stderr.String(), "params.hash_bits") {
		t.Fatalf("import into other hash bits: %d %s", code, stderr.String())
	}

	if code := cmd("inspect", "--top", "5", file); code != 0 {
		t.Fatalf("inspect: %d %s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"mlstream model, version 1", "job", " a\n", `"hash_bits":14`, "updates", "3000", "metrics (all)", "count 3000", "calibration:", "[0.9, 1.0]", "top 5 weights:", "names seen"} {
		if !strings.Contains(out, want) {
			t.Fatalf("inspect output lacks %q:\n%s", want, out)
		}
	}
	data, _ := os.ReadFile(file)
	data[len(data)/2] ^= 1
	damaged := filepath.Join(t.TempDir(), "damaged")
	if err := os.WriteFile(damaged, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := cmd("inspect", damaged); code != 1 || !strings.Contains(stderr.String(), "checksum") {
		t.Fatalf("inspect of a damaged file: %d %s", code, stderr.String())
	}
}
