package synopses

import (
	"bytes"
	"slices"
	"testing"
	"time"
)

func addSeeds(f *testing.F, backup func(full bool) []byte, update func(i int)) {
	for round := range 3 {
		for i := range 200 {
			update(round*200 + i)
		}
		f.Add(backup(round == 0))
	}
	f.Add([]byte{})
}

// FuzzHeavyHittersRecover hands arbitrary bytes to RecoverState, as a
// full backup and as a delta onto states of every shape, among them the
// state recovered from the seeds' full backup (so that mutated seed deltas
// reach the decoding of increases and of counters that took new items):
// refused bytes leave the state as it was, accepted ones leave a working
// summary.
func FuzzHeavyHittersRecover(f *testing.F) {
	h := NewHeavyHitters(8)
	var fullSeed []byte
	addSeeds(f, func(full bool) []byte {
		var b bytes.Buffer
		_ = h.BackupState(&b, full)
		if full {
			fullSeed = bytes.Clone(b.Bytes())
		}
		return b.Bytes()
	}, func(i int) { h.Update(keyNames[(i*i)%50], uint64(1+i%3)) })
	f.Fuzz(func(t *testing.T, data []byte) {
		base := NewHeavyHitters(8)
		base.Update("a", 1)
		chained := &HeavyHitters{}
		if err := chained.RecoverState(bytes.NewReader(fullSeed)); err != nil {
			t.Fatal(err)
		}
		for _, n := range []*HeavyHitters{{}, NewHeavyHitters(8), base, chained} {
			before := n.Items()
			if err := n.RecoverState(bytes.NewReader(data)); err != nil {
				if !slices.Equal(n.Items(), before) {
					t.Fatalf("refused bytes (%v) changed the state", err)
				}
				continue
			}
			if n.capacity > 0 {
				// A state that decoded must work.
				checkInvariants(t, n)
				n.Update("z", 1)
				n.TopK(3)
				m := NewHeavyHitters(4)
				m.Merge(n)
				var b bytes.Buffer
				if err := n.BackupState(&b, true); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}

func FuzzDistinctRecover(f *testing.F) {
	d, _ := NewDistinct(6)
	addSeeds(f, func(full bool) []byte {
		var b bytes.Buffer
		_ = d.BackupState(&b, full)
		return b.Bytes()
	}, func(i int) { d.InsertHash(uint64(i) * 0x9E3779B97F4A7C15) })
	f.Fuzz(func(t *testing.T, data []byte) {
		base, _ := NewDistinct(6)
		for _, n := range []*Distinct{{}, base} {
			if n.RecoverState(bytes.NewReader(data)) == nil && n.sk != nil {
				n.InsertString("x")
				n.Estimate()
				n.Bounds(3)
				var b bytes.Buffer
				if err := n.BackupState(&b, false); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}

func FuzzWindowedRecover(f *testing.F) {
	h := NewWindowedHH(4, time.Second, 2)
	addSeeds(f, func(full bool) []byte {
		var b bytes.Buffer
		_ = h.BackupState(&b, full)
		return b.Bytes()
	}, func(i int) { h.Update(keyNames[i%7], 1, int64(i*37)) })
	d, _ := NewWindowedDistinct(5, time.Second, 2)
	addSeeds(f, func(full bool) []byte {
		var b bytes.Buffer
		_ = d.BackupState(&b, full)
		return b.Bytes()
	}, func(i int) { d.InsertString(keyNames[i%7], int64(i*37)) })
	f.Fuzz(func(t *testing.T, data []byte) {
		n := NewWindowedHH(4, time.Second, 2)
		if n.RecoverState(bytes.NewReader(data)) == nil {
			n.Update("x", 1, 5000)
			n.All()
			n.Last()
		}
		m, _ := NewWindowedDistinct(5, time.Second, 2)
		if m.RecoverState(bytes.NewReader(data)) == nil {
			m.InsertString("x", 5000)
			_, a := m.All()
			a.Estimate()
		}
	})
}
