package runtime

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/valyala/fastjson"
)

// TestBatchAddAllocatesNothingPerFeature guards the ingest path against
// allocating per event or per feature (numeric keys and values included):
// garbage there was a third of the server's time under HTTP ingest.
func TestBatchAddAllocatesNothingPerFeature(t *testing.T) {
	e := testEngine(t, Config{Partitions: 2})
	mustPut(t, e, Spec{Name: "lr", Kind: "logreg", Input: "mail", Partitions: 2})
	mustPut(t, e, Spec{Name: "hh", Kind: "heavy_hitters", Input: "mail", Partitions: 2, Params: map[string]any{"field": "item"}})
	var p fastjson.Parser
	v, err := p.Parse(`{"key":12345,"item":678,"ts":1700000000000,"label":1,"features":{"a":1,"b":2.5,"c":-3,"d":"x","e":true,"f":4,"g":5,"h":6}}`)
	if err != nil {
		t.Fatal(err)
	}
	// The counts are the process's: the engine's own goroutines allocate
	// meanwhile, and under the race detector pools drop buffers on purpose.
	// Both only add, so the least of a few trials is the batch's own.
	batchAllocs := func(events int) float64 {
		least := math.Inf(1)
		for range 5 {
			least = min(least, testing.AllocsPerRun(10, func() {
				b, err := e.NewBatch("mail")
				if err != nil {
					t.Fatal(err)
				}
				b.Expect(events)
				for i := range events {
					if err := b.Add(v, i+1); err != nil {
						t.Fatal(err)
					}
				}
			}))
		}
		return least
	}
	// A batch costs a few dozen allocations of its own and a few more as
	// its arrays grow; what must not grow is the count per event: one
	// allocation per event would add 3,000 here, one per feature 24,000.
	const small, large = 1000, 4000
	perBatch, bigger := batchAllocs(small), batchAllocs(large)
	if grown := bigger - perBatch; grown > (large-small)/50 {
		t.Fatalf("%.0f allocations for %d events and %.0f for %d (8 features, two jobs): %.0f more for %d more events",
			perBatch, small, bigger, large, grown, large-small)
	}
}

// TestQueuedRecordsKeepTheirArrays checks that the arrays a request's
// records are extracted into are reused only once the records are
// processed: requests queued behind a paused job keep their own events.
func TestQueuedRecordsKeepTheirArrays(t *testing.T) {
	e := testEngine(t, Config{Partitions: 2})
	j := mustPut(t, e, Spec{Name: "h", Kind: "heavy_hitters", Input: "s", Partitions: 2,
		Params: map[string]any{"field": "item", "k": 10, "counters": 100}})
	const perRequest = 300
	request := func(item string) {
		lines := make([]string, perRequest)
		for i := range lines {
			lines[i] = fmt.Sprintf(`{"key":"k%d","item":%q}`, i, item)
		}
		if _, err := ingest(e, "s", lines...); err != nil {
			t.Fatal(err)
		}
	}
	j.Pause()
	request("a")
	request("b")
	j.Resume()
	waitProcessed(t, j, 2*perRequest)
	request("c") // on the arrays of a or b, now processed
	// The answer is published after processing: wait until it has it all.
	var top TopK
	for deadline := time.Now().Add(10 * time.Second); top.Total < 3*perRequest; time.Sleep(time.Millisecond) {
		var err error
		if top, err = j.TopK(WindowAll, 10); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("total %d of %d events", top.Total, 3*perRequest)
		}
	}
	got := map[string]uint64{}
	for _, it := range top.Items {
		got[it.Key] = it.Lower
	}
	for _, item := range []string{"a", "b", "c"} {
		if got[item] != perRequest {
			t.Fatalf("counts %v, want %d of each of a, b and c", got, perRequest)
		}
	}
}
