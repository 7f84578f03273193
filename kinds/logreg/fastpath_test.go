package logreg

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mlstream/mlstream/internal/gen"
	"github.com/mlstream/mlstream/runtime"
	"github.com/valyala/fastjson"
)

// fastJobs are jobs whose fields differ: the defaults, and renamed ones
// where one member is both the key and the id.
func fastJobs(t testing.TB) []*logregJob {
	spec := testSpec(1)
	_, def := node(t, nil, spec, runtime.Config{})
	spec = testSpec(1)
	for k, v := range map[string]any{"key_field": "k", "ts_field": "t", "label_field": "y", "features_field": "x", "id_field": "k"} {
		spec.Params[k] = v
	}
	_, renamed := node(t, nil, spec, runtime.Config{})
	return []*logregJob{def, renamed}
}

const fastNow = 1_700_000_000_000

// checkFast is the equivalence of the fast path: ExtractBytes of line
// either declines, or makes exactly the record Extract makes of line
// parsed, and names the same features for the dictionary. It declines
// whatever the parser or Extract refuses. It returns whether the fast
// path took the line.
func checkFast(t *testing.T, j *logregJob, line []byte) bool {
	t.Helper()
	var fastArena, slowArena runtime.Arena
	var got, want runtime.Record
	took := j.ExtractBytes(line, &got, &fastArena, fastNow)
	var p fastjson.Parser
	v, err := p.ParseBytes(line)
	switch {
	case err != nil:
		if took {
			t.Fatalf("fast path took %q, which the parser refuses: %v", line, err)
		}
		return false
	case v.Type() != fastjson.TypeObject:
		if took {
			t.Fatalf("fast path took %q, which is not an object", line)
		}
		return false
	}
	if err := j.Extract(v, &want, &slowArena, fastNow); err != nil {
		if took {
			t.Fatalf("fast path took %q, which Extract refuses: %v", line, err)
		}
		return false
	}
	if !took {
		return false
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\nfast path %+v\nExtract   %+v", line, got, want)
	}
	if gotNames, wantNames := rawNames(line, j.fields.Features), featureNames(v.Get(j.fields.Features)); !slices.Equal(gotNames, wantNames) {
		t.Fatalf("%q: fast path names %q, Extract %q", line, gotNames, wantNames)
	}
	return true
}

// rawNames lists the feature names the fast path samples of ev.
func rawNames(ev []byte, field string) []string {
	buf, ends := appendRawFeatureNames(nil, nil, ev, field)
	names := make([]string, len(ends))
	start := 0
	for i, end := range ends {
		names[i], start = string(buf[start:end]), end
	}
	return names
}

// fastTaken are spellings the fast path must take (for both jobs, with
// their field names).
var fastTaken = []string{
	`{"key":"u1","ts":1700000000123,"label":1,"features":{"amount":12.5,"hour":3,"country":"de","mobile":true,"w":1}}`,
	`{"label":0,"features":{"a":-1e-3,"b":0,"c":false,"d":null,"e":"","f":"x y"}}`,
	` { "key" : 17 , "label" : true , "features" : [ "a" , "b" ] } ` + "\r",
	`{"features":{},"label":null,"key":null,"ts":null}`,
	`{"features":[]}`,
	`{"features":{"x":1},"ts":"2024-05-01T10:00:00.5Z","label":false}`,
	`{"features":{"x":1},"id":"p-1"}`,
	`{"features":{"x":1},"id":42,"label":1}`,
	`{"features":{"x":1},"key":"k","label":1,"ts":1700000000000}`,
	`{"features":{"` + strings.Repeat("long", 30) + `":"` + strings.Repeat("value", 30) + `"}}`,
	"{\"features\":{\"ü\":\"ö\",\"\x01raw\":1}}",
	`{"features":{"x":1.0},"label":1.0}`,
	`{"features":{"a":0,"b":7,"c":9},"label":1}`, // one digit: the shortcut, 0 skipped
	`{"features":{"x":1 ,"y":2 }}`,               // one digit and a space: not the shortcut
	`{"features":{"dup":1,"dup":2}}`,
	// Numbers near where their value stops being computed while scanned.
	`{"features":{"a":97188.2083715755,"b":0.123456789012345,"c":-12345678901.2345,"d":1.5e-7}}`,
}

