package learners

import (
	"math"
	"sync/atomic"
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
	pending int    // labelled events learned since the last Sync
	items   []item // scratch for Learn
}

// item is one active coordinate of the event being learned.
type item struct {
	slot  int
	idx   int     // index of the slot's local delta entry, or -1
	x     float64 // input value in the optimizer's units (x/s if adaptive)
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
// view (global model plus local delta). It does not allocate.
func (l *Learner) Predict(feats []Feature) float64 {
	return l.m.predict(feats, &l.delta)
}

// Learn is one progressive validation step: it predicts the event with the
// current view, then updates the local delta with the label, and returns the
// probability predicted before the update. Features with value 0 (after
// normalization) are skipped; the intercept is always included. Learn does
// not allocate once its buffers have grown to the largest event and to the
// number of slots touched between syncs.
func (l *Learner) Learn(feats []Feature, label bool) float64 {
	m := l.m
	items := l.collect(feats)
	var margin float64
	if m.opt == optFTRL {
		margin = l.marginFTRL(items)
	} else {
		margin = l.marginW(items)
	}
	p := sigmoid(margin)
	g := p
	if label {
		g = p - 1
	}
	l.delta.reserve(len(items)) // entry indices in items stay valid
	switch m.opt {
	case optFTRL:
		l.updateFTRL(items, g)
	case optAdaGrad:
		l.updateAdaGrad(items, g)
	case optSGD:
		t := m.updates.Load() + uint64(l.pending) + 1
		l.updateSGD(items, g, m.alpha/math.Sqrt(float64(t)))
	}
	l.items = items
	l.pending++
	return p
}

// collect fills the scratch buffer with the event's active coordinates
// (bias first) and grows the adaptive scales. Scales grow before any weight
// is read, so that a slot seen twice in one event is read in one scale.
func (l *Learner) collect(feats []Feature) []item {
	m := l.m
	mask := m.mask
	// Fields are assigned one by one: appending struct literals makes the
	// compiler build each item on the stack and copy it with overlapping
	// moves, which stalls store forwarding (measured: half of Learn's time).
	if cap(l.items) < len(feats)+1 {
		l.items = make([]item, 0, 2*(len(feats)+1))
	}
	items := l.items[:len(feats)+1]
	items[0].slot, items[0].x = m.bias, 1
	n := 1
	if m.norm == normNone {
		for _, f := range feats {
			if x := f.Value; x != 0 && x == x {
				items[n].slot, items[n].x = int(f.Hash&mask), x
				n++
			}
		}
	} else {
		k := m.eventNorm(feats)
		for _, f := range feats {
			if x := m.transform(f.Value) * k; x != 0 && x == x {
				items[n].slot, items[n].x = int(f.Hash&mask), x
				n++
			}
		}
	}
	items = items[:n]
	d := &l.delta
	state := m.state
	for i := range items {
		it := &items[i]
		it.idx = d.find(it.slot)
		if !m.adaptive {
			continue
		}
		ax := math.Abs(it.x)
		if inv := math.Float64frombits(atomic.LoadUint64(&state[it.slot*stride+offInv])); inv == 0 || ax*inv > 1 {
			if r := m.growScale(it.slot, ax); r != 1 && it.idx >= 0 {
				d.entries[it.idx].da *= r
			}
		}
	}
	return items
}

// marginFTRL computes the margin with FTRL weights, and stores in each item
// its weight, sqrt(n) and its input in normalized units.
func (l *Learner) marginFTRL(items []item) float64 {
	m := l.m
	state, entries := m.state, l.delta.entries
	adaptive, invAlpha, beta, l1, l2 := m.adaptive, m.invAlpha, m.beta, m.l1, m.l2
	var margin float64
	for i := range items {
		it := &items[i]
		st := state[it.slot*stride : it.slot*stride+stride]
		a := math.Float64frombits(atomic.LoadUint64(&st[offA]))
		b := math.Float64frombits(atomic.LoadUint64(&st[offB]))
		if it.idx >= 0 {
			e := &entries[it.idx]
			a += e.da
			b += e.db
		}
		if adaptive {
			it.x *= math.Float64frombits(atomic.LoadUint64(&st[offInv]))
		}
		it.sqrtN = math.Sqrt(b)
		var w float64
		if l1 == 0 {
			w = -a / ((beta+it.sqrtN)*invAlpha + l2)
		} else if math.Abs(a) > l1 {
			w = -(a - math.Copysign(l1, a)) / ((beta+it.sqrtN)*invAlpha + l2)
		}
		it.w = w
		margin += w * it.x
	}
	return margin
}

// marginW computes the margin for optimizers that store w (AdaGrad, SGD),
// and stores in each item its weight, the state word B and its input in
// normalized units.
func (l *Learner) marginW(items []item) float64 {
	m := l.m
	state, entries, adaptive := m.state, l.delta.entries, m.adaptive
	var margin float64
	for i := range items {
		it := &items[i]
		st := state[it.slot*stride : it.slot*stride+stride]
		it.w = math.Float64frombits(atomic.LoadUint64(&st[offA]))
		it.sqrtN = math.Float64frombits(atomic.LoadUint64(&st[offB]))
		if it.idx >= 0 {
			e := &entries[it.idx]
			it.w += e.da
			it.sqrtN += e.db
		}
		if adaptive {
			it.x *= math.Float64frombits(atomic.LoadUint64(&st[offInv]))
		}
		margin += it.w * it.x
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

// entry returns the local delta entry of an item, adding it if needed.
func (l *Learner) entry(it *item) *deltaEntry {
	if it.idx < 0 {
		// Not found before the update; an earlier item of this event may
		// have added it since (a duplicate slot), so insert looks again.
		it.idx = l.delta.insert(it.slot)
	}
	return &l.delta.entries[it.idx]
}

func (l *Learner) updateFTRL(items []item, g float64) {
	m := l.m
	invAlpha, clip := m.invAlpha, m.clip
	for i := range items {
		it := &items[i]
		gi := clipGrad(g*it.x, clip)
		if gi == 0 {
			continue
		}
		g2 := gi * gi
		sigma := (math.Sqrt(it.sqrtN*it.sqrtN+g2) - it.sqrtN) * invAlpha
		e := l.entry(it)
		e.da += gi - sigma*it.w
		e.db += g2
	}
}

func (l *Learner) updateAdaGrad(items []item, g float64) {
	m := l.m
	alpha, clip, l1, l2 := m.alpha, m.clip, m.l1, m.l2
	for i := range items {
		it := &items[i]
		gi := clipGrad(g*it.x+l2*it.w, clip)
		if gi == 0 {
			continue
		}
		g2 := gi * gi
		rate := alpha / math.Sqrt(it.sqrtN+g2)
		e := l.entry(it)
		e.da += shrink(it.w-rate*gi, rate*l1) - it.w
		e.db += g2
	}
}

func (l *Learner) updateSGD(items []item, g, eta float64) {
	m := l.m
	clip, l1, l2 := m.clip, m.l1, m.l2
	for i := range items {
		it := &items[i]
		gi := clipGrad(g*it.x+l2*it.w, clip)
		if gi == 0 {
			continue
		}
		e := l.entry(it)
		e.da += shrink(it.w-eta*gi, eta*l1) - it.w
	}
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

// Sync pushes the local delta into the global model with atomic float
// additions, clears it, and returns the new model version. With nothing
// pending it changes nothing and returns the current version. It is safe
// to Sync several Learners of one Model concurrently.
func (l *Learner) Sync() uint64 {
	m := l.m
	if l.pending == 0 && len(l.delta.used) == 0 {
		return m.Version()
	}
	for _, i := range l.delta.used {
		e := &l.delta.entries[i]
		base := int(e.key-1) * stride
		if e.da != 0 {
			m.addFloat(base+offA, e.da)
		}
		if e.db != 0 {
			m.addFloat(base+offB, e.db)
		}
	}
	l.delta.reset()
	m.updates.Add(uint64(l.pending))
	l.pending = 0
	return m.version.Add(1)
}
