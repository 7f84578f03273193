package learners

import (
	"math"
	"testing"
)

// resetFixture is a model of optimizer opt that learned a little.
func resetFixture(t *testing.T, opt string) (*Model, [][]Feature) {
	cfg := DefaultConfig()
	cfg.Optimizer, cfg.HashBits = opt, 12
	if opt == OptimizerFTRL {
		cfg.L1 = 0.5 // the rescaling of z keeps its L1 threshold
	}
	m, err := NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := m.NewLearner()
	var evs [][]Feature
	for i := range 500 {
		f := []Feature{{Hash: HashName("x"), Value: float64(i%7) - 3}, {Hash: HashName("y"), Value: float64(i % 3)}}
		evs = append(evs, f)
		l.Learn(f, f[0].Value > 0)
	}
	l.Sync()
	return m, evs
}

// ResetRates keeps every prediction and gives the weights the steps of a
// fresh model: the next update moves them as much as the first did.
func TestResetRatesKeepsTheWeights(t *testing.T) {
	for _, opt := range []string{OptimizerFTRL, OptimizerAdaGrad, OptimizerSGD} {
		m, evs := resetFixture(t, opt)
		before := make([]float64, len(evs))
		for i, f := range evs {
			before[i] = m.Predict(f)
		}
		tr := NewTracker(m)
		changed := m.ResetRates(tr)
		if opt != OptimizerSGD && (changed == 0 || tr.Dirty() != changed || tr.Divergence() > 1e-6) {
			t.Errorf("%s: %d slots changed, %d dirty, divergence %v", opt, changed, tr.Dirty(), tr.Divergence())
		}
		for i, f := range evs {
			if p := m.Predict(f); math.Abs(p-before[i]) > 1e-9 {
				t.Fatalf("%s: event %d predicted %v after the reset, %v before", opt, i, p, before[i])
			}
		}
		// One more update moves the model as far as on a fresh model.
		f := []Feature{{Hash: HashName("z"), Value: 1}, {Hash: HashName("x"), Value: 1}}
		step := func(m *Model) float64 {
			p0 := m.Predict(f)
			l := m.NewLearner()
			l.Learn(f, true)
			l.Sync()
			return m.Predict(f) - p0
		}
		if opt != OptimizerSGD {
			slow, _ := resetFixture(t, opt)
			if a, b := step(slow), step(m); b <= a {
				t.Errorf("%s: a step moves p by %v after ResetRates, %v without: not faster", opt, b, a)
			}
		}
	}
}

// Reset zeroes the weights: every prediction is 0.5 again, and the
// tracker sees the weights move.
func TestResetZeroesTheModel(t *testing.T) {
	m, evs := resetFixture(t, OptimizerFTRL)
	tr := NewTracker(m)
	if n := m.Reset(tr); n == 0 || tr.Divergence() == 0 || tr.Dirty() != n {
		t.Fatalf("%d slots changed, divergence %v, %d dirty", n, tr.Divergence(), tr.Dirty())
	}
	for _, f := range evs {
		if p := m.Predict(f); p != 0.5 {
			t.Fatalf("predicted %v after a reset", p)
		}
	}
}
