package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
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
	mustPut(t, e, hhSpec())
	if got := topTotal(t, e); got != 0 {
		t.Fatalf("the new hh recovered %d events of the earlier one", got)
	}
}

// Data of a config file job from before incarnations existed (no
// incarnation file) is the file's job's: it recovers it.
func TestFileJobKeepsDataWithoutIncarnation(t *testing.T) {
	dir := t.TempDir()
	e, _ := recordingEngine(t, dir, []Spec{hhSpec()})
	if err := e.DeleteJob("hh"); err != nil {
		t.Fatal(err)
	}
	counted(t, e, 30) // created at run time, recorded
	if err := os.Remove(filepath.Join(dir, "hh", ft.IncarnationFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, ".jobs")); err != nil {
		t.Fatal(err)
	}
	e, _ = recordingEngine(t, dir, []Spec{hhSpec()})
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
