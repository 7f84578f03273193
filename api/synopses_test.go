package api

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// zipfBody returns n events {"user": ..., "item": ...} with items drawn
// Zipf(1.1) from 5,000, users uniform from 3,000, and the exact counts.
func zipfBody(seed uint64, n int) (string, map[string]int, map[string]bool) {
	r := rand.New(rand.NewPCG(seed, 1))
	z := rand.NewZipf(r, 1.1, 1, 4999)
	counts, users := map[string]int{}, map[string]bool{}
	var b strings.Builder
	for range n {
		item, user := fmt.Sprintf("i%d", z.Uint64()), fmt.Sprintf("u%d", r.IntN(3000))
		counts[item]++
		users[user] = true
		fmt.Fprintf(&b, "{\"user\":%q,\"item\":%q}\n", user, item)
	}
	return b.String(), counts, users
}

func TestHeavyHittersAndDistinctOverHTTP(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("top", `{"kind":"heavy_hitters","input":"clicks","partitions":2,"params":{"field":"item","k":10,"counters":100}}`)
	ts.putJob("users", `{"kind":"distinct","input":"clicks","partitions":2,"params":{"field":"user","precision":12}}`)
	ws := ts.dialWS("jobs=top&types=topk")
	body, counts, users := zipfBody(7, 30000)
	if code, out := ts.post("clicks", body); code != 202 {
		t.Fatalf("post: %d %v", code, out)
	}
	ts.waitProcessed("top")
	ts.waitProcessed("users")
	var top map[string]any
	waitFor(t, "the top k to cover the stream", 10*time.Second, func() bool {
		_, _, top = ts.do("GET", "/v1/jobs/top/topk?k=10", "", nil)
		return top["total"] == 30000.0
	})
	items := top["items"].([]any)
	if len(items) != 10 {
		t.Fatalf("items: %v", top)
	}
	for _, x := range items {
		it := x.(map[string]any)
		truth := float64(counts[it["key"].(string)])
		if it["lower"].(float64) > truth || it["upper"].(float64) < truth {
			t.Errorf("%v: true count %v outside [%v, %v]", it["key"], truth, it["lower"], it["upper"])
		}
	}
	// The five most frequent items are all reported.
	for rank := 1; rank <= 5; rank++ {
		key := fmt.Sprintf("i%d", rank-1)
		found := false
		for _, x := range items {
			found = found || x.(map[string]any)["key"] == key
		}
		if !found {
			t.Errorf("item %s (count %d) missing from the top 10", key, counts[key])
		}
	}
	if mu := top["max_untracked"].(float64); mu < 0 {
		t.Fatal(mu)
	}
	_, _, d := ts.do("GET", "/v1/jobs/users/distinct", "", nil)
	est, se := d["estimate"].(float64), d["std_error"].(float64)
	if math.Abs(est-float64(len(users))) > 3*se*float64(len(users)) {
		t.Fatalf("distinct %v, true %d, std error %v", est, len(users), se)
	}
	if d["lower"].(float64) > float64(len(users)) || d["upper"].(float64) < float64(len(users)) {
		t.Fatalf("bounds [%v, %v] miss %d", d["lower"], d["upper"], len(users))
	}
	if m := readMessage(t, ws, 5*time.Second); m["type"] != "topk" || m["job"] != "top" {
		t.Fatalf("websocket: %v", m)
	}
	for _, c := range []struct {
		path  string
		field string
	}{
		{"/v1/jobs/top/topk?window=soon", "window"},
		{"/v1/jobs/top/topk?k=0", "k"},
		{"/v1/jobs/users/topk", ""},
		{"/v1/jobs/top/distinct", ""},
	} {
		code, _, out := ts.do("GET", c.path, "", nil)
		if code != 400 || out["field"] != nilIfEmpty(c.field) {
			t.Errorf("%s: %d %v", c.path, code, out)
		}
	}
	// A bad event names the synopsis field.
	code, out := ts.post("clicks", `{"user":"u1","item":{"a":[1]}}`+"\n"+`{"user":"u1"}`)
	if code != 400 {
		t.Fatalf("bad event: %d %v", code, out)
	}
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func TestSynopsisSpecErrors(t *testing.T) {
	ts := newTestServer(t)
	for _, c := range []struct{ spec, field string }{
		{`{"kind":"heavy_hitters","input":"x"}`, "params.field"},
		{`{"kind":"heavy_hitters","input":"x","params":{"field":"f","k":50,"counters":10}}`, "params.counters"},
		{`{"kind":"heavy_hitters","input":"x","params":{"field":"f","window":"soon"}}`, "params.window"},
		{`{"kind":"distinct","input":"x","params":{"field":"f","precision":30}}`, "params.precision"},
		{`{"kind":"distinct","input":"x","params":{"field":"f","counters":10}}`, "params.counters"},
	} {
		code, _, body := ts.do("PUT", "/v1/jobs/j", "", []byte(c.spec))
		if code != 400 || body["field"] != c.field {
			t.Errorf("%s: %d %v, want field %s", c.spec, code, body, c.field)
		}
	}
}