// fastDeclined are events the fast path leaves to the parser: errors the
// parser or Extract reports, and spellings it does not judge.
var fastDeclined = []string{
	``, `[]`, `{}`, `"x"`, `{"label":1}`,
	`{"features":{"x":1}`, `{"features":{"x":1}}}`, `{"features":{"x":1}},`, `{"features":{"x":1},}`,
	`{"features":{"x":01}}`, `{"features":{"x":1,}}`, `{"features":{"x":1.}}`, `{"features":{"x":.5}}`, `{"features":{"x":-}}`,
	`{"features":{"x":1e}}`, `{"features":{"x":+1}}`, `{"features":{"x":1.2.3}}`, `{"features":{"x":1e400}}`,
	`{"features":{"x":1e13}}`, `{"features":{"x":NaN}}`, `{"features":{"x":nan}}`, `{"features":{"x":inf}}`,
	`{"features":{"x":truex}}`, `{"features":{"x":tru}}`, `{"features":{"x":[1]}}`, `{"features":{"x":{}}}`,
	`{"features":{"x\"y":1}}`, `{"features":{"x":"a\"b"}}`, `{"features":{"x":"a\nb"}}`, `{"fe\u0061tures":{"x":1}}`,
	`{"features":["a",1]}`, `{"features":5}`, `{"features":"x"}`, `{"features":null}`,
	`{"features":{"x":1},"features":{"y":1}}`, `{"features":{"x":1},"label":1,"label":0}`,
	`{"features":{"x":1},"label":2}`, `{"features":{"x":1},"label":"1"}`, `{"features":{"x":1},"label":[]}`,
	`{"features":{"x":1},"ts":-1}`, `{"features":{"x":1},"ts":"yesterday"}`, `{"features":{"x":1},"ts":true}`,
	`{"features":{"x":1},"key":{}}`, `{"features":{"x":1},"key":true}`, `{"features":{"x":1},"id":""}`,
	`{"features":{"x":1},"id":"` + strings.Repeat("i", MaxIDBytes+1) + `"}`, `{"features":{"x":1},"meta":{"a":1}}`,
	`{"features":{"x":1},"note":"a\\b"}`, `{"features":{"x":1} "label":1}`, `{"features" {"x":1}}`,
	// Members the job does not read: the parser's path refuses them, or
	// takes them if another job of the stream reads them.
	`{"lable":1,"features":{"x":1}}`, `{"features":{"x":1},"weight":2}`,
	`{"features":{"x":1},"other":"skipped","n":-0.5e+2,"b":true,"z":null}`,
}

// The common spellings take the fast path, and give Extract's records.
func TestFastPathTakesCommonSpellings(t *testing.T) {
	jobs := fastJobs(t)
	for _, line := range fastTaken {
		if !checkFast(t, jobs[0], []byte(line)) {
			t.Errorf("fast path declined %q", line)
		}
		if renamed := renamedFields(line); !checkFast(t, jobs[1], []byte(renamed)) {
			t.Errorf("renamed job: fast path declined %q", renamed)
		}
	}
	g := gen.New(gen.Config{Seed: 3})
	for range 500 {
		if line := g.Next().AppendJSON(nil); !checkFast(t, jobs[0], line) {
			t.Fatalf("fast path declined a generated event %q", line)
		}
	}
}

// Everything else goes to the parser: errors, escapes, nesting.
func TestFastPathDeclinesTheRest(t *testing.T) {
	jobs := fastJobs(t)
	for _, line := range fastDeclined {
		if checkFast(t, jobs[0], []byte(line)) {
			t.Errorf("fast path took %q", line)
		}
	}
}

// renamedFields spells line with the renamed job's field names.
func renamedFields(line string) string {
	return strings.NewReplacer(`"features"`, `"x"`, `"label"`, `"y"`, `"ts"`, `"t"`, `"key"`, `"k"`, `"id"`, `"k"`).Replace(line)
}

// A value of one digit (which jsonNumber reads at once) is held to the number
// limit as any other: over it, the fast path declines and Extract
// refuses.
func TestFastPathOneDigitOverLimit(t *testing.T) {
	l := runtime.DefaultLimits()
	l.MaxValue = 5
	if err := runtime.SetLimits(l); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = runtime.SetLimits(runtime.DefaultLimits()) })
	j := fastJobs(t)[0] // the default field names
	if !checkFast(t, j, []byte(`{"features":{"x":5,"y":1}}`)) {
		t.Errorf("fast path declined a value at the limit")
	}
	if checkFast(t, j, []byte(`{"features":{"x":7}}`)) {
		t.Errorf("fast path took a value over the limit")
	}
}

