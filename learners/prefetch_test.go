package learners

import (
	"math"
	"math/rand/v2"
	"testing"
)

// wideEvents is n events of 16 words drawn from vocab and 4 numbers, with
// random labels: many distinct slots between syncs.
func wideEvents(n, vocab int) ([][]Feature, []bool) {
	r := rand.New(rand.NewPCG(1, 2))
	feats, labels := make([][]Feature, n), make([]bool, n)
	for i := range feats {
		for range 16 {
			feats[i] = append(feats[i], Feature{Hash: HashName("w"+string(rune('a'+r.IntN(26)))) ^ uint64(r.IntN(vocab))<<20, Value: 1})
		}
		for j := range 4 {
			feats[i] = append(feats[i], Feature{Hash: uint64(j), Value: math.Round(r.ExpFloat64() * math.Pow(10, float64(j)))})
		}
		labels[i] = r.IntN(2) == 0
	}
	return feats, labels
}

// TestPrefetchChangesNothing learns the same events with and without
// Prefetch of the next one, syncing merges of thousands of entries (many
// prefetch chunks), also through SyncTracked: every state word and every
// returned probability must be the same bit for bit.
func TestPrefetchChangesNothing(t *testing.T) {
	feats, labels := wideEvents(3000, 100_000)
	run := func(prefetch, tracked bool) (*Model, []float64) {
		m, err := NewModel(DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		tr := NewTracker(m)
		l := m.NewLearner()
		l.Prefetch(nil) // nothing to do
		var probs []float64
		for i := range feats {
			if prefetch && i+1 < len(feats) {
				l.Prefetch(feats[i+1])
			}
			probs = append(probs, l.Learn(feats[i], labels[i]))
			if l.Pending() == 700 {
				if tracked {
					l.SyncTracked(tr)
				} else {
					l.Sync()
				}
			}
		}
		l.Sync()
		return m, probs
	}
	for _, tracked := range []bool{false, true} {
		m0, p0 := run(false, tracked)
		m1, p1 := run(true, tracked)
		for i := range p0 {
			if math.Float64bits(p0[i]) != math.Float64bits(p1[i]) {
				t.Fatalf("tracked %v: event %d: probability %v with Prefetch, %v without", tracked, i, p1[i], p0[i])
			}
		}
		for i := range m0.state {
			if m0.state[i] != m1.state[i] {
				t.Fatalf("tracked %v: state word %d differs with Prefetch", tracked, i)
			}
		}
		if m0.Updates() != uint64(len(feats)) || m1.Updates() != m0.Updates() {
			t.Fatalf("updates %d and %d, want %d", m0.Updates(), m1.Updates(), len(feats))
		}
	}
}

// TestPrefetchOddHashes: Prefetch computes addresses from any hash, also
// ones whose slot is the last one; it never faults.
func TestPrefetchOddHashes(t *testing.T) {
	m, _ := NewModel(Config{HashBits: 10})
	l := m.NewLearner()
	l.Prefetch([]Feature{{Hash: math.MaxUint64, Value: 1}, {Hash: 0, Value: math.NaN()}, {Hash: 1 << 63, Value: 0}})
	l.Learn([]Feature{{Hash: math.MaxUint64, Value: 1}}, true)
	if l.Sync() != 1 {
		t.Fatal("sync")
	}
}
