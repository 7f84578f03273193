package runtime

import (
	"errors"
	"fmt"
	goruntime "runtime"
	"strings"
	"testing"
	"time"
)

// heapAlloc is the live heap after a full collection.
func heapAlloc() int64 {
	goruntime.GC()
	goruntime.GC()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// waitProcessed waits until the job processed n events and went idle.
func waitProcessed(t *testing.T, j *Job, n uint64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for j.processed() < n || j.depth() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("processed %d of %d events", j.processed(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// checkEstimate compares a job's state estimate with the heap it grew by.
func checkEstimate(t *testing.T, j *Job, grown int64) {
	t.Helper()
	est := j.mem.State
	ratio := float64(est) / float64(grown)
	t.Logf("%s: estimate %s, heap grew %s, ratio %.2f", j.spec.Name, fmtBytes(est), fmtBytes(grown), ratio)
	if ratio < 0.5 || ratio > 2 {
		t.Errorf("%s: state estimate %d bytes, heap grew by %d: off by more than 2x", j.spec.Name, est, grown)
	}
}

// The estimate of a logreg job is its model and learners, which it
// allocates when created.
func TestMemoryEstimateOfLogregMatchesHeap(t *testing.T) {
	e := testEngine(t, Config{})
	before := heapAlloc()
	j := mustPut(t, e, Spec{Name: "lr", Kind: "logreg", Input: "s", Partitions: 2, QueueSize: 1024, Params: map[string]any{"hash_bits": 21}})
	checkEstimate(t, j, heapAlloc()-before)
}

// A synopsis opens its windows as events come: the estimate is with
// every window kept, which the events below open in each partition.
func TestMemoryEstimateOfDistinctMatchesHeap(t *testing.T) {
	e := testEngine(t, Config{})
	lines := make([]string, 0, 4*2*1000)
	for w := range 4 {
		for i := range 2 * 1000 {
			lines = append(lines, fmt.Sprintf(`{"key":"k%d","ts":%d,"u":"user-%d"}`, i, w*1000+i%1000, i))
		}
	}
	before := heapAlloc()
	params := map[string]any{"field": "u", "precision": 16, "window": "1s", "keep": 3}
	j := mustPut(t, e, Spec{Name: "distinct", Kind: "distinct", Input: "s", Partitions: 2, QueueSize: len(lines), Params: params})
	if _, err := ingest(e, "s", lines...); err != nil {
		t.Fatal(err)
	}
	waitProcessed(t, j, uint64(len(lines)))
	checkEstimate(t, j, heapAlloc()-before)
	goruntime.KeepAlive(lines)
}

func TestMemoryBudgetRefusesJobs(t *testing.T) {
	e := testEngine(t, Config{MaxMemory: 100 << 20})
	spec := func(name string, hashBits int) Spec {
		return Spec{Name: name, Kind: "logreg", Input: "s", Partitions: 1, QueueSize: 1024, Params: map[string]any{"hash_bits": hashBits, "label_pending_bytes": 0}}
	}
	// 2^21 slots of 32 bytes: 64 MiB (no room for delayed labels), and a
	// second one does not fit.
	j := mustPut(t, e, spec("a", 21))
	if got := j.Status(false).MemoryEstimate; got < 64<<20 || got > 70<<20 {
		t.Fatalf("memory_estimate_bytes = %d", got)
	}
	_, err := e.PutJob(spec("b", 21))
	var be *BudgetError
	if !errors.As(err, &be) || !errors.Is(err, ErrMemoryBudget) {
		t.Fatalf("err = %v, want a BudgetError", err)
	}
	if be.Budget != 100<<20 || be.InUse != j.mem.Total() || be.Estimate.Field != "params.hash_bits" {
		t.Fatalf("%+v", be)
	}
	for _, want := range []string{`"b"`, fmtBytes(be.Estimate.Total()), "100.0 MiB", fmtBytes(be.InUse), "params.hash_bits"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// A refused job allocates nothing: 2^26 slots would be 2 GiB.
	before := heapAlloc()
	if _, err := e.PutJob(spec("huge", 26)); !errors.Is(err, ErrMemoryBudget) {
		t.Fatalf("err = %v", err)
	}
	if grown := heapAlloc() - before; grown > 1<<20 {
		t.Fatalf("refusing the job grew the heap by %d bytes", grown)
	}
	// Deleting the first frees its share.
	if err := e.DeleteJob("a"); err != nil {
		t.Fatal(err)
	}
	mustPut(t, e, spec("b", 21))
	if inUse, _ := e.MemoryInUse(); inUse != j.mem.Total() {
		t.Fatalf("in use %d after delete and put, want %d", inUse, j.mem.Total())
	}
}

func TestMaxJobs(t *testing.T) {
	e := testEngine(t, Config{MaxJobs: 2})
	for i := range 3 {
		_, err := e.PutJob(Spec{Name: fmt.Sprintf("j%d", i), Kind: "distinct", Input: "s", Partitions: 1, Params: map[string]any{"field": "u"}})
		if i < 2 && err != nil || i == 2 && !errors.Is(err, ErrTooManyJobs) {
			t.Fatalf("job %d: err = %v", i, err)
		}
	}
}

// Every parameter that sizes memory has a range; within it the budget
// decides.
func TestParamRanges(t *testing.T) {
	e := testEngine(t, Config{MaxMemory: -1})
	for _, c := range []struct {
		spec  Spec
		field string
	}{
		{Spec{Kind: "logreg", Params: map[string]any{"hash_bits": 27}}, "params.hash_bits"},
		{Spec{Kind: "logreg", Params: map[string]any{"window": 2_000_000}}, "params.window"},
		{Spec{Kind: "logreg", Partitions: 257}, "partitions"},
		{Spec{Kind: "logreg", QueueSize: 1<<20 + 1}, "queue_size"},
		{Spec{Kind: "logreg", Sync: SyncSpec{Consistency: "ssp", Staleness: 1<<20 + 1}}, "sync.staleness"},
		{Spec{Kind: "heavy_hitters", Params: map[string]any{"field": "u", "counters": 1<<20 + 1}}, "params.counters"},
		{Spec{Kind: "heavy_hitters", Params: map[string]any{"field": "u", "k": 10_001, "counters": 20_000}}, "params.k"},
		{Spec{Kind: "heavy_hitters", Params: map[string]any{"field": "u", "keep": 101}}, "params.keep"},
		{Spec{Kind: "distinct", Params: map[string]any{"field": "u", "precision": 19}}, "params.precision"},
		{Spec{Kind: "distinct", Params: map[string]any{"field": strings.Repeat("u", 257)}}, "params.field"},
		{Spec{Kind: "distinct", Params: map[string]any{"field": "u"}, FT: FTSpec{CompactEvery: 1025}}, "ft.compact_every"},
		{Spec{Kind: "distinct", Params: map[string]any{"field": "u"}, FT: FTSpec{MaxPending: 1<<30 + 1}}, "ft.max_pending"},
		{Spec{Kind: "join", Left: "l", Right: "r", Params: map[string]any{"on": "k", "within": "1s", "keep": 101}}, "params.keep"},
		{Spec{Kind: "join", Left: "l", Right: "r", Params: map[string]any{"on": "k", "within": "1s", "max_state": float64(1<<40 + 1)}}, "params.max_state"},
	} {
		s := c.spec
		s.Name = "x"
		if s.Kind != "join" {
			s.Input = "s"
		}
		_, err := e.PutJob(s)
		var se *SpecError
		if !errors.As(err, &se) || se.Field != c.field {
			t.Errorf("%+v: err = %v, want a SpecError of %s", c.spec, err, c.field)
		}
	}
}

func TestNames(t *testing.T) {
	e := testEngine(t, Config{})
	for _, c := range []struct {
		spec  Spec
		field string
	}{
		{Spec{Name: strings.Repeat("a", 65), Input: "s"}, "name"},
		{Spec{Name: ".hidden", Input: "s"}, "name"},
		{Spec{Name: "-x", Input: "s"}, "name"},
		{Spec{Name: "a b", Input: "s"}, "name"},
		{Spec{Name: "caf\xe9", Input: "s"}, "name"},
		{Spec{Name: "ok", Input: "s/t"}, "input"},
		{Spec{Name: "ok", Input: "ü"}, "input"},
		{Spec{Name: "ok", Kind: "join", Left: "..", Right: "r"}, "left"},
		{Spec{Name: "ok", Kind: "join", Left: "l", Right: strings.Repeat("r", 65)}, "right"},
	} {
		s := c.spec
		if s.Kind == "" {
			s.Kind = "distinct"
			s.Params = map[string]any{"field": "u"}
		} else {
			s.Params = map[string]any{"on": "k", "within": "1s"}
		}
		_, err := e.PutJob(s)
		var se *SpecError
		if !errors.As(err, &se) || se.Field != c.field {
			t.Errorf("%+v: err = %v, want a SpecError of %s", c.spec, err, c.field)
		}
	}
	mustPut(t, e, Spec{Name: strings.Repeat("a", 64), Kind: "distinct", Input: "A1_b-c.d", Params: map[string]any{"field": "u"}})
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"8GiB": 8 << 30, "500MB": 500e6, "1048576": 1 << 20, " 2 KiB ": 2048, "-1": -1} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "8 parsecs", "NaN", "1e30"} {
		if _, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) accepted", in)
		}
	}
}
