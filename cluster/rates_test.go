package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/mlstream/mlstream/cluster/lease"
	"github.com/mlstream/mlstream/kinds/kindtest"
	"github.com/mlstream/mlstream/runtime"
	"github.com/valyala/fastjson"
)

// Each node publishes its rates every second; another node shows them
// beside the node in its status, and forgets a node that fell silent. Its
// ingest rate counts events, not events times the jobs reading their
// stream (three jobs read the stream the 600 events go to).
func TestRatesReachOtherNodes(t *testing.T) {
	url := testNATS(t)
	ja := testJob("j", 2)
	ja.parts[0].ownFor(3)
	a := outputsNode(t, url, "a", ja)
	b := outputsNode(t, url, "b")
	waitFor(t, "b to receive a's rates", func() bool { _, ok := b.out.rates.of(time.Now())["a"]; return ok })
	for _, name := range []string{"x", "y", "z"} {
		if _, err := a.engine.PutJob(runtime.Spec{Name: name, Kind: kindtest.Throttled, Input: "s", Params: map[string]any{"rate": 1e6}}); err != nil {
			t.Fatal(err)
		}
	}
	postEvents(t, a.engine, "s", 600)
	var got NodeRates
	waitFor(t, "a's ingest rate at b", func() bool {
		got = b.out.rates.of(time.Now())["a"]
		return got.Ingested > 0
	})
	// 600 events over the last sample's interval, about a second.
	if got.Ingested < 100 || got.Ingested > 1200 || got.Owned != 1 {
		t.Fatalf("a's rates at b %+v, want about 600 events/s ingested and 1 partition owned", got)
	}
	st := b.nodeStatuses([]lease.NodeInfo{{Name: "a"}, {Name: "b"}, {Name: "silent"}})
	if st[0].Rates == nil || st[1].Rates == nil || st[2].Rates != nil {
		t.Fatalf("node statuses %+v: want rates for a and b only", st)
	}
	b.out.rates.record("old", NodeRates{Owned: 2}, time.Now().Add(-ratesExpiry))
	if _, ok := b.out.rates.of(time.Now())["old"]; ok {
		t.Fatal("expired rates shown")
	}
}

// A partition counts towards the processed rate only when owned under
// the same token at both samples: a take-over restarts its sequence.
func TestRatesCountOwnershipsOnce(t *testing.T) {
	st := &jobState{}
	t0 := time.Now()
	prev := rateSample{at: t0, done: map[ownedPart]uint64{{st, 0, 5}: 100, {st, 1, 5}: 1000}}
	cur := rateSample{at: t0.Add(2 * time.Second), owned: 2, forwarded: 40,
		done: map[ownedPart]uint64{{st, 0, 5}: 300, {st, 1, 9}: 10, {st, 2, 9}: 50}}
	r := cur.ratesSince(prev)
	if r.Processed != 100 || r.Forwarded != 20 || r.Owned != 2 {
		t.Fatalf("rates %+v, want 100 processed/s (partition 0 only), 20 forwarded/s, 2 owned", r)
	}
}

// postEvents accepts n events into stream in one request.
func postEvents(t *testing.T, e *runtime.Engine, stream string, n int) {
	t.Helper()
	b, err := e.NewBatch(stream)
	if err != nil {
		t.Fatal(err)
	}
	v := fastjson.MustParse(`{"key":"k"}`)
	for i := range n {
		if err := b.Add(v, i+1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}
