package runtime

import (
	"errors"
	"math"
	"testing"
)

// The number limits apply to every number an extractor reads, and can be
// changed (the binary's flags do).
func TestNumberLimits(t *testing.T) {
	e := testEngine(t, Config{Partitions: 1})
	mustPut(t, e, Spec{Name: "lr", Kind: "logreg", Input: "mail", Params: map[string]any{"hash_bits": 8}})
	mustPut(t, e, Spec{Name: "jn", Kind: "join", Left: "a", Right: "b", Params: map[string]any{"on": "k", "within": "1m", "value": "v"}})
	check := func(stream, line, field string) {
		t.Helper()
		_, err := ingest(e, stream, line)
		var ie *InputError
		switch {
		case field == "" && err != nil:
			t.Errorf("%s: %v", line, err)
		case field != "" && (!errors.As(err, &ie) || ie.Field != field):
			t.Errorf("%s: got %v, want an error on field %s", line, err, field)
		}
	}
	check("mail", `{"label":1,"features":{"x":1e12,"y":-1e12,"z":5e-324}}`, "")
	check("mail", `{"label":1,"features":{"x":1.0000001e12}}`, "features.x")
	check("mail", `{"ts":253402300799999,"label":1,"features":{}}`, "")
	check("mail", `{"ts":253402300800000,"label":1,"features":{}}`, "ts")
	check("mail", `{"ts":-1,"label":1,"features":{}}`, "ts")
	check("a", `{"k":"u","v":-1e12}`, "")
	check("a", `{"k":"u","v":1e13}`, "v")

	if err := SetLimits(Limits{MaxValue: 100, MinTS: 1000, MaxTS: 2000}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = SetLimits(DefaultLimits()) })
	check("mail", `{"ts":1500,"label":1,"features":{"x":100}}`, "")
	check("mail", `{"label":1,"features":{"x":101}}`, "features.x")
	check("mail", `{"ts":999,"label":1,"features":{}}`, "ts")
	check("mail", `{"ts":"1970-01-01T00:00:03Z","label":1,"features":{}}`, "ts")
	check("a", `{"k":"u","ts":1500,"v":-101}`, "v")

	for _, bad := range []Limits{{MaxValue: 0}, {MaxValue: math.Inf(1)}, {MaxValue: math.NaN()}, {MaxValue: 1, MinTS: 2, MaxTS: 1}} {
		if SetLimits(bad) == nil {
			t.Errorf("SetLimits(%+v) accepted", bad)
		}
	}
	if got := CurrentLimits(); got.MaxValue != 100 {
		t.Errorf("a refused SetLimits changed the limits: %+v", got)
	}
}

// MaxEvents is the smallest total queue capacity of the jobs reading a
// stream; a job that sheds load sets no bound.
func TestBatchMaxEvents(t *testing.T) {
	e := testEngine(t, Config{Partitions: 2, QueueSize: 50})
	mustPut(t, e, Spec{Name: "big", Kind: "logreg", Input: "s", QueueSize: 300, Params: map[string]any{"hash_bits": 8}})
	mustPut(t, e, Spec{Name: "small", Kind: "logreg", Input: "s", Params: map[string]any{"hash_bits": 8}})
	mustPut(t, e, Spec{Name: "shedding", Kind: "logreg", Input: "t", Shed: &ShedSpec{MaxDelay: "10ms"}, Params: map[string]any{"hash_bits": 8}})
	for stream, want := range map[string]int{"s": 100, "t": math.MaxInt} {
		b, err := e.NewBatch(stream)
		if err != nil {
			t.Fatal(err)
		}
		if got := b.MaxEvents(); got != want {
			t.Errorf("stream %s: MaxEvents %d, want %d", stream, got, want)
		}
	}
}
