package runtime

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/valyala/fastjson"
)

// Two attempts of one request with the same idempotency key split its
// keyless events over the partitions alike, whatever came between them
// (a cluster drops a retried attempt's messages by ids that assume it);
// without a key the job's round robin goes on.
func TestKeyedRequestsSplitAlike(t *testing.T) {
	e := testEngine(t, Config{})
	mustPut(t, e, Spec{Name: "j", Kind: "logreg", Input: "s", Partitions: 4, Params: map[string]any{"hash_bits": 8}})
	split := func(key string) [][]string {
		b, err := e.NewBatch("s")
		if err != nil {
			t.Fatal(err)
		}
		b.SetKey(key)
		var p fastjson.Parser
		for i := range 10 {
			v, _ := p.Parse(fmt.Sprintf(`{"features":{"x":%d}}`, i+1))
			if err := b.Add(v, i+1); err != nil {
				t.Fatal(err)
			}
		}
		out := make([][]string, 4)
		for i, recs := range b.jobs[0].parts {
			for _, r := range recs {
				out[i] = append(out[i], fmt.Sprint(r.Features))
			}
		}
		b.releaseBuffers()
		return out
	}
	a := split("k1")
	split("")   // the round robin moves on meanwhile
	split("k2") // and another request
	if b := split("k1"); !reflect.DeepEqual(a, b) {
		t.Fatalf("the same key split differently:\n%v\n%v", a, b)
	}
	if x, y := split(""), split(""); reflect.DeepEqual(x, y) {
		t.Fatalf("keyless requests did not move the round robin on: %v", x)
	}
}

