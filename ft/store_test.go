package ft

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func newTestStore(t *testing.T) *DirStore {
	t.Helper()
	return openTestStore(t, t.TempDir())
}

// openTestStore opens a store in dir with a fixed clock, closed at the end
// of the test.
func openTestStore(t *testing.T, dir string) *DirStore {
	t.Helper()
	s, err := NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	s.now = func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }
	return s
}

// put stores one backup whose data is "<kind>-<n>" and fails the test on error.
func put(t *testing.T, s Store, key Key, full bool, n int) BackupMeta {
	t.Helper()
	m, err := s.Put(key, BackupMeta{Full: full, LastSeqs: []uint64{uint64(n)}, Divergence: float64(n)}, payloadFor(full, n))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func payloadFor(full bool, n int) []byte {
	if full {
		return fmt.Appendf(nil, "full-%d", n)
	}
	return fmt.Appendf(nil, "delta-%d", n)
}

// chainString renders a chain as "full-1 delta-2 ..." and checks its indices.
func chainString(t *testing.T, chain []Backup) string {
	t.Helper()
	var parts []string
	for i, b := range chain {
		if i > 0 && b.Meta.Index != chain[i-1].Meta.Index+1 {
			t.Errorf("chain indices not contiguous: %d after %d", b.Meta.Index, chain[i-1].Meta.Index)
		}
		if (i == 0) != b.Meta.Full {
			t.Errorf("chain[%d].Full = %t", i, b.Meta.Full)
		}
		parts = append(parts, string(b.Data))
	}
	return strings.Join(parts, " ")
}

// chainPath is the file of the chain whose full backup has index.
func chainPath(s *DirStore, key Key, index uint64) string {
	return filepath.Join(key.dir(s.Dir()), chainName(index))
}

// frameEnds returns the offset where each frame of a chain file ends, and
// fails the test unless the file is wholly intact frames.
func frameEnds(t *testing.T, b []byte) []int {
	t.Helper()
	var ends []int
	for off := 0; off < len(b); {
		if len(ends) > 0 && len(b)-off == endMarkLen && string(b[off:off+4]) == endMagic {
			break // the end mark after the last frame
		}
		_, _, n, _, reason := decodeFrame(b[off:])
		if reason != "" {
			t.Fatalf("frame at %d: %s", off, reason)
		}
		off += n
		ends = append(ends, off)
	}
	return ends
}

// chainFiles lists the chain files of key, oldest first.
func chainFiles(t *testing.T, s *DirStore, key Key) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(key.dir(s.Dir()), chainPrefix+"*"))
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		names[i] = filepath.Base(n)
	}
	return names
}

// checkSkipped fails the test unless every skipped error is a
// *CorruptError naming a chain file of key.
func checkSkipped(t *testing.T, s *DirStore, key Key, skipped []error) {
	t.Helper()
	for _, e := range skipped {
		var ce *CorruptError
		if !errors.Is(e, ErrCorrupt) || !errors.As(e, &ce) || filepath.Dir(ce.Path) != key.dir(s.Dir()) ||
			!strings.HasPrefix(filepath.Base(ce.Path), chainPrefix) || !strings.Contains(e.Error(), ce.Path) {
			t.Errorf("skipped error %v: not a CorruptError naming a chain file", e)
		}
	}
}

func TestKeyString(t *testing.T) {
	for _, tc := range []struct {
		key  Key
		want string
	}{
		{Key{"j", 0}, "j/p0"},
		{Key{"clicks", 12}, "clicks/p12"},
		{Key{"clicks", GlobalPartition}, "clicks/global"},
	} {
		if got := tc.key.String(); got != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.key, got, tc.want)
		}
	}
}

func TestStoreRejectsBadKeys(t *testing.T) {
	s := newTestStore(t)
	for _, key := range []Key{
		{"", 0}, {".", 0}, {"..", 0}, {"../x", 0}, {"a/b", 0}, {"/abs", 0}, {".hidden", 0},
		{"a b", 0}, {strings.Repeat("a", 129), 0}, {"ok", -2},
	} {
		if _, err := s.Put(key, BackupMeta{Full: true}, nil); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Put(%q, %d) = %v, want ErrInvalidKey", key.Job, key.Partition, err)
		}
		if _, _, err := s.Chain(key); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Chain(%q) = %v, want ErrInvalidKey", key.Job, err)
		}
		if _, err := OpenItemLog(s.Dir(), key); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("OpenItemLog(%q) = %v, want ErrInvalidKey", key.Job, err)
		}
	}
	if err := s.RemoveJob(".."); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("RemoveJob(..) = %v", err)
	}
}

