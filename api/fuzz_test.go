package api

import (
	"errors"
	"io"
	"log/slog"
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
