package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mlstream/mlstream/ft"
	"github.com/mlstream/mlstream/kinds/logreg"
	"github.com/mlstream/mlstream/runtime"
)

// raw sends a request with exactly contentType ("" for none) and returns
// the status and the body bytes.
func (ts *testServer) raw(method, path, contentType string, body []byte) (int, []byte) {
	ts.t.Helper()
	if contentType == "" {
		contentType = noContentType
	}
	code, _, data := ts.sendRaw(method, path, contentType, body)
	return code, data
}

// predictAll returns the job's probabilities for the events of body and
// its model version.
func (ts *testServer) predictAll(job, body string) ([]float64, uint64) {
	ts.t.Helper()
	code, data := ts.raw("POST", "/v1/jobs/"+job+"/predict", "application/x-ndjson", []byte(body))
	if code != http.StatusOK {
		ts.t.Fatalf("predict %s: %d %s", job, code, data)
	}
	var resp predictResponse
	if err := json.Unmarshal(data, &resp); err != nil {
		ts.t.Fatal(err)
	}
	ps := make([]float64, len(resp.Predictions))
	for i, p := range resp.Predictions {
		ps[i] = p.P
	}
	return ps, resp.ModelVersion
}

func (ts *testServer) exportModel(job string) []byte {
	ts.t.Helper()
	code, data := ts.raw("GET", "/v1/jobs/"+job+"/model/export", "", nil)
	if code != http.StatusOK {
		ts.t.Fatalf("export %s: %d %s", job, code, data)
	}
	return data
}

// feed posts body to stream in chunks of n lines, waiting for the jobs to
// process each chunk, so that every job sees the same batches.
func (ts *testServer) feed(stream, body string, n int, jobs ...string) {
	ts.t.Helper()
	lines := strings.SplitAfter(body, "\n")
	for i := 0; i < len(lines); i += n {
		chunk := strings.Join(lines[i:min(i+n, len(lines))], "")
		if chunk == "" {
			continue
		}
		if code, out := ts.post(stream, chunk); code != http.StatusAccepted && code != http.StatusOK {
			ts.t.Fatalf("post %s: %d %v", stream, code, out)
		}
		for _, j := range jobs {
			ts.waitProcessed(j)
		}
	}
}

const (
	modelSpecA = `{"kind":"logreg","input":"a","partitions":1,"params":{"hash_bits":16}}`
	modelSpecB = `{"kind":"logreg","input":"b","partitions":1,"params":{"hash_bits":16}}`
)

func assertSamePredictions(t *testing.T, ts *testServer, body string) {
	t.Helper()
	pa, va := ts.predictAll("a", body)
	pb, vb := ts.predictAll("b", body)
	if va != vb {
		t.Fatalf("model versions differ: a %d, b %d", va, vb)
	}
	if len(pa) != 10000 || len(pb) != len(pa) {
		t.Fatalf("%d and %d predictions", len(pa), len(pb))
	}
	for i := range pa {
		if pa[i] != pb[i] {
			t.Fatalf("event %d: a predicts %v, b %v", i, pa[i], pb[i])
		}
	}
}

func TestModelExportImportPredictsTheSameAndLearnsTheSame(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("a", modelSpecA)
	ts.putJob("b", modelSpecB)
	ts.feed("a", genBody(1, 3000), 500, "a")
	exported := ts.exportModel("a")

	if code, data := ts.raw("PUT", "/v1/jobs/b/model", "application/octet-stream", exported); code != http.StatusOK {
		t.Fatalf("import: %d %s", code, data)
	}
	probe := genBody(2, 10000)
	assertSamePredictions(t, ts, probe)

	// Both go on learning from the same events in the same batches.
	afterImport, _ := ts.predictAll("b", probe)
	more := genBody(3, 2000)
	ts.feed("a", more, 500, "a")
	ts.feed("b", more, 500, "b")
	assertSamePredictions(t, ts, probe)
	learned, _ := ts.predictAll("b", probe)
	if learned[0] == afterImport[0] && learned[1] == afterImport[1] {
		t.Fatal("b did not learn after the import")
	}
}

