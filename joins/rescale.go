package joins

import (
	"cmp"
	"slices"
)

// Rescale moves the state of a job's partitions, from, into the joins of
// its new partitions, to (empty, with the new count's share of the
// state budget): each buffered tuple to to[part(hash)], hash being its
// key's (the hash the job routes events with), in event-time order, so
// that every key's chains stay oldest first; partition i's window
// accumulators and counters into to[i mod len(to)], where a query adds
// them up as it adds up partitions. Every new join learns the highest
// event time seen, for lateness and expiry. A new join over its budget
// evicts its oldest tuples, as at any insert. from is not modified.
func Rescale(from, to []*Join, part func(hash uint64) int) {
	moved := make([][]tuple, len(to))
	var maxTS int64
	started := false
	for i, j := range from {
		for k := 0; k < j.n; k++ {
			t := j.ring[(j.head+k)%len(j.ring)]
			q := part(t.hash)
			moved[q] = append(moved[q], t)
		}
		if j.started {
			maxTS, started = max(maxTS, j.c.MaxTS), true
		}
		to[i%len(to)].takeWindows(j)
	}
	for q, ts := range moved {
		slices.SortStableFunc(ts, func(a, b tuple) int { return cmp.Compare(a.ts, b.ts) })
		dst := to[q]
		if started && (!dst.started || dst.c.MaxTS < maxTS) {
			dst.c.MaxTS, dst.started = maxTS, true
		}
		for _, t := range ts {
			ix, ok := dst.index[t.hash]
			if !ok {
				ix = emptyIndex
			}
			t.next = -1
			dst.insert(&t, &ix)
			dst.index[t.hash] = ix
		}
	}
}

// takeWindows adds o's counters and window accumulators into j's.
func (j *Join) takeWindows(o *Join) {
	maxTS, started := j.c.MaxTS, j.started
	j.c.Add(&o.c)
	j.c.MaxTS, j.started = maxTS, started
	j.closed = mergeAccs(j.closed, o.closed)
	j.wins = mergeAccs(j.wins, o.wins)
	if over := len(j.closed) - j.cfg.Keep; j.cfg.Keep > 0 && over > 0 {
		j.closed = j.closed[over:]
	}
}

// mergeAccs adds the accumulators of b into those of a of the same
// window, keeping the windows in ascending order; b's are copied.
func mergeAccs(a, b []*Acc) []*Acc {
	for _, x := range b {
		i, found := slices.BinarySearchFunc(a, x.Start, func(y *Acc, s int64) int { return cmp.Compare(y.Start, s) })
		if found {
			a[i].Add(x)
			continue
		}
		c := *x
		a = slices.Insert(a, i, &c)
	}
	return a
}