func TestStoreRoundTrip(t *testing.T) {
	s := newTestStore(t)
	key := Key{"job.1", 3}
	chain, skipped, err := s.Chain(key)
	if len(chain) != 0 || len(skipped) != 0 || err != nil {
		t.Fatalf("empty store: Chain = %v, %v, %v", chain, skipped, err)
	}
	if n, b := s.Usage(key); n != 0 || b != 0 {
		t.Fatalf("empty Usage = %d, %d", n, b)
	}
	if _, err := s.Put(key, BackupMeta{}, []byte("d")); !errors.Is(err, ErrNoFullBackup) {
		t.Fatalf("delta first: %v, want ErrNoFullBackup", err)
	}
	data := bytes.Repeat([]byte{0, 1, 2, 0xff}, 1000)
	in := BackupMeta{Index: 99, Full: true, Failures: 2, LastSeqs: []uint64{7, 1 << 63}, Divergence: 0.25}
	m, err := s.Put(key, in, data)
	if err != nil {
		t.Fatal(err)
	}
	if m.Index != 1 || !m.Created.Equal(s.now()) {
		t.Fatalf("Put returned %+v", m)
	}
	chain, skipped, err = s.Chain(key)
	if err != nil || len(skipped) != 0 || len(chain) != 1 {
		t.Fatalf("Chain = %d backups, %v, %v", len(chain), skipped, err)
	}
	got := chain[0]
	if !bytes.Equal(got.Data, data) || got.Meta.Index != 1 || !got.Meta.Full || got.Meta.Failures != 2 ||
		got.Meta.LastSeqs[1] != 1<<63 || got.Meta.Divergence != 0.25 || !got.Meta.Created.Equal(m.Created) {
		t.Fatalf("round trip: got %+v", got.Meta)
	}
	fullSize := int64(backupOverhead+len(data)) + int64(len(mustJSON(t, m)))
	if n, b := s.Usage(key); n != 1 || b != fullSize {
		t.Fatalf("Usage = %d, %d, want 1, %d", n, b, fullSize)
	}
	// An empty delta and an empty full backup are fine.
	d := put(t, s, key, false, 2)
	e, err := s.Put(key, BackupMeta{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	chain, _, _ = s.Chain(key)
	if len(chain) != 3 || len(chain[2].Data) != 0 || chainString(t, chain[:2]) != string(data)+" delta-2" {
		t.Fatalf("chain with empty delta: %d", len(chain))
	}
	// One file holds the chain; Usage counts its backups and bytes.
	if names := chainFiles(t, s, key); len(names) != 1 || names[0] != chainName(1) {
		t.Fatalf("chain files %v", names)
	}
	wantSize := fullSize + int64(2*backupOverhead+len("delta-2")) + int64(len(mustJSON(t, d))+len(mustJSON(t, e)))
	if fi, err := os.Stat(chainPath(s, key, 1)); err != nil || fi.Size() != wantSize+endMarkLen {
		t.Fatalf("chain file: %v, %v, want %d bytes and the end mark", fi, err, wantSize)
	}
	if n, b := s.Usage(key); n != 3 || b != wantSize {
		t.Fatalf("Usage = %d, %d, want 3, %d", n, b, wantSize)
	}
	if _, err := s.Put(key, BackupMeta{Full: true}, nil); err != nil {
		t.Fatal(err)
	}
	if chain, _, _ = s.Chain(key); len(chain) != 1 || chain[0].Meta.Index != 4 || len(chain[0].Data) != 0 {
		t.Fatalf("empty full: %+v", chain)
	}
	// Other keys of the job are independent; the global key too.
	g := Key{"job.1", GlobalPartition}
	if m := put(t, s, g, true, 1); m.Index != 1 {
		t.Fatalf("global key index %d", m.Index)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), "job.1", "global", chainName(1))); err != nil {
		t.Fatal(err)
	}
}

// TestStoreRefusesNonFinite: JSON has no NaN, so Put refuses it, writes
// nothing, and ends the open chain (the caller's next delta would build on
// the backup that was refused).
func TestStoreRefusesNonFinite(t *testing.T) {
	s := newTestStore(t)
	key := Key{"j", 0}
	put(t, s, key, true, 1)
	for _, full := range []bool{false, true} {
		if _, err := s.Put(key, BackupMeta{Full: full, Divergence: math.NaN()}, []byte("x")); err == nil {
			t.Fatal("NaN divergence accepted")
		}
		if _, err := s.Put(key, BackupMeta{}, []byte("d")); !errors.Is(err, ErrNoFullBackup) {
			t.Fatalf("delta after a refused Put: %v, want ErrNoFullBackup", err)
		}
	}
	if m := put(t, s, key, true, 2); m.Index != 2 {
		t.Fatalf("index %d after refused Puts, want 2", m.Index)
	}
	chain, skipped, err := s.Chain(key)
	if got := chainString(t, chain); got != "full-2" || len(skipped) != 0 || err != nil {
		t.Fatalf("chain %q %v %v", got, skipped, err)
	}
}