// A model that does not fit is refused with a 400 naming the mismatch, and
// the job keeps its own.
func TestModelImportRefusesWhatDoesNotFit(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("a", modelSpecA)
	ts.putJob("b", modelSpecB)
	ts.putJob("c", `{"kind":"logreg","input":"b","partitions":1,"params":{"hash_bits":17}}`)
	ts.putJob("d", `{"kind":"logreg","input":"b","partitions":1,"params":{"hash_bits":16,"alpha":0.1}}`)
	ts.putJob("hh", `{"kind":"heavy_hitters","input":"b","partitions":1,"params":{"field":"key"}}`)
	ts.feed("a", genBody(1, 1000), 1000, "a")
	good := ts.exportModel("a")
	ts.feed("b", genBody(5, 1000), 1000, "b")
	probe := genBody(2, 100)
	before, _ := ts.predictAll("b", probe)

	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 1
	version := bytes.Clone(good)
	version[8] = 9
	cases := []struct {
		name, job, ctype string
		body             []byte
		status           int
		field, msg       string
	}{
		{"hash_bits", "c", "application/octet-stream", good, 400, "params.hash_bits", "hash_bits 16, the job 17"},
		{"alpha", "d", "application/octet-stream", good, 400, "params.alpha", "alpha"},
		{"damaged", "b", "application/octet-stream", flipped, 400, "format", "checksum"},
		{"truncated", "b", "application/octet-stream", good[:len(good)-10], 400, "format", ""},
		{"format version", "b", "application/octet-stream", version, 400, "format", "format version 9"},
		{"not a model", "b", "application/octet-stream", []byte("hello"), 400, "format", "not an exported mlstream model"},
		{"json body", "b", "application/json", []byte(`{}`), 415, "Content-Type", "octet-stream"},
		{"kind without a model", "hh", "application/octet-stream", good, 400, "", "no exportable model"},
		{"no job", "nope", "application/octet-stream", good, 404, "", "no job"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, data := ts.raw("PUT", "/v1/jobs/"+c.job+"/model", c.ctype, c.body)
			var e apiError
			_ = json.Unmarshal(data, &e)
			if code != c.status || e.Field != c.field || !strings.Contains(e.Error, c.msg) {
				t.Fatalf("%d %s; want %d naming %q with %q", code, data, c.status, c.field, c.msg)
			}
		})
	}
	after, _ := ts.predictAll("b", probe)
	for i := range before {
		if before[i] != after[i] {
			t.Fatalf("a refused import changed b's prediction %d: %v to %v", i, before[i], after[i])
		}
	}
	if code, data := ts.raw("GET", "/v1/jobs/a/model/export?format=xml", "", nil); code != 400 || !strings.Contains(string(data), `"field":"format"`) {
		t.Fatalf("format=xml: %d %s", code, data)
	}
}

