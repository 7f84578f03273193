package learners

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
)

type obs struct {
	p     float64
	label bool
}

// brute computes the measures of events directly; AUC by pairwise
// comparison of the raw probabilities. sameBin is the share of
// positive-negative pairs in one AUC bin with different probabilities,
// which bounds (times 1/2) the histogram's AUC error.
func brute(events []obs) (m Measures, sameBin float64) {
	m.Count = int64(len(events))
	if m.Count == 0 {
		bruteRates(&m)
		return m, 0
	}
	var correct, loss float64
	for _, e := range events {
		if e.label {
			m.Positives++
		}
		if (e.p > 0.5) == e.label {
			correct++
		}
		loss += logLoss(e.p, e.label)
		bruteDecision(&m, e)
	}
	bruteRates(&m)
	m.Accuracy = correct / float64(m.Count)
	m.LogLoss = loss / float64(m.Count)
	var pairs, conc, same float64
	for _, a := range events {
		if !a.label {
			continue
		}
		for _, b := range events {
			if b.label {
				continue
			}
			pairs++
			switch {
			case a.p > b.p:
				conc++
			case a.p == b.p:
				conc += 0.5
			}
			if probBin(a.p) == probBin(b.p) && a.p != b.p {
				same++
			}
		}
	}
	if pairs > 0 {
		m.AUC = conc / pairs
		sameBin = same / pairs
	}
	return m, sameBin
}

// bruteDecision counts one event at the threshold and in its calibration
// bin (sums of predictions for now).
func bruteDecision(m *Measures, e obs) {
	switch {
	case e.p > 0.5 && e.label:
		m.TP++
	case e.p > 0.5:
		m.FP++
	case e.label:
		m.FN++
	default:
		m.TN++
	}
	i := min(int(e.p*10), 9)
	c := &m.Calibration[i]
	c.Count++
	c.MeanPredicted += e.p
	if e.label {
		c.ObservedRate++
	}
}

func bruteRates(m *Measures) {
	if m.TP+m.FP > 0 {
		m.Precision = float64(m.TP) / float64(m.TP+m.FP)
	}
	if m.TP+m.FN > 0 {
		m.Recall = float64(m.TP) / float64(m.TP+m.FN)
	}
	if m.TP > 0 {
		m.F1 = 2 * float64(m.TP) / float64(2*m.TP+m.FP+m.FN)
	}
	for i := range m.Calibration {
		c := &m.Calibration[i]
		c.Lo, c.Hi = float64(i)/10, float64(i+1)/10
		if c.Count > 0 {
			c.MeanPredicted /= float64(c.Count)
			c.ObservedRate /= float64(c.Count)
		}
	}
}

// checkDecisions compares the counts at the threshold, the rates made of
// them and the calibration table with a direct count.
func checkDecisions(t *testing.T, what string, got, want Measures) {
	t.Helper()
	if got.TP != want.TP || got.FP != want.FP || got.FN != want.FN || got.TN != want.TN {
		t.Errorf("%s: tp/fp/fn/tn %d/%d/%d/%d, want %d/%d/%d/%d", what, got.TP, got.FP, got.FN, got.TN, want.TP, want.FP, want.FN, want.TN)
	}
	for _, r := range [][3]any{{"precision", got.Precision, want.Precision}, {"recall", got.Recall, want.Recall}, {"f1", got.F1, want.F1}} {
		if math.Abs(r[1].(float64)-r[2].(float64)) > 1e-12 {
			t.Errorf("%s: %s %v, want %v", what, r[0], r[1], r[2])
		}
	}
	for i, c := range got.Calibration {
		w := want.Calibration[i]
		if c.Count != w.Count || c.Lo != w.Lo || c.Hi != w.Hi || math.Abs(c.ObservedRate-w.ObservedRate) > 1e-12 ||
			math.Abs(c.MeanPredicted-w.MeanPredicted) > 1e-6 { // the window keeps float32 predictions
			t.Errorf("%s: calibration bin %d %+v, want %+v", what, i, c, w)
		}
	}
}

func checkMeasures(t *testing.T, what string, got Measures, events []obs) {
	t.Helper()
	want, same := brute(events)
	checkDecisions(t, what, got, want)
	if got.Count != want.Count || got.Positives != want.Positives {
		t.Errorf("%s: count %d/%d, want %d/%d", what, got.Count, got.Positives, want.Count, want.Positives)
	}
	if math.Abs(got.Accuracy-want.Accuracy) > 1e-12 {
		t.Errorf("%s: accuracy %v, want %v", what, got.Accuracy, want.Accuracy)
	}
	if math.Abs(got.LogLoss-want.LogLoss) > 1e-6*math.Max(1, want.LogLoss) { // the window keeps float32 losses
		t.Errorf("%s: log loss %v, want %v", what, got.LogLoss, want.LogLoss)
	}
	if math.Abs(got.AUC-want.AUC) > same/2+1e-12 {
		t.Errorf("%s: AUC %v, want %v (same-bin share %v)", what, got.AUC, want.AUC, same)
	}
}

