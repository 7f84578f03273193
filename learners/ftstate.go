package learners

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
)

// Tracker follows how far the global model has drifted from its last
// backup, for approximate fault tolerance: the Euclidean distance between
// the effective weights now and at the backup, kept as a running sum of
// squares updated at every merge, O(1) per merged slot. It also remembers
// which slots changed since the backup, for delta backups. Not safe for
// concurrent use: the runtime serialises merges and backups of one model.
//
// A slot's weight at the backup and after the last merge live in the
// model's own state, as two float32 in word offTracked, beside the words a
// merge has just written: one cache line per merged slot, and the tracker
// itself holds one bit per slot. (float32 is plenty for a distance that is
// compared with θ; the sum telescopes exactly over the rounded values. Only
// merges change an effective weight: a scale change in Learn rescales the
// state so that the weight stays.)
type Tracker struct {
	m      *Model
	sumSq  float64
	dirty  []uint32
	marked []uint64 // bit per slot: in dirty
}

// NewTracker starts tracking m from its current state, as if it had just
// been backed up.
func NewTracker(m *Model) *Tracker {
	t := &Tracker{m: m, marked: make([]uint64, (m.nslots+63)/64)}
	t.Reset()
	return t
}

// Divergence is the Euclidean distance of the weights from the last backup.
func (t *Tracker) Divergence() float64 { return math.Sqrt(max(t.sumSq, 0)) }

// Dirty is the number of slots changed since the last backup.
func (t *Tracker) Dirty() int { return len(t.dirty) }

// SyncTracked is Sync, also recording each merged slot's weight change in
// t. It returns the new model version.
func (l *Learner) SyncTracked(t *Tracker) uint64 {
	m := l.m
	if l.pending == 0 && len(l.delta.used) == 0 {
		return m.Version()
	}
	used := l.delta.used
	for lo := 0; lo < len(used); lo += mergeChunk {
		l.prefetchMerge(lo + mergeChunk)
		for _, i := range used[lo:min(lo+mergeChunk, len(used))] {
			if e := &l.delta.entries[i]; e.da != 0 || e.db != 0 {
				t.changed(int(e.key-1), m.mergeTracked(int(e.key-1), e.da, e.db))
			}
		}
	}
	l.delta.reset()
	m.updates.Add(uint64(l.pending))
	l.pending = 0
	return m.version.Add(1)
}

// mergeTracked adds the deltas of words A and B to slot and returns the
// slot's new effective weight.
func (m *Model) mergeTracked(slot int, da, db float64) float64 {
	base := slot * stride
	a := m.addFloatNew(base+offA, da)
	b := m.addFloatNew(base+offB, db)
	w := m.rawWeight(a, b)
	if m.adaptive {
		w *= m.load(base + offInv)
	}
	return w
}

func (t *Tracker) changed(slot int, after float64) {
	p := &t.m.state[slot*stride+offTracked]
	backed, before := unpackTracked(atomic.LoadUint64(p))
	now := float32(after)
	t.sumSq += sq(float64(now)-backed) - sq(before-backed)
	atomic.StoreUint64(p, uint64(math.Float32bits(float32(backed)))<<32|uint64(math.Float32bits(now)))
	if w, bit := slot>>6, uint64(1)<<(slot&63); t.marked[w]&bit == 0 {
		t.marked[w] |= bit
		t.dirty = append(t.dirty, uint32(slot))
	}
}

func sq(x float64) float64 { return x * x }

// unpackTracked splits word offTracked: the weight at the backup, and
// after the last merge.
func unpackTracked(v uint64) (backed, cur float64) {
	return float64(math.Float32frombits(uint32(v >> 32))), float64(math.Float32frombits(uint32(v)))
}

// BackedUp restarts the divergence from the current state: call it once a
// backup of the slots it reported dirty (or of everything) is taken. It
// returns the dirty slots, increasing, for a delta backup.
func (t *Tracker) BackedUp() []uint32 {
	slices.Sort(t.dirty)
	out := t.dirty
	for _, s := range out {
		p := &t.m.state[int(s)*stride+offTracked]
		cur := uint32(atomic.LoadUint64(p))
		atomic.StoreUint64(p, uint64(cur)<<32|uint64(cur))
		t.marked[s>>6] &^= 1 << (s & 63)
	}
	t.dirty = nil
	t.sumSq = 0
	return out
}

