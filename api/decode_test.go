package api

import (
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

// BenchmarkDecodeArray decodes the events of BenchmarkParseNDJSON sent as
// one JSON array: the framing scan, the count and one parse per element.
func BenchmarkDecodeArray(b *testing.B) {
	body := []byte("[" + strings.ReplaceAll(strings.TrimSuffix(string(benchBody), "\n"), "\n", ",") + "]")
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := countEvents(body, "application/json", 1<<20); err != nil {
			b.Fatal(err)
		}
		if _, err := decodeEvents(body, "application/json", 1<<20, func(*fastjson.Value, int) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "events/s")
}

func TestValueEnd(t *testing.T) {
	for in, want := range map[string]int{
		`{"a":"}"} x`:         9,
		`["\"]",1],`:          9,
		`"a\\"b`:              5,
		`"a\\\"b"`:            8,
		`123, 4`:              3,
		`-1e400]`:             6,
		`{"a":[1,2}`:          -1,
		`"open`:               -1,
		`}`:                   1,
		`,`:                   0,
		`{"a":{"b":[]}}{}`:    14,
		"[\n1,\n{\"x\":2}\n]": 14,
	} {
		if got := valueEnd([]byte(in)); got != want {
			t.Errorf("valueEnd(%q) = %d, want %d", in, got, want)
		}
	}
}
