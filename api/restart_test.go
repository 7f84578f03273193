package api

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlstream/mlstream/ft"
	"github.com/mlstream/mlstream/runtime"
)

// startNode is a server over the data directory dir, as the binary starts
// it: backups, job records, the config file's jobs, then the recorded ones.
func startNode(t *testing.T, dir string, file []runtime.Spec, log *syncBuffer) *testServer {
	t.Helper()
	ts := newNode(t, dir, log)
	if err := ts.engine.Start(file); err != nil {
		t.Fatal(err)
	}
	return ts
}

// newNode is startNode before Start: no job runs yet.
func newNode(t *testing.T, dir string, log *syncBuffer) *testServer {
	t.Helper()
	store, err := ft.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := ft.OpenJobDir(filepath.Join(dir, ".jobs"))
	if err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, func(c *runtime.Config, _ *Config) {
		c.Store, c.DataDir, c.Jobs = store, dir, jobs
		c.Logger = slog.New(slog.NewTextHandler(log, nil))
	})
	return ts
}

func (ts *testServer) stop() {
	ts.t.Helper()
	ts.http.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ts.engine.Close(ctx); err != nil {
		ts.t.Fatal(err)
	}
}

func (ts *testServer) topTotal(job string) float64 {
	ts.t.Helper()
	code, _, body := ts.do("GET", "/v1/jobs/"+job+"/topk", "", nil)
	if code != http.StatusOK {
		ts.t.Fatalf("topk of %s: %d %v", job, code, body)
	}
	return body["total"].(float64)
}

func items(n int, item string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"key":"k%d","u":%q}`+"\n", i, item)
	}
	return b.String()
}

// Jobs created at run time survive a restart with their state; a job
// deleted and created again under its name never sees the old one's
// state; the config file wins over a recorded job of the same name.
func TestRunTimeJobsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	log := &syncBuffer{}
	const hh = `{"kind":"heavy_hitters","input":"s","partitions":1,"params":{"field":"u"}}`

	n1 := startNode(t, dir, nil, log)
	n1.putJob("hh", hh)
	n1.putJob("other", `{"kind":"distinct","input":"s","partitions":1,"params":{"field":"u"}}`)
	if code, body := n1.post("s", items(60, "a")+items(40, "b")); code != http.StatusAccepted && code != http.StatusOK {
		t.Fatalf("post: %d %v", code, body)
	}
	n1.waitProcessed("hh")
	n1.waitProcessed("other")
	n1.stop()

	n2 := startNode(t, dir, nil, log)
	if got := n2.topTotal("hh"); got != 100 {
		t.Fatalf("after restart hh counted %v events, want 100", got)
	}
	if st := n2.job("other"); st.Spec.Kind != "distinct" {
		t.Fatalf("other: %+v", st.Spec)
	}
	if code, _, body := n2.do("DELETE", "/v1/jobs/hh", "", nil); code != http.StatusOK {
		t.Fatalf("delete: %d %v", code, body)
	}
	n2.putJob("hh", `{"kind":"heavy_hitters","input":"s","partitions":1,"params":{"field":"u","counters":500}}`)
	if got := n2.topTotal("hh"); got != 0 {
		t.Fatalf("the new hh counted %v events of the deleted one", got)
	}
	n2.post("s", items(7, "c"))
	n2.waitProcessed("hh")
	n2.stop()

	// The file has hh too, with yet another spec: it wins, without the
	// recorded job's 7 events; the recorded "other" comes back.
	fileSpec := runtime.Spec{Name: "hh", Kind: "heavy_hitters", Input: "s", Partitions: 1, Params: map[string]any{"field": "u", "counters": 300}}
	n3 := startNode(t, dir, []runtime.Spec{fileSpec}, log)
	st := n3.job("hh")
	if st.Spec.Params["counters"] != 300 {
		t.Fatalf("hh runs %v, want the file's spec", st.Spec.Params)
	}
	if got := n3.topTotal("hh"); got != 0 {
		t.Fatalf("the file's hh counted %v events of the recorded one", got)
	}
	n3.job("other")
	var warning string
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, "the file wins") {
			warning = l
		}
	}
	if !strings.Contains(warning, "job=hh") || !strings.Contains(warning, `\"counters\":300`) || !strings.Contains(warning, `\"counters\":500`) {
		t.Fatalf("no warning naming both specs of hh; log:\n%s", log)
	}
	n3.stop()

	// Once the file no longer has it, hh is gone: its record went when the
	// file won.
	n4 := startNode(t, dir, nil, log)
	if _, err := n4.engine.Job("hh"); err == nil {
		t.Fatal("hh restored from a record the file overrode")
	}
	n4.job("other")
}

