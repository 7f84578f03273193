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
	return AssignWeighted(keys, nodes, nil)
}

// AssignWeighted is Assign with each node's share of the keys, and of each
// group, in proportion to its weight (its cores): node i gets
// ⌊k·wᵢ/W⌋ keys or one more. A nil weight, or a weight below 1 for any
// node (one that does not say), weighs every node the same.
func AssignWeighted(keys, nodes []string, weight func(node string) int) map[string]string {
	out := make(map[string]string, len(keys))
	if len(nodes) == 0 || len(keys) == 0 {
		return out
	}
	keys = sortedUnique(keys)
	nodes = sortedUnique(nodes)
	b := newBalancer(keys, nodes, weightsOf(nodes, weight))
	pairs := rankPairs(keys, nodes)
	b.place(pairs, out, true)
	b.place(pairs, out, false)
	return out
}

// weightsOf is each node's weight: all 1 unless every node has one.
func weightsOf(nodes []string, weight func(string) int) map[string]int {
	w := make(map[string]int, len(nodes))
	for _, n := range nodes {
		w[n] = 1
	}
	if weight == nil {
		return w
	}
	for _, n := range nodes {
		if weight(n) < 1 {
			return w
		}
	}
	for _, n := range nodes {
		w[n] = weight(n)
	}
	return w
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
	floor      map[string]int // each node takes its floor, extra nodes one more
	extra      int
	extrasUsed int
	count      map[string]int
	weight     map[string]int
	total      int            // of the weights
	groupSize  map[string]int // group → keys
	groupCount map[[2]string]int
}

func newBalancer(keys, nodes []string, weight map[string]int) *balancer {
	b := &balancer{
		floor:      make(map[string]int, len(nodes)),
		count:      make(map[string]int, len(nodes)),
		weight:     weight,
		groupSize:  make(map[string]int),
		groupCount: make(map[[2]string]int),
	}
	for _, n := range nodes {
		b.total += weight[n]
	}
	placed := 0
	for _, n := range nodes {
		b.floor[n] = len(keys) * weight[n] / b.total
		placed += b.floor[n]
	}
	b.extra = len(keys) - placed
	for _, k := range keys {
		b.groupSize[group(k)]++
	}
	return b
}

// groupCap is the most keys of group g node may take while groups are
// spread: its share of the group, rounded up.
func (b *balancer) groupCap(g, node string) int {
	return (b.groupSize[g]*b.weight[node] + b.total - 1) / b.total
}

func (b *balancer) fits(p pair, spreadGroups bool) bool {
	g := group(p.key)
	if spreadGroups && b.groupCount[[2]string{g, p.node}] >= b.groupCap(g, p.node) {
		return false
	}
	c, f := b.count[p.node], b.floor[p.node]
	return c < f || (c == f && b.extrasUsed < b.extra)
}

func (b *balancer) take(p pair) {
	if b.count[p.node] == b.floor[p.node] {
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
