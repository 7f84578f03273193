package ft

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var testKey = Key{"j", 0}

func openLog(t testing.TB, dir string, cfg ItemLogConfig) *ItemLog {
	t.Helper()
	l, err := OpenItemLogConfig(dir, testKey, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func itemPayload(seq uint64) []byte {
	return fmt.Appendf(nil, "event-%d-%s", seq, bytes.Repeat([]byte{'x'}, int(seq%7)))
}

func appendSeqs(t testing.TB, l *ItemLog, seqs ...uint64) {
	t.Helper()
	for _, s := range seqs {
		if err := l.Append(s, itemPayload(s)); err != nil {
			t.Fatal(err)
		}
	}
}

func seqRange(from, to uint64) []uint64 {
	var s []uint64
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

// replayAll returns the seqs Replay delivers, checking every payload.
func replayAll(t *testing.T, l *ItemLog, after uint64) ([]uint64, error) {
	t.Helper()
	var got []uint64
	n, err := l.Replay(after, func(seq uint64, p []byte) error {
		if !bytes.Equal(p, itemPayload(seq)) {
			t.Errorf("seq %d: payload %q", seq, p)
		}
		got = append(got, seq)
		return nil
	})
	if n != len(got) {
		t.Errorf("Replay returned n=%d, delivered %d", n, len(got))
	}
	return got, err
}

func segments(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(testKey.dir(dir), segPrefix+"*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestItemLogReplay(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, ItemLogConfig{SegmentBytes: 100})
	if got, err := replayAll(t, l, 0); len(got) != 0 || err != nil {
		t.Fatalf("empty log: %v %v", got, err)
	}
	seqs := []uint64{1, 2, 3, 5, 8, 9, 10, 20, 21, 22, 23, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49}
	appendSeqs(t, l, seqs...)
	if err := l.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := len(segments(t, dir)); n < 4 {
		t.Fatalf("%d segments, want several", n)
	}
	for _, after := range []uint64{0, 1, 4, 5, 9, 22, 30, 48, 49, 100} {
		got, err := replayAll(t, l, after)
		if err != nil {
			t.Fatal(err)
		}
		var want []uint64
		for _, s := range seqs {
			if s > after {
				want = append(want, s)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("Replay(%d) = %v, want %v", after, got, want)
		}
	}
	// Reopen: same records, LastSeq found, appends go on in a new segment.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := l.Append(50, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v", err)
	}
	l2 := openLog(t, dir, ItemLogConfig{SegmentBytes: 100})
	if l2.LastSeq() != 49 {
		t.Fatalf("LastSeq after reopen %d", l2.LastSeq())
	}
	if err := l2.Append(49, nil); !errors.Is(err, ErrSeqOrder) {
		t.Fatalf("Append of an old seq: %v", err)
	}
	before := len(segments(t, dir))
	appendSeqs(t, l2, 60, 61)
	if err := l2.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(segments(t, dir)) != before+1 {
		t.Errorf("appends after reopen did not start a new segment")
	}
	got, err := replayAll(t, l2, 45)
	if err != nil || !slices.Equal(got, []uint64{46, 47, 48, 49, 60, 61}) {
		t.Fatalf("after reopen: %v %v", got, err)
	}
}

func TestItemLogAppendChecks(t *testing.T) {
	l := openLog(t, t.TempDir(), ItemLogConfig{MaxPayload: 10})
	if err := l.Append(0, nil); !errors.Is(err, ErrSeqOrder) {
		t.Errorf("seq 0: %v", err)
	}
	if err := l.Append(1, make([]byte, 11)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("large payload: %v", err)
	}
	if err := l.Append(5, nil); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(5, nil); !errors.Is(err, ErrSeqOrder) {
		t.Errorf("repeated seq: %v", err)
	}
	// A record larger than a segment gets a segment of its own.
	l2 := openLog(t, t.TempDir(), ItemLogConfig{SegmentBytes: 8})
	appendSeqs(t, l2, 1, 2, 3)
	if got, err := replayAll(t, l2, 0); err != nil || len(got) != 3 {
		t.Fatalf("%v %v", got, err)
	}
	if err := l2.Flush(); err != nil {
		t.Fatal(err)
	}
	var want int64
	for _, s := range []uint64{1, 2, 3} {
		want += int64(recordHeaderLen + len(itemPayload(s)))
	}
	if l2.Bytes() != want {
		t.Errorf("Bytes %d, want %d", l2.Bytes(), want)
	}
}

func TestItemLogFnError(t *testing.T) {
	l := openLog(t, t.TempDir(), ItemLogConfig{})
	appendSeqs(t, l, 1, 2, 3)
	stop := errors.New("stop")
	n, err := l.Replay(0, func(seq uint64, _ []byte) error {
		if seq == 2 {
			return stop
		}
		return nil
	})
	if n != 1 || err != stop {
		t.Fatalf("n=%d err=%v", n, err)
	}
}

// TestItemLogTornTail cuts the last record at every offset, as a crash
// while writing it would: replay returns every record before it, reports
// the damage, and a reopened log appends after it in a new segment.
func TestItemLogTornTail(t *testing.T) {
	src := t.TempDir()
	l := openLog(t, src, ItemLogConfig{})
	appendSeqs(t, l, 1, 2, 3)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	seg := segments(t, src)[0]
	orig := mustReadFile(t, seg)
	lastLen := recordHeaderLen + len(itemPayload(3))
	for cut := len(orig) - lastLen; cut < len(orig); cut++ {
		dir := t.TempDir()
		p := filepath.Join(testKey.dir(dir), filepath.Base(seg))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, orig[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		l := openLog(t, dir, ItemLogConfig{})
		if l.LastSeq() != 2 {
			t.Fatalf("cut %d: LastSeq %d", cut, l.LastSeq())
		}
		got, err := replayAll(t, l, 0)
		wantDamage := cut > len(orig)-lastLen
		var d *ReplayDamage
		if !slices.Equal(got, []uint64{1, 2}) || wantDamage != errors.As(err, &d) {
			t.Fatalf("cut %d: replay %v, %v", cut, got, err)
		}
		if wantDamage && (len(d.Files) != 1 || d.Files[0].Offset != int64(len(orig)-lastLen) || !errors.Is(err, ErrCorrupt)) {
			t.Fatalf("cut %d: damage %+v", cut, d.Files[0])
		}
		// The torn segment is left as it is; new records go to a new one and
		// replay past the damage.
		appendSeqs(t, l, 3, 4)
		if err := l.Commit(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(mustReadFile(t, p), orig[:cut]) {
			t.Fatalf("cut %d: damaged segment rewritten", cut)
		}
		got, err = replayAll(t, l, 0)
		if !slices.Equal(got, []uint64{1, 2, 3, 4}) || wantDamage != (err != nil) {
			t.Fatalf("cut %d: replay after append %v, %v", cut, got, err)
		}
		l.Close()
	}
}

// TestItemLogTornFirstRecord covers a crash right after a segment was
// created: the empty or torn newest segment is removed on open, so its
// name (the seq of its torn record) can be used again.
func TestItemLogTornFirstRecord(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, ItemLogConfig{SegmentBytes: 64})
	appendSeqs(t, l, 1, 2, 3)
	l.Close()
	segs := segments(t, dir)
	last := segs[len(segs)-1]
	if err := os.WriteFile(last, mustReadFile(t, last)[:5], 0o644); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, ItemLogConfig{SegmentBytes: 64})
	if l.LastSeq() != 2 {
		t.Fatalf("LastSeq %d", l.LastSeq())
	}
	appendSeqs(t, l, 3)
	if got, err := replayAll(t, l, 0); !slices.Equal(got, []uint64{1, 2, 3}) || err != nil {
		t.Fatalf("%v %v", got, err)
	}
}

// TestItemLogDamageInTheMiddle corrupts an older segment: replay delivers
// what comes before the damage in it, passes over the damaged record
// only, and reads on with the next intact one and the later segments.
func TestItemLogDamageInTheMiddle(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, ItemLogConfig{SegmentBytes: 100})
	appendSeqs(t, l, seqRange(1, 12)...)
	l.Close()
	segs := segments(t, dir)
	if len(segs) < 3 {
		t.Fatalf("%d segments", len(segs))
	}
	b := mustReadFile(t, segs[1])
	first, _ := parseSegName(filepath.Base(segs[1]))
	next, _ := parseSegName(filepath.Base(segs[2]))
	b[recordHeaderLen+len(itemPayload(first))+recordHeaderLen+1] ^= 0xff // in the second record's payload
	if err := os.WriteFile(segs[1], b, 0o644); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, ItemLogConfig{SegmentBytes: 100})
	got, err := replayAll(t, l, 0)
	var d *ReplayDamage
	if !errors.As(err, &d) || len(d.Files) != 1 || d.Files[0].Path != segs[1] {
		t.Fatalf("damage %v", err)
	}
	if next <= first+2 {
		t.Fatalf("the damaged segment holds %d records: the test needs one after the damage", next-first)
	}
	var want []uint64
	for s := uint64(1); s <= 12; s++ {
		if s != first+1 { // the damaged record only
			want = append(want, s)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("replay %v, want %v", got, want)
	}
	if !strings.Contains(d.Files[0].Reason, "read on from the next intact record") {
		t.Fatalf("damage %q does not say the replay read on", d.Files[0].Reason)
	}
	if len(d.Skipped) != 1 || d.Skipped[0] != [2]uint64{first + 1, first + 1} || d.TailFrom != 0 || d.TornTail {
		t.Fatalf("damage: skipped %v, tail from %d, torn %v", d.Skipped, d.TailFrom, d.TornTail)
	}
}

// Damage anywhere in a segment of frames (a flipped byte at every offset
// in turn, or random bytes over a stretch) costs the frames it touches
// and no other: replay resynchronises on the next intact frame.
func TestItemLogResyncsAfterDamage(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, ItemLogConfig{})
	var f Frame
	for i := range 20 {
		f.Reset(uint64(5*i+1), []byte("tag"))
		for k := range 5 {
			f.Add(itemPayload(uint64(5*i + k + 1)))
		}
		if err := l.AppendFrame(&f); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	seg := segments(t, dir)[0]
	orig := mustReadFile(t, seg)
	frameLen := len(orig) / 20
	damages := map[string]func(b []byte){}
	for off := 0; off < len(orig); off += 7 {
		damages[fmt.Sprintf("flip@%d", off)] = func(b []byte) { b[off] ^= 0x5a }
	}
	damages["garbage over frames 3-4"] = func(b []byte) {
		for i := 3 * frameLen; i < 5*frameLen-3; i++ {
			b[i] = byte(i * 131)
		}
	}
	for name, damage := range damages {
		b := slices.Clone(orig)
		damage(b)
		if err := os.WriteFile(seg, b, 0o644); err != nil {
			t.Fatal(err)
		}
		l := openLog(t, dir, ItemLogConfig{})
		got, err := replayAll(t, l, 0)
		l.Close()
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: %v", name, err)
		}
		var d *ReplayDamage
		errors.As(err, &d)
		skipped := countRanges(d.Skipped)
		if d.TailFrom != 0 {
			skipped += 101 - int(d.TailFrom) // to the last, 100
		}
		if skipped != 100-len(got) {
			t.Fatalf("%s: %d events missing, the damage counts %d (%v, tail from %d)", name, 100-len(got), skipped, d.Skipped, d.TailFrom)
		}
		// Whole frames are missing, and only those the damage touches: two
		// for a flipped byte (in a frame, or in a length that made it
		// swallow the next), three for the garbage.
		missing, most := 100-len(got), 10
		if strings.HasPrefix(name, "garbage") {
			most = 15
		}
		if missing == 0 || missing%5 != 0 || missing > most || !slices.IsSorted(got) {
			t.Fatalf("%s: replayed %d events %v", name, len(got), got)
		}
	}
}

func TestItemLogTruncateBefore(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, ItemLogConfig{SegmentBytes: 100})
	appendSeqs(t, l, seqRange(1, 20)...)
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	firsts := func() []uint64 {
		var f []uint64
		for _, p := range segments(t, dir) {
			n, _ := parseSegName(filepath.Base(p))
			f = append(f, n)
		}
		return f
	}
	all := firsts()
	if len(all) < 4 {
		t.Fatalf("segments %v", all)
	}
	size := l.Bytes()
	// Up to just before the third segment: the first two go.
	if err := l.TruncateBefore(all[2] - 1); err != nil {
		t.Fatal(err)
	}
	if got := firsts(); !slices.Equal(got, all[2:]) {
		t.Fatalf("after TruncateBefore(%d): %v", all[2]-1, got)
	}
	if l.Bytes() >= size {
		t.Errorf("Bytes did not shrink")
	}
	// A seq inside a segment keeps that segment.
	if err := l.TruncateBefore(all[3]); err != nil {
		t.Fatal(err)
	}
	if got := firsts(); got[0] != all[3] {
		t.Fatalf("segments %v", got)
	}
	got, _ := replayAll(t, l, 0)
	if got[0] != all[3] || got[len(got)-1] != 20 {
		t.Fatalf("replay after truncate %v", got)
	}
	// Everything consumed: the active segment goes too, appends go on.
	if err := l.TruncateBefore(20); err != nil {
		t.Fatal(err)
	}
	if got := firsts(); len(got) != 0 || l.Bytes() != 0 {
		t.Fatalf("segments %v, %d bytes", got, l.Bytes())
	}
	appendSeqs(t, l, 21)
	if err := l.Commit(); err != nil {
		t.Fatal(err)
	}
	if got, _ := replayAll(t, l, 0); !slices.Equal(got, []uint64{21}) {
		t.Fatalf("%v", got)
	}
	// Segments found on open are truncated by the same rule.
	appendSeqs(t, l, seqRange(22, 40)...)
	l.Close()
	l = openLog(t, dir, ItemLogConfig{SegmentBytes: 100})
	if err := l.TruncateBefore(40); err != nil {
		t.Fatal(err)
	}
	if got := firsts(); len(got) != 0 {
		t.Fatalf("segments after reopen and truncate %v", got)
	}
}

// TestItemLogGroupCommit has 8 goroutines appending (serialised by a
// mutex, as seqs must increase) and committing concurrently. Every record
// is replayed exactly once, in order, and fsyncs are shared.
func TestItemLogGroupCommit(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, ItemLogConfig{SegmentBytes: 4 << 10})
	var (
		mu   sync.Mutex
		next uint64
		wg   sync.WaitGroup
	)
	const writers, each = 8, 200
	for range writers {
		wg.Go(func() {
			for range each {
				mu.Lock()
				next++
				err := l.Append(next, itemPayload(next))
				mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
				if err := l.Commit(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	// Readers and truncation-free maintenance running alongside.
	wg.Go(func() {
		for range 20 {
			l.Bytes()
			l.LastSeq()
			if _, err := l.Replay(0, func(uint64, []byte) error { return nil }); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	got, err := replayAll(t, l, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, seqRange(1, writers*each)) {
		t.Fatalf("replayed %d records, want 1..%d in order", len(got), writers*each)
	}
	l.mu.Lock()
	durable, appended := l.durable, l.appended
	l.mu.Unlock()
	if durable != appended {
		t.Fatalf("durable %d of %d", durable, appended)
	}
}

// TestItemLogCommitWithTruncate runs Commit against rolls and truncation
// of the active segment (race detector; no error, nothing lost that was
// not consumed).
func TestItemLogCommitWithTruncate(t *testing.T) {
	l := openLog(t, t.TempDir(), ItemLogConfig{SegmentBytes: 256})
	var mu sync.Mutex
	var wg sync.WaitGroup
	var next uint64
	for range 4 {
		wg.Go(func() {
			for range 200 {
				mu.Lock()
				next++
				err := l.Append(next, itemPayload(next))
				if err == nil && next%50 == 0 {
					err = l.TruncateBefore(next - 10)
				}
				mu.Unlock()
				if err == nil {
					err = l.Commit()
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got, err := replayAll(t, l, 0)
	if err != nil || len(got) == 0 || got[len(got)-1] != 800 || got[0] > 791 {
		t.Fatalf("replay %d records (%v), err %v", len(got), got[:min(3, len(got))], err)
	}
}

func FuzzItemLogReplay(f *testing.F) {
	var seg []byte
	for s := uint64(1); s <= 3; s++ {
		seg = appendRecord(seg, s, itemPayload(s))
	}
	f.Add(seg)
	f.Add(seg[:len(seg)-1])
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		kdir := testKey.dir(dir)
		if err := os.MkdirAll(kdir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(kdir, segName(1)), b, 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := OpenItemLogConfig(dir, testKey, ItemLogConfig{MaxPayload: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		var prev uint64
		n, err := l.Replay(0, func(seq uint64, p []byte) error {
			if seq <= prev {
				t.Fatalf("seq %d after %d", seq, prev)
			}
			prev = seq
			return nil
		})
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatal(err)
		}
		if n > 0 && l.LastSeq() != prev {
			t.Fatalf("LastSeq %d, replay ended at %d", l.LastSeq(), prev)
		}
		// The log stays usable.
		if err := l.Append(l.LastSeq()+1, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := l.Flush(); err != nil {
			t.Fatal(err)
		}
	})
}

func countRanges(rs [][2]uint64) int {
	n := 0
	for _, r := range rs {
		n += int(r[1] - r[0] + 1)
	}
	return n
}

// A segment of random bytes (every file of a job overwritten, say) holds
// no record: opening and replaying it reads each offset once with cheap
// tests, not a checksum of megabytes at each (which took hours).
func TestItemLogOfRandomBytes(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, ItemLogConfig{})
	appendSeqs(t, l, 1, 2, 3)
	l.Close()
	seg := segments(t, dir)[0]
	b := make([]byte, 8<<20)
	_, _ = rand.NewChaCha8([32]byte{3, 4}).Read(b)
	if err := os.WriteFile(seg, b, 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l = openLog(t, dir, ItemLogConfig{})
	defer l.Close()
	got, err := replayAll(t, l, 0)
	if len(got) != 0 || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("replayed %v, %v", got, err)
	}
	t.Logf("8 MiB of random bytes opened and replayed in %v", time.Since(start))
}
