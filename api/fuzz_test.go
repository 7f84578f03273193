package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mlstream/mlstream/runtime"
	"github.com/valyala/fastjson"
)

// FuzzDecodeEvents feeds arbitrary bodies through the event decoder and a
// logreg job's extraction: it must never panic, and either accept every
// event it counts or fail with a located error.
func FuzzDecodeEvents(f *testing.F) {
	for _, seed := range []string{
		`{"key":"a","label":1,"features":{"x":1,"c":"v","b":true}}`,
		"{\"label\":0,\"features\":[\"a\",\"b\"]}\n{\"label\":true,\"features\":{}}\n",
		`[{"label":1,"features":{"x":1e300}},{"ts":"2026-01-02T03:04:05Z","features":["\u00e9"]}]`,
		"{\n\"label\": 1,\n\"features\": {\"x\": -0}\n}",
		`{"label":2}`, `[]`, ``, "\n\n", `{"features":{"a":{"b":1}}}`, `"str"`, `[1]`, "{\"key\":\"\xff\",\"features\":[]}",
	} {
		f.Add([]byte(seed), "")
		f.Add([]byte(seed), "application/json")
	}
	e := runtime.NewEngine(runtime.Config{Partitions: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer e.Close(f.Context())
	if _, err := e.PutJob(runtime.Spec{Name: "j", Kind: "logreg", Input: "s", Params: map[string]any{"hash_bits": 10}}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, ctype string) {
		b, err := e.NewBatch("s")
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		n, err := decodeEvents(body, ctype, 1<<10, func(v *fastjson.Value, line int) error {
			calls++
			if line < 1 {
				t.Fatalf("line %d", line)
			}
			return b.Add(v, line)
		})
		if err != nil {
			var de *DecodeError
			var ie *runtime.InputError
			if !errors.As(err, &de) && !errors.As(err, &ie) {
				t.Fatalf("unlocated error %T: %v", err, err)
			}
			return
		}
		if n != calls || n != b.Len() || n == 0 {
			t.Fatalf("decoded %d, callbacks %d, batch %d", n, calls, b.Len())
		}
	})
}

// hostileSeeds are bodies that once got through, or that probe the
// decoder's framing: numbers fastjson reads as infinities or NaN, deep
// nesting, many elements, invalid UTF-8, stray brackets.
func hostileSeeds() []string {
	return []string{
		`{"label":1,"features":{"x":1e400}}`,
		`{"label":1,"features":{"x":-1e300,"y":1e-320}}`,
		`{"label":1e400,"features":{"x":1}}`,
		`{"ts":1e400,"label":1,"features":{"x":1}}`,
		`{"ts":-1e300,"label":0,"features":{"x":1}}`,
		`{"label":1,"features":{"x":NaN,"y":-Inf,"z":inf,"w":1.2.3}}`,
		`[{"label":1,"features":{"x":1}},{"label":1,"features":{"x":1e400}}]`,
		`{"user":"u","amount":1e400}`,
		strings.Repeat("[", 400) + strings.Repeat("]", 400),
		`{"label":1,"features":` + strings.Repeat(`{"a":`, 300) + "1" + strings.Repeat("}", 300) + "}",
		"[" + strings.Repeat(`{"label":1,"features":["a"]},`, 300) + `{"label":0,"features":["b"]}]`,
		"{\"label\":1,\"features\":[\"\xff\xfe\"]}",
		"[{\"label\":1,\"features\":{\"x\":1}}]]",
		"]", "[", "[,]", "[1,]", `[{"a":"]"}, {"b":"\\"}]`, `["\"]"]`, "{\n\"label\": 1,\n\"features\": {\"x\": 1}\n}\n",
		"{\n\"label\": 1,\n\"features\": {\"x\": 1}\n}\n{\"label\":0,\"features\":{}}",
	}
}

// fuzzServer is a real api.Server with a logreg job on stream s and a
// join on streams u and v, for fuzzing handlers in process.
func fuzzServer(f *testing.F) *Server {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e := runtime.NewEngine(runtime.Config{Partitions: 2, QueueSize: 512, Logger: log})
	f.Cleanup(func() { _ = e.Close(f.Context()) })
	for _, spec := range []runtime.Spec{
		{Name: "j", Kind: "logreg", Input: "s", Params: map[string]any{"hash_bits": 10}},
		{Name: "pairs", Kind: "join", Left: "u", Right: "v", Params: map[string]any{"on": "user", "within": "1m", "value": "amount"}},
	} {
		if _, err := e.PutJob(spec); err != nil {
			f.Fatal(err)
		}
	}
	return New(Config{Engine: e, MaxBodyBytes: 64 << 10, MaxEventBytes: 4 << 10, Logger: log})
}

// checkAnswer fails on a server error other than 503, and on an error
// status whose body is not a JSON error.
func checkAnswer(t *testing.T, rec *httptest.ResponseRecorder) {
	if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d: %s", rec.Code, rec.Body.Bytes())
	}
	if rec.Code >= 400 {
		var e apiError
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
			t.Fatalf("status %d with body %q", rec.Code, rec.Body.Bytes())
		}
	}
}

// FuzzIngestHandler posts arbitrary bodies and content types to the real
// ingest handler: never a panic, never a 5xx but 503, always a JSON error,
// and the model stays finite.
func FuzzIngestHandler(f *testing.F) {
	for _, seed := range hostileSeeds() {
		for _, stream := range []string{"s", "u"} {
			f.Add([]byte(seed), "", stream)
			f.Add([]byte(seed), "application/json", stream)
		}
	}
	s := fuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte, ctype, stream string) {
		if stream != "s" && stream != "u" && stream != "v" {
			stream = "nope"
		}
		req := httptest.NewRequest("POST", "/v1/streams/"+stream+"/events", bytes.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		checkAnswer(t, rec)
		rec = httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/jobs/j/model?weights=true&limit=10000", nil))
		if rec.Code != 200 || !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("model after the post: %d %q", rec.Code, rec.Body.Bytes())
		}
	})
}

// FuzzPredictHandler sends arbitrary bodies to the real predict handler.
func FuzzPredictHandler(f *testing.F) {
	for _, seed := range hostileSeeds() {
		f.Add([]byte(seed), "")
		f.Add([]byte(seed), "application/json")
	}
	s := fuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte, ctype string) {
		req := httptest.NewRequest("POST", "/v1/jobs/j/predict", bytes.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		checkAnswer(t, rec)
		if rec.Code == 200 && !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("predict answered 200 with %q", rec.Body.Bytes())
		}
	})
}

// FuzzSplitArray checks the array splitter against the parser: whenever
// fastjson reads a body as an array of values, the splitter finds the same
// elements.
func FuzzSplitArray(f *testing.F) {
	for _, seed := range hostileSeeds() {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var p fastjson.Parser
		v, err := p.ParseBytes(body)
		if err != nil || v.Type() != fastjson.TypeArray {
			return
		}
		want, _ := v.Array()
		var got []string
		n, err := splitArray(body, len(body), func(ev []byte, line int) error {
			got = append(got, string(ev))
			return nil
		})
		if len(want) == 0 {
			if err == nil {
				t.Fatalf("empty array accepted")
			}
			return
		}
		if err != nil || n != len(want) {
			t.Fatalf("split %d elements (%v), parser %d", n, err, len(want))
		}
		var q fastjson.Parser
		for i, el := range got {
			x, err := q.Parse(el)
			if err != nil || x.String() != want[i].String() {
				t.Fatalf("element %d: split %q, parser %s", i+1, el, want[i])
			}
		}
	})
}
