package synopses

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Summaries that evicted counters, redistributed over more and over fewer
// partitions: merged as a query merges partitions, every item's true count
// stays within its bounds, every untracked item's under MaxUntracked, and
// the total is the stream's.
func TestRescaleHHKeepsBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const parts, counters = 3, 40
	truth := map[string]uint64{}
	from := make([]*WindowedHH, parts)
	for i := range from {
		from[i] = NewWindowedHH(counters, 0, 1)
	}
	var total uint64
	for range 20_000 {
		k := fmt.Sprintf("i%d", int(rng.ExpFloat64()*30))
		truth[k]++
		total++
		from[rng.IntN(parts)].Update(k, 1, 0)
	}
	part := func(n int) func(string) int {
		return func(s string) int { return int(hashKey(s) % uint64(n)) }
	}
	for _, n := range []int{5, 2, 1} {
		moved := RescaleHH(from, n, part(n))
		merged := NewHeavyHitters(counters)
		for q, w := range moved {
			_, s := w.Current()
			for _, it := range s.Items() {
				if part(n)(it.Key) != q {
					t.Fatalf("n=%d: %s in partition %d, its item goes to %d", n, it.Key, q, part(n)(it.Key))
				}
			}
			merged.Merge(s)
		}
		if merged.Total() != total {
			t.Fatalf("n=%d: total %d, want %d", n, merged.Total(), total)
		}
		for k, c := range truth {
			it, ok := merged.Get(k)
			if c < it.Lower || c > it.Upper || !ok && c > merged.MaxUntracked() {
				t.Fatalf("n=%d: %s counted %d, bounds [%d, %d] (tracked %v, untracked ≤ %d)", n, k, c, it.Lower, it.Upper, ok, merged.MaxUntracked())
			}
		}
		from = moved
	}
}
