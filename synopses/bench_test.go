package synopses

import (
	"bytes"
	"runtime"
	"testing"
)

// benchStream is the Zipf(1.1) stream of the brief: 1M items from a
// universe of 100k. Each item's bytes are copied into one arena in stream
// order, as items parsed out of a batch of events would lie in memory, so a
// lookup's cost is the summary's, not a cache miss on a stale key.
var benchStream = func() []string {
	ev := zipfStream(42, 1_000_000, 100_000, 1.1)
	var arena []byte
	for _, e := range ev {
		arena = append(arena, e.key...)
	}
	all := string(arena)
	s := make([]string, len(ev))
	off := 0
	for i, e := range ev {
		s[i] = all[off : off+len(e.key)]
		off += len(e.key)
	}
	return s
}()

// BenchmarkUpdate is the cost of one Space-Saving update with 2,000
// counters on the Zipf stream (target ≤ 50 ns/op). cpu-ns/op is the
// process's CPU time per update, which other processes on the machine do
// not inflate as they do the wall-clock ns/op.
func BenchmarkUpdate(b *testing.B) {
	h := NewHeavyHitters(2000)
	s := benchStream
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	j := 0
	for i := 0; i < b.N; i++ {
		h.Update(s[j], 1)
		if j++; j == len(s) {
			j = 0
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
}

// BenchmarkExactMap counts the same stream exactly in a Go map.
func BenchmarkExactMap(b *testing.B) {
	m := make(map[string]uint64)
	s := benchStream
	b.ReportAllocs()
	b.ResetTimer()
	j := 0
	for i := 0; i < b.N; i++ {
		m[s[j]]++
		if j++; j == len(s) {
			j = 0
		}
	}
	b.ReportMetric(float64(len(m)), "keys")
}

// BenchmarkHeavyHittersMemory reports the heap bytes of a full summary of
// 2,000 counters (the items' strings are shared with the stream and not
// counted) and of the exact map over the same stream.
func BenchmarkHeavyHittersMemory(b *testing.B) {
	for i := 0; i < b.N; i++ {
		before := heapBytes()
		h := NewHeavyHitters(2000)
		for _, k := range benchStream {
			h.Update(k, 1)
		}
		hh := heapBytes() - before
		runtime.KeepAlive(h)
		before = heapBytes()
		m := make(map[string]uint64)
		for _, k := range benchStream {
			m[k]++
		}
		exact := heapBytes() - before
		runtime.KeepAlive(m)
		b.ReportMetric(float64(hh), "summary-bytes")
		b.ReportMetric(float64(exact), "exactmap-bytes")
	}
}

func heapBytes() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// BenchmarkHeavyHittersMerge merges two full 2,000-counter summaries.
func BenchmarkHeavyHittersMerge(b *testing.B) {
	x, y := NewHeavyHitters(2000), NewHeavyHitters(2000)
	for i, k := range benchStream {
		if i%2 == 0 {
			x.Update(k, 1)
		} else {
			y.Update(k, 1)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m := x.Clone()
		m.Merge(y)
	}
}

// BenchmarkHeavyHittersDeltaBackup backs up after each 10,000 updates.
func BenchmarkHeavyHittersDeltaBackup(b *testing.B) {
	h := NewHeavyHitters(2000)
	var buf bytes.Buffer
	s := benchStream
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range 10_000 {
			h.Update(s[(i*10_000+j)%len(s)], 1)
		}
		buf.Reset()
		if err := h.BackupState(&buf, false); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "delta-bytes")
}

// BenchmarkHeavyHittersBackup is one delta backup alone (the updates
// between backups are not timed) after each 2,000 updates: about how often
// the top Zipf item of the fault-tolerance benchmark moves by Θ = 1,000.
// Sub-benchmark cold evicts the caches before each backup, as the request
// handling between two backups of a partition does in the service.
func BenchmarkHeavyHittersBackup(b *testing.B) {
	b.Run("warm", func(b *testing.B) { benchBackup(b, nil) })
	b.Run("cold", func(b *testing.B) { benchBackup(b, make([]byte, 32<<20)) })
}

// benchBackup times delta backups after each 2,000 updates, writing
// through evict (when not nil) before each.
func benchBackup(b *testing.B, evict []byte) {
	h := NewHeavyHitters(2000)
	s := benchStream
	for _, k := range s[:200_000] {
		h.Update(k, 1)
	}
	var buf bytes.Buffer
	if err := h.BackupState(&buf, true); err != nil {
		b.Fatal(err)
	}
	j := 200_000
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for range 2000 {
			h.Update(s[j], 1)
			if j++; j == len(s) {
				j = 0
			}
		}
		buf.Reset()
		for k := 0; k < len(evict); k += 64 {
			evict[k]++
		}
		b.StartTimer()
		if err := h.BackupState(&buf, false); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "delta-bytes")
}

// BenchmarkDistinctInsert hashes (xxhash) and inserts one item of the Zipf
// stream into a p=14 sketch; it reports the sketch's memory.
func BenchmarkDistinctInsert(b *testing.B) {
	d, err := NewDistinct(14)
	if err != nil {
		b.Fatal(err)
	}
	s := benchStream
	b.ReportAllocs()
	b.ResetTimer()
	j := 0
	for i := 0; i < b.N; i++ {
		d.InsertString(s[j])
		if j++; j == len(s) {
			j = 0
		}
	}
	b.ReportMetric(float64(d.MemoryBytes()), "sketch-bytes")
}

// BenchmarkDistinctInsertHash is the insert alone, on precomputed hashes.
func BenchmarkDistinctInsertHash(b *testing.B) {
	d, _ := NewDistinct(14)
	hs := make([]uint64, 1<<16)
	for i := range hs {
		hs[i] = hashKey(benchStream[i]) * 0x9E3779B97F4A7C15
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d.InsertHash(hs[i&(1<<16-1)])
	}
}

// BenchmarkDistinctEstimate is one query (O(2^p)).
func BenchmarkDistinctEstimate(b *testing.B) {
	d, _ := NewDistinct(14)
	for _, k := range benchStream {
		d.InsertString(k)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = d.Estimate()
	}
}

// TestMemoryPerSummary logs the memory of each summary.
func TestMemoryPerSummary(t *testing.T) {
	before := heapBytes()
	h := NewHeavyHitters(2000)
	for _, k := range benchStream[:200_000] {
		h.Update(k, 1)
	}
	hh := heapBytes() - before
	runtime.KeepAlive(h)
	for _, p := range []uint8{10, 14, 18} {
		d, _ := NewDistinct(p)
		t.Logf("Distinct p=%d: %d bytes (library registers + shadow + bitset)", p, d.MemoryBytes())
	}
	t.Logf("HeavyHitters 2000 counters: %d bytes (items' strings shared with the stream)", hh)
}

// BenchmarkHeavyHittersFullBackup is one full backup of a full summary of
// 2,000 counters (what compaction asks for every so many deltas).
func BenchmarkHeavyHittersFullBackup(b *testing.B) {
	h := NewHeavyHitters(2000)
	for _, k := range benchStream[:200_000] {
		h.Update(k, 1)
	}
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		if err := h.BackupState(&buf, true); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "full-bytes")
}
