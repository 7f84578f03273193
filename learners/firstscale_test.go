package learners

import (
	"math"
	"sync"
	"testing"
)

// TestScanSetsFirstScale: an event whose only new scales are those of
// slots never seen stays on scan's path (before firstScale it gave up to
// collect), with each such slot's scale set to |x| (after the sqrt
// normalization); a shared learner, and a slot whose scale must grow
// within the event, still give up.
func TestScanSetsFirstScale(t *testing.T) {
	m, err := NewModel(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	l := m.NewLearner()
	l.Learn([]Feature{{Hash: 1, Value: 1}}, true) // the intercept's scale
	feats := []Feature{{Hash: 2, Value: 9}, {Hash: 3, Value: -0.5}}
	items, ok := l.scan(feats)
	if !ok {
		t.Fatal("scan gave up on first-seen slots")
	}
	for i, want := range []struct{ x, inv float64 }{{1, 1.0 / 3}, {-1, 2}} {
		it := items[i+1]
		if it.x != want.x {
			t.Errorf("slot %d: input %v in scale units, want %v", it.slot, it.x, want.x)
		}
		if got := m.load(int(it.slot)*stride + offInv); got != want.inv {
			t.Errorf("slot %d: 1/scale %v, want %v", it.slot, got, want.inv)
		}
	}

	if _, ok := l.scan([]Feature{{Hash: 4, Value: 1}, {Hash: 4, Value: 2}}); ok {
		t.Error("scan kept an event whose first-seen slot must grow within it")
	}
	if got := m.load(4*stride + offInv); got != 1 {
		t.Errorf("slot 4: 1/scale %v after giving up, want the first value's 1", got)
	}

	shared := m.NewLearner()
	shared.shared = true
	if _, ok := shared.scan([]Feature{{Hash: 5, Value: 1}}); ok {
		t.Error("a shared learner's scan kept a first-seen slot")
	}
	if got := m.load(5*stride + offInv); got != 0 {
		t.Errorf("a shared learner set a scale: 1/scale %v", got)
	}
}

// TestFirstScaleSameResults learns events with many first-seen slots
// (among them slots seen twice in an event, and numeric values whose
// scales keep growing) on scan's path and, with firstScale off, through
// collect: every probability and state word is the same bit for bit.
func TestFirstScaleSameResults(t *testing.T) {
	feats, labels := wideEvents(3000, 100_000)
	for i := 0; i < len(feats); i += 7 { // a slot twice, the second value larger
		f := feats[i]
		feats[i] = append(f[:len(f):len(f)], Feature{Hash: f[0].Hash, Value: 3})
	}
	run := func(off bool) (*Model, []float64) {
		m, err := NewModel(DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		l := m.NewLearner()
		l.noFirstScale = off
		var probs []float64
		for i := range feats {
			probs = append(probs, l.Learn(feats[i], labels[i]))
			if l.Pending() == 700 {
				l.Sync()
			}
		}
		l.Sync()
		return m, probs
	}
	m0, p0 := run(true)
	m1, p1 := run(false)
	for i := range p0 {
		if math.Float64bits(p0[i]) != math.Float64bits(p1[i]) {
			t.Fatalf("event %d: probability %v, %v through collect", i, p1[i], p0[i])
		}
	}
	for i := range m0.state {
		if m0.state[i] != m1.state[i] {
			t.Fatalf("state word %d: %#x, %#x through collect", i, m1.state[i], m0.state[i])
		}
	}
	if m0.Skipped() != m1.Skipped() {
		t.Fatalf("skipped %d, %d through collect", m1.Skipped(), m0.Skipped())
	}
}

// TestFirstScaleConcurrent: learners of one model racing for the first
// scale of the same slots (run it with -race) leave each slot's scale at
// the largest |x| either saw, as growScale alone did.
func TestFirstScaleConcurrent(t *testing.T) {
	m, err := NewModel(Config{HashBits: 12, Normalize: NormalizeNone})
	if err != nil {
		t.Fatal(err)
	}
	const slots = 500
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := m.NewLearner()
			for s := range slots {
				// Learner g sees slot s with |x| = 1+(s+g)%4: the largest
				// over the four learners is 4.
				l.Learn([]Feature{{Hash: uint64(s), Value: float64(1 + (s+g)%4)}}, s%2 == 0)
			}
			l.Sync()
		}()
	}
	wg.Wait()
	for s := range slots {
		if got := m.load(s*stride + offInv); got != 0.25 {
			t.Fatalf("slot %d: 1/scale %v, want 1/4", s, got)
		}
	}
}
