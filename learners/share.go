package learners

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Shared models: several processes hold a copy of one model and change it
// only by applying the same deltas in the same order (cluster mode), so
// that the copies stay equal bit for bit. A shared Learner therefore never
// writes its model: what Sync would add goes into a delta (AppendDelta),
// and every copy applies every delta with Model.ApplyDelta.
//
// The one write a plain Learner makes to the model while learning is the
// growth of a feature's adaptive scale. A shared learner instead records
// the scale it would grow to in its delta entry, and until a delta raises
// the model's scale it learns the feature's input clipped to the model's
// scale (x·inv in [-1, 1]; the sign of x while the feature has no scale
// yet, which is exactly what its first scale, |x|, would give). The delta
// applies the scale before the increments, so the increments count in the
// new scale: exact for a feature first seen in the round, an approximation
// of the same order as a plain learner's for one whose scale grows.
//
// A delta's slot section (AppendDelta, ApplyDelta), little-endian:
//
//	uvarint count of slots
//	per slot, slots strictly increasing:
//	  uvarint gap: slot minus the previous slot minus 1 (the first: slot)
//	  byte flags: deltaA, deltaB, deltaScale; at least one
//	  float64 bits of each flagged quantity (never 0), in that order: the increment
//	  of word A (FTRL z; AdaGrad, SGD w), of word B (FTRL n; AdaGrad sum of
//	  squared gradients; >= 0) and the scale to grow to (>= MinValue)

// Flags of a slot in a delta.
const (
	deltaA     = 1 << iota // increment of word A follows
	deltaB                 // increment of word B follows
	deltaScale             // scale to grow to follows
	deltaFlags = deltaA | deltaB | deltaScale
)

// minSlotBytes is the least a slot takes in a delta: its gap and flags.
const minSlotBytes = 2

// ErrBadDelta is a delta that is not one this model can apply.
var ErrBadDelta = errors.New("learners: malformed delta")

// SetShared makes l a shared learner: it never writes its model, and its
// updates leave only through AppendDelta. Call it before the first Learn.
func (l *Learner) SetShared() {
	l.shared = true
	l.inFlight = newDeltaMap()
}

// InFlight reports whether the learner holds updates AppendDelta sent.
func (l *Learner) InFlight() bool { return len(l.inFlight.used) > 0 }

// ClearInFlight drops the updates AppendDelta sent from the learner's
// view: call it once the model holds them (their delta was applied), or
// when they will never reach it (the send failed).
func (l *Learner) ClearInFlight() {
	if len(l.inFlight.used) > 0 {
		l.inFlight.reset()
	}
}

// Touched is the number of slots in the learner's local delta.
func (l *Learner) Touched() int { return len(l.delta.used) }

// wantScale records that a shared learner saw |x| = ax beyond the model's
// scale of slot. Infinite inputs are not recorded: Learn refuses their
// event.
func (l *Learner) wantScale(slot int, ax float64) {
	if !finite(ax) {
		return
	}
	e := &l.delta.entries[l.delta.insert(slot)]
	e.scale = max(e.scale, ax)
}

// sharedInput is x in the optimizer's units for a shared learner, given
// the model's inverse scale: clipped to [-1, 1], and its sign while the
// slot has no scale. A non-finite x stays so, for Learn to refuse.
func sharedInput(x, inv float64) float64 {
	if !finite(x) {
		return x
	}
	if inv == 0 {
		return math.Copysign(1, x)
	}
	return min(max(x*inv, -1), 1)
}

// AppendDelta appends the learner's pending updates to dst as a delta's
// slot section, clears them like Sync does, and returns the labelled
// events they hold. The model is not touched: a shared learner keeps the
// updates in its view, as in flight, until ClearInFlight, so that it does
// not learn their step a second time while they travel.
func (l *Learner) AppendDelta(dst []byte) (out []byte, labelled int) {
	order := l.sortedEntries()
	dst = binary.AppendUvarint(dst, uint64(len(order)))
	prev := -1
	for _, k := range order {
		e := &l.delta.entries[uint32(k)]
		slot := int(k >> 32)
		dst = binary.AppendUvarint(dst, uint64(slot-prev-1))
		prev = slot
		dst = appendSlot(dst, e.da, e.db, e.scale)
	}
	labelled = l.pending
	if l.shared {
		l.keepInFlight()
	}
	l.Discard()
	return dst, labelled
}

// keepInFlight moves the pending updates to the in-flight ones.
func (l *Learner) keepInFlight() {
	if len(l.inFlight.used) == 0 {
		l.inFlight, l.delta = l.delta, l.inFlight
		return
	}
	l.inFlight.addAll(&l.delta)
}

// sortedEntries lists the delta's non-empty entries as slot<<32 | index,
// by slot: one sort of plain integers, and a delta that applies in
// address order.
func (l *Learner) sortedEntries() []uint64 {
	order := l.order[:0]
	for _, i := range l.delta.used {
		e := &l.delta.entries[i]
		if e.da != 0 || e.db != 0 || e.scale != 0 {
			order = append(order, (e.key-1)<<32|uint64(i))
		}
	}
	slices.Sort(order)
	l.order = order
	return order
}

