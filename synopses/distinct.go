package synopses

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/bits"

	"github.com/axiomhq/hyperloglog"
	"github.com/cespare/xxhash/v2"
	"github.com/mlstream/mlstream/ft"
)

// Distinct counts distinct items with a dense HyperLogLog sketch of
// github.com/axiomhq/hyperloglog (2^p one-byte registers), plus a shadow of
// the register values and a changed-since-backup bitset for approximate
// fault tolerance (see the package doc for the divergence and its bound).
//
// Items are hashed with 64-bit xxhash (Insert), so every partition of a job
// must insert through Distinct, never through the library's own Insert
// (which hashes with MetroHash): merges are only meaningful between sketches
// fed the same hash.
//
// A Distinct is a plain value, not safe for concurrent use. The zero value
// has no precision; it can only be the target of a RecoverState with a full
// snapshot.
type Distinct struct {
	p        uint8
	sk       *hyperloglog.Sketch
	regs     []uint8  // the sketch's registers, as its dense form holds them
	changed  []uint64 // bitset over registers changed since the backup
	nchanged int
	lost     int // registers that recoveries may have lost (Widen)
}

var _ ft.Stateful = (*Distinct)(nil)

// NewDistinct returns an empty sketch of 2^precision registers; precision
// must be in [4, 18]. Memory is about 2·2^p + 2^p/8 bytes (34 KiB at 14).
func NewDistinct(precision uint8) (*Distinct, error) {
	sk, err := hyperloglog.NewSketch(precision, false)
	if err != nil {
		return nil, fmt.Errorf("synopses: precision %d: %w", precision, err)
	}
	return newDistinct(precision, sk), nil
}

func newDistinct(p uint8, sk *hyperloglog.Sketch) *Distinct {
	m := 1 << p
	return &Distinct{p: p, sk: sk, regs: make([]uint8, m), changed: make([]uint64, (m+63)/64)}
}

// Precision is p: the sketch has 2^p registers.
func (s *Distinct) Precision() uint8 { return s.p }

// Insert adds an item.
func (s *Distinct) Insert(b []byte) { s.InsertHash(xxhash.Sum64(b)) }

// InsertString adds an item given as a string.
func (s *Distinct) InsertString(v string) { s.InsertHash(xxhash.Sum64String(v)) }

// InsertHash adds an item by its 64-bit hash (xxhash, to merge with sketches
// fed by Insert). O(1); the library is called only when a register grows.
func (s *Distinct) InsertHash(x uint64) {
	i, r := posVal(x, s.p)
	if r > s.regs[i] {
		s.regs[i] = r
		s.sk.InsertHash(x)
		s.mark(i)
	}
}

// posVal is the library's dense getPosVal (hyperloglog.go, utils.go of
// v0.3.0): the register index is the top p bits of the hash, and the value
// is 1 + the number of leading zeros of the remaining 64-p bits, with a
// sentinel bit so that it is at most 64-p+1. TestDistinctShadow checks that
// the shadow equals the registers the library serialises.
func posVal(x uint64, p uint8) (uint32, uint8) {
	i := uint32(x >> (64 - p))
	w := x<<p | 1<<(p-1)
	return i, uint8(bits.LeadingZeros64(w)) + 1
}

// hashFor returns a hash that posVal maps to register i with value r
// (1 ≤ r ≤ 64-p+1): how a delta's register values are written back into
// the library's sketch.
func hashFor(i uint32, r, p uint8) uint64 {
	x := uint64(i) << (64 - p)
	if int(r) <= 64-int(p) {
		x |= 1 << (64 - int(p) - int(r))
	}
	return x
}

func (s *Distinct) maxRho() uint8 { return 64 - s.p + 1 }

func (s *Distinct) mark(i uint32) {
	w, b := i/64, uint64(1)<<(i%64)
	if s.changed[w]&b == 0 {
		s.changed[w] |= b
		s.nchanged++
	}
}

// Estimate is the library's cardinality estimate (LogLog-Beta bias
// correction on the dense registers).
func (s *Distinct) Estimate() uint64 {
	if s.sk == nil {
		return 0
	}
	return s.sk.Estimate()
}

