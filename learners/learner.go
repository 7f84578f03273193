package learners

import (
	"math"
	"sync/atomic"
	"unsafe"
)

// Learner is a replica of a Model owned by one partition. It is NOT safe for
// concurrent use: one goroutine calls Learn, Predict, Pending and Sync. Any
// number of Learners may share a Model and sync into it concurrently.
//
// Its view of a weight is the global state plus its own local delta. The
// delta is kept for the slots touched since the last Sync only, in a small
// hash table (not a dense array of 2^HashBits entries): with a realistic
// vocabulary its working set stays in cache, and a Learner's memory grows
// with the features seen between syncs, not with HashBits.
type Learner struct {
	m       *Model
	delta   deltaMap
	pending int       // labelled events learned since the last Sync
	items   []item    // scratch for Learn
	normed  []Feature // scratch for Learn: normalized values
	touch   uint64    // sink of scan's cache-warming loads
	// shared: the learner never writes the model; scales it would grow
	// travel in its delta instead (share.go).
	shared bool
	order  []uint64 // scratch of AppendDelta
	// inFlight holds, for a shared learner, the updates sent and not yet
	// in the model: part of its view until ClearInFlight.
	inFlight deltaMap
	// noFirstScale (tests only) sends every event with a first-seen slot
	// to collect, the path before firstScale.
	noFirstScale bool
}

// item is one active coordinate of the event being learned.
type item struct {
	slot  uint32  // < 2^28+1
	idx   uint32  // index of the slot's local delta entry
	x     float64 // input value; in the optimizer's units (x/s if adaptive) once its weight is read
	w     float64 // weight in the optimizer's units
	sqrtN float64 // FTRL: sqrt(n); AdaGrad: sum of squared gradients (word B)
}

// NewLearner returns a new replica of m with an empty local delta.
func (m *Model) NewLearner() *Learner {
	return &Learner{m: m, delta: newDeltaMap(), items: make([]item, 0, 64)}
}

// Model returns the global model the learner syncs into.
func (l *Learner) Model() *Model { return l.m }

// Pending returns the number of labelled events learned since the last Sync.
func (l *Learner) Pending() int { return l.pending }

// Predict returns the probability of a positive label with the learner's
// view (global model plus local delta; a shared learner's updates in
// flight are left out). It does not allocate.
func (l *Learner) Predict(feats []Feature) float64 {
	return l.m.predict(feats, &l.delta)
}

// Learn is one progressive validation step: it predicts the event with the
// current view, then updates the local delta with the label, and returns the
// probability predicted before the update. Features with value 0 (after
// normalization) are skipped; the intercept is always included. Learn does
// not allocate once its buffers have grown to the largest event and to the
// number of slots touched between syncs.
//
// Hot path, in three passes over the event's coordinates, each a loop
// without calls: scan lists them and checks their adaptive scales, touching
// the cache lines the next pass reads (so that their misses overlap instead
// of stalling one by one behind the square root and division of each
// weight); the margin pass looks up (or adds) each coordinate's delta entry
// once and computes its weight; the update pass writes the entries by index.
// An entry is thus added for every active coordinate, also one whose
// gradient turns out to be exactly 0 (only possible by underflow); it holds
// zero deltas and syncs as a no-op. When a scale must grow (beyond a
// first-seen slot's first one, which scan sets), scan gives up
// and collect runs instead, which grows every scale of the event before any
// weight is read.
//
// An event whose margin is not finite (an input or a weight is infinite)
// is not learned, and neither is one whose update would make a delta
// entry non-finite (the update is undone): each counts in Model.Skipped
// and not in Pending. The checks cost one comparison per event and one
// multiply-add per coordinate.
func (l *Learner) Learn(feats []Feature, label bool) float64 {
	m := l.m
	l.delta.reserve(len(feats) + 1) // entry indices in items stay valid
	if cap(l.items) < len(feats)+1 {
		l.items = make([]item, 0, 2*(len(feats)+1))
	}
	items, ok := l.scan(feats)
	if !ok {
		items = l.collect(feats)
	}
	l.items = items
	var margin float64
	if m.opt == optFTRL {
		margin = l.marginFTRL(items)
	} else {
		margin = l.marginW(items)
	}
	p := sigmoid(margin)
	// A non-finite margin means an input or a weight is not finite:
	// learning from it would spread NaN to every weight it touches.
	if !finite(margin) {
		m.skipped.Add(1)
		return p
	}
	g := p
	if label {
		g = p - 1
	}
	var written bool
	switch m.opt {
	case optFTRL:
		written = l.updateFTRL(items, g)
	case optAdaGrad:
		written = l.updateAdaGrad(items, g)
	case optSGD:
		t := m.updates.Load() - min(m.rateFrom.Load(), m.updates.Load()) + uint64(l.pending) + 1
		written = l.updateSGD(items, g, m.alpha/math.Sqrt(float64(t)))
	}
	if !written {
		l.undo(items)
		m.skipped.Add(1)
		return p
	}
	l.pending++
	return p
}

