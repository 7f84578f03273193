package api

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	goruntime "runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/mlstream/mlstream/runtime"
	"github.com/valyala/fastjson"
)

// FuzzStringMatchers: whatever the fast path takes, the parser reads as
// an object of exactly one member, the field, holding a string equal to
// the text taken; the line matcher takes no more than its line.
func FuzzStringMatchers(f *testing.F) {
	for _, seed := range []string{
		`{"item":"a"}`, ` { "item" : "a b" } `, `{"item":"a\"b"}`, `{"item":"a"}x`, `{"item":"a","item":"b"}`,
		`{"item":""}`, `{"item":"\u00e9"}`, "{\"item\":\"\xff\x01\"}", `{"item":5}`, `{"items":"a"}`, `{"item":"a"`,
		"{\"item\":\"a\"}\r\n", "{\"item\":\"a\"}\n{\"item\":\"b\"}", `{"item":"a"}}`, `{{"item":"a"}`,
	} {
		f.Add([]byte(seed))
	}
	m := stringLines{prefix: []byte(`{"item":"`), maxEvent: 64}
	f.Fuzz(func(t *testing.T, ev []byte) {
		if s, ok := stringMember(ev, "item"); ok {
			checkParsesAs(t, ev, s)
		}
		s, next, ok := m.match(ev, 0)
		if !ok {
			return
		}
		line := ev
		if i := bytes.IndexByte(ev, '\n'); i >= 0 {
			line = ev[:i]
		}
		if next != len(line)+1 || len(line) > m.maxEvent {
			t.Fatalf("match of %q: next %d, line of %d bytes", ev, next, len(line))
		}
		checkParsesAs(t, line, s)
	})
}

func checkParsesAs(t *testing.T, ev, s []byte) {
	t.Helper()
	v, err := fastjson.ParseBytes(ev)
	if err != nil {
		t.Fatalf("took %q, which does not parse: %v", ev, err)
	}
	o, err := v.Object()
	if err != nil || o.Len() != 1 {
		t.Fatalf("took %q: not an object of one member", ev)
	}
	got, err := v.Get("item").StringBytes()
	if err != nil || !bytes.Equal(got, s) {
		t.Fatalf("took %q as %q; the parser reads %q (%v)", ev, s, got, err)
	}
}

// The fast path takes the usual spellings of {"item": "text"}, escapes
// aside.
func TestStringMatchersTakeUsualSpellings(t *testing.T) {
	for _, ev := range []string{`{"item":"a-1"}`, `{"item": "a-1"}`, ` { "item" : "a-1" } `, "{\"item\":\"a-1\"}\r", "{\t\"item\":\"a-1\"}"} {
		if s, ok := stringMember([]byte(ev), "item"); !ok || string(s) != "a-1" {
			t.Errorf("stringMember(%q) = %q, %v", ev, s, ok)
		}
	}
	m := stringLines{prefix: []byte(`{"item":"`), maxEvent: 1 << 10}
	body := []byte("{\"item\":\"x\"}\n{\"item\":\"\"}\n{\"item\":\"y\"}")
	var got []string
	for off := 0; off < len(body); {
		s, next, ok := m.match(body, off)
		if !ok {
			t.Fatalf("no match at %d of %q", off, body)
		}
		got, off = append(got, string(s)), next
	}
	if strings.Join(got, ",") != "x,,y" {
		t.Errorf("matched %q", got)
	}
	for _, ev := range []string{`{"item":"a\u0062"}`, `{"item":"a","n":1}`, `{"item":1}`, `{"Item":"a"}`} {
		if _, ok := stringMember([]byte(ev), "item"); ok {
			t.Errorf("stringMember took %q", ev)
		}
	}
}