func TestStoreChain(t *testing.T) {
	// Each case writes a sequence of backups ("F" full, "d" delta), damages
	// some by index, and expects a chain (as chainString) and a number of
	// skipped errors.
	type damage struct {
		index uint64
		how   string // see below
	}
	for _, tc := range []struct {
		name    string
		seq     string
		damage  []damage
		want    string
		skipped int
	}{
		{name: "one full", seq: "F", want: "full-1"},
		{name: "deltas", seq: "Fddd", want: "full-1 delta-2 delta-3 delta-4"},
		{name: "newest full wins", seq: "FddFd", want: "full-4 delta-5"},
		{name: "newest full damaged", seq: "FddFd", damage: []damage{{4, "flip"}}, want: "full-1 delta-2 delta-3", skipped: 1},
		{name: "newest full torn", seq: "FdF", damage: []damage{{3, "truncate"}}, want: "full-1 delta-2", skipped: 1},
		{name: "newest full torn before its deltas", seq: "FdFdd", damage: []damage{{3, "truncate"}}, want: "full-1 delta-2", skipped: 1},
		{name: "newest chain file empty", seq: "FdF", damage: []damage{{3, "empty"}}, want: "full-1 delta-2", skipped: 1},
		{name: "newest chain file removed", seq: "FdFd", damage: []damage{{3, "remove"}}, want: "full-1 delta-2"},
		{name: "delta damaged in the middle", seq: "Fdddd", damage: []damage{{3, "flip"}}, want: "full-1 delta-2", skipped: 1},
		{name: "delta torn", seq: "Fdd", damage: []damage{{3, "truncate"}}, want: "full-1 delta-2", skipped: 1},
		{name: "delta torn in the middle", seq: "Fddd", damage: []damage{{3, "truncate"}}, want: "full-1 delta-2", skipped: 1},
		{name: "first delta damaged", seq: "Fd", damage: []damage{{2, "flip"}}, want: "full-1", skipped: 1},
		{name: "both fulls damaged", seq: "FdFd", damage: []damage{{1, "flip"}, {3, "flip"}}, want: "", skipped: 2},
		{name: "fallback chain with damaged delta", seq: "FddFd", damage: []damage{{4, "truncate"}, {3, "flip"}}, want: "full-1 delta-2", skipped: 2},
		{name: "damage in the newest chain's delta only", seq: "FdFdd", damage: []damage{{5, "flip"}}, want: "full-3 delta-4", skipped: 1},
		{name: "chain file under another index", seq: "FdFd", damage: []damage{{3, "copy-previous"}}, want: "full-1 delta-2", skipped: 1},
		{name: "delta repeated", seq: "Fdd", damage: []damage{{3, "repeat"}}, want: "full-1 delta-2 delta-3", skipped: 1},
		{name: "full inside a chain", seq: "FdFd", damage: []damage{{3, "merge"}}, want: "full-1 delta-2", skipped: 1},
		{name: "trailing byte", seq: "Fd", damage: []damage{{2, "trailing"}}, want: "full-1 delta-2", skipped: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore(t)
			key := Key{"j", 0}
			fullOf := make([]uint64, len(tc.seq)+1) // index of the full backup of each chain
			for i, c := range tc.seq {
				m := put(t, s, key, c == 'F', i+1)
				if m.Index != uint64(i+1) {
					t.Fatalf("index %d, want %d", m.Index, i+1)
				}
				fullOf[i+1] = fullOf[i]
				if c == 'F' {
					fullOf[i+1] = m.Index
				}
			}
			for _, d := range tc.damage {
				full := fullOf[d.index]
				p := chainPath(s, key, full)
				b := mustReadFile(t, p)
				ends := frameEnds(t, b)
				k := d.index - full // the frame's position in its file
				start, end := 0, ends[k]
				if k > 0 {
					start = ends[k-1]
				}
				var err error
				switch d.how {
				case "flip":
					b[(start+end)/2] ^= 0x10
					err = os.WriteFile(p, b, 0o644)
				case "truncate": // cut the frame, and what follows it
					err = os.WriteFile(p, b[:end-3], 0o644)
				case "empty": // a crash right after the file was created
					err = os.WriteFile(p, nil, 0o644)
				case "remove":
					err = os.Remove(p)
				case "copy-previous": // a valid chain under the wrong name
					err = os.WriteFile(p, mustReadFile(t, chainPath(s, key, fullOf[full-1])), 0o644)
				case "repeat": // the frame again after itself
					err = os.WriteFile(p, append(b[:end:end], b[start:end]...), 0o644)
				case "merge": // the chain appended to the previous one's last frame
					prev := chainPath(s, key, fullOf[full-1])
					pb := mustReadFile(t, prev)
					pe := frameEnds(t, pb)
					err = os.WriteFile(prev, append(pb[:pe[len(pe)-1]], b...), 0o644)
					if err == nil {
						err = os.Remove(p)
					}
				case "trailing": // a byte where the end mark should be
					err = os.WriteFile(p, append(b[:end:end], 0), 0o644)
				default:
					t.Fatalf("damage %q", d.how)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			chain, skipped, err := s.Chain(key)
			if err != nil {
				t.Fatal(err)
			}
			if got := chainString(t, chain); got != tc.want {
				t.Errorf("chain = %q, want %q", got, tc.want)
			}
			if len(skipped) != tc.skipped {
				t.Errorf("skipped = %v, want %d", skipped, tc.skipped)
			}
			checkSkipped(t, s, key, skipped)
		})
	}
}

// TestStoreTornDelta: a delta torn by a crash ends the chain, and the
// skipped error names the file and the byte where the torn frame starts.
func TestStoreTornDelta(t *testing.T) {
	s := newTestStore(t)
	key := Key{"j", 0}
	put(t, s, key, true, 1)
	put(t, s, key, false, 2)
	put(t, s, key, false, 3)
	p := chainPath(s, key, 1)
	b := mustReadFile(t, p)
	ends := frameEnds(t, b)
	if err := os.WriteFile(p, b[:ends[2]-5], 0o644); err != nil {
		t.Fatal(err)
	}
	chain, skipped, err := s.Chain(key)
	if got := chainString(t, chain); got != "full-1 delta-2" || err != nil {
		t.Fatalf("chain %q, %v", got, err)
	}
	var ce *CorruptError
	if len(skipped) != 1 || !errors.As(skipped[0], &ce) {
		t.Fatalf("skipped %v", skipped)
	}
	if ce.Path != p || ce.Offset != int64(ends[1]) || !strings.Contains(ce.Reason, "after index 2") {
		t.Fatalf("skipped %+v, want %s at byte %d", ce, p, ends[1])
	}
}

// TestStoreTruncatedEverywhere cuts the newest chain file at every byte
// offset: Chain never panics, returns exactly the frames wholly before the
// cut, falls back to the previous chain when the full backup is cut, and
// reports the cut unless it falls between frames.
func TestStoreTruncatedEverywhere(t *testing.T) {
	s := newTestStore(t)
	key := Key{"j", 0}
	put(t, s, key, true, 1)
	put(t, s, key, false, 2)
	put(t, s, key, true, 3)
	put(t, s, key, false, 4)
	put(t, s, key, false, 5)
	p := chainPath(s, key, 3)
	orig := mustReadFile(t, p)
	ends := frameEnds(t, orig)
	if len(ends) != 3 {
		t.Fatalf("%d frames in the newest chain", len(ends))
	}
	wants := []string{"full-1 delta-2", "full-3", "full-3 delta-4", "full-3 delta-4 delta-5"}
	for cut := 0; cut <= len(orig); cut++ {
		if err := os.WriteFile(p, orig[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		whole := 0 // frames wholly before the cut
		for whole < len(ends) && ends[whole] <= cut {
			whole++
		}
		// Clean: a cut between frames (a file that ends at its last frame,
		// as files of earlier versions do) or after the end mark; a cut in
		// a frame or in the mark is reported.
		wantSkipped := 1
		if whole > 0 && ends[whole-1] == cut || cut == len(orig) {
			wantSkipped = 0
		}
		chain, skipped, err := s.Chain(key)
		if err != nil || chainString(t, chain) != wants[whole] || len(skipped) != wantSkipped {
			t.Fatalf("cut at %d: chain %q, skipped %v, err %v; want %q", cut, chainString(t, chain), skipped, err, wants[whole])
		}
		checkSkipped(t, s, key, skipped)
	}
}

// TestStoreRandomFlips flips random bits of a chain file: the chain
// returned is always the frames before the first damaged one (the previous
// chain when the full backup is hit), never anything altered.
func TestStoreRandomFlips(t *testing.T) {
	s := newTestStore(t)
	key := Key{"j", 0}
	put(t, s, key, true, 1)
	put(t, s, key, false, 2)
	if _, err := s.Put(key, BackupMeta{Full: true, LastSeqs: []uint64{1, 2, 3}}, bytes.Repeat([]byte("weights!"), 64)); err != nil {
		t.Fatal(err)
	}
	put(t, s, key, false, 4)
	put(t, s, key, false, 5)
	p := chainPath(s, key, 3)
	orig := mustReadFile(t, p)
	ends := frameEnds(t, orig)
	origChain, _, _ := s.Chain(key)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		b := bytes.Clone(orig)
		first := len(b)
		for range 1 + rng.IntN(3) {
			at := rng.IntN(len(b))
			b[at] ^= 1 << rng.IntN(8)
			first = min(first, at)
		}
		if bytes.Equal(b, orig) {
			continue // two flips undid each other
		}
		hit := 0 // the first damaged frame, len(ends) for the end mark
		for hit < len(ends) && ends[hit] <= first {
			hit++
		}
		if hit == len(ends) {
			// The end mark: every backup intact, the damage reported.
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			chain, skipped, err := s.Chain(key)
			if err != nil || len(skipped) != 1 || len(chain) != len(origChain) {
				t.Fatalf("flip %d in the end mark: chain of %d, skipped %v, err %v", i, len(chain), skipped, err)
			}
			continue
		}
		start := 0
		if hit > 0 {
			start = ends[hit-1]
		}
		if _, _, _, _, reason := decodeFrame(b[start:]); reason == "" {
			t.Fatalf("flip %d at byte %d not detected", i, first)
		}
		if i%20 == 0 { // through the store too
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			chain, skipped, err := s.Chain(key)
			if err != nil || len(skipped) != 1 {
				t.Fatalf("flip %d: skipped %v, err %v", i, skipped, err)
			}
			if hit == 0 {
				if got := chainString(t, chain); got != "full-1 delta-2" {
					t.Fatalf("flip %d in the full backup: chain %q", i, got)
				}
				continue
			}
			if len(chain) != hit {
				t.Fatalf("flip %d in frame %d: chain of %d", i, hit, len(chain))
			}
			for k, c := range chain {
				if !bytes.Equal(c.Data, origChain[k].Data) || c.Meta.Index != origChain[k].Meta.Index {
					t.Fatalf("flip %d: backup %d altered", i, k)
				}
			}
		}
	}
}

func TestStoreRetention(t *testing.T) {
	s := newTestStore(t)
	key := Key{"j", 1}
	maxCount, maxBytes := 0, int64(0)
	for i := 1; i <= 100; i++ {
		put(t, s, key, true, 3*i)
		put(t, s, key, false, 3*i+1)
		put(t, s, key, false, 3*i+2)
		n, b := s.Usage(key)
		maxCount, maxBytes = max(maxCount, n), max(maxBytes, b)
		if names := chainFiles(t, s, key); len(names) > 2 {
			t.Fatalf("round %d: %d chain files %v", i, len(names), names)
		}
	}
	// Two chains of three backups each.
	if maxCount > 6 {
		t.Errorf("up to %d backups kept", maxCount)
	}
	// The last full Put kept the chain before it, then 2 deltas followed:
	// exactly the two newest chains are on disk.
	names := chainFiles(t, s, key)
	if want := []string{chainName(295), chainName(298)}; !slices.Equal(names, want) {
		t.Errorf("chain files %v, want %v", names, want)
	}
	var size int64
	for _, name := range names {
		fi, err := os.Stat(filepath.Join(key.dir(s.Dir()), name))
		if err != nil {
			t.Fatal(err)
		}
		size += fi.Size() - endMarkLen
	}
	n, b := s.Usage(key)
	if n != 6 || b != size || b > maxBytes {
		t.Errorf("Usage = %d, %d; want 6, %d (at most %d)", n, b, size, maxBytes)
	}
	// A new store counts the same.
	if n2, b2 := openTestStore(t, s.Dir()).Usage(key); n2 != n || b2 != b {
		t.Errorf("Usage after reopen = %d, %d; want %d, %d", n2, b2, n, b)
	}
	// The previous chain is kept: remove the newest, recover from it.
	if err := os.Remove(chainPath(s, key, 298)); err != nil {
		t.Fatal(err)
	}
	chain, _, _ := s.Chain(key)
	if got := chainString(t, chain); got != "full-297 delta-298 delta-299" {
		t.Errorf("fallback chain %q", got)
	}
}

// TestStoreReusesChainFiles: a key's first chain comes with two empty
// spare files, which the next full backups take (a rename, not a file
// creation), and retention keeps old chain files as spares instead of
// deleting them; a spare taken by a chain that crashed before its full
// backup was written reads as a damaged chain, never as backups of the
// new one.
func TestStoreReusesChainFiles(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir)
	key := Key{"j", 0}
	spares := func() (fis []os.FileInfo) {
		t.Helper()
		for _, name := range spareNames {
			fi, err := os.Stat(filepath.Join(key.dir(dir), name))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				t.Fatalf("spare %s: %v", name, err)
			}
			fis = append(fis, fi)
		}
		if len(fis) == 0 {
			t.Fatal("no spare")
		}
		return fis
	}
	put(t, s, key, true, 10)
	for i := 2; i <= 6; i++ {
		before := spares()
		put(t, s, key, false, 10*i-9)
		m := put(t, s, key, true, 10*i)
		taken, err := os.Stat(chainPath(s, key, m.Index))
		if err != nil || !slices.ContainsFunc(before, func(fi os.FileInfo) bool { return os.SameFile(fi, taken) }) {
			t.Fatalf("chain %d: its file is no spare: %v", i, err)
		}
	}
	if n, _ := s.Usage(key); n != 3 {
		t.Errorf("Usage %d, want 3 (spares are not counted)", n)
	}
	put(t, s, key, false, 61)
	chain, skipped, _ := openTestStore(t, dir).Chain(key)
	if got := chainString(t, chain); got != "full-60 delta-61" || len(skipped) != 0 {
		t.Fatalf("chain %q %v", got, skipped)
	}
	// A spare holding backups (not emptied, by hand) taken by the next
	// chain, and a crash before its full backup is written: the chain
	// reads as damaged, and the chain before it is used.
	spare := filepath.Join(key.dir(dir), spareNames[0])
	last := chain[0].Meta.Index
	if err := os.WriteFile(spare, mustReadFile(t, chainPath(s, key, last)), 0o644); err != nil {
		t.Fatal(err)
	}
	s2 := openTestStore(t, dir)
	if err := os.Rename(spare, filepath.Join(key.dir(dir), chainName(last+5))); err != nil {
		t.Fatal(err)
	}
	chain, skipped, _ = s2.Chain(key)
	if got := chainString(t, chain); got != "full-60 delta-61" || len(skipped) != 1 {
		t.Fatalf("chain %q %v", got, skipped)
	}
}

