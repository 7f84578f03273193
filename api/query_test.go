package api

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Each kind's query answers the same on /query/{name} and on its older
// URL; unknown parameters are refused naming them; a query the job's kind
// lacks is 404 on the generic route and 400, as it always was, on an
// alias.
func TestQueryRouteAndAliases(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("lr", `{"kind":"logreg","input":"s","partitions":1}`)
	ts.putJob("hh", `{"kind":"heavy_hitters","input":"s","partitions":1,"params":{"field":"u"}}`)
	ts.putJob("dc", `{"kind":"distinct","input":"s","partitions":1,"params":{"field":"u"}}`)
	ts.putJob("jn", `{"kind":"join","left":"l","right":"r","partitions":1,"params":{"on":"k","within":"10s"}}`)
	var b strings.Builder
	for i := range 50 {
		fmt.Fprintf(&b, `{"key":"e%d","label":%d,"features":{"f%d":1},"u":"v%d"}`+"\n", i, i%2, i%5, i%7)
	}
	for _, p := range []struct{ stream, body string }{{"s", b.String()}, {"l", `{"k":"a","ts":1000}` + "\n"}, {"r", `{"k":"a","ts":1500}` + "\n"}} {
		if code, out := ts.post(p.stream, p.body); code != http.StatusAccepted {
			t.Fatalf("post %s: %d %v", p.stream, code, out)
		}
	}
	for _, j := range []string{"lr", "hh", "dc", "jn"} {
		ts.waitProcessed(j)
	}
	// Queries read what partitions published at their last coordination:
	// wait until both URLs see the same.
	for _, q := range []struct{ job, name, params string }{
		{"lr", "model", "weights=true&limit=2"},
		{"hh", "topk", "k=3&window=all"},
		{"dc", "distinct", "window=current"},
		{"jn", "matches", "limit=5"},
	} {
		var alias, generic map[string]any
		waitFor(t, q.name+" on both URLs", 10*time.Second, func() bool {
			_, _, alias = ts.do("GET", "/v1/jobs/"+q.job+"/"+q.name+"?"+q.params, "", nil)
			_, _, generic = ts.do("GET", "/v1/jobs/"+q.job+"/query/"+q.name+"?"+q.params, "", nil)
			delete(alias, "next") // a link to the next page names the URL asked
			delete(generic, "next")
			return reflect.DeepEqual(alias, generic) && alias["job"] == q.job
		})
		if code, _, out := ts.do("GET", "/v1/jobs/"+q.job+"/query/"+q.name+"?"+q.params+"&bogus=1", "", nil); code != http.StatusBadRequest || out["field"] != "bogus" {
			t.Errorf("%s with an unknown parameter: %d %v", q.name, code, out)
		}
		if code, _, out := ts.do("GET", "/v1/jobs/"+q.job+"/query/nope", "", nil); code != http.StatusNotFound || !strings.Contains(fmt.Sprint(out["error"]), q.name) {
			t.Errorf("unknown query of %s: %d %v", q.job, code, out)
		}
		other := map[string]string{"lr": "topk", "hh": "distinct", "dc": "matches", "jn": "model"}[q.job]
		if code, _, out := ts.do("GET", "/v1/jobs/"+q.job+"/"+other, "", nil); code != http.StatusBadRequest {
			t.Errorf("alias %s on %s: %d %v", other, q.job, code, out)
		}
	}
	_, _, page := ts.do("GET", "/v1/jobs/lr/query/model?weights=true&limit=2", "", nil)
	if next, _ := page["next"].(string); !strings.HasPrefix(next, "/v1/jobs/lr/query/model?") {
		t.Errorf("next page of the model: %q", next)
	}
	if code, _, out := ts.do("GET", "/v1/jobs/hh/query/topk?window=later", "", nil); code != http.StatusBadRequest || out["field"] != "window" {
		t.Errorf("bad window: %d %v", code, out)
	}
	if code, _, out := ts.do("GET", "/v1/jobs/none/query/topk", "", nil); code != http.StatusNotFound {
		t.Errorf("query of no job: %d %v", code, out)
	}
}