// Events taken by the fast path count exactly as the same values parsed:
// the same distinct estimate and top-k, on a stream with both kinds.
func TestStringFastPathCountsAsParsing(t *testing.T) {
	ts := newTestServer(t)
	for _, s := range []string{"fast", "slow"} {
		ts.putJob("d-"+s, `{"kind":"distinct","input":"`+s+`","partitions":2,"params":{"field":"item"}}`)
		ts.putJob("h-"+s, `{"kind":"heavy_hitters","input":"`+s+`","partitions":2,"params":{"field":"item","counters":100}}`)
	}
	var fast, slow strings.Builder
	for i := range 3000 {
		item := fmt.Sprintf("item-%d", i*i%61)
		switch i % 4 { // spellings the fast path takes, and one it leaves to the parser
		case 0:
			fmt.Fprintf(&fast, `{"item":%q}`+"\n", item)
		case 1:
			fmt.Fprintf(&fast, `{ "item": %q }`+"\r\n", item)
		case 2:
			fmt.Fprintf(&fast, `{"item":"\u0069%s"}`+"\n", item[1:])
		default:
			fmt.Fprintf(&fast, "\n"+`{"item":%q}`, item)
			fast.WriteString("\n")
		}
		fmt.Fprintf(&slow, `{"ts":null,"item":%q}`+"\n", item) // arrival time, as with no ts
	}
	for s, body := range map[string]string{"fast": fast.String(), "slow": slow.String()} {
		if code, out := ts.post(s, body); code != http.StatusAccepted || out["accepted"] != 3000.0 {
			t.Fatalf("%s: %d %v", s, code, out)
		}
		ts.waitProcessed("d-" + s)
		ts.waitProcessed("h-" + s)
	}
	for _, q := range []string{"d-%s/distinct", "h-%s/topk?k=100"} {
		_, _, f := ts.do("GET", "/v1/jobs/"+fmt.Sprintf(q, "fast"), "", nil)
		_, _, s := ts.do("GET", "/v1/jobs/"+fmt.Sprintf(q, "slow"), "", nil)
		delete(f, "job")
		delete(s, "job")
		if fmt.Sprint(f) != fmt.Sprint(s) {
			t.Errorf("%s: fast path %v\nparsed %v", q, f, s)
		}
	}
}

// A body on the fast path is refused as before: the first bad event's
// line and field, a body's framing, sizes and count before any event,
// and nothing of a refused body is accepted.
func TestStringFastPathRefusesAsBefore(t *testing.T) {
	ts := newTestServer(t, func(_ *runtime.Config, c *Config) { c.MaxEventBytes = 40 })
	ts.putJob("d", `{"kind":"distinct","input":"s","partitions":2,"queue_size":8,"params":{"field":"item"}}`)
	ok := `{"item":"a"}` + "\n"
	for _, c := range []struct {
		body, field, msg string
		status, line     int
	}{
		{ok + `{"item":"b"` + "\n", "", "not valid JSON", 400, 2},
		{ok + ok + `{"item":null}`, "item", "must be a string", 400, 3},
		{ok + `{"key":"b"}`, "item", "required", 400, 2},
		{ok + `{"items":"b"}`, "items", "unknown field", 400, 2},
		{ok + `{"item":"b` + "\n" + `{"item":"` + strings.Repeat("x", 40) + `"}`, "", "over the limit of 40 bytes", 413, 3},
		{strings.Repeat(ok, 17), "", "17 events, more than the queues", 413, 0},
		{strings.Repeat(ok, 16) + `{"item":1`, "", "17 events, more than the queues", 413, 0},
	} {
		code, _, out := ts.do("POST", "/v1/streams/s/events", "", []byte(c.body))
		line, _ := out["line"].(float64)
		field, _ := out["field"].(string)
		msg, _ := out["error"].(string)
		if code != c.status || int(line) != c.line || field != c.field || !strings.Contains(msg, c.msg) {
			t.Errorf("%q: %d %v; want %d, line %d, field %q, %q", c.body, code, out, c.status, c.line, c.field, c.msg)
		}
	}
	if st := ts.job("d"); st.Accepted != 0 {
		t.Errorf("accepted %d events of refused bodies", st.Accepted)
	}
}