// Prefetch is a hint: it starts bringing into the CPU caches, without
// waiting for them, the model's state and this learner's delta entries
// that Learn(feats, ...) will read. Called with the next event just before
// Learn of the current one, it lets the next event's cache misses overlap
// the current one's arithmetic, which matters once the slots touched
// outgrow the caches (a large vocabulary). It changes nothing and costs a
// few nanoseconds an event when the lines are cached already. (A Learner
// is one goroutine's: call it from the goroutine that calls Learn.)
func (l *Learner) Prefetch(feats []Feature) {
	if len(feats) == 0 {
		return
	}
	prefetchLines(unsafe.Pointer(unsafe.SliceData(l.m.state)), unsafe.Pointer(unsafe.SliceData(l.delta.entries)), feats, l.m.mask, uint64(l.delta.shift&63))
}

// undo restores the delta entries that an update changed to their values
// before it: each item saved them in its (then dead) fields w and sqrtN.
// It goes backwards, since an event can touch a slot twice: the first
// item's saved values are the oldest.
func (l *Learner) undo(items []item) {
	entries := l.delta.entries
	for i := len(items) - 1; i >= 0; i-- {
		it := &items[i]
		e := &entries[it.idx]
		e.da, e.db = it.w, it.sqrtN
	}
}

// scan fills the scratch buffer with the event's active coordinates (bias
// first): slot, input in the optimizer's units (x/s if adaptive) and, if
// the slot's delta entry is in its home position, its index (else
// noEntry). It returns ok = false, with the buffer in an unspecified state,
// if a coordinate's adaptive scale must grow, unless the slot was never
// seen (firstScale sets its first scale). Its loads of each
// coordinate's global slot and delta home take the event's cache misses
// many at a time: this loop is short, its iterations are independent, and
// the out-of-order core runs several of them ahead. (An entry, once added,
// keeps its key until the next Sync, so a home found here stays valid.)
func (l *Learner) scan(feats []Feature) (items []item, ok bool) {
	m := l.m
	feats = l.normalized(feats)
	items = l.items[:len(feats)+1]
	state, entries, shift := m.state, l.delta.entries, l.delta.shift&63
	mask := m.mask
	bias := uint64(m.bias)
	tail := m.norm == normSqrt
	n := 1
	if m.adaptive {
		inv := math.Float64frombits(atomic.LoadUint64(&state[bias*stride+offInv]))
		if inv == 0 || inv > 1 {
			return items, false
		}
		items[0].slot, items[0].idx, items[0].x = uint32(bias), homeIndex(entries, bias, shift), inv
		for _, f := range feats {
			if skipValue(f.Value) {
				continue
			}
			v := f.Value
			if tail {
				v = sqrtTail(v)
			}
			slot := f.Hash & mask
			p := &state[slot*stride+offInv]
			inv := math.Float64frombits(atomic.LoadUint64(p))
			if inv == 0 {
				if inv = l.firstScale(p, v); inv == 0 {
					return items, false
				}
			} else if math.Abs(v)*inv > 1 {
				return items, false
			}
			it := &items[n]
			it.slot, it.idx, it.x = uint32(slot), homeIndex(entries, slot, shift), v*inv
			n++
		}
	} else {
		var touch uint64
		items[0].slot, items[0].idx, items[0].x = uint32(bias), homeIndex(entries, bias, shift), 1
		for _, f := range feats {
			if skipValue(f.Value) {
				continue
			}
			v := f.Value
			if tail {
				v = sqrtTail(v)
			}
			slot := f.Hash & mask
			touch += atomic.LoadUint64(&state[slot*stride+offA])
			it := &items[n]
			it.slot, it.idx, it.x = uint32(slot), homeIndex(entries, slot, shift), v
			n++
		}
		l.touch = touch // keeps the loads
	}
	return items[:n], true
}

