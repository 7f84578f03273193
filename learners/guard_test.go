package learners

import (
	"math"
	"testing"
)

// allFinite fails the test if any slot's weight or optimizer state is not
// finite.
func allFinite(t *testing.T, m *Model) {
	t.Helper()
	for slot := 0; slot < m.Slots(); slot++ {
		base := slot * stride
		for _, v := range []float64{m.Weight(slot), m.load(base + offA), m.load(base + offB), m.load(base + offInv)} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("slot %d: weight %v, state a=%v b=%v inv=%v", slot, m.Weight(slot), m.load(base+offA), m.load(base+offB), m.load(base+offInv))
			}
		}
	}
}

// Hostile inputs never make the model's state non-finite: an event that
// would is skipped and counted, and the model keeps learning from the
// others.
func TestLearnerGuardsItsState(t *testing.T) {
	x, y := HashName("x"), HashName("y")
	cases := []struct {
		name     string
		feats    [][]Feature
		skipped  bool // at least one update is counted as skipped
		fromSync bool // the skip may come from Sync's guard rather than Learn's
	}{
		{"+Inf", [][]Feature{{{x, math.Inf(1)}}}, true, false},
		{"-Inf", [][]Feature{{{x, math.Inf(-1)}, {y, 1}}}, true, false},
		{"NaN is read as 0", [][]Feature{{{x, math.NaN()}, {y, 1}}}, false, false},
		// A subnormal value would make the adaptive scale 1/|x| infinite.
		{"subnormal then normal", [][]Feature{{{x, 1e-320}}, {{x, 1}}, {{x, 5e-324}, {y, 2}}}, false, false},
		{"tiny then huge", [][]Feature{{{x, 1e-150}}, {{x, 1e150}}, {{x, 1e-150}}}, false, false},
		{"huge", [][]Feature{{{x, 1e308}, {y, -1e308}}, {{x, math.MaxFloat64}}}, false, true},
	}
	for _, opt := range []string{OptimizerFTRL, OptimizerAdaGrad, OptimizerSGD} {
		for _, adaptive := range []bool{true, false} {
			for _, c := range cases {
				t.Run(opt+"/"+map[bool]string{true: "adaptive", false: "plain"}[adaptive]+"/"+c.name, func(t *testing.T) {
					m, err := NewModel(Config{Optimizer: opt, HashBits: 8, Adaptive: &adaptive})
					if err != nil {
						t.Fatal(err)
					}
					l := m.NewLearner()
					for i := range 50 {
						for _, f := range c.feats {
							p := l.Learn(f, i%2 == 0)
							if math.IsNaN(p) || p <= 0 || p >= 1 {
								t.Fatalf("Learn returned %v", p)
							}
						}
						l.Sync()
						allFinite(t, m)
					}
					if c.skipped && m.Skipped() == 0 {
						t.Errorf("nothing counted as skipped")
					}
					if !c.skipped && !c.fromSync && m.Skipped() != 0 {
						t.Errorf("%d updates skipped, want none", m.Skipped())
					}
					if s := m.Snapshot(true, 0); s.Skipped != m.Skipped() {
						t.Errorf("snapshot skipped %d, model %d", s.Skipped, m.Skipped())
					}
					// The model still learns from ordinary events.
					before := m.Updates()
					for i := range 100 {
						l.Learn([]Feature{{y, 1}}, i%3 != 0)
					}
					l.Sync()
					allFinite(t, m)
					if m.Updates() != before+100 {
						t.Errorf("learned %d of 100 ordinary events after the hostile ones", m.Updates()-before)
					}
				})
			}
		}
	}
}

// An update undone leaves the learner's delta as it was, also when an
// event touches a slot twice. (SGD's update, |g·x| <= |x|, cannot
// overflow when the margin is finite.) Raw values: sqrt would tame the
// huge one.
func TestUndoRestoresDelta(t *testing.T) {
	for _, opt := range []string{OptimizerFTRL, OptimizerAdaGrad} {
		adaptive := false
		m, _ := NewModel(Config{Optimizer: opt, HashBits: 4, Adaptive: &adaptive, Normalize: NormalizeNone})
		l := m.NewLearner()
		x := HashName("x")
		l.Learn([]Feature{{x, 3}, {x, 2}}, true)
		before := l.Predict([]Feature{{x, 1}})
		l.Learn([]Feature{{x, 2}, {x, math.MaxFloat64}, {x, 1}}, false)
		if got := l.Predict([]Feature{{x, 1}}); got != before {
			t.Errorf("%s: prediction %v after a skipped update, %v before", opt, got, before)
		}
		if l.Pending() != 1 || m.Skipped() != 1 {
			t.Errorf("%s: pending %d, skipped %d; want 1 and 1", opt, l.Pending(), m.Skipped())
		}
	}
}

func TestSkipValue(t *testing.T) {
	for v, skip := range map[float64]bool{
		0: true, math.Copysign(0, -1): true, math.NaN(): true, 5e-324: true, 1e-300: true, MinValue / 2: true,
		MinValue: false, -MinValue: false, 1: false, -1e300: false, math.MaxFloat64: false, math.Inf(1): false, math.Inf(-1): false,
	} {
		if skipValue(v) != skip {
			t.Errorf("skipValue(%v) = %v", v, !skip)
		}
	}
}
