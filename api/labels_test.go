package api

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mlstream/mlstream/kinds/logreg"
)

// labelEvents are n events of ids prefix0..: the feature "x" or "y" says
// the label (x: 1), so that a model that learned tells them apart.
func labelEvents(prefix string, n int, ts int64) (events, labels string) {
	var ev, lb strings.Builder
	for i := range n {
		f, y := "x", 1
		if i%2 == 1 {
			f, y = "y", 0
		}
		tsField := ""
		if ts > 0 {
			tsField = fmt.Sprintf(`,"ts":%d`, ts)
		}
		fmt.Fprintf(&ev, `{"id":"%s%d","features":{"%s":1,"bias":1}%s}`+"\n", prefix, i, f, tsField)
		fmt.Fprintf(&lb, `{"id":"%s%d","label":%d%s}`+"\n", prefix, i, y, tsField)
	}
	return ev.String(), lb.String()
}

func (ts *testServer) predictIDs(job, body string) []any {
	ts.t.Helper()
	code, _, out := ts.do("POST", "/v1/jobs/"+job+"/predict", "application/x-ndjson", []byte(body))
	if code != http.StatusOK {
		ts.t.Fatalf("predict: %d %v", code, out)
	}
	return out["predictions"].([]any)
}

func (ts *testServer) postLabels(job, body string) map[string]any {
	ts.t.Helper()
	code, _, out := ts.do("POST", "/v1/jobs/"+job+"/labels", "application/x-ndjson", []byte(body))
	if code != http.StatusAccepted {
		ts.t.Fatalf("labels: %d %v", code, out)
	}
	return out
}

func (ts *testServer) labelStatus(job string) *logreg.LabelStatus {
	ts.t.Helper()
	return logreg.StatusOf(ts.waitProcessed(job)).Labels
}

// Predictions served with an id wait in their partitions; labels posted
// later join them, the model learns from their features, and the
// progressive metrics score the probabilities that were served (0.5 from
// the empty model: a log loss of exactly ln 2), not predictions made
// when the labels came.
func TestDelayedLabelsJoinThePredictionsServed(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("d", `{"kind":"logreg","input":"m","partitions":3,"params":{"hash_bits":12}}`)
	const n = 300
	events, labels := labelEvents("e", n, 0)
	preds := ts.predictIDs("d", events)
	if len(preds) != n || preds[0].(map[string]any)["id"] != "e0" || preds[0].(map[string]any)["p"] != 0.5 {
		t.Fatalf("predictions %v", preds[:2])
	}
	st := ts.labelStatus("d")
	if st.Pending != n || st.Held != n || st.PendingBytes <= 0 || st.TTLMs != 3600_000 || st.MaxBytes != 8<<20 {
		t.Fatalf("after predict: %+v", st)
	}
	before := ts.job("d")
	if m := logreg.StatusOf(before).Metrics; m.All.Count != 0 {
		t.Fatalf("metrics before the labels: %+v", m.All)
	}
	if out := ts.postLabels("d", labels); out["accepted"] != float64(n) {
		t.Fatalf("labels answer %v", out)
	}
	st = ts.labelStatus("d")
	if st.Joined != n || st.Pending != 0 || st.Unknown != 0 {
		t.Fatalf("after the labels: %+v", st)
	}
	// A partition publishes its metrics when it goes idle, just after its
	// events count as processed: they may show a moment later.
	var after *logreg.Status
	waitFor(t, "the metrics of every joined label", 10*time.Second, func() bool {
		after = logreg.StatusOf(ts.job("d"))
		return after.Metrics.All.Count >= n
	})
	if after.Metrics.All.Count != n || math.Abs(after.Metrics.All.LogLoss-math.Ln2) > 1e-6 {
		t.Fatalf("metrics %+v: want %d events scored at the served 0.5", after.Metrics.All, n)
	}
	// The model learned from the joined features.
	again := ts.predictIDs("d", `{"features":{"x":1,"bias":1}}`+"\n"+`{"features":{"y":1,"bias":1}}`)
	if px, py := again[0].(map[string]any)["p"].(float64), again[1].(map[string]any)["p"].(float64); px <= 0.6 || py >= 0.4 {
		t.Fatalf("after learning from delayed labels: p(x)=%v p(y)=%v", px, py)
	}
	// A label nobody waits for is counted, in the status and /metrics.
	ts.postLabels("d", `{"id":"nobody","label":1}`)
	if st := ts.labelStatus("d"); st.Unknown != 1 {
		t.Fatalf("unknown label: %+v", st)
	}
	if v := ts.counter(`mlstream_model_delayed_labels_total{job="d",outcome="unknown"}`); v != 1 {
		t.Fatalf("/metrics unknown %v", v)
	}
	if v := ts.counter(`mlstream_model_delayed_labels_total{job="d",outcome="joined"}`); v != n {
		t.Fatalf("/metrics joined %v", v)
	}
}

