package api

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mlstream/mlstream/kinds/logreg"
	"github.com/valyala/fastjson"
)

// The byte fast path of a logreg stream takes the usual events as bytes:
// the parser, and so add, sees only the events it declines.
func TestDecodeIntoTakesLogregEventsAsBytes(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("lr", logregSpec)
	b, err := ts.engine.NewBatch("mail")
	if err != nil {
		t.Fatal(err)
	}
	body := `{"key":"a","label":1,"features":{"x":1,"c":"de"}}` + "\n" +
		` { "label" : 0 , "features" : [ "w" ] }` + "\r\n" +
		`{"label":0,"features":{"\u0078":1}}` + "\n" + // an escape: the parser's
		`{"label":1,"features":{"x":2},"k\u0065y":"web"}` + "\n" // an escaped name: the parser's
	var parsed []int
	add := func(v *fastjson.Value, line int) error {
		parsed = append(parsed, line)
		return b.Add(v, line)
	}
	n, err := decodeInto(b, []byte(body), "application/x-ndjson", 1<<10, b.MaxEvents(), add)
	if err != nil || n != 4 || b.Len() != 4 {
		t.Fatalf("decoded %d events (batch %d): %v", n, b.Len(), err)
	}
	if fmt.Sprint(parsed) != "[3 4]" {
		t.Errorf("parsed lines %v, want [3 4]", parsed)
	}
}

// Events the byte fast path takes are learned exactly as the same events
// parsed: the same weights, names and metrics.
func TestLogregFastPathLearnsAsParsing(t *testing.T) {
	ts := newTestServer(t)
	for _, s := range []string{"fast", "slow"} {
		ts.putJob("lr-"+s, `{"kind":"logreg","input":"`+s+`","partitions":1,"params":{"hash_bits":12,"names_slots":64}}`)
	}
	var slow strings.Builder
	fast := genBody(21, 2000)
	for l := range strings.Lines(fast) {
		// A member with an escaped name sends the event to the parser and
		// changes nothing else (a null id, spelt "\u0069d").
		fmt.Fprintf(&slow, "%s,\"\\u0069d\":null}\n", strings.TrimSuffix(strings.TrimSuffix(l, "\n"), "}"))
	}
	for s, body := range map[string]string{"fast": fast, "slow": slow.String()} {
		if code, out := ts.post(s, body); code != http.StatusAccepted || out["accepted"] != 2000.0 {
			t.Fatalf("%s: %d %v", s, code, out)
		}
		ts.waitProcessed("lr-" + s)
	}
	// Processed is not yet merged into the model that /model reads: wait
	// for every update in both.
	waitFor(t, "both models holding 2000 updates", 10*time.Second, func() bool {
		return logreg.StatusOf(ts.job("lr-fast")).Model.Updates == 2000 && logreg.StatusOf(ts.job("lr-slow")).Model.Updates == 2000
	})
	_, _, f := ts.do("GET", "/v1/jobs/lr-fast/model?top=30", "", nil)
	_, _, s := ts.do("GET", "/v1/jobs/lr-slow/model?top=30", "", nil)
	delete(f, "job")
	delete(s, "job")
	if fmt.Sprint(f) != fmt.Sprint(s) {
		t.Errorf("fast path %v\nparsed %v", f, s)
	}
	if !strings.Contains(fmt.Sprint(f), "names") {
		t.Errorf("no names in %v", f)
	}
	fm, sm := logreg.StatusOf(ts.job("lr-fast")).Metrics, logreg.StatusOf(ts.job("lr-slow")).Metrics
	if fm == nil || fmt.Sprint(*fm) != fmt.Sprint(*sm) {
		t.Errorf("metrics: fast path %+v\nparsed %+v", fm, sm)
	}
}

// A body on the byte fast path is refused as before: the first bad
// event's line and field, and nothing of it accepted.
func TestLogregFastPathRefusesAsBefore(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("lr", logregSpec)
	ok := `{"key":"k","label":1,"features":{"x":1,"c":"de"}}` + "\n"
	for _, c := range []struct {
		bad, field, msg string
	}{
		{`{"label":1,"features":{"x":1e400}}`, "features.x", "magnitude over the limit"},
		{`{"label":1,"features":{"x":1e13}}`, "features.x", "magnitude over the limit"},
		{`{"label":1,"features":{"x":[1]}}`, "features.x", "number, string or boolean"},
		{`{"label":1,"features":["a",2]}`, "features[1]", "must be a string"},
		{`{"label":2,"features":{"x":1}}`, "label", "must be 0, 1, true or false"},
		{`{"label":1,"ts":-5,"features":{"x":1}}`, "ts", "out of range"},
		{`{"label":1,"ts":"noon","features":{"x":1}}`, "ts", "RFC 3339"},
		{`{"label":1,"key":{},"features":{"x":1}}`, "key", "string or a number"},
		{`{"label":1}`, "features", "required"},
		{`{"features":{"x":1},"id":""}`, "id", "must not be empty"},
		{`{"label":1,"features":{"x":1}`, "", "not valid JSON"},
		{`{"label":1,"features":{"x":tru}}`, "", "not valid JSON"},
		{`[1]`, "", "must be a JSON object"},
	} {
		code, _, out := ts.do("POST", "/v1/streams/mail/events", "", []byte(ok+ok+c.bad+"\n"+ok))
		line, _ := out["line"].(float64)
		field, _ := out["field"].(string)
		msg, _ := out["error"].(string)
		if code != http.StatusBadRequest || line != 3 || field != c.field || !strings.Contains(msg, c.msg) {
			t.Errorf("%s: %d %v; want 400, line 3, field %q, %q", c.bad, code, out, c.field, c.msg)
		}
	}
	if st := ts.job("lr"); st.Accepted != 0 {
		t.Errorf("accepted %d events of refused bodies", st.Accepted)
	}
}

// A stream read by jobs of different kinds never takes the byte fast
// path unless all of them extract bytes.
func TestByteFastPathNeedsEveryJob(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("lr", logregSpec)
	b, err := ts.engine.NewBatch("mail")
	if err != nil {
		t.Fatal(err)
	}
	if !b.ExtractsBytes() {
		t.Fatal("a logreg stream does not extract bytes")
	}
	ts.putJob("d", `{"kind":"distinct","input":"mail","params":{"field":"key"}}`)
	if b, err = ts.engine.NewBatch("mail"); err != nil {
		t.Fatal(err)
	}
	if b.ExtractsBytes() {
		t.Fatal("a stream with a distinct job extracts bytes")
	}
	var parsed int
	body := bytes.Repeat([]byte(`{"key":"a","label":1,"features":{"x":1}}`+"\n"), 3)
	n, err := decodeInto(b, body, "", 1<<10, b.MaxEvents(), func(v *fastjson.Value, line int) error {
		parsed++
		return b.Add(v, line)
	})
	if err != nil || n != 3 || parsed != 3 {
		t.Fatalf("decoded %d, parsed %d: %v", n, parsed, err)
	}
}
