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

// Backups of a Progressive. Version 1 (no header) began with the window,
// which is never 0; version 2 begins with a 0 word and the version, and
// adds the counts at the decision threshold, the calibration bins and each
// window event's prediction.
const (
	progressiveV2 = 2
	aggSizeV1     = 4*8 + 2*8*AUCBins
	aggSizeV2     = aggSizeV1 + 2*8 + 3*8*CalibrationBins
	ringSizeV1    = 8
	ringSizeV2    = 12
	headerV1      = 9
	headerV2      = 8 + headerV1
)

// MarshalBinary encodes the whole Progressive (counts and recent window),
// for backups, in the format's version 2.
func (p *Progressive) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, headerV2+3*aggSizeV2+len(p.ring)*ringSizeV2)
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = binary.LittleEndian.AppendUint32(b, progressiveV2)
	b = p.appendHeader(b)
	for _, a := range []*agg{&p.all, &p.recent, &p.merged} {
		b = appendAgg(b, a)
	}
	for _, e := range p.ring {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(e.loss))
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(e.prob))
		b = binary.LittleEndian.AppendUint16(b, e.bin)
		b = append(b, e.flags, e.cal)
	}
	return b, nil
}

// appendHeader appends what both versions have after the version: the
// window, the ring's next slot and whether it is full.
func (p *Progressive) appendHeader(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(p.window))
	b = binary.LittleEndian.AppendUint32(b, uint32(p.next))
	full := byte(0)
	if p.full {
		full = 1
	}
	return append(b, full)
}

// appendAggV1 appends the counts both versions have.
func appendAggV1(b []byte, a *agg) []byte {
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

func appendAgg(b []byte, a *agg) []byte {
	b = appendAggV1(b, a)
	b = binary.LittleEndian.AppendUint64(b, uint64(a.truePos))
	b = binary.LittleEndian.AppendUint64(b, uint64(a.predPos))
	for _, c := range a.cal {
		b = binary.LittleEndian.AppendUint64(b, uint64(c.count))
		b = binary.LittleEndian.AppendUint64(b, uint64(c.positives))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(c.sumP))
	}
	return b
}

var errBadProgressive = errors.New("learners: malformed progressive metrics")

// UnmarshalBinary restores what MarshalBinary wrote, in either version;
// the window must match. A version 1 backup has no predictions: each is
// taken as its AUC bin's centre, which is within 1/2048 of it.
func (p *Progressive) UnmarshalBinary(data []byte) error {
	v2 := len(data) >= 8 && binary.LittleEndian.Uint32(data) == 0
	if v2 {
		if binary.LittleEndian.Uint32(data[4:]) != progressiveV2 {
			return fmt.Errorf("%w: unknown version %d", errBadProgressive, binary.LittleEndian.Uint32(data[4:]))
		}
		data = data[8:]
	}
	aggSize, ringSize := aggSizeV1, ringSizeV1
	if v2 {
		aggSize, ringSize = aggSizeV2, ringSizeV2
	}
	if len(data) < headerV1+3*aggSize {
		return errBadProgressive
	}
	window := int(binary.LittleEndian.Uint32(data))
	next := int(binary.LittleEndian.Uint32(data[4:]))
	if window != p.window {
		return fmt.Errorf("%w: window %d, want %d", errBadProgressive, window, p.window)
	}
	if next >= window || data[8] > 1 || len(data) != headerV1+3*aggSize+ringSize*window {
		return errBadProgressive
	}
	q := Progressive{window: window, next: next, full: data[8] == 1, ring: make([]ringEntry, window)}
	off := headerV1
	for _, a := range []*agg{&q.all, &q.recent, &q.merged} {
		off = readAgg(a, data, off, v2)
	}
	for i := range q.ring {
		if off = readRingEntry(&q.ring[i], data, off, v2); off < 0 {
			return errBadProgressive
		}
	}
	if !v2 {
		q.upgradeV1()
	}
	*p = q
	return nil
}

// readAgg reads an agg at off and returns the offset after it.
func readAgg(a *agg, data []byte, off int, v2 bool) int {
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
	if !v2 {
		return off
	}
	a.truePos = int64(binary.LittleEndian.Uint64(data[off:]))
	a.predPos = int64(binary.LittleEndian.Uint64(data[off+8:]))
	off += 16
	for i := range a.cal {
		c := &a.cal[i]
		c.count = int64(binary.LittleEndian.Uint64(data[off:]))
		c.positives = int64(binary.LittleEndian.Uint64(data[off+8:]))
		c.sumP = math.Float64frombits(binary.LittleEndian.Uint64(data[off+16:]))
		off += 24
	}
	return off
}

// readRingEntry reads a window event at off and returns the offset after
// it, or -1 if it is malformed.
func readRingEntry(e *ringEntry, data []byte, off int, v2 bool) int {
	e.loss = math.Float32frombits(binary.LittleEndian.Uint32(data[off:]))
	if v2 {
		e.prob = math.Float32frombits(binary.LittleEndian.Uint32(data[off+4:]))
		off += 4
	}
	e.bin = binary.LittleEndian.Uint16(data[off+4:])
	e.flags = data[off+6] & (flagLabel | flagCorrect)
	e.cal = data[off+7]
	if e.bin >= AUCBins || (v2 && (e.cal >= CalibrationBins || !(e.prob >= 0 && e.prob <= 1))) {
		return -1
	}
	return off + 8
}

// upgradeV1 fills what version 1 did not keep. The window's events get
// their bin centre as prediction, and the recent counts are rebuilt from
// them so that events leaving the window take out what they brought in.
// The whole run's counts come from the AUC bins: those from 0.5 up count as
// predicted positive (an event at exactly 0.5 was predicted negative).
func (p *Progressive) upgradeV1() {
	for i := range p.ring {
		e := &p.ring[i]
		c := (float64(e.bin) + 0.5) / AUCBins
		e.prob, e.cal = float32(c), uint8(calIndex(c))
	}
	p.all.binsToDecisions()
	p.merged.binsToDecisions()
	events := p.ring[:p.next]
	if p.full {
		events = p.ring
	}
	var recent agg
	for _, e := range events {
		recent.observe(e, 1)
	}
	recent.loss = p.recent.loss
	p.recent = recent
}

func (a *agg) binsToDecisions() {
	for i := range a.pos {
		c := (float64(i) + 0.5) / AUCBins
		k := &a.cal[calIndex(c)]
		n := a.pos[i] + a.neg[i]
		k.count += n
		k.positives += a.pos[i]
		k.sumP += float64(n) * c
		if i >= AUCBins/2 {
			a.predPos += n
			a.truePos += a.pos[i]
		}
	}
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
