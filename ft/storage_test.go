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

// Claim keeps the data of its own incarnation and moves another's into
// the quarantine, whole, where it can be restored from.
func TestClaimKeepsOwnDataAndQuarantinesAnothers(t *testing.T) {
	d := newTestDir(t)
	js := mustJob(t, d, "j")
	if c, err := js.Claim("one", false); err != nil || c != (Claimed{}) {
		t.Fatalf("first claim: %+v %v", c, err)
	}
	fillJob(t, js)
	if c, err := js.Claim("one", false); err != nil || c.Quarantined != "" || c.Previous != "one" {
		t.Fatalf("claim by the owner: %+v %v", c, err)
	}
	if isEmpty(t, js) {
		t.Fatal("the owner's claim removed its data")
	}
	c, err := js.Claim("two", false)
	if err != nil || c.Quarantined == "" || c.Previous != "one" || !strings.Contains(c.Why, "incarnation one's") {
		t.Fatalf("claim by another incarnation: %+v %v", c, err)
	}
	if !isEmpty(t, js) {
		t.Fatal("another incarnation's data survived its claim")
	}
	assertQuarantined(t, d, c.Quarantined, "one")
	if owner, _, err := js.(*jobDir).readIncarnation(); err != nil || owner != "two" {
		t.Fatalf("incarnation file %q, %v", owner, err)
	}
}

// assertQuarantined checks that folder, in the data's quarantine, holds
// fillJob's data of incarnation inc, intact.
func assertQuarantined(t *testing.T, d *Dir, folder, inc string) {
	t.Helper()
	if filepath.Dir(folder) != filepath.Join(d.Root(), QuarantineDir) {
		t.Fatalf("quarantined into %s, not under %s", folder, QuarantineDir)
	}
	chain, _, skipped, err := readChainFile(filepath.Join(folder, "global", chainName(1)), 1)
	if err != nil || skipped != nil || len(chain) != 1 || string(chain[0].Data) != "state" || chain[0].Meta.Incarnation != inc {
		t.Fatalf("quarantined backup: %+v %v %v", chain, skipped, err)
	}
	if _, err := os.Stat(filepath.Join(folder, "0", segName(1))); err != nil {
		t.Fatalf("quarantined item log: %v", err)
	}
}

// Data without an incarnation file (an earlier version's) is kept when
// the claim says so, else moved aside.
func TestClaimOfUnmarkedData(t *testing.T) {
	for _, keep := range []bool{true, false} {
		d := newTestDir(t)
		js := mustJob(t, d, "j")
		fillJob(t, js)
		c, err := js.Claim("config", keep)
		if err != nil || (c.Quarantined == "") != keep {
			t.Fatalf("keep %v: %+v, %v", keep, c, err)
		}
		if isEmpty(t, js) == keep {
			t.Fatalf("keep %v: data kept %v", keep, !keep)
		}
	}
}

// A damaged incarnation file never deletes data: beside intact backups
// that name the claiming incarnation it is rebuilt and the data kept;
// beside backups that name none (every file damaged), the data is moved
// aside.
func TestClaimOfDamagedIncarnationFile(t *testing.T) {
	for _, damage := range []struct {
		name string
		all  bool // every file of the job overwritten with random bytes
	}{{"incarnation file", false}, {"every file", true}} {
		t.Run(damage.name, func(t *testing.T) {
			d := newTestDir(t)
			js := mustJob(t, d, "j")
			if _, err := js.Claim("config", true); err != nil {
				t.Fatal(err)
			}
			fillJob(t, js)
			overwrite := func(path string) {
				fi, err := os.Stat(path)
				if err != nil {
					t.Fatal(err)
				}
				b := make([]byte, max(fi.Size(), 7))
				for i := range b {
					b[i] = byte(i*131 + 7)
				}
				if err := os.WriteFile(path, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			dir := filepath.Join(d.Root(), "j")
			if damage.all {
				_ = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
					if err == nil && !e.IsDir() {
						overwrite(p)
					}
					return err
				})
			} else {
				overwrite(filepath.Join(dir, IncarnationFile))
			}
			d = NewDir(d.Root(), mustStore(t, d.Root())) // a restart
			js = mustJob(t, d, "j")
			c, err := js.Claim("config", true)
			if err != nil {
				t.Fatal(err)
			}
			if damage.all {
				if c.Quarantined == "" || !strings.Contains(c.Why, "is not an incarnation") {
					t.Fatalf("claim: %+v", c)
				}
				if _, err := os.Stat(filepath.Join(c.Quarantined, "global", chainName(1))); err != nil {
					t.Fatalf("the damaged backups were not moved aside: %v", err)
				}
				return
			}
			if c.Quarantined != "" || !strings.Contains(c.Repaired, "rebuilt from the job's intact backups") {
				t.Fatalf("claim: %+v", c)
			}
			if isEmpty(t, js) {
				t.Fatal("the data beside the damaged incarnation file is gone")
			}
		})
	}
}

func mustStore(t *testing.T, root string) *DirStore {
	t.Helper()
	s, err := NewDirStore(root)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Quarantine copies damaged files into a new folder of the quarantine,
// in the job's layout, and leaves them where they are.
func TestQuarantineCopiesFiles(t *testing.T) {
	d := newTestDir(t)
	js := mustJob(t, d, "j")
	fillJob(t, js)
	seq := filepath.Join(d.Root(), "j", "0", "seq")
	folder, err := js.Quarantine("", []string{seq, filepath.Join(d.Root(), "other", "x")})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(seq)
	got, err := os.ReadFile(filepath.Join(folder, "0", "seq"))
	if err != nil || string(got) != string(want) {
		t.Fatalf("copy %q, %v; want %q", got, err, want)
	}
	if entries, _ := os.ReadDir(folder); len(entries) != 1 {
		t.Fatalf("quarantine folder holds %d entries, want the one file's directory", len(entries))
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
