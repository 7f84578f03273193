package gen

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"github.com/mlstream/mlstream/learners"
)

func TestDeterministic(t *testing.T) {
	a, b, c := New(Config{Seed: 5}), New(Config{Seed: 5}), New(Config{Seed: 6})
	var differ bool
	for range 2000 {
		ea, eb, ec := a.Next(), b.Next(), c.Next()
		ja, jb := ea.AppendJSON(nil), eb.AppendJSON(nil)
		if !bytes.Equal(ja, jb) || ea.TrueP != eb.TrueP {
			t.Fatalf("same seed, different events:\n%s\n%s", ja, jb)
		}
		if !bytes.Equal(ja, ec.AppendJSON(nil)) {
			differ = true
		}
	}
	if !differ {
		t.Error("different seeds give the same stream")
	}
}

// serviceFeatures hashes a decoded JSON event the way the service does.
func serviceFeatures(t *testing.T, features map[string]any) map[uint64]float64 {
	got := map[uint64]float64{}
	for k, v := range features {
		switch v := v.(type) {
		case float64:
			got[learners.HashName(k)] += v
		case string:
			got[learners.HashNameValue(k, v)] += 1
		case bool:
			if v {
				got[learners.HashName(k)] += 1
			}
		default:
			t.Fatalf("feature %q has type %T", k, v)
		}
	}
	return got
}

func TestJSONRoundTrip(t *testing.T) {
	g := New(Config{Seed: 1})
	var buf []byte
	var feats []learners.Feature
	for i := range 3000 {
		e := g.Next()
		buf = e.AppendJSON(buf[:0])
		var dec struct {
			Key      string         `json:"key"`
			TS       int64          `json:"ts"`
			Label    int            `json:"label"`
			Features map[string]any `json:"features"`
		}
		d := json.NewDecoder(bytes.NewReader(buf))
		d.DisallowUnknownFields()
		if err := d.Decode(&dec); err != nil {
			t.Fatalf("event %d: %v\n%s", i, err, buf)
		}
		if dec.Key != e.Key || dec.TS != e.TS || (dec.Label == 1) != e.Label || (dec.Label != 0 && dec.Label != 1) {
			t.Fatalf("event %d: header %+v, want %q %d %v", i, dec, e.Key, e.TS, e.Label)
		}
		want := map[uint64]float64{}
		feats = e.Features(feats[:0])
		for _, f := range feats {
			if _, dup := want[f.Hash]; dup {
				t.Fatalf("event %d: Features repeats hash %x", i, f.Hash)
			}
			want[f.Hash] = f.Value
		}
		got := serviceFeatures(t, dec.Features)
		if len(got) != len(want) {
			t.Fatalf("event %d: %d features from JSON, %d from Features\n%s", i, len(got), len(want), buf)
		}
		for h, v := range want {
			if got[h] != v {
				t.Fatalf("event %d: feature %x = %v from JSON, %v from Features", i, h, got[h], v)
			}
		}
		var words float64
		for _, w := range e.Words {
			if _, ok := dec.Features[w]; !ok {
				t.Fatalf("word %q missing from JSON", w)
			}
		}
		for k, v := range dec.Features {
			if _, field := e.Numbers[k]; !field {
				if f, ok := v.(float64); ok {
					words += f
				}
			}
		}
		if int(words) != len(e.Words) {
			t.Fatalf("word counts sum to %v, want %d", words, len(e.Words))
		}
	}
}

func TestVocabulary(t *testing.T) {
	g := New(Config{Vocabulary: 10000})
	seen := map[string]bool{}
	fields := []string{FieldAmount, FieldWordCount, FieldLinks, FieldCountry, FieldDevice, FieldHour, FieldReturning, "key", "ts", "label", "features"}
	for _, f := range fields {
		seen[f] = true
	}
	for i := range 10000 {
		w := g.Word(i)
		if seen[w] {
			t.Fatalf("word %d %q repeats or is a field name", i, w)
		}
		seen[w] = true
	}
}

