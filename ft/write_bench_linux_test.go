package ft

import (
	"os"
	goruntime "runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// writeSize and writeChain are the write benchmarks' delta (a heavy_hitters
// one's size) and the deltas of a chain.
const writeSize, writeChain = 7300, 50

// benchFile is a new file for a write benchmark, closed when b ends.
func benchFile(b *testing.B) *os.File {
	f, err := os.Create(b.TempDir() + "/chain.bin")
	check(b, err)
	b.Cleanup(func() { f.Close() })
	return f
}

// check ends benchmark b at an error.
func check(b *testing.B, err error) {
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkFileWrites is where a delta's write to a chain file goes: 7.3 KB
// writes (a heavy_hitters delta), a chain of 50 in a file. append empties
// the file for each chain and appends, as DirStore did before it wrote new
// chains over old ones; fallocate and ftruncate preallocate each chain's
// blocks or size first and write with pwrite; overwrite (what DirStore does
// now) and mmap write over one chain's region again and again, whose pages
// stay in the page cache, by pwrite and by a copy into a shared mapping.
// Only the last two avoid the kernel's work on a page met for the first
// time.
func BenchmarkFileWrites(b *testing.B) {
	const size, chain = writeSize, writeChain
	buf := make([]byte, size)
	b.Run("append", func(b *testing.B) {
		f := benchFile(b)
		i := 0
		for b.Loop() {
			if i%chain == 0 {
				check(b, f.Truncate(0))
				_, err := f.Seek(0, 0)
				check(b, err)
			}
			_, err := f.Write(buf)
			check(b, err)
			i++
		}
	})
	for _, v := range []struct {
		name  string
		grow  func(f *os.File) error
		empty bool
	}{
		{"fallocate", func(f *os.File) error { return syscall.Fallocate(int(f.Fd()), 0, 0, size*chain) }, true},
		{"ftruncate", func(f *os.File) error { return f.Truncate(size * chain) }, true},
		{"overwrite", func(f *os.File) error { return f.Truncate(size * chain) }, false},
	} {
		b.Run(v.name, func(b *testing.B) {
			f := benchFile(b)
			check(b, v.grow(f))
			i := 0
			for b.Loop() {
				if i%chain == 0 && i > 0 && v.empty {
					check(b, f.Truncate(0))
					check(b, v.grow(f))
				}
				_, err := f.WriteAt(buf, int64(i%chain)*size)
				check(b, err)
				i++
			}
		})
	}
	b.Run("mmap", func(b *testing.B) {
		f := benchFile(b)
		check(b, f.Truncate(size*chain))
		m, err := syscall.Mmap(int(f.Fd()), 0, size*chain, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
		check(b, err)
		defer syscall.Munmap(m)
		i := 0
		for b.Loop() {
			o := i % chain * size
			copy(m[o:o+size], buf)
			i++
		}
	})
}

// BenchmarkFileWriteFreshBuffer is the overwrite case of BenchmarkFileWrites
// with a buffer just written by another thread, as a delta encoded by a
// partition's goroutine is when the backup writer stores it: that thread
// pinned to this one's CPU (same) or to the other (other). write-ns/op
// times the pwrite alone (the hand-off is not counted): what the copy into
// the page cache pays for lines that are dirty in another core's cache.
func BenchmarkFileWriteFreshBuffer(b *testing.B) {
	if goruntime.NumCPU() < 2 {
		b.Skip("one CPU")
	}
	const size, chain = writeSize, writeChain
	for _, c := range []struct {
		name   string
		filler int
	}{{"same", 0}, {"other", 1}} {
		b.Run(c.name, func(b *testing.B) {
			goruntime.LockOSThread()
			defer goruntime.UnlockOSThread()
			if err := pin(0); err != nil {
				b.Skip(err)
			}
			f := benchFile(b)
			check(b, f.Truncate(size*chain))
			buf := make([]byte, size)
			fill, filled := make(chan byte), make(chan error)
			go func() {
				goruntime.LockOSThread()
				err := pin(c.filler)
				for v := range fill {
					for i := range buf {
						buf[i] = v + byte(i)
					}
					filled <- err
				}
			}()
			defer close(fill)
			var spent time.Duration
			i := 0
			for b.Loop() {
				fill <- byte(i)
				if err := <-filled; err != nil {
					b.Skip(err)
				}
				t0 := time.Now()
				_, err := f.WriteAt(buf, int64(i%chain)*size)
				check(b, err)
				spent += time.Since(t0)
				i++
			}
			b.ReportMetric(float64(spent.Nanoseconds())/float64(b.N), "write-ns/op")
		})
	}
}

// pin binds the calling thread to one CPU.
func pin(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	return unix.SchedSetaffinity(0, &set)
}
