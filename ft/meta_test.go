package ft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"
)

// damages are the ways a small file is found damaged after a crash or by
// the disk: a flipped byte, a torn tail, nothing at all.
var damages = map[string]func([]byte) []byte{
	"flipped":   func(b []byte) []byte { b = bytes.Clone(b); b[len(b)/2] ^= 0x40; return b },
	"truncated": func(b []byte) []byte { return b[:len(b)-3] },
	"empty":     func([]byte) []byte { return nil },
}

func TestJobFileRoundTripAndDamage(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := ReadJobFile(dir, "j", RecoveryHistory); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	want := []byte(`[{"job":"j"}]`)
	if err := WriteJobFile(dir, "j", RecoveryHistory, want, true); err != nil {
		t.Fatal(err)
	}
	got, legacy, err := ReadJobFile(dir, "j", RecoveryHistory)
	if err != nil || legacy || !bytes.Equal(got, want) {
		t.Fatalf("read back %q legacy %t: %v", got, legacy, err)
	}
	path := filepath.Join(dir, "j", RecoveryHistory)
	good, _ := os.ReadFile(path)
	for name, damage := range damages {
		if err := os.WriteFile(path, damage(good), 0o644); err != nil {
			t.Fatal(err)
		}
		data, legacy, err := ReadJobFile(dir, "j", RecoveryHistory)
		if name == "empty" {
			// Indistinguishable from the earlier version's files: handed
			// back raw, for the caller to judge.
			if err != nil || !legacy || len(data) != 0 {
				t.Errorf("%s: %q legacy %t: %v", name, data, legacy, err)
			}
			continue
		}
		var ce *CorruptError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.Path != path {
			t.Errorf("%s: %q legacy %t: %v", name, data, legacy, err)
		}
	}
	// The earlier version's plain file is handed back as legacy.
	os.WriteFile(path, want, 0o644)
	if data, legacy, err := ReadJobFile(dir, "j", RecoveryHistory); err != nil || !legacy || !bytes.Equal(data, want) {
		t.Fatalf("legacy: %q %t %v", data, legacy, err)
	}
	if err := RemoveJobFile(dir, "j", RecoveryHistory); err != nil {
		t.Fatal(err)
	}
	if err := RemoveJobFile(dir, "j", RecoveryHistory); err != nil {
		t.Fatalf("removing a missing file: %v", err)
	}
	if err := WriteJobFile(dir, "../x", CleanMarker, nil, false); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("bad job name: %v", err)
	}
}

func TestSeqMark(t *testing.T) {
	dir := t.TempDir()
	key := Key{Job: "j", Partition: 0}
	m, err := OpenSeqMark(dir, key)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := m.Read(); v != 0 || err != nil {
		t.Fatalf("new mark: %d %v", v, err)
	}
	for _, v := range []uint64{7, 1 << 40, 3} {
		if err := m.Write(v); err != nil {
			t.Fatal(err)
		}
		if got, err := m.Read(); got != v || err != nil {
			t.Fatalf("read %d %v, want %d", got, err, v)
		}
	}
	// After the first write, writes are stores into a mapping of the file
	// (no system call per request), which the file has at once.
	if goruntime.GOOS != "windows" && m.mem == nil {
		t.Fatal("the mark is not mapped after a write")
	}
	path := filepath.Join(key.dir(dir), "seq")
	if b, _ := os.ReadFile(path); len(b) != markLen || binary.LittleEndian.Uint64(b[5:13]) != 3 {
		t.Fatalf("the file holds % x, want the mark 3", b)
	}
	good, _ := os.ReadFile(path)
	for name, damage := range damages {
		os.WriteFile(path, damage(good), 0o644)
		m, err := OpenSeqMark(dir, key)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := m.Read(); !errors.Is(err, ErrCorrupt) || v != 0 {
			t.Errorf("%s: %d %v", name, v, err)
		}
		// The next write repairs it.
		m.Write(9)
		if v, err := m.Read(); v != 9 || err != nil {
			t.Errorf("%s: after a write: %d %v", name, v, err)
		}
		m.Close()
	}
	// The earlier version's mark: 8 bytes, read once, rewritten in the new
	// format.
	os.WriteFile(path, []byte{42, 0, 0, 0, 0, 0, 0, 0}, 0o644)
	m, _ = OpenSeqMark(dir, key)
	defer m.Close()
	if v, err := m.Read(); v != 42 || err != nil {
		t.Fatalf("legacy mark: %d %v", v, err)
	}
	m.Write(43)
	if b, _ := os.ReadFile(path); len(b) != markLen {
		t.Fatalf("rewritten mark has %d bytes", len(b))
	}
}
