package ft

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkItemLogAppendFlush appends 300-byte payloads and flushes every
// 1,000 records (an AF-Stream item backup of l = 1,000 pending events), with
// no fsync: what the approximate mode pays.
func BenchmarkItemLogAppendFlush(b *testing.B) {
	l := openLog(b, b.TempDir(), ItemLogConfig{})
	payload := make([]byte, 300)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	seq := uint64(0)
	for b.Loop() {
		seq++
		if err := l.Append(seq, payload); err != nil {
			b.Fatal(err)
		}
		if seq%1000 == 0 {
			if err := l.Flush(); err != nil {
				b.Fatal(err)
			}
		}
		if seq%100_000 == 0 { // keep the disk use of long runs bounded
			if err := l.TruncateBefore(seq); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := l.Flush(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkItemLogGroupCommit has 4 writers each appending one 300-byte
// record and committing it before the next (the exact mode: each accepted
// event durable before the reply). It reports the Commit latency
// percentiles and how many records one fsync covered.
func BenchmarkItemLogGroupCommit(b *testing.B) {
	const writers = 4
	l := openLog(b, b.TempDir(), ItemLogConfig{})
	payload := make([]byte, 300)
	b.SetBytes(int64(len(payload)))
	var (
		mu        sync.Mutex
		seq       uint64
		lat       = make([][]time.Duration, writers)
		wg        sync.WaitGroup
		per       = b.N/writers + 1
		syncsBase = l.Syncs()
	)
	b.ResetTimer()
	for w := range writers {
		wg.Go(func() {
			for range per {
				mu.Lock()
				seq++
				err := l.Append(seq, payload)
				mu.Unlock()
				if err != nil {
					b.Error(err)
					return
				}
				t0 := time.Now()
				if err := l.Commit(); err != nil {
					b.Error(err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	pct := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))].Microseconds()) }
	b.ReportMetric(pct(0.5), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(float64(len(all))/b.Elapsed().Seconds(), "records/s")
	if syncs := l.Syncs() - syncsBase; syncs > 0 {
		b.ReportMetric(float64(len(all))/float64(syncs), "records/fsync")
	}
}

// BenchmarkStorePut writes 8 MiB full backups (a 2^20-weight model),
// fsync included.
func BenchmarkStorePut(b *testing.B) {
	s, err := NewDirStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 8<<20)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := s.Put(Key{"bench", 0}, BackupMeta{Full: true}, data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStoreChain reads a full 8 MiB backup and 10 deltas of 64 KiB.
func BenchmarkStoreChain(b *testing.B) {
	s, err := NewDirStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	key := Key{"bench", 0}
	if _, err := s.Put(key, BackupMeta{Full: true}, make([]byte, 8<<20)); err != nil {
		b.Fatal(err)
	}
	for range 10 {
		if _, err := s.Put(key, BackupMeta{}, make([]byte, 64<<10)); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(8<<20 + 10*64<<10)
	for b.Loop() {
		chain, _, err := s.Chain(key)
		if err != nil || len(chain) != 11 {
			b.Fatal(len(chain), err)
		}
	}
}