// StdError is the relative standard error of the estimate, 1.04/√(2^p).
func (s *Distinct) StdError() float64 { return 1.04 / math.Sqrt(float64(int(1)<<s.p)) }

// Merge adds o's registers to s (register-wise maximum): the sketch of the
// union of both streams. Both must have the same precision. The registers
// that grow count as changed for fault tolerance, and o's lost registers
// add to s's.
func (s *Distinct) Merge(o *Distinct) error {
	if o == nil || o.sk == nil {
		return nil
	}
	if s.p != o.p {
		return fmt.Errorf("%w: precision %d and %d", ErrMismatch, s.p, o.p)
	}
	for i, v := range o.regs {
		if v > s.regs[i] {
			s.regs[i] = v
			s.mark(uint32(i))
		}
	}
	s.lost += o.lost
	return s.sk.Merge(o.sk)
}

// Clone returns a deep copy.
func (s *Distinct) Clone() *Distinct {
	c := *s
	if s.sk != nil {
		c.sk = s.sk.Clone()
	}
	c.regs = append([]uint8(nil), s.regs...)
	c.changed = append([]uint64(nil), s.changed...)
	return &c
}

// StateDivergence is the number of registers changed since the last backup
// (see the package doc): O(1), and one event moves it by at most 1.
func (s *Distinct) StateDivergence() float64 { return float64(s.nchanged) }

// Widen records that a recovery may have lost up to d register increases
// (d ≤ the divergence at the crash plus the events lost that were never in
// the state: each moves one register). Upper bounds then allow for them;
// widenings add up.
func (s *Distinct) Widen(d int) { s.lost += max(d, 0) }

// Lost is the number of register increases recoveries may have lost.
func (s *Distinct) Lost() int { return s.lost }

// RecoveryBound is the largest relative underestimate the loss of d register
// increases can cause to the current estimate E: with E* the estimate of the
// registers with their d smallest values raised to the maximum (the worst
// case, each lost term 2^-M of the harmonic sum gone), it returns 1 - E/E*,
// so the estimate without the loss is at most E/(1-RecoveryBound(d)).
// O(2^p). The package doc derives its closed forms: about d/m once the
// registers are past the small range, about d/E in the linear-counting
// range.
func (s *Distinct) RecoveryBound(d int) float64 {
	e := s.Estimate()
	w := s.worstEstimate(d)
	if w == 0 || w <= e {
		return 0
	}
	return 1 - float64(e)/float64(w)
}

// worstEstimate is E*: the library's estimate with the d smallest registers
// raised to the largest value a register can take.
func (s *Distinct) worstEstimate(d int) uint64 {
	if d <= 0 || s.sk == nil {
		return s.Estimate()
	}
	// Raise every register below the cut value and the first `atCut` of
	// those equal to it: the d largest terms of the harmonic sum.
	var hist [66]int
	for _, v := range s.regs {
		hist[v]++
	}
	top := s.maxRho()
	cut, below := 0, 0
	for cut < int(top) && below+hist[cut] < d {
		below += hist[cut]
		cut++
	}
	atCut := d - below
	buf := make([]byte, 8, 8+len(s.regs))
	buf[0], buf[1] = 2, s.p
	binary.BigEndian.PutUint32(buf[4:], uint32(len(s.regs)))
	buf = append(buf, s.regs...)
	regs := buf[8:]
	for i, v := range regs {
		switch {
		case int(v) < cut:
			regs[i] = top
		case int(v) == cut && cut < int(top) && atCut > 0:
			regs[i] = top
			atCut--
		}
	}
	var sk hyperloglog.Sketch
	if err := sk.UnmarshalBinary(buf); err != nil {
		return s.Estimate()
	}
	return sk.Estimate()
}

// Bounds is the interval [lower, upper] of the number of distinct items at
// z standard errors (z = 3: 99.7% under the normal approximation), widened
// above for the register increases recoveries may have lost.
func (s *Distinct) Bounds(z float64) (lower, upper uint64) {
	e := float64(s.Estimate())
	w := float64(s.worstEstimate(s.lost))
	se := z * s.StdError()
	return uint64(max(e*(1-se), 0)), uint64(math.Ceil(w * (1 + se)))
}

