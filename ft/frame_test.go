package ft

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// frameOf is a frame of the events first..last with itemPayload payloads.
func frameOf(first, last uint64, tag string) *Frame {
	var f Frame
	f.Reset(first, []byte(tag))
	for s := first; s <= last; s++ {
		f.Add(itemPayload(s))
	}
	return &f
}

type replayedFrame struct {
	first, last uint64
	tag         string
	seqs        []uint64
}

func replayFrames(t *testing.T, l *ItemLog, after uint64) ([]replayedFrame, error) {
	t.Helper()
	var got []replayedFrame
	n, err := l.ReplayFrames(after, func(f *StoredFrame) error {
		rf := replayedFrame{first: f.First, last: f.Last, tag: string(f.Tag)}
		err := f.Each(func(seq uint64, p []byte) error {
			if !bytes.Equal(p, itemPayload(seq)) {
				t.Errorf("seq %d: payload %q", seq, p)
			}
			rf.seqs = append(rf.seqs, seq)
			return nil
		})
		got = append(got, rf)
		return err
	})
	total := 0
	for _, f := range got {
		total += len(f.seqs)
	}
	if n != total {
		t.Errorf("ReplayFrames returned n=%d, delivered %d events", n, total)
	}
	return got, err
}

// Frames and single-event records (the earlier version's) mix in one log;
// a frame is delivered with its tag, and only its events above after.
func TestItemLogFrames(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, ItemLogConfig{})
	appendSeqs(t, l, 1, 2)
	if err := l.AppendFrame(frameOf(3, 7, "req-1")); err != nil {
		t.Fatal(err)
	}
	appendSeqs(t, l, 8)
	if err := l.AppendFrame(frameOf(9, 9, "")); err != nil {
		t.Fatal(err)
	}
	if err := l.AppendFrame(&Frame{}); err != nil { // empty: nothing
		t.Fatal(err)
	}
	// A frame must start above the last seq.
	if err := l.AppendFrame(frameOf(9, 12, "")); !errors.Is(err, ErrSeqOrder) {
		t.Fatalf("overlapping frame: %v", err)
	}
	if l.LastSeq() != 9 {
		t.Fatalf("LastSeq %d", l.LastSeq())
	}
	got, err := replayFrames(t, l, 4)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint([]replayedFrame{{3, 7, "req-1", seqRange(5, 7)}, {8, 8, "", []uint64{8}}, {9, 9, "", []uint64{9}}})
	if fmt.Sprint(got) != want {
		t.Fatalf("frames %v, want %v", got, want)
	}
	// Replay by event sees the same, across a reopen.
	l.Close()
	l2 := openLog(t, dir, ItemLogConfig{})
	if l2.LastSeq() != 9 {
		t.Fatalf("LastSeq after reopen %d", l2.LastSeq())
	}
	seqs, err := replayAll(t, l2, 0)
	if err != nil || fmt.Sprint(seqs) != fmt.Sprint(seqRange(1, 9)) {
		t.Fatalf("replay %v %v", seqs, err)
	}
	// A frame larger than MaxPayload is refused whole.
	l3 := openLog(t, t.TempDir(), ItemLogConfig{MaxPayload: 64})
	if err := l3.AppendFrame(frameOf(1, 10, "")); !errors.Is(err, ErrTooLarge) || l3.LastSeq() != 0 {
		t.Fatalf("oversized frame: %v, last seq %d", err, l3.LastSeq())
	}
}

// A frame cut anywhere by a crash is replayed not at all, never in part;
// the frames before it are replayed whole, and the damage is a torn tail.
func TestItemLogTornFrameIsAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, ItemLogConfig{})
	if err := l.AppendFrame(frameOf(1, 4, "a")); err != nil {
		t.Fatal(err)
	}
	if err := l.AppendFrame(frameOf(5, 9, "b")); err != nil {
		t.Fatal(err)
	}
	if err := l.Commit(); err != nil {
		t.Fatal(err)
	}
	l.Close()
	seg := segments(t, dir)[0]
	whole, _ := os.ReadFile(seg)
	firstLen := recordHeaderLen + frameOf(1, 4, "a").payloadLen()
	for cut := firstLen + 1; cut < len(whole); cut++ {
		os.WriteFile(seg, whole[:cut], 0o644)
		l := openLog(t, dir, ItemLogConfig{})
		seqs, err := replayAll(t, l, 0)
		var d *ReplayDamage
		if !errors.As(err, &d) || !d.TornTail || fmt.Sprint(seqs) != fmt.Sprint(seqRange(1, 4)) {
			t.Fatalf("cut at %d of %d: %v, %v", cut, len(whole), seqs, err)
		}
		l.Close()
		// Reopening leaves the torn segment alone: remove what a new
		// segment it might have started.
		for _, s := range segments(t, dir)[1:] {
			os.Remove(s)
		}
	}
	// A flipped byte inside the second frame drops it whole, and is not a
	// torn tail.
	b := bytes.Clone(whole)
	b[firstLen+recordHeaderLen+5] ^= 1
	os.WriteFile(seg, b, 0o644)
	l2 := openLog(t, dir, ItemLogConfig{})
	seqs, err := replayAll(t, l2, 0)
	var d *ReplayDamage
	if !errors.As(err, &d) || d.TornTail || fmt.Sprint(seqs) != fmt.Sprint(seqRange(1, 4)) {
		t.Fatalf("flipped: %v, %v", seqs, err)
	}
}

