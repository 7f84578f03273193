package ft

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fillJob leaves one of everything a job keeps in js: a backup, an item
// log record, a sequence mark and a metadata file.
func fillJob(t *testing.T, js JobStorage) {
	t.Helper()
	if _, err := js.Backups(GlobalPartition).Put(BackupMeta{Full: true, LastSeqs: []uint64{1}}, []byte("state")); err != nil {
		t.Fatal(err)
	}
	l, err := js.OpenItemLog(0, ItemLogConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var f Frame
	f.Reset(1, nil)
	f.Add([]byte("event"))
	if err := l.AppendFrame(&f); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	m, err := js.OpenSeqMark(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Write(1); err != nil {
		t.Fatal(err)
	}
	m.Close()
	if err := js.WriteMeta(CleanMarker, []byte("{}"), true); err != nil {
		t.Fatal(err)
	}
}

// isEmpty says whether js holds nothing of what fillJob leaves.
func isEmpty(t *testing.T, js JobStorage) bool {
	t.Helper()
	chain, _, err := js.Backups(GlobalPartition).Chain()
	if err != nil {
		t.Fatal(err)
	}
	l, err := js.OpenItemLog(0, ItemLogConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	m, err := js.OpenSeqMark(0)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	seq, err := m.Read()
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = js.ReadMeta(CleanMarker)
	return len(chain) == 0 && l.LastSeq() == 0 && seq == 0 && errors.Is(err, fs.ErrNotExist)
}

func newTestDir(t *testing.T) *Dir {
	t.Helper()
	root := t.TempDir()
	store, err := NewDirStore(root)
	if err != nil {
		t.Fatal(err)
	}
	return NewDir(root, store)
}

func mustJob(t *testing.T, d *Dir, name string) JobStorage {
	t.Helper()
	js, err := d.Job(name)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// Claim keeps the data of its own incarnation and removes another's.
func TestClaimKeepsOwnDataAndRemovesAnothers(t *testing.T) {
	d := newTestDir(t)
	js := mustJob(t, d, "j")
	if prev, removed, err := js.Claim("one", false); err != nil || removed || prev != "" {
		t.Fatalf("first claim: %q %v %v", prev, removed, err)
	}
	fillJob(t, js)
	if prev, removed, err := js.Claim("one", false); err != nil || removed || prev != "one" {
		t.Fatalf("claim by the owner: %q %v %v", prev, removed, err)
	}
	if isEmpty(t, js) {
		t.Fatal("the owner's claim removed its data")
	}
	if prev, removed, err := js.Claim("two", false); err != nil || !removed || prev != "one" {
		t.Fatalf("claim by another incarnation: %q %v %v", prev, removed, err)
	}
	if !isEmpty(t, js) {
		t.Fatal("another incarnation's data survived its claim")
	}
	data, err := os.ReadFile(filepath.Join(d.Root(), "j", IncarnationFile))
	if err != nil || strings.TrimSpace(string(data)) != "two" {
		t.Fatalf("incarnation file %q, %v", data, err)
	}
}

// Data without an incarnation (an earlier version's) is kept only when
// the claim says so.
func TestClaimOfUnmarkedData(t *testing.T) {
	for _, keep := range []bool{true, false} {
		d := newTestDir(t)
		js := mustJob(t, d, "j")
		fillJob(t, js)
		if _, removed, err := js.Claim("config", keep); err != nil || removed == keep {
			t.Fatalf("keep %v: removed %v, %v", keep, removed, err)
		}
		if isEmpty(t, js) == keep {
			t.Fatalf("keep %v: data kept %v", keep, !keep)
		}
	}
}

// Remove deletes everything of the job and nothing of another.
func TestJobStorageRemove(t *testing.T) {
	d := newTestDir(t)
	a, b := mustJob(t, d, "a"), mustJob(t, d, "b")
	fillJob(t, a)
	fillJob(t, b)
	if err := a.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d.Root(), "a")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the job's directory is still there: %v", err)
	}
	if !isEmpty(t, a) {
		t.Fatal("removed job still has data")
	}
	if isEmpty(t, b) {
		t.Fatal("removing a took b's data")
	}
}

func TestDirRefusesBadJobNames(t *testing.T) {
	d := newTestDir(t)
	for _, name := range []string{"", ".jobs", "../x", "a/b"} {
		if _, err := d.Job(name); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Job(%q): %v, want ErrInvalidKey", name, err)
		}
	}
}

// OpenDir locks the directory until Close.
func TestOpenDirLocks(t *testing.T) {
	root := filepath.Join(t.TempDir(), "data")
	d, err := OpenDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var locked *LockedError
	if _, err := OpenDir(root); !errors.As(err, &locked) {
		t.Fatalf("second OpenDir: %v, want a *LockedError", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d2, err := OpenDir(root)
	if err != nil {
		t.Fatalf("OpenDir after Close: %v", err)
	}
	d2.Close()
	recs, err := d2.JobRecords()
	if err != nil || recs.Dir() != filepath.Join(root, ".jobs") {
		t.Fatalf("job records: %v", err)
	}
}
