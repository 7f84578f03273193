package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/mlstream/mlstream/learners"
	"github.com/valyala/fastjson"
)

func testEngine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	e := NewEngine(cfg)
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

func mustPut(t *testing.T, e *Engine, s Spec) *Job {
	t.Helper()
	if _, err := e.PutJob(s); err != nil {
		t.Fatal(err)
	}
	j, err := e.Job(s.Name)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// ingest adds NDJSON lines to a batch and commits it.
func ingest(e *Engine, stream string, lines ...string) (int, error) {
	b, err := e.NewBatch(stream)
	if err != nil {
		return 0, err
	}
	var p fastjson.Parser
	for i, l := range lines {
		v, err := p.Parse(l)
		if err != nil {
			return 0, err
		}
		if err := b.Add(v, i+1); err != nil {
			return 0, err
		}
	}
	return b.Commit(context.Background())
}

func TestParseConfig(t *testing.T) {
	yml := `
jobs:
  - name: spam
    kind: logreg
    input: mail
    partitions: 2
    params: {hash_bits: 20, optimizer: ftrl, alpha: 0.1}
  - name: other
    kind: logreg
    input: mail
`
	specs, err := ParseConfig([]byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 2 || specs[0].Name != "spam" || specs[0].Partitions != 2 || specs[1].Input != "mail" {
		t.Fatalf("%+v", specs)
	}
	e := testEngine(t, Config{})
	for _, s := range specs {
		if _, err := e.PutJob(s); err != nil {
			t.Fatal(err)
		}
	}
	bad := []struct{ doc, field string }{
		{"jobs:\n  - name: a\n    kind: logreg\n    input: x\n    partitions: many\n", "jobs[0].partitions"},
		{"jobs:\n  - name: a\n    kind: logreg\n    input: x\n  - name: b\n    knd: logreg\n", "jobs[1].knd"},
		{"jobz: []\n", "jobz"},
	}
	for _, c := range bad {
		_, err := ParseConfig([]byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%q: error %v does not name %s", c.doc, err, c.field)
		}
	}
	// Param errors are found when the job is put, and name the param.
	_, err = e.PutJob(Spec{Name: "x", Kind: "logreg", Input: "s", Params: map[string]any{"window": 0}})
	var se *SpecError
	if !errors.As(err, &se) || se.Field != "params.window" {
		t.Fatalf("got %v", err)
	}
}

// A request is queued whole for every job reading the stream, or not at
// all: with one job's queue full, the other job gets nothing either.
func TestCommitIsAllOrNothingAcrossJobs(t *testing.T) {
	e := testEngine(t, Config{Partitions: 1, IngestWait: 10 * time.Millisecond})
	a := mustPut(t, e, Spec{Name: "a", Kind: "logreg", Input: "s", QueueSize: 4, Params: map[string]any{"hash_bits": 8}})
	b := mustPut(t, e, Spec{Name: "b", Kind: "logreg", Input: "s", QueueSize: 100, Params: map[string]any{"hash_bits": 8}})
	a.Pause()
	ev := `{"label":1,"features":["x"]}`
	if n, err := ingest(e, "s", ev, ev, ev); err != nil || n != 3 {
		t.Fatal(n, err)
	}
	if _, err := ingest(e, "s", ev, ev); !errors.Is(err, ErrBusy) {
		t.Fatalf("got %v, want ErrBusy", err)
	}
	if _, err := ingest(e, "s", ev, ev, ev, ev, ev); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	if got := b.accepted.Load(); got != 3 {
		t.Fatalf("job b accepted %d, want 3", got)
	}
	a.Resume()
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, j := range []*Job{a, b} {
		if p := j.processed(); p != 3 {
			t.Errorf("job %s processed %d, want 3", j.Name(), p)
		}
	}
	if _, err := ingest(e, "s", ev); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

// Close processes everything that was accepted before it returns.
func TestCloseDrainsQueues(t *testing.T) {
	e := testEngine(t, Config{Partitions: 3})
	j := mustPut(t, e, Spec{Name: "a", Kind: "logreg", Input: "s", Params: map[string]any{"hash_bits": 8}})
	j.Pause()
	total := 0
	for i := range 50 {
		lines := make([]string, 20)
		for k := range lines {
			lines[k] = `{"key":"k` + string(rune('a'+k)) + `","label":` + []string{"0", "1"}[(i+k)%2] + `,"features":{"v":` + string(rune('1'+k%9)) + `}}`
		}
		n, err := ingest(e, "s", lines...)
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	go j.Resume()
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := j.Status(false)
	if st.Processed != uint64(total) || sec(st).Metrics.All.Count != int64(total) || st.QueueDepth != 0 {
		t.Fatalf("processed %d, learned %d, depth %d; accepted %d", st.Processed, sec(st).Metrics.All.Count, st.QueueDepth, total)
	}
	// Keys route to a fixed partition; sequence numbers are per partition.
	var sum uint64
	for _, p := range st.Partitions {
		sum += p.LastSeq
	}
	if sum != uint64(total) {
		t.Fatalf("sequence numbers: %v", st.Partitions)
	}
}

func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	cases := []string{"", "plain", "quote\"back\\slash", "\x00\x1f\n\t\r", "héllo ✓", "\xff\xfe bad utf8", "</script>"}
	for range 500 {
		b := make([]byte, r.IntN(20))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		got := AppendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%q -> %s: %v", s, got, err)
		}
		want, _ := json.Marshal(s)
		var wantBack string
		_ = json.Unmarshal(want, &wantBack)
		if back != wantBack {
			t.Fatalf("%q: decoded %q, encoding/json gives %q", s, back, wantBack)
		}
	}
}

func TestLatencyQuantiles(t *testing.T) {
	var h latencyHist
	h.observe(100*time.Microsecond, 98)
	h.observe(50*time.Millisecond, 2)
	s := h.snap()
	if s.total() != 100 {
		t.Fatal(s.total())
	}
	p50, p99 := s.quantile(0.5), s.quantile(0.99)
	if p50 < 0.1/1.5 || p50 > 0.15 {
		t.Errorf("p50 = %v ms, want about 0.1", p50)
	}
	if p99 < 50/1.5 || p99 > 75 {
		t.Errorf("p99 = %v ms, want about 50", p99)
	}
	// Quantiles in one bucket are distinct estimates, not its bound.
	var one latencyHist
	for i := 1; i <= 100; i++ {
		one.observe(time.Duration(40+i/10)*time.Millisecond, 1)
	}
	os := one.snap()
	if q50, q95, q99 := os.quantile(0.5), os.quantile(0.95), os.quantile(0.99); !(q50 < q95 && q95 < q99) || q50 < 30 || q99 > 60 {
		t.Errorf("p50 %v, p95 %v, p99 %v ms of latencies 40-50 ms: want increasing estimates", q50, q95, q99)
	}
	var empty latSnap
	if empty.quantile(0.5) != 0 {
		t.Error("empty quantile")
	}
}

func TestHubDropsForSlowSubscriber(t *testing.T) {
	h := NewHub()
	if h.Wants("j", TypePrediction) {
		t.Fatal("wants with no subscriber")
	}
	s := h.Subscribe([]string{"j"}, []string{TypePrediction}, 2)
	all := h.Subscribe(nil, []string{TypePrediction}, 10)
	if !h.Wants("j", TypePrediction) || h.Wants("j", TypeStats) || !h.Wants("other", TypePrediction) {
		t.Fatal("wants table")
	}
	for range 5 {
		h.Publish("j", TypePrediction, []byte("m"))
	}
	h.Publish("other", TypePrediction, []byte("o"))
	if len(s.C) != 2 || s.Dropped() != 3 || len(all.C) != 6 || all.Dropped() != 0 || h.Dropped() != 3 {
		t.Fatalf("s: %d queued %d dropped; all: %d queued", len(s.C), s.Dropped(), len(all.C))
	}
	h.Unsubscribe(s)
	h.Unsubscribe(all)
	if h.Wants("j", TypePrediction) || h.Subscribers() != 0 {
		t.Fatal("after unsubscribe")
	}
}

func TestRecordRoundTrip(t *testing.T) {
	recs := []Record{
		{TS: 1764412800000, Key: "user-1", Label: 1, Features: []learners.Feature{{Hash: 1, Value: 2.5}, {Hash: 1 << 63, Value: -1}}},
		{TS: -5, Label: -1},
		{Key: "ключ", Label: 0, Features: []learners.Feature{{Hash: 7, Value: 1e300}}},
		{TS: 9, Key: "ad-7", Label: -1, Side: 1, Value: -2.25},
	}
	var a arena
	for _, r := range recs {
		data := appendRecord(nil, &r)
		var got Record
		if err := decodeRecord(data, &got, &a); err != nil {
			t.Fatal(err)
		}
		if got.TS != r.TS || got.Key != r.Key || got.Label != r.Label || len(got.Features) != len(r.Features) || got.Side != r.Side || got.Value != r.Value {
			t.Fatalf("%+v -> %+v", r, got)
		}
		for i := range r.Features {
			if got.Features[i] != r.Features[i] {
				t.Fatalf("feature %d: %+v", i, got.Features[i])
			}
		}
		for cut := range data {
			if err := decodeRecord(data[:cut], &got, &a); err == nil {
				t.Fatalf("truncated at %d decoded", cut)
			}
		}
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(appendRecord(nil, &Record{TS: 1, Key: "k", Label: 1, Features: []learners.Feature{{Hash: 3, Value: 1}}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Record
		var a arena
		if decodeRecord(data, &r, &a) == nil {
			again := appendRecord(nil, &r)
			var r2 Record
			if err := decodeRecord(again, &r2, &a); err != nil || r2.Key != r.Key || len(r2.Features) != len(r.Features) {
				t.Fatalf("re-encoding failed: %v", err)
			}
		}
	})
}
