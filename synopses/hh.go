package synopses

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"slices"

	"github.com/mlstream/mlstream/ft"
)

// MaxCounters is the largest number of counters a HeavyHitters may have.
const MaxCounters = 1 << 24

// Item is one reported heavy hitter. The true count of Key in the stream the
// summary has seen lies in [Lower, Upper]; Estimate is the Space-Saving
// count (an overestimate before any Widen: Lower ≤ true ≤ Estimate ≤ Upper).
type Item struct {
	Key      string `json:"key"`
	Estimate uint64 `json:"estimate"`
	Lower    uint64 `json:"lower"`
	Upper    uint64 `json:"upper"`
}

// HeavyHitters is a Space-Saving summary (Metwally et al. 2005) with a fixed
// number of counters, mergeable in the sense of Agarwal et al. 2012. Each
// counter keeps an item, its count and the overestimation error err: the
// item's true count lies in [count-err, count]; an item without a counter
// has a true count of at most MaxUntracked.
//
// It also implements ft.Stateful with the L∞ divergence of the AF-Stream
// paper (see StateDivergence) and delta backups of the counters changed
// since the previous backup.
//
// A HeavyHitters is a plain value: not safe for concurrent use, no I/O of its
// own. The zero value has no counters; it can only be the target of a
// RecoverState with a full snapshot.
type HeavyHitters struct {
	capacity int
	slots    []hhSlot   // counter id → item and count at the backup
	errs     []uint64   // counter id → overestimation error
	marked   []uint64   // bitset: counter id changed since the backup (in dirty)
	index    index      // item → counter id
	heap     []hhEntry  // counts by increasing count (stream-summary, see summary.go); counts live only here
	pos      []int32    // counter id → position in heap
	buckets  []hhBucket // runs of equal count in heap
	bfree    []int32    // unused bucket ids
	total    uint64     // stream weight seen, merges included
	floor    uint64     // bound on untracked items' counts while not full (from merges)
	widen    uint64     // added to every upper bound (Widen)
	div      uint64     // running max of count-backed since the backup
	dirty    []int32    // counter ids changed since the backup
	scratch  []byte     // BackupState's encoding, reused
}

// hhSlot is 32 bytes, half a cache line: what a tracked update reads (the
// key, to confirm the index's match, and the backed count, for the
// divergence) is in one line whenever the array is 32-byte aligned, as
// every array of 2,000 counters is (large allocations are page-aligned).
type hhSlot struct {
	key    string
	hash   uint64 // hashKey(key)
	backed uint64 // the counter's count at the last backup (whichever item it held)
}

type hhEntry struct {
	count uint64
	id    int32 // counter id
	b     int32 // bucket of this position (not of the counter: kept on swaps)
}

var _ ft.Stateful = (*HeavyHitters)(nil)

// NewHeavyHitters returns an empty summary with the given number of
// counters, clamped to [1, MaxCounters]. Memory is about 100 to 140 bytes
// per counter plus the items' bytes.
func NewHeavyHitters(counters int) *HeavyHitters {
	counters = min(max(counters, 1), MaxCounters)
	return newHH(counters, counters)
}

// newHH allocates room for prealloc counters of the capacity.
func newHH(capacity, prealloc int) *HeavyHitters {
	return &HeavyHitters{
		capacity: capacity,
		slots:    make([]hhSlot, 0, prealloc),
		errs:     make([]uint64, 0, prealloc),
		marked:   make([]uint64, (capacity+63)/64),
		index:    newIndex(capacity),
		heap:     make([]hhEntry, 0, prealloc),
		pos:      make([]int32, 0, prealloc),
		buckets:  make([]hhBucket, 0, prealloc),
	}
}

// Counters is the number of counters (the capacity).
func (h *HeavyHitters) Counters() int { return h.capacity }

// Len is the number of items tracked now.
func (h *HeavyHitters) Len() int { return len(h.slots) }

// Total is the weight of the stream seen, including merged summaries.
func (h *HeavyHitters) Total() uint64 { return h.total }

