package learners_test

import (
	"testing"

	"github.com/mlstream/mlstream/internal/gen"
	"github.com/mlstream/mlstream/learners"
)

// driftRun learns a generated stream whose true model changes after
// driftAfter events (never if 0) and returns the events after which the
// detector fired.
func driftRun(t *testing.T, seed int64, driftAfter, n int) []int {
	t.Helper()
	m, err := learners.NewModel(learners.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	l := m.NewLearner()
	g := gen.New(gen.Config{Seed: seed, DriftAfter: driftAfter})
	d := learners.NewPageHinkley()
	var fired []int
	var feats []learners.Feature
	for i := 1; i <= n; i++ {
		e := g.Next()
		feats = e.Features(feats[:0])
		if d.UpdatePrediction(l.Learn(feats, e.Label), e.Label) {
			fired = append(fired, i)
		}
		if i%100 == 0 {
			l.Sync()
		}
	}
	return fired
}

// The detector fires soon after the true model changes, and not before.
func TestPageHinkleyFindsGeneratedDrift(t *testing.T) {
	const driftAfter, within = 20000, 1000
	for seed := int64(1); seed <= 4; seed++ {
		fired := driftRun(t, seed, driftAfter, driftAfter+within)
		if len(fired) == 0 {
			t.Errorf("seed %d: no drift within %d events of the change", seed, within)
			continue
		}
		if fired[0] <= driftAfter {
			t.Errorf("seed %d: drift signalled at event %d, before the change at %d (all: %v)", seed, fired[0], driftAfter, fired)
		}
	}
}

// Without a change in the true model the detector stays quiet.
func TestPageHinkleyQuietWithoutDrift(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		if fired := driftRun(t, seed, 0, 40000); len(fired) > 0 {
			t.Errorf("seed %d: drifts signalled at %v in a stationary stream", seed, fired)
		}
	}
}

func TestPageHinkleyStep(t *testing.T) {
	d := learners.NewPageHinkley()
	for i := range 1000 {
		if d.Update(0.3) {
			t.Fatalf("constant values signalled a drift at %d", i)
		}
	}
	for i := range 1000 {
		if d.Update(0.8) {
			// The sum grows by about 0.5 per value (less as the mean
			// follows) past the threshold 100.
			if i < 190 || i > 400 {
				t.Fatalf("step found after %d values, want about 100", i)
			}
			return
		}
	}
	t.Fatal("a step from 0.3 to 0.8 went unnoticed")
}

func TestPageHinkleyNoAlloc(t *testing.T) {
	d := learners.NewPageHinkley()
	if n := testing.AllocsPerRun(1000, func() { d.UpdatePrediction(0.7, true) }); n != 0 {
		t.Fatalf("UpdatePrediction allocates %v", n)
	}
}
