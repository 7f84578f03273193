package synopses

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
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
	slots    []hhSlot   // counter id → item, count, count at the backup
	hashes   []uint64   // counter id → hashKey of its item
	errs     []uint64   // counter id → overestimation error
	marked   []uint64   // bitset: counter id changed since the backup (in dirty)
	rekeyed  []uint64   // bitset: counter id took a new item since the backup
	index    index      // item → counter id
	heap     []hhEntry  // counts by increasing count (stream-summary, see summary.go)
	pos      []int32    // counter id → position in heap
	buckets  []hhBucket // runs of equal count in heap
	bfree    []int32    // unused bucket ids
	total    uint64     // stream weight seen, merges included
	floor    uint64     // bound on untracked items' counts while not full (from merges)
	widen    uint64     // added to every upper bound (Widen)
	div      uint64     // running max of count-backed since the backup
	carried  uint64     // divergence of a backup that could not be written
	dirty    []int32    // counter ids changed since the backup
	scratch  []byte     // BackupState's encoding, reused
	view     bool       // a viewCopy: no index, order or bookkeeping
}

// hhSlot is 32 bytes, half a cache line: what a tracked update reads and
// writes (the key, to confirm the index's match; the backed count, for the
// divergence; the count) and what a backup reads of each changed counter
// are in one line whenever the array is 32-byte aligned, as every array of
// 2,000 counters is (large allocations are page-aligned). The count is
// also in the stream-summary (h.heap), which orders the counters; the
// copy here spares a backup a random read of h.heap per counter, a cache
// miss each once request handling has evicted the summary (a delta of
// ~900 counters: 31 → 24 µs).
type hhSlot struct {
	key    string
	backed uint64 // the counter's count at the last backup (whichever item it held)
	count  uint64 // = h.heap[h.pos[id]].count
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
		hashes:   make([]uint64, 0, prealloc),
		errs:     make([]uint64, 0, prealloc),
		marked:   make([]uint64, (capacity+63)/64),
		rekeyed:  make([]uint64, (capacity+63)/64),
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
		vh = h.hashes[h.heap[0].id]
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
		h.slots = append(h.slots, hhSlot{key: item})
		h.hashes = append(h.hashes, x)
		h.errs = append(h.errs, h.floor)
		h.push(id, c)
		h.index.insertAt(at, x, id)
		h.touch(id, c)
		setBit(h.rekeyed, id)
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
	s.key, h.hashes[id] = item, x
	h.errs[id] = m
	h.increase(0, w)
	h.touch(id, m+w)
	setBit(h.rekeyed, id)
}

func setBit(b []uint64, id int32) { b[id>>6] |= 1 << (id & 63) }

func hasBit(b []uint64, id int32) bool { return b[id>>6]&(1<<(id&63)) != 0 }

// touch records that counter id now holds count c, for the divergence and
// the next delta.
func (h *HeavyHitters) touch(id int32, c uint64) {
	s := &h.slots[id]
	s.count = c
	b := s.backed
	h.div = max(h.div, max(c, b)-min(c, b))
	if !hasBit(h.marked, id) {
		h.mark(id)
	}
}

// mark adds counter id to the next delta (touch's rare path, not inlined).
func (h *HeavyHitters) mark(id int32) {
	setBit(h.marked, id)
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
	if h.view {
		for _, e := range h.heap {
			if h.slots[e.id].key == key {
				return h.item(e), true
			}
		}
	} else if id := h.index.find(key, hashKey(key), h.slots); id >= 0 {
		return h.item(h.heap[h.pos[id]]), true
	}
	return Item{Key: key, Lower: 0, Upper: h.MaxUntracked()}, false
}

// Clone returns a deep copy (backup state included).
func (h *HeavyHitters) Clone() *HeavyHitters {
	c := *h
	c.slots = slices.Clone(h.slots)
	c.hashes = slices.Clone(h.hashes)
	c.heap = slices.Clone(h.heap)
	c.pos = slices.Clone(h.pos)
	c.buckets = slices.Clone(h.buckets)
	c.bfree = slices.Clone(h.bfree)
	c.dirty = slices.Clone(h.dirty)
	c.errs = slices.Clone(h.errs)
	c.marked = slices.Clone(h.marked)
	c.rekeyed = slices.Clone(h.rekeyed)
	c.index = h.index.clone()
	c.scratch = nil // h's own
	return &c
}