// firstScale sets the scale of a slot never seen before (its word at p,
// 1/s, is 0) to |v|, as collect's growScale would, and returns the new
// 1/|v|; or it returns 0 when scan must give up to collect after all: a
// shared learner leaves the model's scales alone, and a learner that lost
// the race for the word to another one must go by the scale that one set.
// A vocabulary that keeps growing brings a first-seen slot every few
// events (1 M events over 100k words: 47k of them), and giving up to
// collect walks the event again and looks each of its delta entries up by
// probing. The outcome is collect's: no weight is read before every scale
// of the event is final (an event whose other scales must grow still gives
// up, and collect's growScale finds the scales set here in place), and
// growScale's first scale of a slot rescales nothing.
func (l *Learner) firstScale(p *uint64, v float64) float64 {
	if l.shared || l.noFirstScale {
		return 0
	}
	inv := 1 / math.Abs(v)
	if !atomic.CompareAndSwapUint64(p, 0, math.Float64bits(inv)) {
		return 0
	}
	return inv
}

// noEntry marks an item whose delta entry is not known yet.
const noEntry = ^uint32(0)

// homeIndex returns the index of slot's delta entry if it is at its home
// position, else noEntry.
func homeIndex(entries []deltaEntry, slot uint64, shift uint) uint32 {
	h := slot * hashMul >> shift
	if entries[h].key == slot+1 {
		return uint32(h)
	}
	return noEntry
}

// normalized returns feats, or with per-event normalization a copy in a
// scratch buffer with the normalized values, so that the gather loops call
// nothing. (sqrt, value by value, is applied by the gather loops.)
func (l *Learner) normalized(feats []Feature) []Feature {
	m := l.m
	if !m.norm.perEvent() {
		return feats
	}
	k := m.eventNorm(feats)
	nf := l.normed[:0]
	for _, f := range feats {
		nf = append(nf, Feature{f.Hash, m.transform(f.Value) * k})
	}
	l.normed = nf
	return nf
}

// collect fills the scratch buffer with the event's active coordinates
// (bias first) and grows the adaptive scales. Scales grow before any weight
// is read, so that a slot seen twice in one event is read in one scale.
func (l *Learner) collect(feats []Feature) []item {
	m := l.m
	feats = l.normalized(feats)
	items := l.items[:len(feats)+1]
	items[0].slot, items[0].idx, items[0].x = uint32(m.bias), noEntry, 1
	tail := m.norm == normSqrt
	n := 1
	for _, f := range feats {
		if !skipValue(f.Value) {
			v := f.Value
			if tail {
				v = sqrtTail(v)
			}
			items[n].slot, items[n].idx, items[n].x = uint32(f.Hash&m.mask), noEntry, v
			n++
		}
	}
	items = items[:n]
	if !m.adaptive {
		return items
	}
	d := &l.delta
	state := m.state
	for i := range items {
		it := &items[i]
		slot := int(it.slot)
		ax := math.Abs(it.x)
		if inv := math.Float64frombits(atomic.LoadUint64(&state[slot*stride+offInv])); inv == 0 || ax*inv > 1 {
			if l.shared {
				l.wantScale(slot, ax)
				continue
			}
			if r := m.growScale(slot, ax); r != 1 {
				if idx := d.find(slot); idx >= 0 {
					d.entries[idx].da *= r
				}
			}
		}
	}
	for i := range items {
		it := &items[i]
		inv := math.Float64frombits(atomic.LoadUint64(&state[int(it.slot)*stride+offInv]))
		if l.shared {
			it.x = sharedInput(it.x, inv)
		} else {
			it.x *= inv
		}
	}
	return items
}

// minValueBits are the bits of MinValue.
const minValueBits = 0x20b0000000000000