// A record that does not pass its checksum is rebuilt from the copy beside
// the job's data; with the copy damaged too, it is reported and skipped,
// and the engine starts with the others.
func TestDamagedJobRecordIsSkipped(t *testing.T) {
	dir := t.TempDir()
	log := &syncBuffer{}
	n1 := startNode(t, dir, nil, log)
	n1.putJob("a", `{"kind":"distinct","input":"s","partitions":1,"params":{"field":"u"}}`)
	n1.putJob("b", `{"kind":"distinct","input":"s","partitions":1,"params":{"field":"u"}}`)
	n1.stop()
	damage := func(path string) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)-2] ^= 1
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	damage(filepath.Join(dir, ".jobs", "a.job"))
	n2 := startNode(t, dir, nil, log)
	n2.job("b")
	n2.job("a")
	if !strings.Contains(log.String(), "damaged job record rebuilt") || !strings.Contains(log.String(), "a.job: checksum mismatch") {
		t.Fatalf("rebuild not reported; log:\n%s", log)
	}
	n2.stop()
	damage(filepath.Join(dir, ".jobs", "a.job"))
	damage(filepath.Join(dir, "a", ft.JobRecordCopy))
	n3 := startNode(t, dir, nil, log)
	n3.job("b")
	if _, err := n3.engine.Job("a"); err == nil {
		t.Fatal("a restored from a damaged record")
	}
	if !strings.Contains(log.String(), "damaged job record ignored") {
		t.Fatalf("damage not reported; log:\n%s", log)
	}
}

// The limits answer 507 with what the job needs and what is left, and a
// bad name 400 naming the field.
func TestJobLimitsOverHTTP(t *testing.T) {
	ts := newTestServer(t, func(c *runtime.Config, _ *Config) { c.MaxMemory, c.MaxJobs = 80<<20, 2 })
	ts.putJob("a", `{"kind":"logreg","input":"s","partitions":1,"queue_size":1024,"params":{"hash_bits":21,"label_pending_bytes":0}}`)
	if est := ts.job("a").MemoryEstimate; est < 64<<20 {
		t.Fatalf("memory_estimate_bytes %d", est)
	}
	code, _, body := ts.do("PUT", "/v1/jobs/b", "application/json", []byte(`{"kind":"logreg","input":"s","partitions":1,"params":{"hash_bits":21}}`))
	if code != http.StatusInsufficientStorage || body["field"] != "params.hash_bits" || body["budget_bytes"] != float64(80<<20) ||
		body["estimate_bytes"].(float64) < 64<<20 || body["in_use_bytes"].(float64) < 64<<20 {
		t.Fatalf("over budget: %d %v", code, body)
	}
	ts.putJob("c", `{"kind":"distinct","input":"s","partitions":1,"params":{"field":"u"}}`)
	code, _, body = ts.do("PUT", "/v1/jobs/d", "application/json", []byte(`{"kind":"distinct","input":"s","partitions":1,"params":{"field":"u"}}`))
	if code != http.StatusInsufficientStorage || !strings.Contains(body["error"].(string), "2") {
		t.Fatalf("past max jobs: %d %v", code, body)
	}
	code, _, body = ts.do("PUT", "/v1/jobs/e", "application/json", []byte(`{"kind":"distinct","input":"`+strings.Repeat("x", 65)+`","params":{"field":"u"}}`))
	if code != http.StatusBadRequest || body["field"] != "input" {
		t.Fatalf("long stream name: %d %v", code, body)
	}
	js, _ := json.Marshal(body)
	if !strings.Contains(string(js), "64 bytes") {
		t.Fatalf("error does not state the limit: %s", js)
	}
}
