package joins

import (
	"fmt"
	"testing"
)

// BenchmarkAdd measures tuples/s of the join alone: two interleaved streams
// over 10,000 random keys, 100 per ms, joined within 100 ms (about one match per
// tuple), with and without sampling.
func BenchmarkAdd(b *testing.B) {
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprint("user-", i)
	}
	for _, sample := range []float64{1, 0.1} {
		b.Run(fmt.Sprintf("sample=%v", sample), func(b *testing.B) {
			j, _ := New(Config{Within: 100, Lateness: 10, MaxBytes: 64 << 20, Sample: sample, Window: 10_000})
			var matches int
			emit := func(*Match) { matches++ }
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				k := keys[mix(uint64(i))%uint64(len(keys))]
				j.Add(Side(i&1), k, int64(i/100), float64(i&255), uint64(i+1), emit)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tuples/s")
			b.ReportMetric(float64(matches)/float64(b.N), "matches/tuple")
		})
	}
}
