package runtime

import (
	"testing"

	"github.com/valyala/fastjson"
)

// TestBatchAddAllocatesNothingPerFeature guards the ingest path against
// allocating per event or per feature: garbage there was a third of the
// server's time under HTTP ingest.
func TestBatchAddAllocatesNothingPerFeature(t *testing.T) {
	e := testEngine(t, Config{Partitions: 2})
	mustPut(t, e, Spec{Name: "lr", Kind: "logreg", Input: "mail", Partitions: 2})
	var p fastjson.Parser
	v, err := p.Parse(`{"key":"k1","ts":1700000000000,"label":1,"features":{"a":1,"b":2.5,"c":-3,"d":"x","e":true,"f":4,"g":5,"h":6}}`)
	if err != nil {
		t.Fatal(err)
	}
	const events = 200
	allocs := testing.AllocsPerRun(20, func() {
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
	})
	// A batch costs a few allocations of its own and the arena's growth;
	// one per event would be 200.
	if allocs > events/10 {
		t.Fatalf("%.0f allocations for a batch of %d events of 8 features", allocs, events)
	}
}