// MinValue is the smallest input magnitude learned, 2^-500 (about
// 3.05e-151): a smaller value is read as 0. The adaptive scale of a
// feature is 1/max|x|, which for a subnormal x is +Inf and would turn the
// feature's state into NaN; above MinValue the scale, and its rescaling by
// any finite larger value up to 2^500, stay finite.
const MinValue = 0x1p-500

// skipValue reports whether an input value is skipped: 0, under MinValue
// or NaN (an infinity is not skipped: Learn refuses the event). It is one
// integer comparison: |v|'s bits minus those of MinValue wrap around
// below it, and the bits of a NaN are above those of +Inf.
func skipValue(v float64) bool {
	return math.Float64bits(v)&^(1<<63)-minValueBits > 0x7ff0000000000000-minValueBits
}

// finite reports whether v is neither infinite nor NaN: v-v is NaN for
// both.
func finite(v float64) bool { return v-v == 0 }

// marginFTRL computes the margin with FTRL weights. It stores in each
// item its delta entry (added if missing), weight and sqrt(n).
func (l *Learner) marginFTRL(items []item) float64 {
	m := l.m
	d := &l.delta
	state, entries := m.state, d.entries
	dmask, shift := uint64(len(entries)-1), d.shift&63
	negInvAlpha, beta, l1, negL2, noL1 := -m.invAlpha, m.beta, m.l1, -m.l2, m.l1 == 0
	sent := len(l.inFlight.used) > 0
	var margin float64
	for i := range items {
		it := &items[i]
		slot := uint64(it.slot)
		st := state[slot*stride : slot*stride+stride : slot*stride+stride]
		a := math.Float64frombits(atomic.LoadUint64(&st[offA]))
		b := math.Float64frombits(atomic.LoadUint64(&st[offB]))
		h := uint64(it.idx)
		if it.idx == noEntry {
			h = d.lookup(slot, entries, dmask, shift)
		}
		e := &entries[h]
		if sent {
			a, b = l.inFlight.addTo(slot, a, b)
		}
		a += e.da
		sqrtN := math.Sqrt(b + e.db)
		w := ftrlWeight(a, sqrtN, negInvAlpha, beta, l1, negL2, noL1)
		it.idx, it.w, it.sqrtN = uint32(h), w, sqrtN
		margin += w * it.x
	}
	return margin
}

// ftrlWeight is the FTRL-Proximal weight -(z - sign(z)·λ1) / ((β+√n)/α + λ2)
// (0 if |z| <= λ1) for z = a and √n = sqrtN, given -1/α, β, λ1, -λ2 and
// noL1 = (λ1 == 0). It divides by the negated denominator instead of
// negating the quotient: IEEE rounding is symmetric, so the result is the
// same bit for bit, one negation fewer.
func ftrlWeight(a, sqrtN, negInvAlpha, beta, l1, negL2 float64, noL1 bool) float64 {
	if noL1 {
		return a / ((beta+sqrtN)*negInvAlpha + negL2)
	}
	if math.Abs(a) > l1 {
		return (a - math.Copysign(l1, a)) / ((beta+sqrtN)*negInvAlpha + negL2)
	}
	return 0
}

// marginW computes the margin for optimizers that store w (AdaGrad, SGD).
// It stores in each item its delta entry (added if missing), weight and
// state word B.
func (l *Learner) marginW(items []item) float64 {
	m := l.m
	d := &l.delta
	state, entries := m.state, d.entries
	dmask, shift := uint64(len(entries)-1), d.shift&63
	sent := len(l.inFlight.used) > 0
	var margin float64
	for i := range items {
		it := &items[i]
		slot := uint64(it.slot)
		st := state[slot*stride : slot*stride+stride : slot*stride+stride]
		w := math.Float64frombits(atomic.LoadUint64(&st[offA]))
		b := math.Float64frombits(atomic.LoadUint64(&st[offB]))
		h := uint64(it.idx)
		if it.idx == noEntry {
			h = d.lookup(slot, entries, dmask, shift)
		}
		e := &entries[h]
		if sent {
			w, b = l.inFlight.addTo(slot, w, b)
		}
		w += e.da
		it.idx, it.w, it.sqrtN = uint32(h), w, b+e.db
		margin += w * it.x
	}
	return margin
}

// clipGrad bounds gi to [-c, c] when c > 0.
func clipGrad(gi, c float64) float64 {
	if c > 0 {
		gi = min(max(gi, -c), c)
	}
	return gi
}

