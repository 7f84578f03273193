package learners

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// hasCX16: GOAMD64=v1, Go's default, does not promise CMPXCHG16B (the
// first x86-64 processors lack it).
var hasCX16 = cpu.X86.HasCX16

// addAB adds da to word A and db to word B of the slot at base, as two
// addFloat would, but in one atomic step where the pair is 16-byte aligned
// (always, for a state array of Go's allocator) and the processor has
// CMPXCHG16B: one locked instruction an entry instead of two, a quarter of
// a Sync's time (BenchmarkSync).
func (m *Model) addAB(base int, da, db float64) {
	p := &m.state[base+offA]
	if !hasCX16 || uintptr(unsafe.Pointer(p))&15 != 0 {
		m.addFloats(base, da, db)
		return
	}
	if n := addPair(p, da, db); n != 0 {
		m.skipped.Add(n)
	}
}

// addPair adds da and db to the float64 words p[0] and p[1] (16-byte
// aligned) with LOCK CMPXCHG16B, leaving a word whose sum is not finite
// unchanged; it returns how many were.
//
//go:noescape
func addPair(p *uint64, da, db float64) (skipped uint64)