// TestStoreChainOverAnOlderOne: a chain written over a longer, older one
// in a reused file reads as its own backups alone, with nothing reported,
// by the writer and by a new store; a torn end mark, or a delta torn where
// the older chain's bytes follow, is reported, and the chain ends before.
func TestStoreChainOverAnOlderOne(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir)
	key := Key{"j", 0}
	long := func(full bool, n int) BackupMeta {
		m, err := s.Put(key, BackupMeta{Full: full, LastSeqs: []uint64{uint64(n)}}, bytes.Repeat(payloadFor(full, n), 100))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	old := long(true, 1)
	for n := 2; n <= 10; n++ {
		long(false, n)
	}
	oldFile, err := os.Stat(chainPath(s, key, old.Index))
	if err != nil {
		t.Fatal(err)
	}
	// Two more chains: the third full backup's retention makes the old
	// chain's file a spare, and the fourth chain takes it.
	put(t, s, key, true, 11)
	put(t, s, key, true, 12)
	m := put(t, s, key, true, 13)
	put(t, s, key, false, 14)
	p := chainPath(s, key, m.Index)
	fi, err := os.Stat(p)
	if err != nil || !os.SameFile(fi, oldFile) || fi.Size() != oldFile.Size() {
		t.Fatalf("the newest chain's file %v (%v) is not the old chain's, at its size %d", fi, err, oldFile.Size())
	}
	for _, store := range []*DirStore{s, openTestStore(t, dir)} {
		chain, skipped, err := store.Chain(key)
		if got := chainString(t, chain); got != "full-13 delta-14" || len(skipped) != 0 || err != nil {
			t.Fatalf("chain %q %v %v", got, skipped, err)
		}
	}
	orig := mustReadFile(t, p)
	for _, c := range []struct {
		name string
		edit func(b []byte)
		want string
	}{
		{"end mark torn", func(b []byte) { b[chainLen(t, b, m.Index)] ^= 1 }, "full-13 delta-14"},
		{"delta torn", func(b []byte) { b[chainLen(t, b, m.Index)-3] ^= 1 }, "full-13"},
	} {
		b := bytes.Clone(orig)
		c.edit(b)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		chain, skipped, err := openTestStore(t, dir).Chain(key)
		if got := chainString(t, chain); got != c.want || len(skipped) != 1 || err != nil {
			t.Fatalf("%s: chain %q %v %v, want %q and the damage", c.name, got, skipped, err, c.want)
		}
	}
}

