package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlstream/mlstream/ft"
)

// recordingEngine is an engine over dir with backups and job records.
func recordingEngine(t *testing.T, dir string, file []Spec) (*Engine, *ft.JobDir) {
	t.Helper()
	store, err := ft.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := ft.OpenJobDir(filepath.Join(dir, ".jobs"))
	if err != nil {
		t.Fatal(err)
	}
	e := NewEngine(Config{Partitions: 1, Store: store, DataDir: dir, Jobs: jobs, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	if err := e.Start(file); err != nil {
		t.Fatal(err)
	}
	return e, jobs
}

func hhSpec() Spec {
	return Spec{Name: "hh", Kind: "heavy_hitters", Input: "s", Partitions: 1, Params: map[string]any{"field": "u"}}
}

// counted puts n events into job hh and closes the engine.
func counted(t *testing.T, e *Engine, n int) {
	t.Helper()
	j := mustPut(t, e, hhSpec())
	lines := make([]string, n)
	for i := range lines {
		lines[i] = fmt.Sprintf(`{"u":"x%d"}`, i%5)
	}
	if _, err := ingest(e, "s", lines...); err != nil {
		t.Fatal(err)
	}
	waitProcessed(t, j, uint64(n))
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func topTotal(t *testing.T, e *Engine) uint64 {
	t.Helper()
	j, err := e.Job("hh")
	if err != nil {
		t.Fatal(err)
	}
	return sec(j.Status(false)).TopK.Total
}

// A crash between the removal of a deleted job's record and of its data
// leaves the data behind: a new job of the name must not recover it.
func TestNewIncarnationIgnoresAnEarlierJobsData(t *testing.T) {
	dir := t.TempDir()
	e, jobs := recordingEngine(t, dir, nil)
	counted(t, e, 50)
	if err := jobs.Delete("hh"); err != nil { // DeleteJob's first step, then the crash
		t.Fatal(err)
	}
	e, _ = recordingEngine(t, dir, nil)
	if _, err := e.Job("hh"); err == nil {
		t.Fatal("hh restored without a record")
	}
	j := mustPut(t, e, hhSpec())
	if got := topTotal(t, e); got != 0 {
		t.Fatalf("the new hh recovered %d events of the earlier one", got)
	}
	// Nor was the earlier one's data deleted: it is in the quarantine.
	assertQuarantinedHH(t, j, dir, "moved aside")
}

// Data of a config file job without an incarnation file (an earlier
// version wrote none) is the file's job's: it recovers it.
func TestFileJobKeepsDataWithoutIncarnation(t *testing.T) {
	dir := t.TempDir()
	store, err := ft.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Without records every job is of the config file's incarnation.
	counted(t, NewEngine(Config{Partitions: 1, Store: store, DataDir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}), 30)
	if err := os.Remove(filepath.Join(dir, "hh", ft.IncarnationFile)); err != nil {
		t.Fatal(err)
	}
	e, _ := recordingEngine(t, dir, []Spec{hhSpec()})
	if got := topTotal(t, e); got != 30 {
		t.Fatalf("the file's hh recovered %d events, want 30", got)
	}
}

// gatedStore holds RemoveJob until released.
type gatedStore struct {
	ft.Store
	entered, release chan struct{}
}

func (g *gatedStore) RemoveJob(job string) error {
	close(g.entered)
	<-g.release
	return g.Store.RemoveJob(job)
}

// DeleteJob holds the name until the job's data is gone: a PUT of the
// name meanwhile is refused, never interleaved with the removal.
func TestPutWhileDeletingIsRefused(t *testing.T) {
	dir := t.TempDir()
	ds, err := ft.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	store := &gatedStore{Store: ds, entered: make(chan struct{}), release: make(chan struct{})}
	e := testEngine(t, Config{Partitions: 1, Store: store, DataDir: dir})
	mustPut(t, e, hhSpec())
	done := make(chan error)
	go func() { done <- e.DeleteJob("hh") }()
	<-store.entered
	if _, err := e.PutJob(hhSpec()); !errors.Is(err, ErrJobExists) {
		t.Fatalf("PUT while deleting: %v", err)
	}
	close(store.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mustPut(t, e, hhSpec())
}

// A config file job whose spec is the recorded one's is that job: it
// keeps its state and its record.
func TestFileJobSameAsRecordKeepsItsState(t *testing.T) {
	dir := t.TempDir()
	e, _ := recordingEngine(t, dir, nil)
	counted(t, e, 20) // created at run time, recorded
	spec := hhSpec()
	spec.Sync.Every, spec.FT.Mode = "auto", "approx" // spelled out, as a file may
	e, jobs := recordingEngine(t, dir, []Spec{spec})
	if got := topTotal(t, e); got != 20 {
		t.Fatalf("hh recovered %d events, want 20", got)
	}
	if recs, _, _ := jobs.Load(); len(recs) != 1 {
		t.Fatalf("records %+v", recs)
	}
}

// A config file job that does not start fails Start, naming its index.
func TestStartFailsOnABadFileJob(t *testing.T) {
	e := testEngine(t, Config{})
	bad := hhSpec()
	bad.Name, bad.Params = "bad", map[string]any{"field": "u", "counters": 0}
	err := e.Start([]Spec{hhSpec(), bad})
	var fe *FileJobError
	var se *SpecError
	if !errors.As(err, &fe) || fe.Index != 1 || fe.Name != "bad" || !errors.As(err, &se) || se.Field != "params.counters" {
		t.Fatalf("err = %v", err)
	}
}

// assertQuarantinedHH checks that j's recovery report names a folder of
// the quarantine, for what, and that the folder holds a backup chain of
// hh's (global) state.
func assertQuarantinedHH(t *testing.T, j *Job, dir, what string) string {
	t.Helper()
	rep := j.Recovery()
	if rep == nil || len(rep.Quarantined) == 0 {
		t.Fatalf("no quarantine in the recovery report %+v", rep)
	}
	q := rep.Quarantined[0]
	folder, _, _ := strings.Cut(q, ": ")
	if !strings.Contains(q, what) || filepath.Dir(folder) != filepath.Join(dir, ft.QuarantineDir) ||
		!strings.HasPrefix(filepath.Base(folder), "hh-") {
		t.Fatalf("quarantine %q, want a folder of %s/%s for %q", q, dir, ft.QuarantineDir, what)
	}
	if chains, _ := filepath.Glob(filepath.Join(folder, "global", "chain-*.bin")); len(chains) == 0 {
		var files []string
		_ = filepath.WalkDir(folder, func(p string, _ fs.DirEntry, _ error) error { files = append(files, p); return nil })
		t.Fatalf("%s holds no backup of hh: %q", folder, files)
	}
	return folder
}

// overwriteFile replaces a file's bytes with as many others (at least 7).
func overwriteFile(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, max(fi.Size(), 7))
	for i := range b {
		b[i] = byte(i*167 + 13)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A damaged incarnation file beside intact backups of the job deletes
// nothing: the file is rebuilt from the backups, which name the job's
// incarnation, and the job recovers its events (today: all removed).
func TestDamagedIncarnationFileKeepsTheData(t *testing.T) {
	for _, fromFile := range []bool{true, false} {
		t.Run(fmt.Sprintf("config_file_job=%v", fromFile), func(t *testing.T) {
			dir := t.TempDir()
			var file []Spec
			if fromFile {
				file = []Spec{hhSpec()}
			}
			e, _ := recordingEngine(t, dir, file)
			if fromFile {
				if err := e.DeleteJob("hh"); err != nil {
					t.Fatal(err)
				}
			}
			counted(t, e, 40)
			overwriteFile(t, filepath.Join(dir, "hh", ft.IncarnationFile))
			e, _ = recordingEngine(t, dir, file)
			if got := topTotal(t, e); got != 40 {
				t.Fatalf("hh recovered %d events, want 40", got)
			}
			j, _ := e.Job("hh")
			if rep := j.Recovery(); rep == nil || len(rep.Repaired) != 1 || len(rep.Quarantined) != 0 {
				t.Fatalf("recovery report %+v", rep)
			}
		})
	}
}

// Every file of the job overwritten with random bytes: nothing can be
// rebuilt, and nothing is deleted: the job starts afresh and its data is
// in the quarantine, named by the report, as it was (today: removed).
func TestEveryFileDamagedIsQuarantined(t *testing.T) {
	dir := t.TempDir()
	e, _ := recordingEngine(t, dir, []Spec{hhSpec()})
	counted(t, e, 40)
	sizes := map[string]int64{}
	_ = filepath.WalkDir(filepath.Join(dir, "hh"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			overwriteFile(t, p)
			fi, _ := os.Stat(p)
			sizes[strings.TrimPrefix(p, filepath.Join(dir, "hh"))] = fi.Size()
		}
		return err
	})
	e, _ = recordingEngine(t, dir, []Spec{hhSpec()})
	if got := topTotal(t, e); got != 0 {
		t.Fatalf("hh recovered %d events from random bytes", got)
	}
	j, _ := e.Job("hh")
	folder := assertQuarantinedHH(t, j, dir, "is not an incarnation")
	for rel, size := range sizes {
		if fi, err := os.Stat(folder + rel); err != nil || fi.Size() != size {
			t.Fatalf("quarantined %s: %v (want %d bytes)", rel, err, size)
		}
	}
}

// A damaged job record is rebuilt from its copy beside the job's data:
// the job is restored with its data, and the record is whole again
// (today: the job was not restored, and a PUT of it deleted its data).
func TestDamagedRecordIsRebuilt(t *testing.T) {
	dir := t.TempDir()
	e, _ := recordingEngine(t, dir, nil)
	counted(t, e, 40) // created at run time, recorded
	overwriteFile(t, filepath.Join(dir, ".jobs", "hh.job"))
	e, jobs := recordingEngine(t, dir, nil)
	if got := topTotal(t, e); got != 40 {
		t.Fatalf("hh restored with %d events, want 40", got)
	}
	if recs, damaged, err := jobs.Load(); err != nil || len(recs) != 1 || len(damaged) != 0 {
		t.Fatalf("records %+v, damaged %v, %v", recs, damaged, err)
	}
}

// A damaged job record and its copy, then a PUT of the same spec: the new
// job is a new incarnation and does not recover the old data, but the old
// data is moved aside, not deleted (today: removed), and an operator
// restores it as docs/fault-tolerance.md says: the folder moved back, with
// the job's incarnation written in its incarnation file.
func TestDamagedRecordThenPutKeepsTheOldData(t *testing.T) {
	dir := t.TempDir()
	e, _ := recordingEngine(t, dir, nil)
	counted(t, e, 40) // created at run time, recorded
	overwriteFile(t, filepath.Join(dir, ".jobs", "hh.job"))
	overwriteFile(t, filepath.Join(dir, "hh", ft.JobRecordCopy))
	e, jobs := recordingEngine(t, dir, nil)
	if _, err := e.Job("hh"); err == nil {
		t.Fatal("hh restored from a damaged record")
	}
	j := mustPut(t, e, hhSpec())
	if got := topTotal(t, e); got != 0 {
		t.Fatalf("the new hh recovered %d events", got)
	}
	folder := assertQuarantinedHH(t, j, dir, "moved aside")
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The restore.
	recs, _, err := jobs.Load()
	if err != nil || len(recs) != 1 {
		t.Fatalf("records %+v, %v", recs, err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "hh")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(folder, filepath.Join(dir, "hh")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hh", ft.IncarnationFile), []byte(recs[0].Incarnation+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e, _ = recordingEngine(t, dir, nil)
	if got := topTotal(t, e); got != 40 {
		t.Fatalf("the restored hh has %d events, want 40", got)
	}
}
