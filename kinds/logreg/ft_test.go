package logreg

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/mlstream/mlstream/internal/gen"
	"github.com/mlstream/mlstream/learners"
	"github.com/mlstream/mlstream/runtime"
)

// trainedJob runs n generated events through a job of one partition and
// returns it, idle, with a tracker as fault tolerance gives it.
func trainedJob(t *testing.T, n int) *logregJob {
	t.Helper()
	lines, _ := events(gen.New(gen.Config{Seed: 3}), n)
	spec := testSpec(1)
	e, j := node(t, nil, spec, runtime.Config{Partitions: 1})
	ingest(t, e, lines)
	job, err := e.Job(spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the events learned", func() bool { return j.metrics().All.Count == int64(n) && job.Status(false).Processed == uint64(n) })
	j.merge.tracker = learners.NewTracker(j.model)
	return j
}

// A version 2 backup brings back the metrics, the drift counts and the
// feature names with the model.
func TestBackupHoldsMetricsDriftsAndNames(t *testing.T) {
	j := trainedJob(t, 2000)
	j.drifts.count.Store(3)
	var full bytes.Buffer
	j.merge.Lock()
	err := j.BackupState(&full, true)
	j.merge.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	r := trainedJob(t, 10)
	if err := r.RecoverState(bytes.NewReader(full.Bytes())); err != nil {
		t.Fatal(err)
	}
	if got, want := r.parts[0].prog.Count(), j.metrics().All.Count; got != want {
		t.Fatalf("recovered metrics count %d, want %d", got, want)
	}
	if r.drifts.status().Drifts != 3 {
		t.Fatalf("recovered drifts %+v", r.drifts.status())
	}
	if len(r.names.slots) == 0 || len(r.names.slots) != len(j.names.slots) {
		t.Fatalf("recovered %d named slots of %d", len(r.names.slots), len(j.names.slots))
	}
}

// A version 1 backup (a partition count, the metrics, the model, the
// pending predictions) is still read.
func TestVersion1BackupIsRead(t *testing.T) {
	j := trainedJob(t, 2000)
	var old bytes.Buffer
	old.Write(binary.LittleEndian.AppendUint32(nil, 1))
	metrics, err := j.parts[0].pub.snap.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	old.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(metrics))))
	old.Write(metrics)
	if _, err := j.model.WriteTo(&old); err != nil {
		t.Fatal(err)
	}
	if err := j.backupPending(&old, true); err != nil {
		t.Fatal(err)
	}
	r := trainedJob(t, 10)
	if err := r.RecoverState(bytes.NewReader(old.Bytes())); err != nil {
		t.Fatal(err)
	}
	if got := r.parts[0].prog.Count(); got != 2000 {
		t.Fatalf("recovered metrics count %d, want 2000", got)
	}
	if !bytes.Equal(snapshot(t, r.model), snapshot(t, j.model)) {
		t.Fatal("the recovered model differs")
	}
}
