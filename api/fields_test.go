package api

import (
	"net/http"
	"strings"
	"testing"
)

// postRefused posts body to stream and checks the answer is a 400 naming
// line and field, with msg in the error, and that job accepted nothing.
func postRefused(t *testing.T, ts *testServer, stream, body, job string, line float64, field, msg string) {
	t.Helper()
	for _, ctype := range []string{"application/x-ndjson", "application/json"} {
		b := body
		if ctype == "application/json" {
			b = "[" + strings.Join(strings.Split(strings.TrimSpace(body), "\n"), ",") + "]"
		}
		code, _, out := ts.do("POST", "/v1/streams/"+stream+"/events", ctype, []byte(b))
		got, _ := out["error"].(string)
		if code != http.StatusBadRequest || out["line"] != line || out["field"] != field || !strings.Contains(got, msg) {
			t.Errorf("%s %q: %d %v; want 400, line %v, field %q, %q", ctype, b, code, out, line, field, msg)
		}
	}
	if st := ts.job(job); st.Accepted != 0 {
		t.Errorf("job %s accepted %d events of refused bodies", job, st.Accepted)
	}
}

// A misspelt field is refused, on the byte fast path (the usual
// spelling) and on the parser's (an escape sends the event there), as is
// a weight no job honours: the event is not taken as unlabelled.
func TestEventUnknownFieldIsRefused(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("lr", logregSpec)
	ok := `{"key":"k","label":1,"features":{"x":1}}` + "\n"
	for _, c := range []struct{ bad, field, msg string }{
		{`{"lable":1,"features":{"x":1}}`, "lable", `unknown field: an event of stream "mail" may have only features, id, key, label, ts`},
		{`{"lable":1,"feat\u0075res":{"x":1}}`, "lable", "unknown field"},
		{`{"label":1,"features":{"x":1},"weight":2}`, "weight", "no job kind honours a per-event weight yet"},
		{`{"label":1,"features":{"x":1},"meta":{"src":"web"}}`, "meta", "unknown field"},
	} {
		postRefused(t, ts, "mail", ok+c.bad+"\n"+ok, "lr", 2, c.field, c.msg)
	}
}

// The fields an event of a stream may have are the conventional ones and
// every field a job reading the stream names: another job's field is
// taken, a field no job names is refused, on the string fast path too.
func TestEventFieldsAreThoseItsJobsName(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("words", `{"kind":"distinct","input":"words","params":{"field":"item"}}`)
	postRefused(t, ts, "words", `{"item":"a"}`+"\n"+`{"itme":"b"}`, "words", 2, "itme", `"words" may have only features, item, key, label, ts`)
	if code, out := ts.post("words", `{"item":"a","label":1,"ts":1700000000000,"features":{"x":1}}`); code != http.StatusAccepted {
		t.Errorf("conventional fields: %d %v", code, out)
	}

	// A logreg job and a heavy-hitters job on one stream: each one's
	// fields are taken, the byte fast path leaving them to the parser.
	ts.putJob("lr", `{"kind":"logreg","input":"mix","partitions":1,"params":{"label_field":"y"}}`)
	ts.putJob("hh", `{"kind":"heavy_hitters","input":"mix","params":{"field":"page"}}`)
	if code, out := ts.post("mix", `{"page":"/a","y":1,"features":{"x":1}}`+"\n"+`{"page":"/b","label":0,"features":{"x":1}}`); code != http.StatusAccepted || out["accepted"] != 2.0 {
		t.Errorf("fields of two jobs: %d %v", code, out)
	}
	code, out := ts.post("mix", `{"page":"/a","y":1,"features":{"x":1},"pgae":"/c"}`)
	if code != http.StatusBadRequest || out["field"] != "pgae" || !strings.Contains(out["error"].(string), "features, id, key, label, page, ts, y") {
		t.Errorf("misspelt field of a mixed stream: %d %v", code, out)
	}

	// A join names its key (on) and value fields.
	ts.putJob("j", `{"kind":"join","input":"","left":"views","right":"buys","params":{"on":"click","within":"2s","value":"amount","value_side":"right"}}`)
	if code, out := ts.post("buys", `{"click":"c1","amount":3}`); code != http.StatusAccepted {
		t.Errorf("a join's fields: %d %v", code, out)
	}
	if code, out := ts.post("views", `{"click":"c1","amuont":3}`); code != http.StatusBadRequest || out["field"] != "amuont" {
		t.Errorf("a misspelt join field: %d %v", code, out)
	}
}