// The append hook refuses a record before anything is buffered.
func TestItemLogAppendHook(t *testing.T) {
	l := openLog(t, t.TempDir(), ItemLogConfig{})
	crash := errors.New("crash")
	l.SetAppendHook(func(first, last uint64) error {
		if first == 5 {
			return crash
		}
		return nil
	})
	if err := l.AppendFrame(frameOf(1, 4, "")); err != nil {
		t.Fatal(err)
	}
	if err := l.AppendFrame(frameOf(5, 6, "")); !errors.Is(err, crash) || l.LastSeq() != 4 {
		t.Fatalf("hooked append: %v, last seq %d", err, l.LastSeq())
	}
	l.SetAppendHook(nil)
	if err := l.AppendFrame(frameOf(5, 6, "")); err != nil {
		t.Fatal(err)
	}
}

// A backup's metadata is written as encoding/json writes it, byte for
// byte (readers of earlier versions parse it), and refused where
// json.Marshal refuses it.
func TestMetaJSONIsEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	zones := []*time.Location{time.UTC, time.FixedZone("x", -7*3600-30*60), time.FixedZone("odd", 3600+17), time.Local}
	floats := []float64{0, math.Copysign(0, -1), 1, -2.5, 250, 1e-6, 9.99e-7, 1e-9, 1e20, 1e21, 123456789.125, math.MaxFloat64, math.SmallestNonzeroFloat64}
	for i := range 2000 {
		m := BackupMeta{Index: r.Uint64() >> r.IntN(64), Full: r.IntN(2) == 0, Failures: r.IntN(40) - 3, Durable: r.IntN(2) == 0,
			Divergence: floats[i%len(floats)],
			Created:    time.Unix(r.Int64N(1<<36)-1<<35, r.Int64N(1e9)*int64(r.IntN(2))).In(zones[r.IntN(len(zones))])}
		if i%len(floats) == 0 {
			m.Divergence = r.NormFloat64() * math.Pow(10, float64(r.IntN(60)-30))
		}
		if r.IntN(2) == 0 {
			m.Incarnation = []string{"config", "0123abcdef456789", "a\"b", "é"}[r.IntN(4)]
		}
		switch r.IntN(3) {
		case 0: // nil: null
		case 1:
			m.LastSeqs = []uint64{}
		default:
			for range r.IntN(5) + 1 {
				m.LastSeqs = append(m.LastSeqs, r.Uint64()>>r.IntN(64))
			}
		}
		want, werr := json.Marshal(m)
		got, gerr := appendMetaJSON(nil, &m)
		if (werr != nil) != (gerr != nil) || werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("%+v:\n got %s (%v)\nwant %s (%v)", m, got, gerr, want, werr)
		}
	}
	for _, d := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if _, err := appendMetaJSON(nil, &BackupMeta{Divergence: d}); err == nil {
			t.Fatalf("divergence %v accepted", d)
		}
	}
	if _, err := appendMetaJSON(nil, &BackupMeta{Created: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}); err == nil {
		t.Fatal("year 10000 accepted")
	}
}

// validJob accepts exactly the job names of the spec's syntax.
func TestValidJobIsTheSpecSyntax(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)
	names := []string{"", "a", "A9", "9", "-a", "_a", ".", "..", "a/b", "a\\b", "a b", "a.b-c_d", "é", "a\x00",
		strings.Repeat("a", 128), strings.Repeat("a", 129)}
	r := rand.New(rand.NewPCG(1, 2))
	const alphabet = "aZ09_.-/ \x00\xff"
	for range 20000 {
		b := make([]byte, r.IntN(6))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		names = append(names, string(b))
	}
	for _, n := range names {
		if got, want := validJob(n) == nil, re.MatchString(n); got != want {
			t.Fatalf("validJob(%q) accepts: %v, the syntax: %v", n, got, want)
		}
	}
}
