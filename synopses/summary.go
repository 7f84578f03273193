package synopses

import (
	"cmp"
	"slices"
)

// The counts live in the stream-summary of Metwally et al. (2005), laid out
// as one array: h.heap holds every counter's (count, id) sorted by
// increasing count, and the counters of equal count (a bucket) are one
// contiguous run of it. h.buckets[b] gives the first and last position of
// bucket b, and every entry carries the id of its bucket, so the walk from
// one bucket to the next is position+1: the array order is the bucket list.
// All of it is index-based, with no pointers for the GC to scan, and an
// update allocates nothing once the summary has filled.
//
// Incrementing the counter at position p by w swaps it with the last
// counter of its bucket (same count, so the order holds), detaches that
// position from the bucket, and then, while the next bucket's count is
// below the new count, moves that bucket one place down (its last counter
// takes the free position) — for w = 1 that loop never runs. The counter
// lands after the last bucket it passed, joining the next bucket if that
// one has its new count, else in a bucket of its own. The cost is O(1) plus
// one step per distinct count passed, independent of how many counters tie.
//
// An array sorted by count is also a min-heap of any arity (a parent's
// position is before its children's), so h.heap[0] is the minimum and the
// heap invariants the tests check still hold.

// hhBucket is a run [start, end] of positions in h.heap with equal counts.
type hhBucket struct {
	start, end int32
}

// newBucket returns a bucket spanning [p, p], reusing a free one if any.
func (h *HeavyHitters) newBucket(p int32) int32 {
	if n := len(h.bfree); n > 0 {
		b := h.bfree[n-1]
		h.bfree = h.bfree[:n-1]
		h.buckets[b] = hhBucket{p, p}
		return b
	}
	h.buckets = append(h.buckets, hhBucket{p, p})
	return int32(len(h.buckets) - 1)
}

// increase adds w > 0 to the count at position p and restores the order.
func (h *HeavyHitters) increase(p int32, w uint64) {
	hp := h.heap
	n := int32(len(hp))
	id := hp[p].id
	nc := hp[p].count + w
	b := hp[p].b
	bk := &h.buckets[b]
	e := bk.end
	if p != e {
		// Same count and bucket: only the ids trade places.
		o := hp[e].id
		hp[p].id = o
		h.pos[o] = p
	}
	// Position e leaves bucket b.
	freed := e == bk.start
	if !freed {
		bk.end = e - 1
	}
	p = e
	// Move each bucket of count below nc down by one position.
	for p+1 < n && hp[p+1].count < nc {
		nb := hp[p+1].b
		q := &h.buckets[nb]
		ne := q.end
		o := hp[ne]
		hp[p] = hhEntry{count: o.count, id: o.id, b: nb}
		h.pos[o.id] = p
		q.start, q.end = p, ne-1
		p = ne
	}
	h.pos[id] = p
	if p+1 < n && hp[p+1].count == nc {
		nb := hp[p+1].b
		h.buckets[nb].start = p
		hp[p] = hhEntry{count: nc, id: id, b: nb}
		if freed {
			h.bfree = append(h.bfree, b)
		}
		return
	}
	if freed {
		h.buckets[b] = hhBucket{p, p}
	} else {
		b = h.newBucket(p)
	}
	hp[p] = hhEntry{count: nc, id: id, b: b}
}

// push adds counter id with count c, at its place in the order.
func (h *HeavyHitters) push(id int32, c uint64) {
	p := int32(len(h.heap))
	h.heap = append(h.heap, hhEntry{})
	h.pos = append(h.pos, 0)
	hp := h.heap
	// Move each bucket of count above c up by one position.
	for p > 0 && hp[p-1].count > c {
		pb := hp[p-1].b
		q := &h.buckets[pb]
		s := q.start
		o := hp[s]
		hp[p] = hhEntry{count: o.count, id: o.id, b: pb}
		h.pos[o.id] = p
		q.start, q.end = s+1, p
		p = s
	}
	h.pos[id] = p
	if p > 0 && hp[p-1].count == c {
		pb := hp[p-1].b
		h.buckets[pb].end = p
		hp[p] = hhEntry{count: c, id: id, b: pb}
		return
	}
	hp[p] = hhEntry{count: c, id: id, b: h.newBucket(p)}
}

// rebuild sorts h.heap (whose counts and ids are set, in any order) and
// recomputes the positions and buckets.
func (h *HeavyHitters) rebuild() {
	slices.SortFunc(h.heap, func(a, b hhEntry) int {
		if c := cmp.Compare(a.count, b.count); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	h.buckets = h.buckets[:0]
	h.bfree = h.bfree[:0]
	for i := range h.heap {
		p := int32(i)
		e := &h.heap[i]
		h.pos[e.id] = p
		if i > 0 && h.heap[i-1].count == e.count {
			e.b = h.heap[i-1].b
			h.buckets[e.b].end = p
			continue
		}
		e.b = h.newBucket(p)
	}
}