func appendSlot(dst []byte, da, db, scale float64) []byte {
	flagAt := len(dst)
	dst = append(dst, 0)
	var flags byte
	for i, v := range [3]float64{da, db, scale} {
		if v != 0 {
			flags |= 1 << i
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(v))
		}
	}
	dst[flagAt] = flags
	return dst
}

// slotDelta is one slot of a delta.
type slotDelta struct {
	slot          int
	da, db, scale float64
}

// deltaReader walks a delta's slot section, checking each slot.
type deltaReader struct {
	data  []byte
	left  uint64 // slots not read yet
	prev  int
	slots int // the model's
}

func newDeltaReader(data []byte, slots int) (deltaReader, error) {
	n, k := binary.Uvarint(data)
	if k <= 0 {
		return deltaReader{}, fmt.Errorf("%w: bad slot count", ErrBadDelta)
	}
	data = data[k:]
	if n > uint64(slots) || n > uint64(len(data)/minSlotBytes) {
		return deltaReader{}, fmt.Errorf("%w: %d slots announced in %d bytes for a model of %d slots", ErrBadDelta, n, len(data), slots)
	}
	return deltaReader{data: data, left: n, prev: -1, slots: slots}, nil
}

// next reads one slot; ok is false at the end (err nil) or on a malformed
// one.
func (r *deltaReader) next() (s slotDelta, ok bool, err error) {
	if r.left == 0 {
		if len(r.data) != 0 {
			return s, false, fmt.Errorf("%w: %d bytes after the last slot", ErrBadDelta, len(r.data))
		}
		return s, false, nil
	}
	r.left--
	gap, k := binary.Uvarint(r.data)
	if k <= 0 || gap >= uint64(r.slots-r.prev-1) {
		return s, false, fmt.Errorf("%w: slot out of range (the model has %d)", ErrBadDelta, r.slots)
	}
	s.slot = r.prev + 1 + int(gap)
	r.prev = s.slot
	r.data = r.data[k:]
	if len(r.data) == 0 || r.data[0] == 0 || r.data[0]&^deltaFlags != 0 {
		return s, false, fmt.Errorf("%w: bad flags of slot %d", ErrBadDelta, s.slot)
	}
	flags := r.data[0]
	r.data = r.data[1:]
	for i, dst := range [3]*float64{&s.da, &s.db, &s.scale} {
		if flags&(1<<i) == 0 {
			continue
		}
		if len(r.data) < 8 {
			return s, false, fmt.Errorf("%w: slot %d truncated", ErrBadDelta, s.slot)
		}
		*dst = math.Float64frombits(binary.LittleEndian.Uint64(r.data))
		r.data = r.data[8:]
		if *dst == 0 {
			return s, false, fmt.Errorf("%w: slot %d: a flagged quantity is 0", ErrBadDelta, s.slot)
		}
	}
	if !finite(s.da) || !(s.db >= 0) || !finite(s.db) || !(s.scale == 0 || s.scale >= MinValue) || !finite(s.scale) {
		return s, false, fmt.Errorf("%w: slot %d: increments %g, %g, scale %g", ErrBadDelta, s.slot, s.da, s.db, s.scale)
	}
	return s, true, nil
}

// CheckDelta reports whether delta is a slot section this model can apply,
// without changing anything.
func (m *Model) CheckDelta(delta []byte) error {
	r, err := newDeltaReader(delta, m.nslots)
	if err != nil {
		return err
	}
	for {
		_, ok, err := r.next()
		if !ok {
			return err
		}
	}
}

// ApplyDelta adds a delta's slot section to the model exactly as Sync
// adds a learner's updates (through t when t is not nil, as SyncTracked),
// growing each slot's scale first; then counts labelled updates and sets
// the version. A malformed delta is refused with ErrBadDelta before
// anything changes. Applied to equal models in the same order, deltas
// leave them equal bit for bit. Not safe to call concurrently with itself
// or with a Tracker's other users.
func (m *Model) ApplyDelta(delta []byte, labelled, version uint64, t *Tracker) error {
	if err := m.CheckDelta(delta); err != nil {
		return err
	}
	r, _ := newDeltaReader(delta, m.nslots)
	for {
		s, ok, _ := r.next()
		if !ok {
			break
		}
		m.applySlot(s, t)
	}
	m.updates.Add(labelled)
	m.version.Store(version)
	return nil
}

func (m *Model) applySlot(s slotDelta, t *Tracker) {
	if s.scale != 0 && m.adaptive {
		m.growScale(s.slot, s.scale)
	}
	if s.da == 0 && s.db == 0 {
		return
	}
	if t != nil {
		t.changed(s.slot, m.mergeTracked(s.slot, s.da, s.db))
		return
	}
	m.addAB(s.slot*stride, s.da, s.db)
}