const distinctMagic = "HLLD"

// BackupState writes the sketch (full) or the registers changed since the
// previous backup as (index, value) pairs (delta); a delta that would be
// larger than the full encoding (2^p bytes plus a header: 16 KiB at p=14)
// is written as a full snapshot instead, which RecoverState accepts in its
// place. The divergence restarts from 0.
func (s *Distinct) BackupState(w io.Writer, full bool) error {
	if s.sk == nil {
		return fmt.Errorf("%w: zero Distinct", ErrMismatch)
	}
	if !full && 4*s.nchanged >= len(s.regs) {
		full = true
	}
	b := appendHeader(nil, distinctMagic, full)
	b = append(b, s.p)
	b = binary.AppendUvarint(b, uint64(s.lost))
	if full {
		var err error
		if b, err = s.sk.AppendBinary(b); err != nil {
			return err
		}
	} else {
		b = binary.AppendUvarint(b, uint64(s.nchanged))
		for wi, word := range s.changed {
			for word != 0 {
				i := wi*64 + bits.TrailingZeros64(word)
				word &= word - 1
				b = binary.AppendUvarint(b, uint64(i))
				b = append(b, s.regs[i])
			}
		}
	}
	if _, err := w.Write(b); err != nil {
		return err
	}
	clear(s.changed)
	s.nchanged = 0
	return nil
}

// RecoverState applies a backup: a full snapshot replaces the sketch
// (precision included, so a zero Distinct can be the target); a delta raises
// the registers it lists on top of the state recovered so far. The
// recovered state counts as backed up. On error s is unchanged.
func (s *Distinct) RecoverState(r io.Reader) error {
	b, err := readAll(r)
	if err != nil {
		return err
	}
	d := newDec(b)
	kind := d.Header(distinctMagic)
	p := d.Byte()
	lost := d.Uvarint()
	if d.Err != nil {
		return d.Err
	}
	if lost > math.MaxInt32 {
		return fmt.Errorf("%w: lost %d", ErrCorrupt, lost)
	}
	if kind == kindFull {
		var sk hyperloglog.Sketch
		if err := sk.UnmarshalBinary(d.B); err != nil {
			return fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		// Our snapshots are dense version 2: registers from byte 8.
		if len(d.B) < 8 || d.B[0] != 2 || d.B[1] != p || d.B[3] != 0 {
			return fmt.Errorf("%w: not a dense sketch of precision %d", ErrCorrupt, p)
		}
		n := newDistinct(p, &sk)
		copy(n.regs, d.B[8:])
		n.lost = int(lost)
		*s = *n
		return nil
	}
	if s.sk == nil || p != s.p {
		return fmt.Errorf("%w: delta of precision %d on %d", ErrMismatch, p, s.p)
	}
	cnt := d.Count(uint64(len(s.regs)), 2)
	type reg struct {
		i uint32
		v uint8
	}
	regs := make([]reg, 0, cnt)
	for range cnt {
		i, v := d.Uvarint(), d.Byte()
		if d.Err != nil {
			return d.Err
		}
		if i >= uint64(len(s.regs)) || v > s.maxRho() {
			return fmt.Errorf("%w: register %d = %d", ErrCorrupt, i, v)
		}
		regs = append(regs, reg{uint32(i), v})
	}
	if err := d.End(); err != nil {
		return err
	}
	for _, g := range regs {
		if g.v > s.regs[g.i] {
			s.regs[g.i] = g.v
			s.sk.InsertHash(hashFor(g.i, g.v, s.p))
		}
	}
	s.lost = int(lost)
	clear(s.changed)
	s.nchanged = 0
	return nil
}

// MemoryBytes is the size of the sketch's arrays: the library's registers,
// the shadow and the bitset.
func (s *Distinct) MemoryBytes() int { return 2*len(s.regs) + 8*len(s.changed) }
