package runtime

import (
	"fmt"
	"reflect"
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