// The readable form holds the header, the learner parameters and every
// non-zero slot.
func TestModelExportJSON(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("a", modelSpecA)
	ts.feed("a", genBody(1, 1000), 1000, "a")
	code, data := ts.raw("GET", "/v1/jobs/a/model/export?format=json", "", nil)
	if code != 200 {
		t.Fatalf("%d %s", code, data)
	}
	var m struct {
		Format        string `json:"format"`
		FormatVersion int    `json:"format_version"`
		Kind, Job     string
		Params        struct {
			HashBits  int    `json:"hash_bits"`
			Optimizer string `json:"optimizer"`
		} `json:"params"`
		Updates uint64 `json:"updates"`
		NonZero int    `json:"nonzero_weights"`
		Slots   []struct {
			Slot   int     `json:"slot"`
			Weight float64 `json:"weight"`
		} `json:"slots"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if m.Format != "mlstream-model" || m.FormatVersion != 1 || m.Kind != "logreg" || m.Job != "a" ||
		m.Params.HashBits != 16 || m.Params.Optimizer != "ftrl" || m.Updates != 1000 || m.NonZero == 0 || len(m.Slots) < m.NonZero {
		t.Fatalf("json export: %+v", m)
	}
}

// Ingest goes on while a model is imported: nothing accepted is lost and
// the job ends up learning on the imported model.
func TestModelImportWhileIngesting(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("a", modelSpecA)
	ts.putJob("b", `{"kind":"logreg","input":"b","partitions":2,"params":{"hash_bits":16}}`)
	ts.feed("a", genBody(1, 2000), 2000, "a")
	good := ts.exportModel("a")
	done := make(chan int)
	go func() {
		accepted := 0
		for i := range 20 {
			req, _ := http.NewRequest("POST", ts.http.URL+"/v1/streams/b/events", strings.NewReader(genBody(int64(10+i), 200)))
			req.Header.Set("Content-Type", "application/x-ndjson")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				if resp.StatusCode/100 == 2 {
					accepted += 200
				}
				resp.Body.Close()
			}
		}
		done <- accepted
	}()
	for range 5 {
		if code, data := ts.raw("PUT", "/v1/jobs/b/model", "application/octet-stream", good); code != http.StatusOK {
			t.Fatalf("import: %d %s", code, data)
		}
	}
	accepted := <-done
	st := ts.waitProcessed("b")
	if int(st.Processed) != accepted || accepted == 0 {
		t.Fatalf("b processed %d of %d accepted", st.Processed, accepted)
	}
}

// crashableNode is a real engine with a data directory behind a real
// server, which the test abandons without Close (kill -9): only what was
// backed up before survives.
func crashableNode(t *testing.T, dir string) *testServer {
	t.Helper()
	store, err := ft.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e := runtime.NewEngine(runtime.Config{Partitions: 1, Storage: ft.NewDir(dir, store), Logger: log})
	s := New(Config{Engine: e, Logger: log})
	s.SetReady(true)
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return &testServer{t: t, engine: e, api: s, http: hs}
}

// After an import a crash recovers the imported model, not the job's old
// one: the import takes a full backup at once.
func TestModelImportSurvivesACrash(t *testing.T) {
	const ftSpec = `{"kind":"logreg","input":"b","partitions":1,"params":{"hash_bits":12},
		"ft":{"mode":"approx","max_divergence":1e9,"max_pending":1000000,"max_unacked":1000000}}`
	dir := t.TempDir()
	n1 := crashableNode(t, dir)
	n1.putJob("a", `{"kind":"logreg","input":"a","partitions":1,"params":{"hash_bits":12}}`)
	n1.putJob("b", ftSpec)
	n1.feed("a", genBody(1, 2000), 1000, "a")
	n1.feed("b", genBody(7, 2000), 1000, "b")
	good := n1.exportModel("a")
	probe := genBody(2, 10000)
	want, _ := n1.predictAll("a", probe)
	if code, data := n1.raw("PUT", "/v1/jobs/b/model", "application/octet-stream", good); code != http.StatusOK {
		t.Fatalf("import: %d %s", code, data)
	}
	n1.http.Close() // the crash

	n2 := crashableNode(t, dir)
	n2.putJob("b", ftSpec)
	got, _ := n2.predictAll("b", probe)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("after the crash b predicts %v for event %d, the imported model %v", got[i], i, want[i])
		}
	}
}

// explain takes a prediction apart by feature name; the parts add up to
// the probability /predict gives, and features sharing a slot say so.
func TestExplain(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("a", modelSpecA)
	ts.putJob("tiny", `{"kind":"logreg","input":"a","partitions":1,"params":{"hash_bits":1}}`)
	ts.feed("a", genBody(1, 2000), 1000, "a", "tiny")
	event := `{"key":"k1","features":{"amount":120,"country":"de","vip":true,"zero":0,"off":false}}`
	code, data := ts.raw("POST", "/v1/jobs/a/explain", "application/x-ndjson", []byte(event))
	if code != 200 {
		t.Fatalf("explain: %d %s", code, data)
	}
	var resp struct {
		Explanations []struct {
			Key      string  `json:"key"`
			P        float64 `json:"p"`
			Margin   float64 `json:"margin"`
			Bias     float64 `json:"bias"`
			Features []struct {
				Name         string   `json:"name"`
				Value        float64  `json:"value"`
				Weight       float64  `json:"weight"`
				Contribution float64  `json:"contribution"`
				CollidesWith []string `json:"collides_with"`
			} `json:"features"`
		} `json:"explanations"`
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		t.Fatal(err)
	}
	e := resp.Explanations[0]
	var names []string
	sum := e.Bias
	for _, f := range e.Features {
		names = append(names, f.Name)
		if f.Contribution != f.Weight*f.Value {
			t.Fatalf("%s: contribution %v is not weight %v × value %v", f.Name, f.Contribution, f.Weight, f.Value)
		}
		sum += f.Contribution
	}
	if strings.Join(names, ",") != "amount,country=de,vip" || e.Key != "k1" || sum != e.Margin {
		t.Fatalf("explanation %+v", e)
	}
	if p, _ := ts.predictAll("a", event); p[0] != e.P {
		t.Fatalf("explain says %v, predict %v", e.P, p[0])
	}

	// Three features on two slots: at least one pair collides.
	code, data = ts.raw("POST", "/v1/jobs/tiny/explain", "application/x-ndjson", []byte(event))
	if err := json.Unmarshal(data, &resp); code != 200 || err != nil {
		t.Fatalf("%d %s", code, data)
	}
	collided := false
	for _, f := range resp.Explanations[0].Features {
		collided = collided || len(f.CollidesWith) > 0
	}
	if !collided {
		t.Fatalf("no collision shown on two slots: %s", data)
	}

	if code, data := ts.raw("POST", "/v1/jobs/a/explain", "application/x-ndjson", []byte(event+"\n[1]")); code != 400 || !strings.Contains(string(data), `"line":2`) {
		t.Fatalf("a bad second event: %d %s", code, data)
	}
}

// namedEvents: "good" marks positives, "bad" negatives, "n" is noise.
func namedEvents(n int) string {
	var b strings.Builder
	for i := range n {
		if i%2 == 0 {
			fmt.Fprintf(&b, `{"label":1,"features":{"good":true,"n":%d,"color":"c%d"}}`+"\n", i%7+1, i%3)
		} else {
			fmt.Fprintf(&b, `{"label":0,"features":{"bad":true,"n":%d,"color":"c%d"}}`+"\n", i%7+1, i%3)
		}
	}
	return b.String()
}

type topView struct {
	Top []struct {
		Weight float64 `json:"weight"`
		Sign   string  `json:"sign"`
		Names  []struct {
			Name  string `json:"name"`
			Count uint64 `json:"count"`
		} `json:"names"`
		Collision bool `json:"collision"`
	} `json:"top"`
	NamesSampled int `json:"names_sampled_every"`
}

func (ts *testServer) top(job string, n int) topView {
	ts.t.Helper()
	code, data := ts.raw("GET", fmt.Sprintf("/v1/jobs/%s/model?top=%d", job, n), "", nil)
	var v topView
	if err := json.Unmarshal(data, &v); code != 200 || err != nil {
		ts.t.Fatalf("top: %d %s", code, data)
	}
	return v
}

// ?top=N lists the strongest weights by the names seen at their slots,
// with sign and counts; an export carries the names to the importer.
func TestTopWeightsByName(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("a", modelSpecA)
	ts.putJob("b", modelSpecB)
	ts.putJob("tiny", `{"kind":"logreg","input":"a","partitions":1,"params":{"hash_bits":1}}`)
	ts.feed("a", namedEvents(3200), 800, "a", "tiny")
	v := ts.top("a", 3)
	signs := map[string]string{}
	for _, w := range v.Top {
		if len(w.Names) == 1 && w.Names[0].Name == "(intercept)" {
			continue
		}
		if len(w.Names) != 1 || w.Names[0].Count == 0 || w.Collision {
			t.Fatalf("a weight without its one name: %+v", v)
		}
		signs[w.Names[0].Name] = w.Sign
	}
	if signs["good"] != "+" || signs["bad"] != "-" || v.NamesSampled != 16 {
		t.Fatalf("top weights %+v", v)
	}
	collided := false
	for _, w := range ts.top("tiny", 3).Top {
		collided = collided || w.Collision && len(w.Names) > 1
	}
	if !collided {
		t.Fatal("no collision shown on two slots")
	}
	if code, data := ts.raw("PUT", "/v1/jobs/b/model", "application/octet-stream", ts.exportModel("a")); code != 200 {
		t.Fatalf("import: %d %s", code, data)
	}
	if got := ts.top("b", 3); fmt.Sprint(got) != fmt.Sprint(v) {
		t.Fatalf("after the import b's top is %+v, a's %+v", got, v)
	}
	if code, _ := ts.raw("GET", "/v1/jobs/a/model?top=0", "", nil); code != 400 {
		t.Fatalf("top=0: %d", code)
	}

	// names_slots bounds the dictionary; 0 turns it off.
	code, _, body := ts.do("PUT", "/v1/jobs/bad", "application/json", []byte(`{"kind":"logreg","input":"a","params":{"names_slots":-1}}`))
	if code != 400 || body["field"] != "params.names_slots" {
		t.Fatalf("names_slots -1: %d %v", code, body)
	}
	ts.putJob("off", `{"kind":"logreg","input":"a","partitions":1,"params":{"hash_bits":16,"names_slots":0}}`)
	ts.putJob("one", `{"kind":"logreg","input":"a","partitions":1,"params":{"hash_bits":16,"names_slots":1}}`)
	ts.feed("a", namedEvents(800), 800, "off", "one")
	named := 0
	for _, w := range ts.top("off", 3).Top {
		if len(w.Names) > 0 && w.Names[0].Name != "(intercept)" {
			t.Fatalf("names with names_slots 0: %+v", w)
		}
	}
	code, data := ts.raw("GET", "/v1/jobs/one/model?top=5", "", nil)
	var one struct {
		Top []struct {
			Names []struct{ Name string } `json:"names"`
		} `json:"top"`
		Untracked uint64 `json:"untracked_names"`
	}
	if err := json.Unmarshal(data, &one); code != 200 || err != nil {
		t.Fatalf("%d %s", code, data)
	}
	for _, w := range one.Top {
		if len(w.Names) > 0 && w.Names[0].Name != "(intercept)" {
			named++
		}
	}
	if named != 1 || one.Untracked == 0 {
		t.Fatalf("names_slots 1: %d slots named, %d untracked: %s", named, one.Untracked, data)
	}
}

// A names section that does not fit the job is refused whole; a job that
// learned nothing exports and imports too.
func TestModelImportChecksTheNames(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("a", modelSpecA)
	ts.putJob("b", modelSpecB)
	empty := ts.exportModel("a")
	if code, data := ts.raw("PUT", "/v1/jobs/b/model", "application/octet-stream", empty); code != 200 {
		t.Fatalf("import of an empty model: %d %s", code, data)
	}
	ts.feed("a", namedEvents(1000), 1000, "a")
	e, err := logreg.DecodeModel(ts.exportModel("a"))
	if err != nil {
		t.Fatal(err)
	}
	e.Names = []byte(`{"every":16,"slots":{"70000":[{"name":"x","count":1}]}}`)
	var buf bytes.Buffer
	if err := e.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	code, data := ts.raw("PUT", "/v1/jobs/b/model", "application/octet-stream", buf.Bytes())
	if code != 400 || !strings.Contains(string(data), "slot 70000 out of range") || !strings.Contains(string(data), `"field":"format"`) {
		t.Fatalf("names past the slots: %d %s", code, data)
	}
	if st := ts.job("b"); logreg.StatusOf(st).Model.Updates != 0 {
		t.Fatalf("a refused import changed b: %+v", logreg.StatusOf(st).Model)
	}
}
