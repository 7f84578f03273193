package learners

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

// A model read back from its snapshot predicts and learns exactly as the
// original, and a learner's discarded delta leaves the model untouched.
func TestSnapshotCopyLearnsIdentically(t *testing.T) {
	cfg := Config{HashBits: 12}
	a := trainedModel(t, cfg)
	var buf bytes.Buffer
	if _, err := a.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	b, err := NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.ReadFrom(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	feats, labels := toyEvents(3000)
	la, lb := a.NewLearner(), b.NewLearner()
	for i := range feats {
		if pa, pb := la.Learn(feats[i], labels[i]), lb.Learn(feats[i], labels[i]); pa != pb {
			t.Fatalf("event %d: %v and %v", i, pa, pb)
		}
		if i%100 == 99 {
			la.Sync()
			lb.Sync()
		}
	}
	la.Sync()
	lb.Sync()
	for s := range a.Slots() {
		if a.Weight(s) != b.Weight(s) {
			t.Fatalf("slot %d: %v and %v", s, a.Weight(s), b.Weight(s))
		}
	}
	before := b.Snapshot(true, 0)
	for i := range feats[:100] {
		lb.Learn(feats[i], labels[i])
	}
	lb.Discard()
	if lb.Pending() != 0 || lb.Sync() != before.Version {
		t.Fatal("a discarded delta was merged")
	}
}

// Summarize reads a snapshot without a model, and refuses one announcing
// more slots than its bytes hold before allocating them.
func TestSummarize(t *testing.T) {
	cfg := Config{HashBits: 12}
	m := trainedModel(t, cfg)
	var buf bytes.Buffer
	if _, err := m.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	s, err := Summarize(buf.Bytes(), cfg, 5)
	if err != nil {
		t.Fatal(err)
	}
	want := m.Snapshot(true, 5)
	if s.NonZero != want.NonZero || s.Version != want.Version || len(s.Top) != 5 {
		t.Fatalf("summary %+v, model %+v", s, want)
	}
	for i := range s.Top {
		if s.Top[i] != want.Weights[i] || math.IsNaN(s.Top[i].Weight) {
			t.Fatalf("top %d: %+v, model %+v", i, s.Top[i], want.Weights[i])
		}
	}
	lying := bytes.Clone(buf.Bytes())
	lying[28+7] = 0x7f // count ~ 2^63
	if _, err := Summarize(lying, cfg, 5); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a snapshot announcing 2^63 slots: %v", err)
	}
	if _, err := Summarize(buf.Bytes(), Config{HashBits: 13}, 5); !errors.Is(err, ErrIncompatible) {
		t.Fatalf("other hash bits: %v", err)
	}
}

// An explanation adds up to the model's own prediction.
func TestExplainAddsUpToPredict(t *testing.T) {
	for _, norm := range []string{NormalizeNone, NormalizeL2} {
		m := trainedModel(t, Config{HashBits: 12, Normalize: norm})
		feats, _ := toyEvents(200)
		for i, f := range feats {
			e := m.Explain(f)
			if p := m.Predict(f); e.P != p {
				t.Fatalf("%s event %d: explanation %v, prediction %v", norm, i, e.P, p)
			}
			sum := e.Bias
			for _, term := range e.Terms {
				sum += term.Contribution
			}
			if sum != e.Margin || len(e.Terms) != len(f) {
				t.Fatalf("%s event %d: terms add up to %v, margin %v", norm, i, sum, e.Margin)
			}
		}
	}
}