// Reset restarts tracking from the current state of every slot, after the
// state was replaced (a recovery).
func (t *Tracker) Reset() {
	for s := range t.m.nslots {
		w := uint64(math.Float32bits(float32(t.m.Weight(s))))
		atomic.StoreUint64(&t.m.state[s*stride+offTracked], w<<32|w)
	}
	clear(t.marked)
	t.dirty = t.dirty[:0]
	t.sumSq = 0
}

// StepBound is α of the fault-tolerance bounds: an upper bound on how far
// one event of at most k non-zero features can move the weights (Euclidean
// distance), for the model's optimizer with inputs scaled to at most 1 in
// absolute value (adaptive updates or l2 normalisation). One coordinate's
// gradient is then at most 1, so FTRL and AdaGrad move a weight by at most
// alpha/beta (alpha with AdaGrad, whose first step is the largest) and SGD
// by alpha; the bias adds one coordinate.
func (m *Model) StepBound(k int) float64 {
	step := m.alpha
	if m.opt == optFTRL && m.beta > 0 {
		step = m.alpha / m.beta
	}
	return step * math.Sqrt(float64(k+1))
}

// MarshalBinary encodes the whole Progressive (counts and recent window),
// for backups.
func (p *Progressive) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, 64+4*8*AUCBins+len(p.ring)*8)
	b = binary.LittleEndian.AppendUint32(b, uint32(p.window))
	b = binary.LittleEndian.AppendUint32(b, uint32(p.next))
	full := byte(0)
	if p.full {
		full = 1
	}
	b = append(b, full)
	for _, a := range []*agg{&p.all, &p.recent, &p.merged} {
		b = appendAgg(b, a)
	}
	for _, e := range p.ring {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(e.loss))
		b = binary.LittleEndian.AppendUint16(b, e.bin)
		flags := byte(0)
		if e.label {
			flags |= 1
		}
		if e.correct {
			flags |= 2
		}
		b = append(b, flags, 0)
	}
	return b, nil
}

func appendAgg(b []byte, a *agg) []byte {
	for _, v := range []int64{a.count, a.positives, a.correct} {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(a.loss))
	for i := range a.pos {
		b = binary.LittleEndian.AppendUint64(b, uint64(a.pos[i]))
		b = binary.LittleEndian.AppendUint64(b, uint64(a.neg[i]))
	}
	return b
}

const aggSize = 4*8 + 2*8*AUCBins

var errBadProgressive = errors.New("learners: malformed progressive metrics")

// UnmarshalBinary restores what MarshalBinary wrote; the window must match.
func (p *Progressive) UnmarshalBinary(data []byte) error {
	if len(data) < 9+3*aggSize {
		return errBadProgressive
	}
	window := int(binary.LittleEndian.Uint32(data))
	next := int(binary.LittleEndian.Uint32(data[4:]))
	if window != p.window {
		return fmt.Errorf("%w: window %d, want %d", errBadProgressive, window, p.window)
	}
	if next >= window || data[8] > 1 || len(data) != 9+3*aggSize+8*window {
		return errBadProgressive
	}
	q := Progressive{window: window, next: next, full: data[8] == 1, ring: make([]ringEntry, window)}
	off := 9
	for _, a := range []*agg{&q.all, &q.recent, &q.merged} {
		a.count = int64(binary.LittleEndian.Uint64(data[off:]))
		a.positives = int64(binary.LittleEndian.Uint64(data[off+8:]))
		a.correct = int64(binary.LittleEndian.Uint64(data[off+16:]))
		a.loss = math.Float64frombits(binary.LittleEndian.Uint64(data[off+24:]))
		off += 32
		for i := range a.pos {
			a.pos[i] = int64(binary.LittleEndian.Uint64(data[off:]))
			a.neg[i] = int64(binary.LittleEndian.Uint64(data[off+8:]))
			off += 16
		}
	}
	for i := range q.ring {
		e := &q.ring[i]
		e.loss = math.Float32frombits(binary.LittleEndian.Uint32(data[off:]))
		e.bin = binary.LittleEndian.Uint16(data[off+4:])
		if e.bin >= AUCBins {
			return errBadProgressive
		}
		e.label = data[off+6]&1 != 0
		e.correct = data[off+6]&2 != 0
		off += 8
	}
	*p = q
	return nil
}

// addFloatNew adds d to a state word and returns the word's new value.
func (m *Model) addFloatNew(i int, d float64) float64 {
	p := &m.state[i]
	for {
		old := atomic.LoadUint64(p)
		v := math.Float64frombits(old) + d
		if !finite(v) {
			m.skipped.Add(1)
			return math.Float64frombits(old)
		}
		if d == 0 || atomic.CompareAndSwapUint64(p, old, math.Float64bits(v)) {
			return v
		}
	}
}