func TestProgressive(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	random := func(n int, noise float64) []obs {
		ev := make([]obs, n)
		for i := range ev {
			l := r.IntN(2) == 1
			p := r.Float64()
			if l {
				p = math.Min(1, p+noise)
			}
			ev[i] = obs{p, l}
		}
		return ev
	}
	cases := []struct {
		name   string
		window int
		events []obs
	}{
		{"empty", 5, nil},
		{"one positive", 5, []obs{{0.9, true}}},
		{"all negative", 5, []obs{{0.1, false}, {0.7, false}, {0.3, false}}},
		{"perfect", 10, []obs{{0.9, true}, {0.1, false}, {0.8, true}, {0.2, false}}},
		{"reversed", 10, []obs{{0.1, true}, {0.9, false}, {0.2, true}, {0.8, false}}},
		{"ties at one half", 10, []obs{{0.5, true}, {0.5, false}, {0.5, false}}},
		{"bin edges", 4, []obs{{0.7, true}, {0.3, false}, {0.1, true}, {1, true}, {0.5000001, false}, {0.6, true}, {0.9999, false}}},
		{"no predicted positive", 10, []obs{{0.2, true}, {0.4, false}}},
		{"extremes clamp the loss", 10, []obs{{0, true}, {1, false}, {1, true}, {0, false}}},
		{"window shorter than run", 3, []obs{{0.9, true}, {0.2, true}, {0.4, false}, {0.6, false}, {0.7, true}, {0.3, false}, {0.1, true}}},
		{"random 50, window 7", 7, random(50, 0.3)},
		{"random 300, window 100", 100, random(300, 0.1)},
		{"random 1000, window 1000", 1000, random(1000, 0.2)},
		{"random 2500, window 999", 999, random(2500, 0.5)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := NewProgressive(tc.window)
			for _, e := range tc.events {
				p.Observe(e.p, e.label)
			}
			s := p.Summary()
			checkMeasures(t, "all", s.All, tc.events)
			recent := tc.events[max(0, len(tc.events)-tc.window):]
			checkMeasures(t, "recent", s.Recent, recent)
			if _, err := json.Marshal(s); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestProgressiveMergeClone(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const window, parts = 50, 3
	whole := NewProgressive(window)
	ps := make([]*Progressive, parts)
	var tails [parts][]obs
	for i := range ps {
		ps[i] = NewProgressive(window)
	}
	for i := range 1000 {
		e := obs{r.Float64(), r.IntN(3) == 0}
		whole.Observe(e.p, e.label)
		ps[i%parts].Observe(e.p, e.label)
		tails[i%parts] = append(tails[i%parts], e)
	}
	job := NewProgressive(window)
	var recent []obs
	for i, p := range ps {
		job.Merge(p.Clone())
		recent = append(recent, tails[i][len(tails[i])-window:]...)
	}
	s := job.Summary()
	if s.All != whole.Summary().All {
		t.Errorf("merged whole run %+v, want %+v", s.All, whole.Summary().All)
	}
	checkMeasures(t, "merged recent", s.Recent, recent)

	// A clone is independent of the original.
	c := ps[0].Clone()
	before := ps[0].Summary()
	c.Observe(0.99, false)
	if ps[0].Summary() != before {
		t.Error("observing a clone changed the original")
	}
	// A Progressive with merged counts keeps observing its own window.
	job.Observe(0.9, true)
	if got := job.Summary().Recent.Count; got != parts*window+1 {
		t.Errorf("recent count after observe %d", got)
	}
}

func TestProgressiveNoAlloc(t *testing.T) {
	p := NewProgressive(100)
	if n := testing.AllocsPerRun(1000, func() { p.Observe(0.3, true) }); n != 0 {
		t.Errorf("Observe allocates %v", n)
	}
}

func TestProgressiveLongRunLoss(t *testing.T) {
	// Adding and subtracting losses for many windows stays accurate.
	p := NewProgressive(10)
	for i := range 1_000_003 {
		p.Observe(float64(i%97)/97, i%2 == 0)
	}
	var ev []obs
	for i := 1_000_003 - 10; i < 1_000_003; i++ {
		ev = append(ev, obs{float64(i%97) / 97, i%2 == 0})
	}
	checkMeasures(t, "recent", p.Summary().Recent, ev)
}

// LastLoss is the log loss of the event just observed, across the
// window's wrap.
func TestProgressiveLastLoss(t *testing.T) {
	p := NewProgressive(3)
	if p.LastLoss() != 0 {
		t.Fatalf("before any event: %v", p.LastLoss())
	}
	for i := range 7 {
		prob := float64(i+1) / 10
		p.Observe(prob, i%2 == 0)
		if got, want := p.LastLoss(), logLoss(prob, i%2 == 0); math.Abs(got-want) > 1e-6 {
			t.Fatalf("event %d: %v, want %v", i, got, want)
		}
	}
}

// CopyTo makes the same copy as Clone, into memory it reuses.
func TestProgressiveCopyTo(t *testing.T) {
	p := NewProgressive(8)
	for i := range 20 {
		p.Observe(float64(i%10)/10, i%3 == 0)
	}
	dst := NewProgressive(8)
	dst.Observe(0.9, false)
	p.CopyTo(dst)
	if got, want := dst.Summary(), p.Clone().Summary(); got != want {
		t.Fatalf("CopyTo %+v, Clone %+v", got, want)
	}
	if a := testing.AllocsPerRun(10, func() { p.CopyTo(dst) }); a != 0 {
		t.Fatalf("CopyTo allocates %v times into a copy of the same size", a)
	}
	p.Observe(0.2, true)
	if dst.Summary() == p.Summary() {
		t.Fatal("the copy shares state with the original")
	}
}
