package synopses

import (
	"cmp"
	"slices"
)

// Rescaling: when a job's partition count changes, its partitions'
// windowed summaries are merged (WindowedDistinct.MergeFrom) or their
// counters redistributed by item (RescaleHH).

// mergeFrom folds o's windows into w: each of o's windows into w's of the
// same index (made when missing). Windows older than keep before the
// newest are dropped, as an advancing watermark would drop them. Late, dropped and closed counts add up, and pending widens
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

// place makes all the windows, sorted: the newest one's start stands for
// the largest event time seen (its lower bound), which closes the windows
// before it unless a watermark is told. Every window is fresh: the next
// delta carries it in full.
func (w *windows[S]) place(all []*window[S]) {
	slices.SortFunc(all, func(a, b *window[S]) int { return cmp.Compare(a.idx, b.idx) })
	w.wins, w.hot, w.hasC, w.hasMax = nil, nil, false, false
	for _, x := range all {
		x.fresh, x.stale = true, true
	}
	w.wins = all
	if len(all) == 0 {
		return
	}
	w.maxTS, w.hasMax = w.span(all[len(all)-1].idx).Start, true
	if !w.ext {
		w.advance(w.maxTS)
	}
	w.trim()
}

// MergeFrom folds o's windows into d (register-wise maximum: the union).
// o is not modified.
func (d *WindowedDistinct) MergeFrom(o *WindowedDistinct) { d.w.mergeFrom(&o.w) }

// RescaleHH redistributes the summaries of a job's partitions, from, over
// n new ones by item, window by window: new partition q holds the items
// part maps to q, each with its counts and errors summed over the old
// partitions (their events were disjoint), the largest kept when more
// than the counters (what is dropped bounds the untracked, as in Merge).
// Partition 0 also holds the totals, the widening and the old summaries'
// untracked bounds as widening (an item a new summary does not track may
// have had up to that count in an old one), and the counts of late,
// dropped and closed events. So every item's bounds stay valid, and with
// no counter ever evicted a query (the merge of the partitions) answers
// as before. from is not modified.
func RescaleHH(from []*WindowedHH, n int, part func(item string) int) []*WindowedHH {
	byIdx := map[int64][]*HeavyHitters{}
	var idxs []int64
	for _, h := range from {
		for _, x := range h.w.list() {
			if _, ok := byIdx[x.idx]; !ok {
				idxs = append(idxs, x.idx)
			}
			byIdx[x.idx] = append(byIdx[x.idx], x.s)
		}
	}
	lists := make([][]*window[*HeavyHitters], n)
	for _, idx := range idxs {
		for q, s := range redistribute(byIdx[idx], n, part) {
			lists[q] = append(lists[q], &window[*HeavyHitters]{idx: idx, s: s})
		}
	}
	out := make([]*WindowedHH, n)
	for q := range out {
		w := windows[*HeavyHitters]{size: from[0].w.size, keep: from[0].w.keep, maxOpen: from[0].w.maxOpen, ext: from[0].w.ext, newS: from[0].w.newS,
			clone: from[0].w.clone, merge: from[0].w.merge, widen: from[0].w.widen}
		if q == 0 {
			for _, h := range from {
				w.late += h.w.late
				w.dropped += h.w.dropped
				w.nclosed = max(w.nclosed, h.w.nclosed)
				w.pend = append(w.pend, h.w.pend...)
			}
		}
		w.place(lists[q])
		out[q] = &WindowedHH{w: w}
	}
	return out
}

// redistribute makes the n summaries of one window (see RescaleHH).
func redistribute(from []*HeavyHitters, n int, part func(string) int) []*HeavyHitters {
	type acc struct{ count, err uint64 }
	items := make([]map[string]acc, n)
	for q := range items {
		items[q] = map[string]acc{}
	}
	capacity := from[0].capacity
	var total, widen uint64
	for _, h := range from {
		total += h.total
		widen += h.widen + h.untracked()
		for _, e := range h.heap {
			key := h.slots[e.id].key
			m := items[part(key)]
			a := m[key]
			m[key] = acc{a.count + e.count, a.err + h.errs[e.id]}
		}
	}
	out := make([]*HeavyHitters, n)
	for q, m := range items {
		type ent struct {
			key string
			acc
		}
		ents := make([]ent, 0, len(m))
		for k, a := range m {
			ents = append(ents, ent{k, a})
		}
		slices.SortFunc(ents, func(a, b ent) int {
			if c := cmp.Compare(b.count, a.count); c != 0 {
				return c
			}
			return cmp.Compare(a.key, b.key)
		})
		h := newHH(capacity, min(len(ents), capacity))
		if len(ents) > capacity {
			h.floor = ents[capacity].count
			ents = ents[:capacity]
		}
		for _, e := range ents {
			h.add(e.key, e.count, e.err)
		}
		h.rebuild()
		out[q] = h
	}
	out[0].total, out[0].widen = total, widen
	return out
}

// add tracks a new item with its count and error; rebuild must follow.
func (h *HeavyHitters) add(key string, count, err uint64) {
	id := int32(len(h.slots))
	x := hashKey(key)
	h.slots = append(h.slots, hhSlot{key: key, count: count})
	h.hashes = append(h.hashes, x)
	h.errs = append(h.errs, err)
	h.heap = append(h.heap, hhEntry{count: count, id: id})
	h.pos = append(h.pos, 0)
	h.index.insert(x, id)
	setBit(h.marked, id)
	setBit(h.rekeyed, id)
	h.dirty = append(h.dirty, id)
	h.div = max(h.div, count)
}
