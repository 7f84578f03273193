package ft

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func newTestStore(t *testing.T) *DirStore {
	t.Helper()
	s, err := NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
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

func backupPath(s *DirStore, key Key, index uint64, full bool) string {
	return filepath.Join(key.dir(s.Dir()), backupName(index, full))
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
	if n, b := s.Usage(key); n != 1 || b != int64(backupOverhead+len(data))+int64(len(mustJSON(t, m))) {
		t.Fatalf("Usage = %d, %d", n, b)
	}
	// An empty delta and an empty full backup are fine.
	put(t, s, key, false, 2)
	if _, err := s.Put(key, BackupMeta{}, nil); err != nil {
		t.Fatal(err)
	}
	chain, _, _ = s.Chain(key)
	if len(chain) != 3 || len(chain[2].Data) != 0 {
		t.Fatalf("chain with empty delta: %d", len(chain))
	}
	// Other keys of the job are independent; the global key too.
	g := Key{"job.1", GlobalPartition}
	if m := put(t, s, g, true, 1); m.Index != 1 {
		t.Fatalf("global key index %d", m.Index)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), "job.1", "global", backupName(1, true))); err != nil {
		t.Fatal(err)
	}
}

func TestStoreChain(t *testing.T) {
	// Each case writes a sequence of backups ("F" full, "d" delta), damages
	// some by index, and expects a chain (as chainString) and a number of
	// skipped files.
	type damage struct {
		index uint64
		how   string // "flip", "truncate", "remove", "rename"
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
		{name: "delta damaged in the middle", seq: "Fdddd", damage: []damage{{3, "flip"}}, want: "full-1 delta-2", skipped: 1},
		{name: "delta torn", seq: "Fdd", damage: []damage{{3, "truncate"}}, want: "full-1 delta-2", skipped: 1},
		{name: "delta missing", seq: "Fdddd", damage: []damage{{3, "remove"}}, want: "full-1 delta-2", skipped: 1},
		{name: "first delta damaged", seq: "Fd", damage: []damage{{2, "flip"}}, want: "full-1", skipped: 1},
		{name: "both fulls damaged", seq: "FdFd", damage: []damage{{1, "flip"}, {3, "flip"}}, want: "", skipped: 2},
		{name: "fallback chain with damaged delta", seq: "FddFd", damage: []damage{{4, "truncate"}, {3, "flip"}}, want: "full-1 delta-2", skipped: 2},
		{name: "file renamed to another index", seq: "Fdd", damage: []damage{{3, "rename"}}, want: "full-1 delta-2", skipped: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore(t)
			key := Key{"j", 0}
			for i, c := range tc.seq {
				m := put(t, s, key, c == 'F', i+1)
				if m.Index != uint64(i+1) {
					t.Fatalf("index %d, want %d", m.Index, i+1)
				}
			}
			for _, d := range tc.damage {
				full := tc.seq[d.index-1] == 'F'
				p := backupPath(s, key, d.index, full)
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				switch d.how {
				case "flip":
					b[len(b)/2] ^= 0x10
					err = os.WriteFile(p, b, 0o644)
				case "truncate":
					err = os.WriteFile(p, b[:len(b)-3], 0o644)
				case "remove":
					err = os.Remove(p)
				case "rename": // a valid file under the wrong name: meta and name disagree
					err = os.WriteFile(p, mustReadFile(t, backupPath(s, key, d.index-1, false)), 0o644)
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
			for _, e := range skipped {
				if !errors.Is(e, ErrCorrupt) || !strings.Contains(e.Error(), "backup-") {
					t.Errorf("skipped error %v: not ErrCorrupt or names no file", e)
				}
			}
		})
	}
}

// TestStoreTruncatedEverywhere cuts a small backup at every byte offset:
// Chain never returns it and never panics.
func TestStoreTruncatedEverywhere(t *testing.T) {
	s := newTestStore(t)
	key := Key{"j", 0}
	put(t, s, key, true, 1)
	m := put(t, s, key, false, 2)
	p := backupPath(s, key, m.Index, false)
	orig := mustReadFile(t, p)
	for cut := 0; cut < len(orig); cut++ {
		if err := os.WriteFile(p, orig[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		chain, skipped, err := s.Chain(key)
		if err != nil || chainString(t, chain) != "full-1" || len(skipped) != 1 {
			t.Fatalf("cut at %d: chain %q, skipped %v, err %v", cut, chainString(t, chain), skipped, err)
		}
	}
	// Extra bytes after a valid file are damage too.
	if err := os.WriteFile(p, append(orig, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	if chain, _, _ := s.Chain(key); len(chain) != 1 {
		t.Fatalf("trailing byte accepted")
	}
}

// TestStoreRandomFlips flips random bits of a backup: the CRC (or a length
// or magic check) always catches it.
func TestStoreRandomFlips(t *testing.T) {
	s := newTestStore(t)
	key := Key{"j", 0}
	m, err := s.Put(key, BackupMeta{Full: true, LastSeqs: []uint64{1, 2, 3}}, bytes.Repeat([]byte("weights!"), 64))
	if err != nil {
		t.Fatal(err)
	}
	p := backupPath(s, key, m.Index, true)
	orig := mustReadFile(t, p)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		b := bytes.Clone(orig)
		for range 1 + rng.IntN(3) {
			b[rng.IntN(len(b))] ^= 1 << rng.IntN(8)
		}
		if bytes.Equal(b, orig) {
			continue // two flips undid each other
		}
		if _, _, _, reason := decodeBackup(b); reason == "" {
			t.Fatalf("flip %d not detected", i)
		}
		if i%100 == 0 { // through the store too
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			if chain, skipped, _ := s.Chain(key); len(chain) != 0 || len(skipped) != 1 {
				t.Fatalf("flip %d: chain %d, skipped %d", i, len(chain), len(skipped))
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
	}
	// Two full chains of three files each at most.
	if maxCount > 6 {
		t.Errorf("up to %d files kept", maxCount)
	}
	entries, err := os.ReadDir(key.dir(s.Dir()))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	// The last full Put kept the chain before it (3 files), then 2 deltas followed.
	n, b := s.Usage(key)
	if n != len(names) || n != 6 {
		t.Errorf("Usage count %d, %d files on disk %v, want 6", n, len(names), names)
	}
	if b > maxBytes {
		t.Errorf("bytes %d", b)
	}
	// The previous chain is kept: damage the newest full, recover from it.
	chain, _, _ := s.Chain(key)
	newest := chain[0].Meta.Index
	if err := os.Remove(backupPath(s, key, newest, true)); err != nil {
		t.Fatal(err)
	}
	chain, _, _ = s.Chain(key)
	if got := chainString(t, chain); got != "full-297 delta-298 delta-299" {
		t.Errorf("fallback chain %q", got)
	}
}

func TestStoreIndicesContinueAfterReopen(t *testing.T) {
	dir := t.TempDir()
	key := Key{"j", 0}
	s, err := NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, key, true, 1)
	put(t, s, key, false, 2)
	// An interrupted Put leaves a temporary file: a new store removes it.
	tmp := filepath.Join(key.dir(dir), tempPrefix+"123"+tempSuffix)
	if err := os.WriteFile(tmp, []byte("half a backup"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Files the store does not own are left alone and ignored.
	other := filepath.Join(key.dir(dir), "items-00000000000000000001.log")
	if err := os.WriteFile(other, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	s2, err := NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("temporary file still there: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("foreign file removed: %v", err)
	}
	if m := put(t, s2, key, false, 3); m.Index != 3 {
		t.Fatalf("index after reopen %d, want 3", m.Index)
	}
	chain, skipped, err := s2.Chain(key)
	if got := chainString(t, chain); got != "full-1 delta-2 delta-3" || len(skipped) != 0 || err != nil {
		t.Fatalf("chain %q %v %v", got, skipped, err)
	}
	if n, _ := s2.Usage(key); n != 3 {
		t.Fatalf("Usage %d", n)
	}
}

func TestStoreRemoveJob(t *testing.T) {
	s := newTestStore(t)
	a0, a1, b0 := Key{"a", 0}, Key{"a", GlobalPartition}, Key{"b", 0}
	for _, k := range []Key{a0, a1, b0} {
		put(t, s, k, true, 1)
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
	if err := s.RemoveJob("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), "a")); !os.IsNotExist(err) {
		t.Fatalf("job dir still there: %v", err)
	}
	for _, k := range []Key{a0, a1} {
		if n, _ := s.Usage(k); n != 0 {
			t.Errorf("Usage(%s) = %d after RemoveJob", k, n)
		}
	}
	if n, _ := s.Usage(b0); n != 1 {
		t.Errorf("other job touched")
	}
	// The job can be created again from scratch.
	if m := put(t, s, a0, true, 1); m.Index != 1 {
		t.Errorf("index after RemoveJob %d", m.Index)
	}
	if err := s.RemoveJob("never-existed"); err != nil {
		t.Errorf("RemoveJob of unknown job: %v", err)
	}
}

// TestStoreConcurrentKeys runs Puts of different keys at once (race detector).
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
			}
		})
	}
	wg.Wait()
	for p := range 8 {
		chain, _, err := s.Chain(Key{"j", p})
		if err != nil || chainString(t, chain) != "full-16 delta-17 delta-18 delta-19 delta-20" {
			t.Errorf("p%d: %q %v", p, chainString(t, chain), err)
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

func FuzzDecodeBackup(f *testing.F) {
	head, tail, _ := backupParts(BackupMeta{Index: 1, Full: true, LastSeqs: []uint64{3}}, []byte("data"))
	valid := append(append(head, "data"...), tail...)
	f.Add(valid)
	f.Add(valid[:len(valid)-1])
	f.Add([]byte("MLSB\x01\xff\xff\xff\xff"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		meta, data, off, reason := decodeBackup(b)
		if reason != "" {
			if off < 0 || off > int64(len(b)) {
				t.Fatalf("offset %d outside the file", off)
			}
			return
		}
		// What decodes is the data just before the CRC, and its meta encodes.
		if !bytes.Equal(b[len(b)-4-len(data):len(b)-4], data) {
			t.Fatalf("data is not the file's data")
		}
		if _, _, err := backupParts(meta, data); err != nil {
			t.Fatal(err)
		}
	})
}