// FuzzFastPath: for any line, the fast path declines or agrees with
// Extract exactly.
func FuzzFastPath(f *testing.F) {
	for _, line := range append(slices.Clone(fastTaken), fastDeclined...) {
		f.Add([]byte(line))
		f.Add([]byte(renamedFields(line)))
	}
	g := gen.New(gen.Config{Seed: 5})
	for range 20 {
		f.Add(g.Next().AppendJSON(nil))
	}
	jobs := fastJobs(f)
	f.Fuzz(func(t *testing.T, line []byte) {
		for _, j := range jobs {
			checkFast(t, j, line)
		}
	})
}

// The fast path never takes an event when a field's name needs escaping
// in JSON, nor when the features field is also another field.
func TestFastFields(t *testing.T) {
	def := runtime.Fields{Key: "key", TS: "ts", Label: "label", Features: "features"}
	for _, c := range []struct {
		f    runtime.Fields
		id   string
		want bool
	}{
		{def, "id", true},
		{def, "key", true},
		{runtime.Fields{Key: "k\"", TS: "ts", Label: "label", Features: "features"}, "id", false},
		{runtime.Fields{Key: "key", TS: "ts", Label: "label", Features: "f\\"}, "id", false},
		{runtime.Fields{Key: "key", TS: "ts", Label: "label", Features: "label"}, "id", false},
		{def, "features", false},
	} {
		if got := fastFields(c.f, c.id); got != c.want {
			t.Errorf("%+v id %q: %v, want %v", c.f, c.id, got, c.want)
		}
	}
}

// putJobs puts logreg jobs of the given params, all reading stream s,
// into one engine, and returns them.
func putJobs(t *testing.T, params ...map[string]any) (*runtime.Engine, []*logregJob) {
	e := runtime.NewEngine(runtime.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	var jobs []*logregJob
	for i, p := range params {
		spec := testSpec(1)
		spec.Name = fmt.Sprintf("j%d", i)
		maps.Copy(spec.Params, p)
		if _, err := e.PutJob(spec); err != nil {
			t.Fatal(err)
		}
		hook.Lock()
		jobs = append(jobs, hook.last)
		hook.Unlock()
	}
	return e, jobs
}

// feedBatch adds lines to a batch of stream s, with fast by AddBytes
// where every job takes the event, else by Add, and returns how many
// AddBytes took.
func feedBatch(t *testing.T, e *runtime.Engine, lines [][]byte, fast bool) int {
	t.Helper()
	b, err := e.NewBatch("s")
	if err != nil {
		t.Fatal(err)
	}
	took := 0
	var p fastjson.Parser
	for i, l := range lines {
		if fast && b.ExtractsBytes() && b.AddBytes(l) {
			took++
			continue
		}
		v, err := p.ParseBytes(l)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Add(v, i+1); err != nil {
			t.Fatal(err)
		}
	}
	if b.Len() != len(lines) {
		t.Fatalf("batch of %d events, want %d", b.Len(), len(lines))
	}
	if _, err := b.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	return took
}

// When one job reading a stream declines an event that another takes,
// the event goes to Add for both: each job extracts it and samples its
// names once, as if there were no fast path.
func TestAddBytesLeavesToAddWhatAnyJobDeclines(t *testing.T) {
	g := gen.New(gen.Config{Seed: 7})
	var lines [][]byte
	for i := range 400 {
		l := g.Next().AppendJSON(nil)
		if i%2 == 0 {
			// Job 1 reads "lab" as its id; job 0 does not read it, and
			// leaves the event to the parser (Add takes it: job 1 names it).
			l = append(l[:len(l)-1], `,"lab":"x"}`...)
		}
		lines = append(lines, l)
	}
	params := []map[string]any{nil, {"id_field": "lab"}}
	e, jobs := putJobs(t, params...)
	if took := feedBatch(t, e, lines, true); took != 200 {
		t.Fatalf("fast path took %d events, want 200", took)
	}
	refEngine, refs := putJobs(t, params...)
	feedBatch(t, refEngine, lines, false)
	for i, j := range jobs {
		if got, want := j.names.events.Load(), refs[i].names.events.Load(); got != want || got != 400 {
			t.Errorf("job %d: %d events sampled from, want %d (400)", i, got, want)
		}
		if !reflect.DeepEqual(j.names.slots, refs[i].names.slots) {
			t.Errorf("job %d: names differ from those Add alone gives", i)
		}
		if len(j.names.slots) == 0 {
			t.Errorf("job %d: no names", i)
		}
	}
}
