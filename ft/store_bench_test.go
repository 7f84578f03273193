package ft

import (
	"bytes"
	"testing"
)

// BenchmarkStorePutMixed is the cost of one Put as approximate fault tolerance
// makes them: 10 KB of state, a full backup every 17th Put and deltas in
// between, not durable (mode approx does not fsync). (BenchmarkStorePut, in
// itemlog_bench_test.go, is 8 MiB full backups only.)
//
// On a 2-core AMD EPYC VM: 300-550 µs/op, 24 allocs/op with one file per
// backup (temporary file, write, close, rename); 22-40 µs/op, 5 allocs/op
// with one file per chain and deltas appended; 4.8-5.2 µs/op with each new
// chain written over an old chain's file (2026-12-02, against 21.8-24.7
// µs/op for the emptied files before, alternately).
func BenchmarkStorePutMixed(b *testing.B) {
	s, err := NewDirStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	key := Key{"bench", 0}
	data := bytes.Repeat([]byte("0123456789"), 1024)
	meta := BackupMeta{LastSeqs: []uint64{1, 2}, Divergence: 0.5}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		meta.Full = i%17 == 0
		meta.LastSeqs[0] = uint64(i)
		if _, err := s.Put(key, meta, data); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkStorePutDelta is one delta of 7 KB appended to an open chain,
// and BenchmarkStorePutFull one full backup of 50 KB starting a chain (the
// sizes of a heavy_hitters job's backups with 2,000 counters).
func BenchmarkStorePutDelta(b *testing.B) { benchPut(b, 7<<10, 1<<30) }
func BenchmarkStorePutFull(b *testing.B)  { benchPut(b, 50<<10, 1) }

func benchPut(b *testing.B, size, fullEvery int) {
	s, err := NewDirStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	key := Key{"bench", 0}
	data := bytes.Repeat([]byte{7}, size)
	meta := BackupMeta{LastSeqs: []uint64{1, 2}, Divergence: 0.5, Full: true}
	if _, err := s.Put(key, meta, data); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		meta.Full = i%fullEvery == 0
		meta.LastSeqs[0] = uint64(i)
		if _, err := s.Put(key, meta, data); err != nil {
			b.Fatal(err)
		}
	}
}
