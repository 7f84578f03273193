package synopses

import (
	"cmp"
	"slices"
)

// Rescaling: when a job's partition count changes, its partitions'
// windowed summaries are folded into one another (MergeFrom) and a heavy
// hitters summary is split by the partition each item goes to (SplitBy).

// mergeFrom folds o's windows into w: each of o's windows into w's of the
// same index (made when missing). The newest window is current; windows
// older than keep before it are dropped, as an advancing window would
// drop them. Late, dropped and closed counts add up, and pending widens
// are kept. Every window is fresh: the next delta carries it in full.
func (w *windows[S]) mergeFrom(o *windows[S]) {
	all := w.list()
	for _, x := range o.list() {
		i := slices.IndexFunc(all, func(y *window[S]) bool { return y.idx == x.idx })
		if i < 0 {
			all = append(all, &window[S]{idx: x.idx, s: w.newS()})
			i = len(all) - 1
		}
		w.merge(all[i].s, x.s)
	}
	w.place(all)
	w.late += o.late
	w.dropped += o.dropped
	w.nclosed = max(w.nclosed, o.nclosed)
	w.pend = append(w.pend, o.pend...)
}

// place makes all the windows: the newest current, the others closed.
func (w *windows[S]) place(all []*window[S]) {
	slices.SortFunc(all, func(a, b *window[S]) int { return cmp.Compare(a.idx, b.idx) })
	w.cur, w.closed = nil, nil
	if len(all) == 0 {
		return
	}
	w.cur = all[len(all)-1]
	lo := w.cur.idx - int64(w.keep)
	for _, x := range all[:len(all)-1] {
		if x.idx >= lo {
			w.closed = append(w.closed, x)
		}
	}
	for _, x := range all {
		x.fresh = true
	}
}

// MergeFrom folds o's windows into h (see Merge for each window's
// bounds). o is not modified.
func (h *WindowedHH) MergeFrom(o *WindowedHH) { h.w.mergeFrom(&o.w) }

// MergeFrom folds o's windows into d (register-wise maximum: the union).
// o is not modified.
func (d *WindowedDistinct) MergeFrom(o *WindowedDistinct) { d.w.mergeFrom(&o.w) }

// SplitBy splits h into n summaries, window by window: piece q holds the
// counters of the items that part maps to q. Piece 0 also keeps h's
// counts of late, dropped and closed events and its pending widens, so
// that merging the pieces again gives h's counts. h is not modified.
func (h *WindowedHH) SplitBy(n int, part func(item string) int) []*WindowedHH {
	out := make([]*WindowedHH, n)
	lists := make([][]*window[*HeavyHitters], n)
	for _, x := range h.w.list() {
		for q, s := range x.s.SplitBy(n, part) {
			lists[q] = append(lists[q], &window[*HeavyHitters]{idx: x.idx, s: s})
		}
	}
	for q := range out {
		w := h.w
		w.scratch, w.state, w.carried, w.pend = nil, byteBuf{}, 0, nil
		w.late, w.dropped = 0, 0
		if q == 0 {
			w.late, w.dropped, w.pend = h.w.late, h.w.dropped, slices.Clone(h.w.pend)
		}
		w.place(lists[q])
		out[q] = &WindowedHH{w: w}
	}
	return out
}

// SplitBy splits h's counters by the partition each item goes to: piece
// q holds, with their counts and errors, the items part maps to q. Piece
// 0 also holds h's total and widening, and widens by h's untracked bound:
// an item a piece does not track may have had up to that count in h. So
// merging the pieces (as a query merges partitions) gives every tracked
// item the bounds it had in h or wider, and no untracked item a lower
// bound; with no counter ever evicted the answers are h's own. h is not
// modified.
func (h *HeavyHitters) SplitBy(n int, part func(item string) int) []*HeavyHitters {
	out := make([]*HeavyHitters, n)
	for q := range out {
		out[q] = NewHeavyHitters(h.capacity)
	}
	for _, e := range h.heap {
		s := &h.slots[e.id]
		out[part(s.key)].add(s.key, e.count, h.errs[e.id])
	}
	for _, p := range out {
		p.rebuild()
	}
	out[0].total = h.total
	out[0].widen = h.widen + h.untracked()
	return out
}

// add tracks a new item with its count and error; rebuild must follow.
func (h *HeavyHitters) add(key string, count, err uint64) {
	id := int32(len(h.slots))
	x := hashKey(key)
	h.slots = append(h.slots, hhSlot{key: key, hash: x})
	h.errs = append(h.errs, err)
	h.heap = append(h.heap, hhEntry{count: count, id: id})
	h.pos = append(h.pos, 0)
	h.index.insert(x, id)
	setBit(h.marked, id)
	setBit(h.rekeyed, id)
	h.dirty = append(h.dirty, id)
	h.div = max(h.div, count)
}
