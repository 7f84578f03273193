package learners

import (
	"math"
	"sync"
	"testing"
)

// addAB of concurrent writers loses no addition, and a sum that is not
// finite leaves its word alone and counts in Skipped, as two addFloat do.
func TestAddABConcurrentAndFinite(t *testing.T) { checkAddAB(t) }

func checkAddAB(t *testing.T) {
	t.Helper()
	m, err := NewModel(Config{HashBits: 10})
	if err != nil {
		t.Fatal(err)
	}
	const writers, adds = 4, 20_000
	base := 7 * stride
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for range adds {
				m.addAB(base, 1, float64(w+1))
			}
		})
	}
	wg.Wait()
	if a, b := m.load(base+offA), m.load(base+offB); a != writers*adds || b != adds*(1+2+3+4) {
		t.Fatalf("after concurrent adds A = %v, B = %v; want %v, %v", a, b, writers*adds, adds*(1+2+3+4))
	}
	if s := m.Skipped(); s != 0 {
		t.Fatalf("Skipped = %d after finite adds", s)
	}

	m.addAB(base, math.Inf(1), 0.5)
	if a, b := m.load(base+offA), m.load(base+offB); a != writers*adds || b != adds*10+0.5 {
		t.Fatalf("after +Inf to A: A = %v, B = %v; want A unchanged, B + 0.5", a, b)
	}
	m.addAB(base, 0.25, math.NaN())
	m.addAB(base, math.MaxFloat64, math.MaxFloat64) // A stays finite; B too
	if s := m.Skipped(); s != 2 {
		t.Fatalf("Skipped = %d, want 2 (the +Inf and the NaN)", s)
	}
	m.addAB(base, math.MaxFloat64, -math.MaxFloat64)
	if s := m.Skipped(); s != 3 {
		t.Fatalf("Skipped = %d, want 3 (A overflowed to +Inf)", s)
	}
	if a := m.load(base + offA); math.IsInf(a, 0) || math.IsNaN(a) {
		t.Fatalf("A = %v: a sum that is not finite was stored", a)
	}
}