// An unlabelled event ingested with an id waits for its label as a
// prediction request's does; the prediction message names the id.
func TestDelayedLabelsOfIngestedEvents(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("d", `{"kind":"logreg","input":"m","partitions":2,"params":{"hash_bits":12}}`)
	c := ts.dialWS("jobs=d&types=prediction")
	ts.post("m", `{"id":7,"key":"k","features":{"x":1}}`)
	m := readMessage(t, c, 5e9)
	if m["id"] != "7" || m["key"] != "k" {
		t.Fatalf("prediction message %v", m)
	}
	if st := ts.labelStatus("d"); st.Pending != 1 {
		t.Fatalf("%+v", st)
	}
	ts.postLabels("d", `[{"id":"7","label":true}]`)
	if st := ts.labelStatus("d"); st.Joined != 1 || st.Pending != 0 {
		t.Fatalf("%+v", st)
	}
}

// Pending predictions expire label_ttl after their event time, as the
// partition's event time goes on, or when a label comes too late; a
// second prediction of an id replaces the first; past
// label_pending_bytes the oldest are evicted. Each is counted.
func TestDelayedLabelsExpireAndEvict(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("t", `{"kind":"logreg","input":"m","partitions":1,"params":{"hash_bits":12,"label_ttl":"1s"}}`)
	ts.predictIDs("t", `{"id":"a","ts":1000,"features":{"x":1}}`+"\n"+`{"id":"b","ts":1000,"features":{"x":1}}`)
	ts.postLabels("t", `{"id":"a","label":1,"ts":5000}`)
	if st := ts.labelStatus("t"); st.Expired != 2 || st.Joined != 0 || st.Pending != 0 {
		t.Fatalf("late label: %+v", st)
	}
	ts.predictIDs("t", `{"id":"c","ts":9000,"features":{"x":1}}`)
	ts.predictIDs("t", `{"id":"c","ts":9001,"features":{"y":1}}`)
	if st := ts.labelStatus("t"); st.Duplicates != 1 || st.Pending != 1 {
		t.Fatalf("duplicate: %+v", st)
	}
	if logreg.StatusOf(ts.job("t")).Metrics.All.Count != 0 {
		t.Fatal("an expired prediction was learned")
	}

	ts.putJob("b", `{"kind":"logreg","input":"m","partitions":1,"params":{"hash_bits":12,"label_pending_bytes":1000}}`)
	events, labels := labelEvents("e", 20, 0)
	ts.predictIDs("b", events)
	st := ts.labelStatus("b")
	if st.Evicted == 0 || st.Pending+st.Evicted != 20 || st.PendingBytes > 1000 {
		t.Fatalf("budget: %+v", st)
	}
	ts.postLabels("b", labels)
	if st2 := ts.labelStatus("b"); st2.Joined != st.Pending || st2.Unknown != st.Evicted {
		t.Fatalf("labels after eviction: %+v (before %+v)", st2, st)
	}
	if v := ts.counter(`mlstream_model_delayed_labels_total{job="b",outcome="evicted"}`); v != float64(st.Evicted) {
		t.Fatalf("/metrics evicted %v", v)
	}
}

