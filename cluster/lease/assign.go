package lease

import (
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// Assign returns the desired owner of every key among nodes. Every node
// computes it from the same inputs, so all agree without talking.
//
// It is rendezvous hashing (each key prefers the nodes in the order of a hash
// of key and node, so a join or leave moves few keys) with a balance step:
// with n nodes and k keys each node gets ⌊k/n⌋ or ⌈k/n⌉ keys, and the keys of
// one group (the part of a key before its last dot, e.g. the job of
// "clicks.p3") are spread first, each node taking at most ⌈group size/n⌉ of a
// group while that is possible.
func Assign(keys, nodes []string) map[string]string {
	out := make(map[string]string, len(keys))
	if len(nodes) == 0 || len(keys) == 0 {
		return out
	}
	keys = sortedUnique(keys)
	nodes = sortedUnique(nodes)
	b := newBalancer(keys, nodes)
	pairs := rankPairs(keys, nodes)
	b.place(pairs, out, true)
	b.place(pairs, out, false)
	return out
}

func sortedUnique(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

// group is the unit whose keys should spread over the nodes: a job.
func group(key string) string {
	if i := strings.LastIndexByte(key, '.'); i > 0 {
		return key[:i]
	}
	return key
}

type pair struct {
	score     uint64
	key, node string
}

// rankPairs lists every (key, node) pair, the most preferred first.
func rankPairs(keys, nodes []string) []pair {
	pairs := make([]pair, 0, len(keys)*len(nodes))
	for _, k := range keys {
		for _, n := range nodes {
			pairs = append(pairs, pair{score: xxhash.Sum64String(k + "\x00" + n), key: k, node: n})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		if a.score != b.score {
			if a.score > b.score {
				return -1
			}
			return 1
		}
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		return strings.Compare(a.node, b.node)
	})
	return pairs
}

// balancer tracks how many keys each node has taken so far.
type balancer struct {
	floor, extra int // each node takes floor keys, extra of them one more
	extrasUsed   int
	count        map[string]int
	groupCap     map[string]int // group → ⌈size/n⌉
	groupCount   map[[2]string]int
}

func newBalancer(keys, nodes []string) *balancer {
	n := len(nodes)
	b := &balancer{
		floor:      len(keys) / n,
		extra:      len(keys) % n,
		count:      make(map[string]int, n),
		groupCap:   make(map[string]int),
		groupCount: make(map[[2]string]int),
	}
	sizes := make(map[string]int)
	for _, k := range keys {
		sizes[group(k)]++
	}
	for g, size := range sizes {
		b.groupCap[g] = (size + n - 1) / n
	}
	return b
}

func (b *balancer) fits(p pair, spreadGroups bool) bool {
	if spreadGroups && b.groupCount[[2]string{group(p.key), p.node}] >= b.groupCap[group(p.key)] {
		return false
	}
	c := b.count[p.node]
	return c < b.floor || (c == b.floor && b.extrasUsed < b.extra)
}

func (b *balancer) take(p pair) {
	if b.count[p.node] == b.floor {
		b.extrasUsed++
	}
	b.count[p.node]++
	b.groupCount[[2]string{group(p.key), p.node}]++
}

// place walks the pairs in preference order and gives each unplaced key to
// the first node with room. The pass without the group limit always places
// every key: the node capacities add up to the number of keys.
func (b *balancer) place(pairs []pair, out map[string]string, spreadGroups bool) {
	for _, p := range pairs {
		if _, done := out[p.key]; done || !b.fits(p, spreadGroups) {
			continue
		}
		b.take(p)
		out[p.key] = p.node
	}
}