// Update adds weight w to item. The summary keeps item (it does not copy the
// string): pass a string that is not modified later (no unsafe views of
// reused buffers). A tracked item costs a hash, a probe of a 64 KiB table
// (at 2,000 counters) and a move to the next bucket of the stream-summary
// (O(1) for w = 1, however many counters tie), with no allocation.
func (h *HeavyHitters) Update(item string, w uint64) {
	if w == 0 {
		return
	}
	h.total += w
	// The hash of the item an eviction would replace, read first so that
	// its load overlaps the hashing and the lookup: that counter has the
	// least count, so its slot is rarely in cache.
	var vh uint64
	if n := len(h.heap); n == h.capacity && n > 0 {
		vh = h.slots[h.heap[0].id].hash
	}
	x := hashKey(item)
	id, at := h.index.lookup(item, x, h.slots)
	if id >= 0 {
		p := h.pos[id]
		c := h.heap[p].count + w
		h.increase(p, w)
		h.touch(id, c)
		return
	}
	if len(h.slots) < h.capacity {
		id := int32(len(h.slots))
		c := h.floor + w
		h.slots = append(h.slots, hhSlot{key: item, hash: x})
		h.errs = append(h.errs, h.floor)
		h.push(id, c)
		h.index.insertAt(at, x, id)
		h.touch(id, c)
		return
	}
	// Replace the item with the smallest count: the new item may have
	// occurred up to that many times before (else it would be tracked).
	root := &h.heap[0]
	id, m := root.id, root.count
	s := &h.slots[id]
	// Insert first, at the free position lookup found, then delete the old
	// item (its backward shift may move the new entry, which is fine).
	h.index.insertAt(at, x, id)
	h.index.remove(vh, id)
	// The counter keeps its backed count: divergence is per counter, as the
	// paper's L∞ over counters, and a counter only grows, here by w. (Per
	// item, every eviction would jump the divergence to the minimum count
	// and, once that passes θ, call for a backup.)
	s.key, s.hash = item, x
	h.errs[id] = m
	h.increase(0, w)
	h.touch(id, m+w)
}

// touch records that counter id now holds count c, for the divergence and
// the next delta.
func (h *HeavyHitters) touch(id int32, c uint64) {
	b := h.slots[id].backed
	h.div = max(h.div, max(c, b)-min(c, b))
	if h.marked[id>>6]&(1<<(id&63)) == 0 {
		h.mark(id)
	}
}

// mark adds counter id to the next delta (touch's rare path, not inlined).
func (h *HeavyHitters) mark(id int32) {
	h.marked[id>>6] |= 1 << (id & 63)
	h.dirty = append(h.dirty, id)
}

// untracked is the bound on the true count of an item without a counter,
// before Widen: the smallest count when all counters are in use (an item
// with more would not have been evicted, or would have evicted another),
// else the floor left by merges (0 for a summary never merged).
func (h *HeavyHitters) untracked() uint64 {
	if len(h.heap) == h.capacity && len(h.heap) > 0 {
		return max(h.floor, h.heap[0].count)
	}
	return h.floor
}

// MaxUntracked bounds the true count of any item that is not tracked (is
// not in Items): it includes every Widen.
func (h *HeavyHitters) MaxUntracked() uint64 { return h.untracked() + h.widen }

// Widen adds by to every upper bound and to MaxUntracked, for good: after a
// recovery that lost up to by weight of any one item (the AF-Stream
// compensation of a one-sided sketch), so that the bounds still contain the
// true counts of the whole stream and no true heavy hitter is missed.
func (h *HeavyHitters) Widen(by uint64) { h.widen += by }

// Widened is the sum of all Widen calls (merges add them up).
func (h *HeavyHitters) Widened() uint64 { return h.widen }

func (h *HeavyHitters) item(e hhEntry) Item {
	s := &h.slots[e.id]
	return Item{Key: s.key, Estimate: e.count, Lower: e.count - h.errs[e.id], Upper: e.count + h.widen}
}