// commitEvents commits a request of n events event(0..n-1) to stream s
// of e, with idempotency key key ("" for none).
func commitEvents(t *testing.T, e *Engine, key string, n int, event func(i int) string) {
	t.Helper()
	b, err := e.NewBatch("s")
	if err != nil {
		t.Fatal(err)
	}
	b.SetKey(key)
	var p fastjson.Parser
	for i := range n {
		v, err := p.Parse(event(i))
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Add(v, i+1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// publishedSizes is a Cluster that records how many events of each
// request went to each partition.
type publishedSizes struct{ publishedKeys }

// sizes are the requests' events per partition.
func (c *publishedSizes) sizes() [][]int {
	var out [][]int
	for _, keys := range c.reqs {
		sizes := make([]int, len(keys))
		for p, k := range keys {
			sizes[p] = len(k)
		}
		out = append(out, sizes)
	}
	return out
}

// In cluster mode a request's keyless events go to one partition in runs
// of stickyRun (one log message rather than one per partition), keyed
// events by their key, and successive requests start on other partitions.
func TestClusterModeSticksKeylessEventsToAPartition(t *testing.T) {
	pub := &publishedSizes{}
	e := testEngine(t, Config{Cluster: pub})
	mustPut(t, e, Spec{Name: "j", Kind: "heavy_hitters", Input: "s", Partitions: 4, Params: map[string]any{"field": "item", "key_field": "user"}})
	post := func(key string, events int, keyed bool) {
		commitEvents(t, e, key, events, func(i int) string {
			if keyed {
				return fmt.Sprintf(`{"item":"i%d","user":"u%d"}`, i, i)
			}
			return fmt.Sprintf(`{"item":"i%d"}`, i)
		})
	}
	postFast := func(events int) {
		b, err := e.NewBatch("s")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := b.StringField(); !ok {
			t.Fatal("no string fast path")
		}
		for i := range events {
			b.AddString(fmt.Appendf(nil, "i%d", i))
		}
		if _, err := b.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	nonEmpty := func(sizes []int) (n int) {
		for _, s := range sizes {
			if s > 0 {
				n++
			}
		}
		return n
	}
	post("", 1000, false)
	post("", 1000, false)
	post("k", 2*stickyRun+10, false)
	post("k", 2*stickyRun+10, false)
	post("", 1000, true)
	postFast(1000)
	r := pub.sizes()
	if nonEmpty(r[0]) != 1 || nonEmpty(r[1]) != 1 || reflect.DeepEqual(r[0], r[1]) {
		t.Errorf("two keyless requests of 1,000 events: %v and %v, want each on one partition, not the same", r[0], r[1])
	}
	if !slices.Contains(r[2], stickyRun) || !slices.Contains(r[2], 10) || nonEmpty(r[2]) != 3 {
		t.Errorf("a keyless request of %d events went %v, want runs of %d", 2*stickyRun+10, r[2], stickyRun)
	}
	if !reflect.DeepEqual(r[2], r[3]) {
		t.Errorf("two attempts of a keyed request split differently: %v and %v", r[2], r[3])
	}
	if nonEmpty(r[4]) != 4 {
		t.Errorf("1,000 events of distinct keys went to %v, want every partition", r[4])
	}
	if nonEmpty(r[5]) != 1 {
		t.Errorf("1,000 keyless events on the string fast path went %v, want one partition", r[5])
	}
}

// A cluster checks a spec (CheckSpec) before storing it for every node:
// what cluster mode cannot do yet is refused there, not by each node
// after the PUT was answered.
func TestCheckSpecRefusesWhatClusterModeCannotDo(t *testing.T) {
	e := testEngine(t, Config{Cluster: &publishedSizes{}})
	for _, tc := range []struct {
		spec  Spec
		field string
	}{
		{Spec{Name: "a", Kind: "heavy_hitters", Input: "s", Params: map[string]any{"field": "f"}, Autoscale: &AutoscaleSpec{Max: 4}}, "autoscale"},
	} {
		_, err := e.CheckSpec(tc.spec)
		var se *SpecError
		if !errors.As(err, &se) || se.Field != tc.field {
			t.Errorf("%s: got %v, want an error on %s", tc.spec.Name, err, tc.field)
		}
	}
}

// Route splits records as ingest does: an event with a key goes to its
// key's partition, and the keyless ones in turn from partition 0, the
// same way every time (a cluster forwards records under ids that must
// repeat).
func TestRouteSplitsByKeyAndAlike(t *testing.T) {
	e := testEngine(t, Config{})
	mustPut(t, e, Spec{Name: "j", Kind: "heavy_hitters", Input: "s", Partitions: 3, Params: map[string]any{"field": "item", "key_field": "user"}})
	j, err := e.Job("j")
	if err != nil {
		t.Fatal(err)
	}
	var recs []Record
	for i := range 12 {
		r := Record{Values: []string{fmt.Sprint("item-", i)}}
		if i%2 == 0 {
			r.Key = fmt.Sprint("user-", i)
		}
		recs = append(recs, r)
	}
	parts := j.Route(recs)
	keyless := 0
	for p, rs := range parts {
		for _, r := range rs {
			switch {
			case r.Key != "" && p != j.partitionFor(r.Key):
				t.Fatalf("key %q routed to %d, ingest routes it to %d", r.Key, p, j.partitionFor(r.Key))
			case r.Key == "":
				keyless++
			}
		}
	}
	if keyless != 6 || len(parts[0])+len(parts[1])+len(parts[2]) != 12 {
		t.Fatalf("routed %v", parts)
	}
	if again := j.Route(recs); !reflect.DeepEqual(parts, again) {
		t.Fatalf("the same records routed differently:\n%v\n%v", parts, again)
	}
}

// publishedKeys is a Cluster that records the keys of each request's
// records, by partition.
type publishedKeys struct{ reqs [][][]string }

func (*publishedKeys) Attach(*Job) error { return nil }
func (*publishedKeys) Detach(*Job)       {}
func (c *publishedKeys) Publish(_ context.Context, _ *Job, parts [][]Record) error {
	keys := make([][]string, len(parts))
	for p, recs := range parts {
		for _, r := range recs {
			keys[p] = append(keys[p], r.Key)
		}
	}
	c.reqs = append(c.reqs, keys)
	return nil
}

// In cluster mode a job with spread spreads the keys hot in a request
// (at least spreadMin events and spread.above of its keyed events) over
// every partition, the other keys by key; a retry of the request with its
// idempotency key splits exactly as the first attempt, whatever came
// between; a request of few events spreads nothing.
func TestClusterSpreadsARequestsHotKeysAlike(t *testing.T) {
	pub := &publishedKeys{}
	e := testEngine(t, Config{Cluster: pub})
	mustPut(t, e, Spec{Name: "j", Kind: "heavy_hitters", Input: "s", Partitions: 4, Spread: &SpreadSpec{Above: 0.1},
		Params: map[string]any{"field": "item", "key_field": "user"}})
	j, _ := e.Job("j")
	post := func(key string, events int) [][]string {
		commitEvents(t, e, key, events, func(i int) string {
			user := fmt.Sprint("u", i) // a cool key each
			if i%10 < 3 {
				user = "hot" // 30% of the request
			}
			return fmt.Sprintf(`{"item":"i%d","user":%q}`, i, user)
		})
		return pub.reqs[len(pub.reqs)-1]
	}
	first := post("req-1", 1000)
	for p, keys := range first {
		hot := 0
		for _, k := range keys {
			switch {
			case k == "hot":
				hot++
			case p != j.partitionFor(k):
				t.Fatalf("cool key %q went to partition %d, not its own %d", k, p, j.partitionFor(k))
			}
		}
		if hot != 75 {
			t.Errorf("partition %d got %d of the hot key's 300 events, want 75 (round robin)", p, hot)
		}
	}
	post("", 1000)    // the job's round robin moves on
	post("other", 50) // and its spread status
	if again := post("req-1", 1000); !reflect.DeepEqual(first, again) {
		t.Fatal("two attempts of a request with a hot key split differently")
	}
	small := post("small", 40) // 12 events of the hot key: under spreadMin
	for p, keys := range small {
		for _, k := range keys {
			if p != j.partitionFor(k) {
				t.Fatalf("a request of 40 events spread key %q", k)
			}
		}
	}
	st := j.Status(false)
	if sp := st.Elastic.Skew.Spread; sp == nil || !slices.Equal(sp.Keys, []string{"hot"}) || sp.Events == 0 {
		t.Errorf("spread status %+v, want key hot and the events moved", sp)
	}
}
