package learners_test

import (
	"bytes"
	"math"
	"testing"

	"github.com/mlstream/mlstream/internal/gen"
	"github.com/mlstream/mlstream/learners"
)

// The tracker's running divergence equals the distance computed from
// scratch, and a full snapshot plus deltas rebuilds the model exactly.
func TestTrackerAndDeltaBackups(t *testing.T) {
	m, err := learners.NewModel(learners.Config{HashBits: 12})
	if err != nil {
		t.Fatal(err)
	}
	feats, labels := gen.FeatureEvents(3000, 500)
	l := m.NewLearner()
	tr := learners.NewTracker(m)
	weights := func() []float64 {
		w := make([]float64, m.Slots())
		for s := range w {
			w[s] = m.Weight(s)
		}
		return w
	}
	var full bytes.Buffer
	if _, err := m.WriteTo(&full); err != nil {
		t.Fatal(err)
	}
	backed := weights()
	var deltas []bytes.Buffer
	for i := range feats {
		l.Learn(feats[i], labels[i])
		if l.Pending() == 100 {
			l.SyncTracked(tr)
			now := weights()
			var sq float64
			for s := range now {
				sq += (now[s] - backed[s]) * (now[s] - backed[s])
			}
			// The tracker keeps weights as float32: relative error ~1e-7.
			if got, want := tr.Divergence(), math.Sqrt(sq); math.Abs(got-want) > 1e-6*(1+want) {
				t.Fatalf("event %d: divergence %v, from scratch %v", i, got, want)
			}
			if tr.Divergence() > 0.5 {
				var d bytes.Buffer
				if _, err := m.WriteDelta(&d, tr.BackedUp()); err != nil {
					t.Fatal(err)
				}
				deltas = append(deltas, d)
				backed = weights()
				if tr.Divergence() != 0 || tr.Dirty() != 0 {
					t.Fatal("divergence not restarted")
				}
			}
		}
	}
	if len(deltas) < 3 {
		t.Fatalf("only %d deltas", len(deltas))
	}
	r, _ := learners.NewModel(learners.Config{HashBits: 12})
	if _, err := r.ReadFrom(&full); err != nil {
		t.Fatal(err)
	}
	for i := range deltas {
		if _, err := r.ReadFrom(&deltas[i]); err != nil {
			t.Fatal(err)
		}
	}
	for s := range backed {
		if r.Weight(s) != backed[s] {
			t.Fatalf("slot %d: rebuilt %v, backed up %v", s, r.Weight(s), backed[s])
		}
	}
}

func TestProgressiveMarshalRoundTrip(t *testing.T) {
	p := learners.NewProgressive(50)
	for i := range 120 {
		p.Observe(float64(i%10)/10, i%3 == 0)
	}
	data, err := p.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	q := learners.NewProgressive(50)
	if err := q.UnmarshalBinary(data); err != nil {
		t.Fatal(err)
	}
	if q.Summary() != p.Summary() {
		t.Fatalf("%+v != %+v", q.Summary(), p.Summary())
	}
	p.Observe(0.9, true)
	q.Observe(0.9, true)
	if q.Summary() != p.Summary() {
		t.Fatal("diverged after restore")
	}
	if err := learners.NewProgressive(40).UnmarshalBinary(data); err == nil {
		t.Fatal("window mismatch accepted")
	}
	for cut := 0; cut < len(data); cut += 97 {
		if err := q.UnmarshalBinary(data[:cut]); err == nil {
			t.Fatalf("truncated at %d accepted", cut)
		}
	}
}