// chainLen is where the backups of the chain of full backup index end in
// the chain file b: the offset of its end mark.
func chainLen(t *testing.T, b []byte, index uint64) int {
	t.Helper()
	backups, size, damage := parseChain("chain.bin", b, index)
	if damage != nil || len(backups) == 0 {
		t.Fatalf("chain file: %d backups, %v", len(backups), damage)
	}
	return int(size)
}

// TestStoreRetentionKeepsIntactFallback: a chain whose full backup is
// damaged is no fallback; retention keeps the intact one before it.
func TestStoreRetentionKeepsIntactFallback(t *testing.T) {
	dir := t.TempDir()
	key := Key{"j", 0}
	s := openTestStore(t, dir)
	put(t, s, key, true, 1)
	put(t, s, key, false, 2)
	put(t, s, key, true, 3)
	put(t, s, key, false, 4)
	// A machine crash tore the newest full backup.
	p := chainPath(s, key, 3)
	if err := os.WriteFile(p, mustReadFile(t, p)[:20], 0o644); err != nil {
		t.Fatal(err)
	}
	// The restart: recovery, then a full backup.
	s2 := openTestStore(t, dir)
	chain, skipped, _ := s2.Chain(key)
	if got := chainString(t, chain); got != "full-1 delta-2" || len(skipped) != 1 {
		t.Fatalf("chain %q %v", got, skipped)
	}
	m := put(t, s2, key, true, 5)
	if names, want := chainFiles(t, s2, key), []string{chainName(1), chainName(m.Index)}; !slices.Equal(names, want) {
		t.Fatalf("chain files %v, want %v", names, want)
	}
	if n, _ := s2.Usage(key); n != 3 {
		t.Errorf("Usage %d, want 3", n)
	}
	// The next full backup makes the new chain the fallback.
	m2 := put(t, s2, key, true, 6)
	if names, want := chainFiles(t, s2, key), []string{chainName(m.Index), chainName(m2.Index)}; !slices.Equal(names, want) {
		t.Fatalf("chain files %v, want %v", names, want)
	}
}