func TestTrueModel(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		g := New(Config{Seed: seed})
		const n = 50_000
		var correct, pos int
		var words, feats float64
		for range n {
			e := g.Next()
			if (e.TrueP > 0.5) == e.Label {
				correct++
			}
			if e.Label {
				pos++
			}
			words += float64(len(e.Words))
			feats += float64(len(e.Features(nil)))
			if a := e.Numbers[FieldAmount]; a < 0 || a > 5000 {
				t.Fatalf("amount %v", a)
			}
			if c := e.Numbers[FieldWordCount]; c < 0 || c > 500 {
				t.Fatalf("word_count %v", c)
			}
			if l := e.Numbers[FieldLinks]; l < 0 || l > 20 {
				t.Fatalf("links %v", l)
			}
		}
		acc, rate := float64(correct)/n, float64(pos)/n
		t.Logf("seed %d: true accuracy %.3f, positives %.3f, words/event %.1f, features/event %.1f", seed, acc, rate, words/n, feats/n)
		if acc < 0.80 || acc > 0.90 {
			t.Errorf("seed %d: true model accuracy %.3f outside [0.80, 0.90]", seed, acc)
		}
		if rate < 0.3 || rate > 0.6 {
			t.Errorf("seed %d: positive rate %.3f", seed, rate)
		}
	}
}

func TestDrift(t *testing.T) {
	const after = 1000
	plain, drift := New(Config{Seed: 3}), New(Config{Seed: 3, DriftAfter: after})
	var changed int
	for i := range 3 * after {
		a, b := plain.Next(), drift.Next()
		if i < after && a.TrueP != b.TrueP {
			t.Fatalf("event %d before the drift: TrueP %v vs %v", i, a.TrueP, b.TrueP)
		}
		if i >= after && math.Abs(a.TrueP-b.TrueP) > 0.1 {
			changed++
		}
		if a.Key != b.Key || a.TS != b.TS || len(a.Words) != len(b.Words) {
			t.Fatalf("event %d: drift changed the features", i)
		}
	}
	if changed < after {
		t.Errorf("only %d of %d events after the drift changed TrueP by > 0.1", changed, 2*after)
	}
}

// TestDriftVisible: a learner's accuracy drops after the drift and recovers.
func TestDriftVisible(t *testing.T) {
	if testing.Short() {
		t.Skip("learns 120k events")
	}
	const after = 60_000
	g := New(Config{Seed: 2, DriftAfter: after})
	m, err := learners.NewModel(learners.Config{})
	if err != nil {
		t.Fatal(err)
	}
	l := m.NewLearner()
	var trueOK int
	acc := func(n int) float64 {
		var ok int
		trueOK = 0
		var feats []learners.Feature
		for range n {
			e := g.Next()
			feats = e.Features(feats[:0])
			if (l.Learn(feats, e.Label) > 0.5) == e.Label {
				ok++
			}
			if (e.TrueP > 0.5) == e.Label {
				trueOK++
			}
			if l.Pending() == 1000 {
				l.Sync()
			}
		}
		return float64(ok) / float64(n)
	}
	acc(after - 5000)
	before := acc(5000)
	trueBefore := float64(trueOK) / 5000
	drop := acc(3000)
	acc(after - 3000 - 5000)
	recovered := acc(5000)
	trueAfter := float64(trueOK) / 5000
	t.Logf("accuracy before drift %.3f (true model %.3f), just after %.3f, %d events later %.3f (true model %.3f)",
		before, trueBefore, drop, after, recovered, trueAfter)
	if drop > before-0.1 {
		t.Errorf("accuracy did not drop visibly: %.3f -> %.3f", before, drop)
	}
	// FTRL's per-coordinate rates have decayed by the time of the drift, so
	// it wins back most, not all, of the loss within the test's horizon.
	if recovered < drop+0.6*(before-drop) {
		t.Errorf("accuracy did not recover: %.3f", recovered)
	}
}

func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uote`, `back\slash`, "ctl\x00\x1f\n\t", "ünïcødé 日本", "bad\xffutf8"} {
		b := appendString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q -> %s: %v", s, b, err)
		}
		if want := string([]rune(s)); got != want && s != "bad\xffutf8" {
			t.Errorf("%q round-trips to %q", s, got)
		}
	}
}

func TestFeaturesNoAlloc(t *testing.T) {
	e := New(Config{}).Next()
	dst := make([]learners.Feature, 0, 64)
	if n := testing.AllocsPerRun(100, func() { dst = e.Features(dst[:0]) }); n != 0 {
		t.Errorf("Features allocates %v times", n)
	}
}

func BenchmarkNext(b *testing.B) {
	g := New(Config{Seed: 1})
	b.ReportAllocs()
	for b.Loop() {
		g.Next()
	}
}

func BenchmarkNextJSON(b *testing.B) {
	g := New(Config{Seed: 1})
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		e := g.Next()
		buf = e.AppendJSON(buf[:0])
	}
	b.SetBytes(int64(len(buf)))
}