// Items returns every tracked item, by decreasing estimate (ties by key).
func (h *HeavyHitters) Items() []Item { return h.TopK(len(h.heap)) }

// TopK returns the k tracked items with the largest estimates, by decreasing
// estimate (ties by key, so the order is deterministic).
func (h *HeavyHitters) TopK(k int) []Item {
	if k <= 0 {
		return nil
	}
	all := make([]Item, len(h.heap))
	for i, e := range h.heap {
		all[i] = h.item(e)
	}
	slices.SortFunc(all, func(a, b Item) int {
		if c := cmp.Compare(b.Estimate, a.Estimate); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return all[:min(k, len(all))]
}

// Get returns the bounds of one item: tracked or not, its true count lies in
// [Lower, Upper]. ok reports whether it is tracked.
func (h *HeavyHitters) Get(key string) (it Item, ok bool) {
	if id := h.index.find(key, hashKey(key), h.slots); id >= 0 {
		return h.item(h.heap[h.pos[id]]), true
	}
	return Item{Key: key, Lower: 0, Upper: h.MaxUntracked()}, false
}

// Clone returns a deep copy (backup state included).
func (h *HeavyHitters) Clone() *HeavyHitters {
	c := *h
	c.slots = slices.Clone(h.slots)
	c.heap = slices.Clone(h.heap)
	c.pos = slices.Clone(h.pos)
	c.buckets = slices.Clone(h.buckets)
	c.bfree = slices.Clone(h.bfree)
	c.dirty = slices.Clone(h.dirty)
	c.errs = slices.Clone(h.errs)
	c.marked = slices.Clone(h.marked)
	c.index = h.index.clone()
	c.scratch = nil // h's own
	return &c
}

// Merge folds o into h, as the mergeable summaries of Agarwal et al. (2012)
// do for Space-Saving, keeping h's number of counters. o is not modified.
//
// Let mA and mB be the untracked bounds of h and o (MaxUntracked before
// Widen). Every item x gets count cA(x)+cB(x) and error eA(x)+eB(x), where
// a side that does not track x contributes its untracked bound m to both.
// Then the largest counts are kept.
//
// Why the bounds stay valid, for the union stream A∪B (true count f = fA+fB):
//   - Upper: fA(x) ≤ cA(x) if A tracks x, else fA(x) ≤ mA; the same for B.
//     So f(x) ≤ merged count, and each side's widen adds up (Widen is added
//     to the union's upper bound as the sum of both sides' widens).
//   - Lower: fA(x) ≥ cA(x)-eA(x) if tracked, else fA(x) ≥ 0 = m-m; so
//     f(x) ≥ count-err, the merged lower bound.
//   - Untracked after the merge: an item in neither side has f ≤ mA+mB; an
//     item dropped by the truncation has f ≤ its merged count ≤ the largest
//     dropped count. Every merged count is ≥ mA+mB (a tracked count is at
//     least its side's untracked bound), so the new untracked bound is the
//     largest dropped count if anything was dropped, else mA+mB. It is
//     kept as the floor, and an item entering a free counter later starts
//     from it (count floor+w, error floor), which keeps every count ≥ floor.
//
// Merge counts as a change of every counter for fault tolerance: each counter
// is in the next delta and the divergence grows by the largest change.
func (h *HeavyHitters) Merge(o *HeavyHitters) {
	if o == nil || len(o.heap) == 0 && o.floor == 0 && o.total == 0 && o.widen == 0 {
		return
	}
	mA, mB := h.untracked(), o.untracked()
	type ent struct {
		key        string
		count, err uint64
		backed     uint64
	}
	ents := make([]ent, 0, len(h.heap)+len(o.heap))
	at := make(map[string]int, len(h.heap)+len(o.heap))
	for _, e := range h.heap {
		s := &h.slots[e.id]
		at[s.key] = len(ents)
		ents = append(ents, ent{key: s.key, count: e.count + mB, err: h.errs[e.id] + mB, backed: s.backed})
	}
	for _, e := range o.heap {
		s := &o.slots[e.id]
		if i, ok := at[s.key]; ok {
			// Replace the assumed mB by B's own count and error.
			ents[i].count = ents[i].count - mB + e.count
			ents[i].err = ents[i].err - mB + o.errs[e.id]
			continue
		}
		ents = append(ents, ent{key: s.key, count: e.count + mA, err: o.errs[e.id] + mA})
	}
	slices.SortFunc(ents, func(a, b ent) int {
		if c := cmp.Compare(b.count, a.count); c != 0 {
			return c
		}
		return cmp.Compare(a.key, b.key)
	})
	floor := mA + mB
	if len(ents) > h.capacity {
		floor = max(floor, ents[h.capacity].count)
		ents = ents[:h.capacity]
	}
	h.slots = h.slots[:0]
	h.heap = h.heap[:0]
	h.pos = h.pos[:0]
	h.errs = h.errs[:0]
	h.dirty = h.dirty[:0]
	clear(h.marked)
	h.index.clear()
	for i, e := range ents {
		id := int32(i)
		x := hashKey(e.key)
		h.slots = append(h.slots, hhSlot{key: e.key, hash: x, backed: e.backed})
		h.errs = append(h.errs, e.err)
		h.marked[id>>6] |= 1 << (id & 63)
		h.heap = append(h.heap, hhEntry{count: e.count, id: id})
		h.pos = append(h.pos, 0)
		h.index.insert(x, id)
		h.dirty = append(h.dirty, id)
		if d := max(e.count, e.backed) - min(e.count, e.backed); d > h.div {
			h.div = d
		}
	}
	h.rebuild()
	h.floor = floor
	h.total += o.total
	h.widen += o.widen
}

// StateDivergence is the L∞ distance of the counts from the last backup, as
// in the AF-Stream paper: the largest |count - count at the backup| over the
// items, where an item that took over a counter since the backup counts from
// 0 (so an eviction moves the divergence to at least the evicted minimum
// plus the new weight). Kept as a running maximum, O(1) per update.
func (h *HeavyHitters) StateDivergence() float64 { return float64(h.div) }

// Dirty is the number of counters changed since the last backup (the size of
// the next delta).
func (h *HeavyHitters) Dirty() int { return len(h.dirty) }

const hhMagic = "SSHH"

// BackupState writes all counters when full, else the counters changed since
// the previous backup (item, count, error) and the summary's totals; then
// the divergence restarts from 0.
func (h *HeavyHitters) BackupState(w io.Writer, full bool) error {
	b := h.appendState(h.scratch[:0], full)
	h.scratch = b
	if _, err := w.Write(b); err != nil {
		return err
	}
	h.markBacked()
	return nil
}

// appendState encodes the state (all of it, or the dirty counters) without
// touching the backup bookkeeping.
func (h *HeavyHitters) appendState(b []byte, full bool) []byte {
	b = appendHeader(b, hhMagic, full)
	for _, v := range []uint64{uint64(h.capacity), uint64(len(h.slots)), h.total, h.floor, h.widen} {
		b = binary.AppendUvarint(b, v)
	}
	if full {
		b = binary.AppendUvarint(b, uint64(len(h.slots)))
		for id := range h.slots {
			b = h.appendCounter(b, int32(id))
		}
	} else {
		b = binary.AppendUvarint(b, uint64(len(h.dirty)))
		for _, id := range h.dirty {
			b = h.appendCounter(b, id)
		}
	}
	return b
}

// appendCounter encodes counter id: its item, count and error.
func (h *HeavyHitters) appendCounter(b []byte, id int32) []byte {
	b = binary.AppendUvarint(b, uint64(id))
	b = appendStr(b, h.slots[id].key)
	b = binary.AppendUvarint(b, h.heap[h.pos[id]].count)
	return binary.AppendUvarint(b, h.errs[id])
}

// markBacked makes the current state the backed-up one.
func (h *HeavyHitters) markBacked() {
	for _, id := range h.dirty {
		s := &h.slots[id]
		s.backed = h.heap[h.pos[id]].count
		h.marked[id>>6] &^= 1 << (id & 63)
	}
	h.dirty = h.dirty[:0]
	h.div = 0
}

// RecoverState applies a backup written by BackupState: a full snapshot
// replaces the state (capacity included, so a zero HeavyHitters can be the
// target), a delta is applied on top of the state recovered so far. The
// recovered state counts as backed up. On error h is unchanged.
func (h *HeavyHitters) RecoverState(r io.Reader) error {
	b, err := readAll(r)
	if err != nil {
		return err
	}
	d := newDec(b)
	n, err := h.decodeState(d)
	if err != nil {
		return err
	}
	if err := d.End(); err != nil {
		return err
	}
	*h = *n
	return nil
}

// decodeState reads one backup from d and returns the state it leads to,
// leaving h unchanged.
func (h *HeavyHitters) decodeState(d *dec) (*HeavyHitters, error) {
	kind := d.Header(hhMagic)
	capacity := d.Uvarint()
	used := d.Uvarint()
	total, floor, widen := d.Uvarint(), d.Uvarint(), d.Uvarint()
	if d.Err != nil {
		return nil, d.Err
	}
	if capacity < 1 || capacity > MaxCounters || used > capacity {
		return nil, fmt.Errorf("%w: %d of %d counters", ErrCorrupt, used, capacity)
	}
	var n *HeavyHitters
	if kind == kindFull {
		if used > uint64(len(d.B)/4) {
			return nil, fmt.Errorf("%w: %d counters in %d bytes", ErrCorrupt, used, len(d.B))
		}
		n = newHH(int(capacity), int(used))
		n.slots = n.slots[:used]
		n.errs = n.errs[:used]
		n.heap = n.heap[:used]
		n.pos = n.pos[:used]
		for i := range n.pos {
			n.pos[i] = int32(i)
			n.heap[i].id = -1
		}
	} else {
		if h.capacity != int(capacity) || int(used) < len(h.slots) {
			return nil, fmt.Errorf("%w: delta for %d of %d counters on %d of %d", ErrMismatch, used, capacity, len(h.slots), h.capacity)
		}
		if used-uint64(len(h.slots)) > uint64(len(d.B)/4) {
			return nil, fmt.Errorf("%w: %d new counters in %d bytes", ErrCorrupt, used-uint64(len(h.slots)), len(d.B))
		}
		n = h.Clone()
		for int(used) > len(n.slots) {
			n.slots = append(n.slots, hhSlot{})
			n.errs = append(n.errs, 0)
			n.heap = append(n.heap, hhEntry{id: -1})
			n.pos = append(n.pos, int32(len(n.pos)))
		}
	}
	n.total, n.floor, n.widen = total, floor, widen
	entries := d.Count(used, 4)
	seen := make([]bool, used)
	for range entries {
		id := d.Uvarint()
		key := d.Str()
		count, errv := d.Uvarint(), d.Uvarint()
		if d.Err != nil {
			return nil, d.Err
		}
		if id >= used || seen[id] || errv > count {
			return nil, fmt.Errorf("%w: counter %d", ErrCorrupt, id)
		}
		seen[id] = true
		n.slots[id] = hhSlot{key: key, hash: hashKey(key), backed: count}
		n.errs[id] = errv
		n.heap[n.pos[id]] = hhEntry{count: count, id: int32(id)}
	}
	if d.Err != nil {
		return nil, d.Err
	}
	n.index.clear()
	for id, s := range n.slots {
		if n.heap[n.pos[id]].id < 0 {
			return nil, fmt.Errorf("%w: counter %d missing", ErrCorrupt, id)
		}
		if n.index.find(s.key, s.hash, n.slots) >= 0 {
			return nil, fmt.Errorf("%w: item in two counters", ErrCorrupt)
		}
		n.index.insert(s.hash, int32(id))
		n.slots[id].backed = n.heap[n.pos[id]].count
	}
	n.dirty = n.dirty[:0]
	clear(n.marked)
	n.div = 0
	n.rebuild()
	return n, nil
}