func TestStoreIndicesContinueAfterReopen(t *testing.T) {
	dir := t.TempDir()
	key := Key{"j", 0}
	s := openTestStore(t, dir)
	put(t, s, key, true, 1)
	put(t, s, key, false, 2)
	put(t, s, key, false, 3)
	// An interrupted Put of the earlier layout left a temporary file: a new
	// store removes it.
	tmp := filepath.Join(key.dir(dir), tempPrefix+"123"+tempSuffix)
	if err := os.WriteFile(tmp, []byte("half a backup"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Files the store does not own are left alone and ignored.
	other := filepath.Join(key.dir(dir), "items-00000000000000000001.log")
	if err := os.WriteFile(other, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	s2 := openTestStore(t, dir)
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("temporary file still there: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("foreign file removed: %v", err)
	}
	if n, _ := s2.Usage(key); n != 3 {
		t.Fatalf("Usage after reopen %d, want 3", n)
	}
	// The chain on disk may end in a torn frame: a new store appends
	// nothing to it, and wants a full backup first.
	if _, err := s2.Put(key, BackupMeta{}, []byte("d")); !errors.Is(err, ErrNoFullBackup) {
		t.Fatalf("delta after reopen: %v, want ErrNoFullBackup", err)
	}
	if m := put(t, s2, key, true, 4); m.Index != 4 {
		t.Fatalf("index after reopen %d, want 4", m.Index)
	}
	if m := put(t, s2, key, false, 5); m.Index != 5 {
		t.Fatalf("delta index %d, want 5", m.Index)
	}
	// Chain reads the disk: the first store sees what the second wrote.
	chain, skipped, err := s.Chain(key)
	if got := chainString(t, chain); got != "full-4 delta-5" || len(skipped) != 0 || err != nil {
		t.Fatalf("chain %q %v %v", got, skipped, err)
	}
	// A store that is not writing the key also refreshes its Usage.
	reader := openTestStore(t, dir)
	reader.Usage(key)
	put(t, s2, key, false, 6)
	reader.Chain(key)
	if n, b := reader.Usage(key); n != 6 {
		n2, b2 := s2.Usage(key)
		t.Fatalf("Usage of a reader after Chain %d, %d; the writer's %d, %d", n, b, n2, b2)
	}
	// A torn last frame: the next store goes on after the last intact one
	// and the one torn, and the damaged chain stays the fallback.
	p := chainPath(s2, key, 4)
	b := mustReadFile(t, p)
	ends := frameEnds(t, b)
	if err := os.WriteFile(p, b[:ends[len(ends)-1]-1], 0o644); err != nil {
		t.Fatal(err)
	}
	s3 := openTestStore(t, dir)
	m := put(t, s3, key, true, 7)
	if m.Index <= 6 {
		t.Fatalf("index %d after a torn delta 6, want above 6", m.Index)
	}
	if err := os.Remove(chainPath(s3, key, m.Index)); err != nil {
		t.Fatal(err)
	}
	chain, skipped, _ = s3.Chain(key)
	if got := chainString(t, chain); got != "full-4 delta-5" || len(skipped) != 1 {
		t.Fatalf("fallback chain %q %v", got, skipped)
	}
	// Indices also go on after a newest chain whose full backup is torn:
	// the name counts.
	if err := os.WriteFile(chainPath(s3, key, 20), []byte("MLSB"), 0o644); err != nil {
		t.Fatal(err)
	}
	if m := put(t, openTestStore(t, dir), key, true, 21); m.Index != 21 {
		t.Fatalf("index %d after a torn chain 20, want 21", m.Index)
	}
}

// TestStoreLegacyFiles: backup files of the one-file-per-backup layout (a
// data directory of an earlier version) are recovered from until the first
// full Put of this layout, which deletes them; they do not lower indices.
func TestStoreLegacyFiles(t *testing.T) {
	dir := t.TempDir()
	key := Key{"j", 0}
	if err := os.MkdirAll(key.dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	var legacy []string
	for _, b := range []struct {
		index uint64
		full  bool
		data  string
	}{{6, true, "older"}, {7, true, "old"}, {8, false, "d8"}, {9, false, "d9"}, {11, false, "d11: not after 9"}} {
		head, tail, err := backupParts(BackupMeta{Index: b.index, Full: b.full, LastSeqs: []uint64{b.index}}, []byte(b.data))
		if err != nil {
			t.Fatal(err)
		}
		kind := "delta"
		if b.full {
			kind = "full"
		}
		p := filepath.Join(key.dir(dir), fmt.Sprintf("backup-%020d-%s.bin", b.index, kind))
		if err := os.WriteFile(p, slices.Concat(head, []byte(b.data), tail), 0o644); err != nil {
			t.Fatal(err)
		}
		legacy = append(legacy, p)
	}
	s := openTestStore(t, dir)
	chain, skipped, err := s.Chain(key)
	if got := chainString(t, chain); got != "old d8 d9" || len(skipped) != 0 || err != nil {
		t.Fatalf("Chain = %q, %v, %v; want the newest legacy full and its deltas", got, skipped, err)
	}
	// A damaged newest full falls back to the one before.
	if err := os.WriteFile(legacy[1], []byte("MLSB torn"), 0o644); err != nil {
		t.Fatal(err)
	}
	chain, skipped, _ = openTestStore(t, dir).Chain(key)
	var ce *CorruptError
	if got := chainString(t, chain); got != "older" || len(skipped) != 1 || !errors.As(skipped[0], &ce) || ce.Path != legacy[1] {
		t.Fatalf("after damage: Chain = %q, skipped %v", got, skipped)
	}
	if m := put(t, s, key, true, 1); m.Index != 12 {
		t.Fatalf("index %d, want 12", m.Index)
	}
	for _, p := range legacy {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("old layout file %s still there: %v", p, err)
		}
	}
	if chain, _, _ := s.Chain(key); chainString(t, chain) != "full-1" {
		t.Fatalf("after a full Put: %q", chainString(t, chain))
	}
}

// TestStoreFailedPut: after a Put that fails, deltas are refused until the
// next full Put succeeds, and the failed backup is in no chain.
func TestStoreFailedPut(t *testing.T) {
	s := newTestStore(t)
	key := Key{"j", 0}
	put(t, s, key, true, 1)
	put(t, s, key, false, 2)
	// A delta whose write fails: swap the chain's file for a read-only one.
	ks := s.lock(key)
	ro, err := os.Open(chainPath(s, key, 1))
	if err != nil {
		t.Fatal(err)
	}
	ks.open.Close()
	ks.open = ro
	ks.mu.Unlock()
	if _, err := s.Put(key, BackupMeta{}, []byte("lost")); err == nil || errors.Is(err, ErrNoFullBackup) {
		t.Fatalf("delta into a read-only file: %v", err)
	}
	if _, err := ro.Stat(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("failed chain file left open: %v", err)
	}
	if _, err := s.Put(key, BackupMeta{}, []byte("d")); !errors.Is(err, ErrNoFullBackup) {
		t.Fatalf("delta after a failed one: %v, want ErrNoFullBackup", err)
	}
	chain, skipped, _ := s.Chain(key)
	if got := chainString(t, chain); got != "full-1 delta-2" || len(skipped) != 0 {
		t.Fatalf("chain %q %v", got, skipped)
	}
	m := put(t, s, key, true, 4)
	if m.Index <= 3 {
		t.Fatalf("index %d reused", m.Index)
	}
	put(t, s, key, false, 5)
	// A full backup that cannot be created: its file name is taken.
	next := m.Index + 2
	if err := os.WriteFile(chainPath(s, key, next), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(key, BackupMeta{Full: true}, []byte("full")); err == nil {
		t.Fatal("full Put over an existing file succeeded")
	}
	// The chain before it takes no more deltas: they would build on the
	// full backup that failed.
	if _, err := s.Put(key, BackupMeta{}, []byte("d")); !errors.Is(err, ErrNoFullBackup) {
		t.Fatalf("delta after a failed full: %v, want ErrNoFullBackup", err)
	}
	if m := put(t, s, key, true, 7); m.Index <= next {
		t.Fatalf("index %d after the failed full, want above %d", m.Index, next)
	}
	if n, _ := s.Usage(key); n != 3 { // the chain of full-4 and this one
		t.Errorf("Usage %d, want 3", n)
	}
}

// TestStoreClosesReplacedChains: each full Put closes the previous chain's
// file, so a long run holds one file per key open.
func TestStoreClosesReplacedChains(t *testing.T) {
	fds := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd")
		}
		return len(entries)
	}
	s := newTestStore(t)
	keys := []Key{{"j", 0}, {"j", 1}}
	for _, k := range keys {
		put(t, s, k, true, 1)
	}
	before := fds()
	for i := range 50 {
		for _, k := range keys {
			put(t, s, k, true, i)
			put(t, s, k, false, i)
		}
	}
	if after := fds(); after > before {
		t.Errorf("%d open files after 100 chains, %d before", after, before)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if after := fds(); after != before-len(keys) {
		t.Errorf("%d open files after Close, want %d", after, before-len(keys))
	}
	// Close leaves the store usable, as after a restart.
	if _, err := s.Put(keys[0], BackupMeta{}, nil); !errors.Is(err, ErrNoFullBackup) {
		t.Errorf("delta after Close: %v, want ErrNoFullBackup", err)
	}
	put(t, s, keys[0], true, 1)
	put(t, s, keys[0], false, 2)
}

func TestStoreRemoveJob(t *testing.T) {
	s := newTestStore(t)
	a0, a1, b0 := Key{"a", 0}, Key{"a", GlobalPartition}, Key{"b", 0}
	for _, k := range []Key{a0, a1, b0} {
		put(t, s, k, true, 1)
		put(t, s, k, false, 2)
	}
	l, err := OpenItemLog(s.Dir(), a0)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	old := s.lock(a0)
	old.mu.Unlock()
	open := old.open
	if err := s.RemoveJob("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := open.Stat(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("chain file of a removed job still open: %v", err)
	}
	// Whoever still holds the old state looks the key up again.
	if !old.removed || s.keys[a0] != nil {
		t.Errorf("state of a removed key still in use")
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), "a")); !os.IsNotExist(err) {
		t.Fatalf("job dir still there: %v", err)
	}
	for _, k := range []Key{a0, a1} {
		if n, _ := s.Usage(k); n != 0 {
			t.Errorf("Usage(%s) = %d after RemoveJob", k, n)
		}
		if _, err := s.Put(k, BackupMeta{}, nil); !errors.Is(err, ErrNoFullBackup) {
			t.Errorf("delta after RemoveJob: %v, want ErrNoFullBackup", err)
		}
	}
	if n, _ := s.Usage(b0); n != 2 {
		t.Errorf("other job touched")
	}
	if m := put(t, s, b0, false, 3); m.Index != 3 {
		t.Errorf("other job's chain: delta index %d", m.Index)
	}
	// The job can be created again from scratch.
	if m := put(t, s, a0, true, 1); m.Index != 1 {
		t.Errorf("index after RemoveJob %d", m.Index)
	}
	if chain, _, _ := s.Chain(a0); chainString(t, chain) != "full-1" {
		t.Errorf("chain after RemoveJob %q", chainString(t, chain))
	}
	if err := s.RemoveJob("never-existed"); err != nil {
		t.Errorf("RemoveJob of unknown job: %v", err)
	}
}

// TestStoreConcurrentKeys runs Puts, Chains and Usages of different keys at
// once, and a RemoveJob of another job (race detector).
func TestStoreConcurrentKeys(t *testing.T) {
	s := newTestStore(t)
	var wg sync.WaitGroup
	for p := range 8 {
		wg.Go(func() {
			key := Key{"j", p}
			for i := 1; i <= 20; i++ {
				if _, err := s.Put(key, BackupMeta{Full: i%5 == 1}, payloadFor(i%5 == 1, i)); err != nil {
					t.Error(err)
					return
				}
				s.Usage(key)
				if i%7 == 0 {
					if _, _, err := s.Chain(key); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 10 {
			put(t, s, Key{"other", 0}, true, i)
			if err := s.RemoveJob("other"); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	for p := range 8 {
		chain, _, err := s.Chain(Key{"j", p})
		if err != nil || chainString(t, chain) != "full-16 delta-17 delta-18 delta-19 delta-20" {
			t.Errorf("p%d: %q %v", p, chainString(t, chain), err)
		}
		if n, _ := s.Usage(Key{"j", p}); n != 10 {
			t.Errorf("p%d: Usage %d, want 10", p, n)
		}
	}
}

func mustReadFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustJSON(t *testing.T, m BackupMeta) []byte {
	t.Helper()
	head, _, err := backupParts(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	return head[backupHeaderLen : len(head)-8]
}

func FuzzDecodeFrame(f *testing.F) {
	head, tail, _ := backupParts(BackupMeta{Index: 1, Full: true, LastSeqs: []uint64{3}}, []byte("data"))
	valid := slices.Concat(head, []byte("data"), tail)
	f.Add(valid)
	f.Add(valid[:len(valid)-1])
	f.Add(slices.Concat(valid, valid))
	f.Add(append(slices.Clone(valid), 0))
	f.Add([]byte("MLSB\x01\xff\xff\xff\xff"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		meta, data, n, off, reason := decodeFrame(b)
		if reason != "" {
			if off < 0 || off > int64(len(b)) || n != 0 {
				t.Fatalf("offset %d, n %d for a file of %d", off, n, len(b))
			}
			return
		}
		if n < backupOverhead || n > len(b) {
			t.Fatalf("frame of %d bytes in %d", n, len(b))
		}
		// What decodes is the data just before the CRC, the frame alone
		// decodes the same, and its meta encodes.
		if !bytes.Equal(b[n-4-len(data):n-4], data) {
			t.Fatalf("data is not the frame's data")
		}
		if _, _, n2, _, reason := decodeFrame(b[:n]); n2 != n || reason != "" {
			t.Fatalf("the frame alone: %d, %q", n2, reason)
		}
		if _, _, _, _, reason := decodeFrame(b[:n-1]); reason == "" {
			t.Fatalf("a frame less its last byte decodes")
		}
		if _, _, err := backupParts(meta, data); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzChainStaleTail: whatever follows a chain's end mark (what is left of
// an older chain in a reused file, or anything else) is never read: the
// chain is its backups, unreported.
func FuzzChainStaleTail(f *testing.F) {
	var chain []byte
	for i, full := range []bool{true, false, false} {
		head, tail, err := backupParts(BackupMeta{Index: uint64(5 + i), Full: full, LastSeqs: []uint64{uint64(i)}}, payloadFor(full, 5+i))
		if err != nil {
			f.Fatal(err)
		}
		chain = slices.Concat(chain, head, payloadFor(full, 5+i), tail)
	}
	chain = appendEndMark(chain, 5)
	f.Add([]byte{})
	f.Add(chain)                      // an older copy of the same chain
	f.Add(appendEndMark(nil, 5))      // a second mark
	f.Add(chain[len(chain)/2:])       // an older chain's middle
	f.Add([]byte("MLSB\x01\xff\xff")) // a frame's start
	f.Fuzz(func(t *testing.T, stale []byte) {
		backups, size, damage := parseChain(chainName(5), slices.Concat(chain, stale), 5)
		if damage != nil || chainString(t, backups) != "full-5 delta-6 delta-7" || size != int64(len(chain)-endMarkLen) {
			t.Fatalf("chain %q, size %d, damage %v", chainString(t, backups), size, damage)
		}
	})
}