// Items on the fast path into a distinct job allocate nothing per event:
// no string, no parsed value; the job's records take only their hashes.
func TestStringFastPathAllocatesNothingPerEvent(t *testing.T) {
	if raceEnabled {
		t.Skip("under the race detector, pools drop buffers on purpose and every allocation is instrumented")
	}
	ts := newTestServer(t)
	ts.putJob("d", `{"kind":"distinct","input":"s","partitions":2,"params":{"field":"item"}}`)
	const events, requests = 10_000, 20
	var body []byte
	for i := range events {
		body = fmt.Appendf(body, `{"item":"item-%d"}`+"\n", i)
	}
	// No collection meanwhile: it would empty the pools of buffers that
	// requests reuse, and the test is about what each event costs.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	var allocated []uint64 // by request
	post := func() {
		req := httptest.NewRequest("POST", "/v1/streams/s/events", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/x-ndjson")
		rec := httptest.NewRecorder()
		var before, after goruntime.MemStats
		goruntime.ReadMemStats(&before)
		ts.api.ServeHTTP(rec, req)
		goruntime.ReadMemStats(&after)
		allocated = append(allocated, after.TotalAlloc-before.TotalAlloc)
		if rec.Code != http.StatusAccepted {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		ts.waitProcessed("d") // the buffers go back to their pool
	}
	for range 5 { // until the pools hold what requests take
		post()
	}
	allocated = allocated[:0]
	for range requests {
		post()
	}
	// The median request: a sync.Pool keeps what a partition's goroutine
	// put back in its processor's private slot, which a request on another
	// processor does not find, so now and then a request makes its arrays
	// anew (~0.5 MB); an allocation per event would show in every request.
	slices.Sort(allocated)
	if per := float64(allocated[requests/2]) / events; per > 4 {
		t.Errorf("%.1f bytes allocated per event (the median request's %d bytes; all: %v)", per, allocated[requests/2], allocated)
	}
}

// FuzzStringFastPathDecodes: a body decoded with the fast path gives the
// same count, or the same error, as the parser alone.
func FuzzStringFastPathDecodes(f *testing.F) {
	for _, seed := range []string{
		"{\"item\":\"a\"}\n{\"item\":\"b\"}\n", "{\"item\":\"a\"}\n\n  {\"item\" : \"b\"}\r\n", "{\"item\":\"a\"}\n{\"item\":null}",
		"{\"item\":\"a\"}\n{\"item\":\"b\"", "[{\"item\":\"a\"},{\"item\":\"b\\n\"}]", "{\n\"item\": \"a\"\n}", "{\"item\":\"a\"}{\"item\":\"b\"}",
		"{\"item\":\"" + strings.Repeat("x", 70) + "\"}", "{\"item\":\"a\",\"ts\":1}\n{\"item\":[\"a\",1]}",
	} {
		f.Add([]byte(seed), "")
	}
	e := runtime.NewEngine(runtime.Config{Partitions: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer e.Close(f.Context())
	if _, err := e.PutJob(runtime.Spec{Name: "d", Kind: "distinct", Input: "s", Params: map[string]any{"field": "item"}}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, ctype string) {
		fast, _ := e.NewBatch("s")
		slow, _ := e.NewBatch("s")
		nf, errf := decodeInto(fast, body, ctype, 64, 1<<20, func(v *fastjson.Value, line int) error { return fast.Add(v, line) })
		ns, errs := decodeEvents(body, ctype, 64, func(v *fastjson.Value, line int) error { return slow.Add(v, line) })
		if nf != ns || fmt.Sprint(errf) != fmt.Sprint(errs) || fast.Len() != slow.Len() {
			t.Fatalf("%q: fast path %d, %v (%d in the batch); parser %d, %v (%d)", body, nf, errf, fast.Len(), ns, errs, slow.Len())
		}
	})
}
