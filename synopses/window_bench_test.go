package synopses

import (
	"testing"
	"time"
)

// BenchmarkWindowedUpdate is one update of a windowed summary (2,000
// counters, 10 s windows) on the Zipf stream, 100 events a millisecond of
// event time: the window logic's cost over BenchmarkUpdate's.
func BenchmarkWindowedUpdate(b *testing.B) {
	h := NewWindowedHH(2000, 10*time.Second, 3)
	s := benchStream
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	j := 0
	for i := 0; i < b.N; i++ {
		h.Update(s[j], 1, int64(i/100))
		if j++; j == len(s) {
			j = 0
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
}

// BenchmarkWindowedDistinctInsertHash is one insert of a windowed sketch
// (precision 14, 10 s windows) on precomputed hashes.
func BenchmarkWindowedDistinctInsertHash(b *testing.B) {
	d, _ := NewWindowedDistinct(14, 10*time.Second, 3)
	hs := make([]uint64, 1<<16)
	for i := range hs {
		hs[i] = hashKey(benchStream[i]) * 0x9E3779B97F4A7C15
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d.InsertHash(hs[i&(1<<16-1)], int64(i/100))
	}
}