// Bad labels are refused with 400 naming the line and the field, and
// nothing of the request is taken.
func TestDelayedLabelsHostile(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("d", `{"kind":"logreg","input":"m","partitions":2,"params":{"hash_bits":12}}`)
	ts.putJob("h", `{"kind":"heavy_hitters","input":"hh","params":{"field":"u"}}`)
	long := strings.Repeat("i", logreg.MaxIDBytes+1)
	for _, c := range []struct {
		job, body, field string
		line             float64
	}{
		{"d", `{"id":"a","label":1}` + "\n" + `{"id":"b","label":2}`, "label", 2},
		{"d", `{"id":"a","label":1}` + "\n" + `{"label":1}`, "id", 2},
		{"d", `{"id":"` + long + `","label":1}`, "id", 1},
		{"d", `{"id":"","label":1}`, "id", 1},
		{"d", `{"id":{"x":1},"label":1}`, "id", 1},
		{"d", `{"id":"a"}`, "label", 1},
		{"d", `{"id":"a","label":1,"ts":"yesterday"}`, "ts", 1},
		{"d", `[1]`, "", 1},
	} {
		code, _, body := ts.do("POST", "/v1/jobs/"+c.job+"/labels", "application/x-ndjson", []byte(c.body))
		if code != http.StatusBadRequest || body["field"] != nilIfEmpty(c.field) || body["line"] != c.line {
			t.Errorf("%s: %d %v", c.body, code, body)
		}
	}
	code, _, body := ts.do("POST", "/v1/jobs/h/labels", "application/json", []byte(`{"id":"a","label":1}`))
	if code != http.StatusBadRequest || !strings.Contains(body["error"].(string), "heavy_hitters") {
		t.Errorf("labels for a heavy_hitters job: %d %v", code, body)
	}
	if code, _, _ := ts.do("POST", "/v1/jobs/none/labels", "application/json", []byte(`{"id":"a","label":1}`)); code != http.StatusNotFound {
		t.Errorf("labels for no job: %d", code)
	}
	code, _, body = ts.do("POST", "/v1/jobs/d/predict", "application/json", []byte(`{"id":"`+long+`","features":{"x":1}}`))
	if code != http.StatusBadRequest || body["field"] != "id" {
		t.Errorf("predict with a long id: %d %v", code, body)
	}
	if st := ts.labelStatus("d"); st.Unknown != 0 || st.Held != 0 {
		t.Fatalf("refused requests left %+v", st)
	}
	ts.healthy("m")
}

// Pending predictions are part of the job's backups: after a restart the
// labels still find them.
func TestDelayedLabelsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	log := &syncBuffer{}
	const spec = `{"kind":"logreg","input":"m","partitions":2,"params":{"hash_bits":12}}`
	n1 := startNode(t, dir, nil, log)
	n1.putJob("d", spec)
	events, labels := labelEvents("e", 100, 0)
	first, rest, _ := strings.Cut(labels, `{"id":"e10",`)
	n1.predictIDs("d", events)
	n1.postLabels("d", first)
	if st := n1.labelStatus("d"); st.Joined != 10 || st.Pending != 90 {
		t.Fatalf("before the restart: %+v", st)
	}
	n1.stop()

	n2 := startNode(t, dir, nil, log)
	if st := n2.labelStatus("d"); st.Joined != 10 || st.Pending != 90 || st.Held != 100 {
		t.Fatalf("after the restart: %+v", st)
	}
	n2.postLabels("d", `{"id":"e10",`+rest)
	if st := n2.labelStatus("d"); st.Joined != 100 || st.Pending != 0 || st.Unknown != 0 {
		t.Fatalf("labels after the restart: %+v", st)
	}
	if m := logreg.StatusOf(n2.job("d")).Metrics.All; m.Count != 100 {
		t.Fatalf("metrics after the restart: %+v", m)
	}
	n2.stop()
}
