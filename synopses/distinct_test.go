package synopses

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func mustDistinct(t testing.TB, p uint8) *Distinct {
	t.Helper()
	s, err := NewDistinct(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDistinctShadow: the shadow registers are exactly the registers the
// library serialises for its dense sketch.
func TestDistinctShadow(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, p := range []uint8{4, 8, 14, 18} {
		s := mustDistinct(t, p)
		for i := range 200_000 {
			if i%2 == 0 {
				s.InsertHash(r.Uint64())
			} else {
				s.InsertHash(r.Uint64() >> r.IntN(64)) // long runs of zeros too
			}
		}
		b, err := s.sk.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if b[0] != 2 || b[3] != 0 || !bytes.Equal(b[8:], s.regs) {
			t.Fatalf("p=%d: shadow differs from the library's registers", p)
		}
	}
}

func TestHashFor(t *testing.T) {
	for _, p := range []uint8{4, 14, 18} {
		for _, i := range []uint32{0, 1, 1<<p - 1} {
			for r := uint8(1); r <= 64-p+1; r++ {
				if gi, gr := posVal(hashFor(i, r, p), p); gi != i || gr != r {
					t.Fatalf("p=%d i=%d r=%d: got %d %d", p, i, r, gi, gr)
				}
			}
		}
	}
}

func TestDistinctAccuracy(t *testing.T) {
	for _, p := range []uint8{10, 12, 14} {
		for seed := range uint64(4) {
			for _, n := range []int{100, 5_000, 200_000} {
				s := mustDistinct(t, p)
				for i := range n {
					s.InsertString(fmt.Sprintf("s%d-item-%d", seed, i))
					if i%3 == 0 { // duplicates change nothing
						s.InsertString(fmt.Sprintf("s%d-item-%d", seed, i/2))
					}
				}
				e := float64(s.Estimate())
				rel := math.Abs(e-float64(n)) / float64(n)
				if rel > 3*s.StdError() {
					t.Fatalf("p=%d n=%d seed %d: estimate %v, error %.4f > 3σ = %.4f", p, n, seed, e, rel, 3*s.StdError())
				}
				lo, hi := s.Bounds(3)
				if uint64(n) < lo || uint64(n) > hi {
					t.Fatalf("p=%d n=%d: outside [%d, %d]", p, n, lo, hi)
				}
			}
		}
	}
}

func TestDistinctMerge(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, parts := range []int{2, 5, 8} {
		whole := mustDistinct(t, 14)
		ps := make([]*Distinct, parts)
		for i := range ps {
			ps[i] = mustDistinct(t, 14)
		}
		for range 300_000 {
			x := r.Uint64()
			whole.InsertHash(x)
			ps[r.IntN(parts)].InsertHash(x)
		}
		m := mustDistinct(t, 14)
		for _, p := range ps {
			if err := m.Merge(p); err != nil {
				t.Fatal(err)
			}
		}
		if m.Estimate() != whole.Estimate() || !bytes.Equal(m.regs, whole.regs) {
			t.Fatalf("merged %d != whole %d", m.Estimate(), whole.Estimate())
		}
	}
	a, b := mustDistinct(t, 10), mustDistinct(t, 12)
	if err := a.Merge(b); err == nil {
		t.Fatal("merged precisions 10 and 12")
	}
}

// TestDistinctCrashRecovery backs up (full, then deltas), loses the updates
// after the last backup, recovers a fresh value, widens by the divergence
// at the crash, and checks that the no-crash estimate is within the
// widened bounds and that the recovered registers are those of the backup.
func TestDistinctCrashRecovery(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for trial := range 30 {
		p := uint8(8 + r.IntN(8))
		n := 1 + r.IntN(400_000)
		hs := make([]uint64, n)
		for i := range hs {
			hs[i] = r.Uint64()
		}
		s := mustDistinct(t, p)
		var backups [][]byte
		var atBackup []uint8
		every := 1 + r.IntN(n)
		crashAt := r.IntN(n + 1)
		for i, x := range hs[:crashAt] {
			s.InsertHash(x)
			if (i+1)%every == 0 {
				var buf bytes.Buffer
				full := len(backups)%4 == 0
				if err := s.BackupState(&buf, full); err != nil {
					t.Fatal(err)
				}
				if full {
					backups = backups[:0]
				}
				backups = append(backups, buf.Bytes())
				atBackup = slices.Clone(s.regs)
			}
		}
		if len(backups) == 0 {
			continue
		}
		d := int(s.StateDivergence())
		rec := &Distinct{} // zero value: the full snapshot sets the precision
		for _, b := range backups {
			if err := rec.RecoverState(bytes.NewReader(b)); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(rec.regs, atBackup) {
			t.Fatalf("trial %d: recovered registers differ from the backup", trial)
		}
		// The registers lost are exactly those changed since the backup.
		diff := 0
		for i := range rec.regs {
			if rec.regs[i] != s.regs[i] {
				diff++
			}
		}
		if diff != d {
			t.Fatalf("trial %d: %d registers differ, divergence %d", trial, diff, d)
		}
		rec.Widen(d)
		s.Widen(0)
		for _, x := range hs[crashAt:] {
			rec.InsertHash(x)
			s.InsertHash(x)
		}
		truthEst := s.Estimate()
		worst := rec.worstEstimate(rec.Lost())
		if truthEst > worst {
			t.Fatalf("trial %d (p=%d n=%d, lost %d): no-crash estimate %d above the worst case %d", trial, p, n, d, truthEst, worst)
		}
		if b := rec.RecoveryBound(rec.Lost()); b < 0 || b > 1 {
			t.Fatalf("bound %v", b)
		}
		_, hi := rec.Bounds(3)
		if uint64(n) > hi {
			t.Fatalf("trial %d: %d distinct above upper %d", trial, n, hi)
		}
	}
}

// TestRecoveryBoundClosedForm: past the small range, losing the d worst
// registers costs about (d/m)(1+ln(m/d)) of the estimate; in the small range
// about d/E.
func TestRecoveryBoundClosedForm(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	s := mustDistinct(t, 14)
	m := 1 << 14
	for range 2_000_000 {
		s.InsertHash(r.Uint64())
	}
	for _, d := range []int{16, 164, 1638} {
		b := s.RecoveryBound(d)
		f := float64(d) / float64(m) * (1 + math.Log(float64(m)/float64(d)))
		t.Logf("large range: d=%d d/m=%.4f (d/m)(1+ln(m/d))=%.4f bound=%.4f", d, float64(d)/float64(m), f, b)
		if b < f/2 || b > 2*f {
			t.Fatalf("d=%d: bound %.4f far from %.4f", d, b, f)
		}
	}
	small := mustDistinct(t, 14)
	for range 2000 {
		small.InsertHash(r.Uint64())
	}
	for _, d := range []int{10, 100} {
		b := small.RecoveryBound(d)
		e := float64(small.Estimate())
		t.Logf("small range: E=%v d=%d d/E=%.4f bound=%.4f", e, d, float64(d)/e, b)
		if b < float64(d)/e/2 || b > 2*float64(d)/e {
			t.Fatalf("d=%d: bound %.4f far from d/E = %.4f", d, b, float64(d)/e)
		}
	}
}

func TestDistinctDeltaFallsBackToFull(t *testing.T) {
	s := mustDistinct(t, 6)
	for i := range 10_000 {
		s.InsertString(fmt.Sprint(i))
	}
	var buf bytes.Buffer
	if err := s.BackupState(&buf, false); err != nil {
		t.Fatal(err)
	}
	if buf.Bytes()[5] != kindFull {
		t.Fatal("a delta of every register was not written as a full snapshot")
	}
	var rec Distinct
	if err := rec.RecoverState(&buf); err != nil {
		t.Fatal(err)
	}
	if rec.Estimate() != s.Estimate() {
		t.Fatal("estimate changed")
	}
}