// viewCopy is a copy to be read, not changed: Items, TopK, Get (a scan),
// Total, MaxUntracked, and as the summary a Merge folds in. It leaves out
// what only updates and backups use (the index, the order's buckets, the
// backup bookkeeping): about half of Clone's bytes, for the copies that
// queries read, which a partition makes every few milliseconds while its
// queue runs dry.
func (h *HeavyHitters) viewCopy() *HeavyHitters {
	return &HeavyHitters{
		capacity: h.capacity, view: true,
		slots: slices.Clone(h.slots), errs: slices.Clone(h.errs), heap: slices.Clone(h.heap),
		total: h.total, floor: h.floor, widen: h.widen,
	}
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
	h.hashes = h.hashes[:0]
	h.heap = h.heap[:0]
	h.pos = h.pos[:0]
	h.errs = h.errs[:0]
	h.dirty = h.dirty[:0]
	clear(h.marked)
	clear(h.rekeyed)
	h.index.clear()
	for i, e := range ents {
		id := int32(i)
		x := hashKey(e.key)
		h.slots = append(h.slots, hhSlot{key: e.key, backed: e.backed, count: e.count})
		h.hashes = append(h.hashes, x)
		h.errs = append(h.errs, e.err)
		setBit(h.marked, id)
		setBit(h.rekeyed, id) // counter ids are reassigned
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

// StateDivergence is the L∞ distance of the counters from the last backup
// written, as in the AF-Stream paper: the largest |count - count at the
// backup| over the counters (a counter that took a new item counts from its
// count at the backup, so an eviction adds only its weight). Kept as a
// running maximum, O(1) per update; after a backup the writer refused, the
// divergence it had is carried on.
func (h *HeavyHitters) StateDivergence() float64 { return float64(h.div + h.carried) }

// Dirty is the number of counters changed since the last backup (the size of
// the next delta).
func (h *HeavyHitters) Dirty() int { return len(h.dirty) }

const hhMagic = "SSHH"

// BackupState writes all counters when full, else the counters changed since
// the previous backup and the summary's totals; then the divergence
// restarts from 0. A delta (kindDelta2) lists the changed counters in
// ascending id order, each that kept its item as the increase of its count
// alone (no item, no error: most of a delta under a skewed stream, where
// the same heavy items keep growing), the others in full. Deltas of the
// first format (kindDelta, every changed counter in full) are still read.
//
// Encoding a counter also makes its count the backed-up one (one pass over
// the changed counters, not two); should w refuse the bytes, the next delta
// carries every counter in full and the divergence keeps what it had.
func (h *HeavyHitters) BackupState(w io.Writer, full bool) error {
	div := h.div + h.carried
	b := h.appendBackup(h.scratch[:0], full)
	h.scratch = b
	if _, err := w.Write(b); err != nil {
		h.backupLost(div)
		return err
	}
	h.carried = 0
	return nil
}

// backupLost undoes what appendBackup assumed of a backup that was not
// written: every counter goes into the next delta in full, and the
// divergence from the last backup written is at most div plus what
// changes from now on.
func (h *HeavyHitters) backupLost(div uint64) {
	for id := range int32(len(h.slots)) {
		setBit(h.marked, id)
		setBit(h.rekeyed, id)
		h.dirty = append(h.dirty, id)
	}
	h.carried = div
}

// sortDirty puts the dirty counter ids in ascending order: from the bitset
// when they are many (at most 64 bits scanned per id), else by sorting the
// list.
func (h *HeavyHitters) sortDirty() {
	if len(h.dirty) < len(h.marked) {
		slices.Sort(h.dirty)
		return
	}
	d := h.dirty[:0]
	for wi, m := range h.marked {
		for m != 0 {
			d = append(d, int32(wi<<6|bits.TrailingZeros64(m)))
			m &= m - 1
		}
	}
	h.dirty = d
}

// appendBackup encodes the state (all of it, or the dirty counters) and
// makes it the backed-up one.
func (h *HeavyHitters) appendBackup(b []byte, full bool) []byte {
	kind := byte(kindDelta2)
	if full {
		kind = kindFull
	}
	b = appendHeaderKind(b, hhMagic, kind)
	for _, v := range []uint64{uint64(h.capacity), uint64(len(h.slots)), h.total, h.floor, h.widen} {
		b = binary.AppendUvarint(b, v)
	}
	if full {
		b = binary.AppendUvarint(b, uint64(len(h.slots)))
		for id := range int32(len(h.slots)) {
			s := &h.slots[id]
			b = binary.AppendUvarint(b, uint64(id))
			b = h.appendCounter(b, id, s.count)
			s.backed = s.count
		}
	} else {
		h.sortDirty()
		b = binary.AppendUvarint(b, uint64(len(h.dirty)))
		next := int32(0)
		for _, id := range h.dirty {
			b = h.appendChange(b, id-next, id)
			next = id + 1
		}
	}
	h.restartDivergence()
	return b
}

// restartDivergence makes the current state the backed-up one for the
// bookkeeping: no counter dirty, divergence 0 (the backed counts are the
// caller's).
func (h *HeavyHitters) restartDivergence() {
	clear(h.marked)
	clear(h.rekeyed)
	h.dirty = h.dirty[:0]
	h.div = 0
}

// appendChange encodes dirty counter id, gap ids after the previous one,
// and makes its count the backed-up one: gap<<1 then the count's increase
// since the backup if the counter kept its item, else gap<<1|1 and the
// whole counter.
func (h *HeavyHitters) appendChange(b []byte, gap, id int32) []byte {
	s := &h.slots[id]
	c, backed := s.count, s.backed
	s.backed = c
	if !hasBit(h.rekeyed, id) && c >= backed {
		b = binary.AppendUvarint(b, uint64(gap)<<1)
		return binary.AppendUvarint(b, c-backed)
	}
	b = binary.AppendUvarint(b, uint64(gap)<<1|1)
	return h.appendCounter(b, id, c)
}

// appendCounter encodes counter id's item, count c and error.
func (h *HeavyHitters) appendCounter(b []byte, id int32, c uint64) []byte {
	b = appendStr(b, h.slots[id].key)
	b = binary.AppendUvarint(b, c)
	return binary.AppendUvarint(b, h.errs[id])
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

// hhTotals are the fields every backup starts with.
type hhTotals struct {
	capacity, used, total, floor, widen uint64
}

// decodeState reads one backup from d and returns the state it leads to,
// leaving h unchanged.
func (h *HeavyHitters) decodeState(d *dec) (*HeavyHitters, error) {
	kind := d.HeaderUpTo(hhMagic, kindDelta2)
	t := hhTotals{capacity: d.Uvarint(), used: d.Uvarint()}
	t.total, t.floor, t.widen = d.Uvarint(), d.Uvarint(), d.Uvarint()
	if d.Err != nil {
		return nil, d.Err
	}
	if t.capacity < 1 || t.capacity > MaxCounters || t.used > t.capacity {
		return nil, fmt.Errorf("%w: %d of %d counters", ErrCorrupt, t.used, t.capacity)
	}
	var n *HeavyHitters
	var err error
	if kind == kindFull {
		n, err = h.fullBase(t, len(d.B))
	} else {
		n, err = h.deltaBase(t, len(d.B))
	}
	if err != nil {
		return nil, err
	}
	n.total, n.floor, n.widen = t.total, t.floor, t.widen
	if kind == kindDelta2 {
		err = n.decodeChanges(d, len(h.slots))
	} else {
		err = n.decodeCounters(d)
	}
	if err != nil {
		return nil, err
	}
	return n, n.restore()
}

// fullBase is the empty state a full snapshot fills: every counter unset
// (id -1) until decodeCounters sets it.
func (h *HeavyHitters) fullBase(t hhTotals, left int) (*HeavyHitters, error) {
	if t.used > uint64(left/4) {
		return nil, fmt.Errorf("%w: %d counters in %d bytes", ErrCorrupt, t.used, left)
	}
	n := newHH(int(t.capacity), int(t.used))
	n.slots = n.slots[:t.used]
	n.hashes = n.hashes[:t.used]
	n.errs = n.errs[:t.used]
	n.heap = n.heap[:t.used]
	n.pos = n.pos[:t.used]
	for i := range n.pos {
		n.pos[i] = int32(i)
		n.heap[i].id = -1
	}
	return n, nil
}

// deltaBase is a copy of h that a delta applies to, with the counters
// created since h's backup added unset.
func (h *HeavyHitters) deltaBase(t hhTotals, left int) (*HeavyHitters, error) {
	if h.capacity != int(t.capacity) || int(t.used) < len(h.slots) {
		return nil, fmt.Errorf("%w: delta for %d of %d counters on %d of %d", ErrMismatch, t.used, t.capacity, len(h.slots), h.capacity)
	}
	if t.used-uint64(len(h.slots)) > uint64(left/4) {
		return nil, fmt.Errorf("%w: %d new counters in %d bytes", ErrCorrupt, t.used-uint64(len(h.slots)), left)
	}
	n := h.Clone()
	for int(t.used) > len(n.slots) {
		n.slots = append(n.slots, hhSlot{})
		n.hashes = append(n.hashes, 0)
		n.errs = append(n.errs, 0)
		n.heap = append(n.heap, hhEntry{id: -1})
		n.pos = append(n.pos, int32(len(n.pos)))
	}
	return n, nil
}

// decodeCounters reads counters written in full with their ids (a full
// snapshot, or a delta of the first format) into n.
func (n *HeavyHitters) decodeCounters(d *dec) error {
	used := uint64(len(n.slots))
	entries := d.Count(used, 4)
	seen := make([]bool, used)
	for range entries {
		id := d.Uvarint()
		if d.Err == nil && (id >= used || seen[id]) {
			return fmt.Errorf("%w: counter %d", ErrCorrupt, id)
		}
		if err := n.decodeCounter(d, id); err != nil {
			return err
		}
		seen[id] = true
	}
	return d.Err
}

// decodeChanges reads a delta of kindDelta2 into n, where the counters
// below old existed at the previous backup.
func (n *HeavyHitters) decodeChanges(d *dec, old int) error {
	used := uint64(len(n.slots))
	entries := d.Count(used, 2)
	next := uint64(0)
	for range entries {
		tag := d.Uvarint()
		if d.Err != nil {
			return d.Err
		}
		if tag>>1 >= used-next {
			return fmt.Errorf("%w: counter %d+%d", ErrCorrupt, next, tag>>1)
		}
		id := next + tag>>1
		next = id + 1
		if tag&1 == 1 {
			if err := n.decodeCounter(d, id); err != nil {
				return err
			}
			continue
		}
		inc := d.Uvarint()
		e := &n.heap[n.pos[id]]
		if d.Err == nil && (id >= uint64(old) || e.count+inc < e.count) {
			return fmt.Errorf("%w: increase of counter %d", ErrCorrupt, id)
		}
		e.count += inc
	}
	return d.Err
}

// decodeCounter reads counter id's item, count and error into n.
func (n *HeavyHitters) decodeCounter(d *dec, id uint64) error {
	key := d.Str()
	count, errv := d.Uvarint(), d.Uvarint()
	if d.Err != nil {
		return d.Err
	}
	if errv > count {
		return fmt.Errorf("%w: counter %d", ErrCorrupt, id)
	}
	n.slots[id] = hhSlot{key: key}
	n.hashes[id] = hashKey(key)
	n.errs[id] = errv
	n.heap[n.pos[id]] = hhEntry{count: count, id: int32(id)}
	return nil
}

// restore checks a decoded state (every counter set, no item twice) and
// rebuilds what backups do not carry: the index, the order, the slots'
// counts and backed counts.
func (n *HeavyHitters) restore() error {
	n.index.clear()
	for id := range n.slots {
		s, x := &n.slots[id], n.hashes[id]
		e := n.heap[n.pos[id]]
		if e.id < 0 {
			return fmt.Errorf("%w: counter %d missing", ErrCorrupt, id)
		}
		if e.count < n.floor {
			// No summary has one: merges raise every count to the floor,
			// and counters only grow.
			return fmt.Errorf("%w: counter %d below the floor", ErrCorrupt, id)
		}
		if n.index.find(s.key, x, n.slots) >= 0 {
			return fmt.Errorf("%w: item in two counters", ErrCorrupt)
		}
		n.index.insert(x, int32(id))
		s.count, s.backed = e.count, e.count
	}
	n.restartDivergence()
	n.carried = 0
	n.rebuild()
	return nil
}