// The update functions write each item's delta entry, saving its old
// values in the item's fields w and sqrtN for undo (the item is done with
// them), and report whether every entry written is finite: bad sums
// v*0 over the values written, which is 0 for finite ones and NaN for an
// infinity or a NaN, without a branch per item.

func (l *Learner) updateFTRL(items []item, g float64) (ok bool) {
	m := l.m
	invAlpha, clip := m.invAlpha, m.clip
	entries := l.delta.entries
	var bad float64
	for i := range items {
		it := &items[i]
		e := &entries[it.idx]
		w, sqrtN := it.w, it.sqrtN
		it.w, it.sqrtN = e.da, e.db
		gi := clipGrad(g*it.x, clip)
		if gi == 0 {
			continue
		}
		g2 := gi * gi
		sigma := (math.Sqrt(sqrtN*sqrtN+g2) - sqrtN) * invAlpha
		e.da += gi - sigma*w
		e.db += g2
		bad += (e.da + e.db) * 0
	}
	return bad == 0
}

func (l *Learner) updateAdaGrad(items []item, g float64) (ok bool) {
	m := l.m
	alpha, clip, l1, l2 := m.alpha, m.clip, m.l1, m.l2
	entries := l.delta.entries
	var bad float64
	for i := range items {
		it := &items[i]
		e := &entries[it.idx]
		w, sumSq := it.w, it.sqrtN
		it.w, it.sqrtN = e.da, e.db
		gi := clipGrad(g*it.x+l2*w, clip)
		if gi == 0 {
			continue
		}
		g2 := gi * gi
		rate := alpha / math.Sqrt(sumSq+g2)
		e.da += shrink(w-rate*gi, rate*l1) - w
		e.db += g2
		bad += (e.da + e.db) * 0
	}
	return bad == 0
}

func (l *Learner) updateSGD(items []item, g, eta float64) (ok bool) {
	m := l.m
	clip, l1, l2 := m.clip, m.l1, m.l2
	entries := l.delta.entries
	var bad float64
	for i := range items {
		it := &items[i]
		e := &entries[it.idx]
		w := it.w
		it.w, it.sqrtN = e.da, e.db
		gi := clipGrad(g*it.x+l2*w, clip)
		if gi == 0 {
			continue
		}
		e.da += shrink(w-eta*gi, eta*l1) - w
		bad += e.da * 0
	}
	return bad == 0
}

// shrink applies the L1 proximal step (soft thresholding by t >= 0).
func shrink(w, t float64) float64 {
	if t == 0 {
		return w
	}
	switch {
	case w > t:
		return w - t
	case w < -t:
		return w + t
	}
	return 0
}

// mergeChunk is how many delta entries a merge prefetches the global slots
// of at once, one chunk ahead of those it merges: enough misses in flight
// to hide memory latency, few enough to stay in the L1 cache.
const mergeChunk = 16

// prefetchMerge prefetches the global slots of the merge chunk of delta
// entries starting at used[lo], if any.
func (l *Learner) prefetchMerge(lo int) {
	used := l.delta.used
	if lo < len(used) {
		prefetchEntrySlots(unsafe.Pointer(unsafe.SliceData(l.m.state)), unsafe.Pointer(unsafe.SliceData(l.delta.entries)), used[lo:min(lo+mergeChunk, len(used))])
	}
}

// Sync pushes the local delta into the global model with atomic float
// additions, clears it, and returns the new model version. With nothing
// pending it changes nothing and returns the current version. It is safe
// to Sync several Learners of one Model concurrently.
func (l *Learner) Sync() uint64 {
	m := l.m
	if l.pending == 0 && len(l.delta.used) == 0 {
		return m.Version()
	}
	used := l.delta.used
	for lo := 0; lo < len(used); lo += mergeChunk {
		l.prefetchMerge(lo + mergeChunk)
		for _, i := range used[lo:min(lo+mergeChunk, len(used))] {
			e := &l.delta.entries[i]
			m.addAB(int(e.key-1)*stride, e.da, e.db)
		}
	}
	l.delta.reset()
	m.updates.Add(uint64(l.pending))
	l.pending = 0
	return m.version.Add(1)
}
