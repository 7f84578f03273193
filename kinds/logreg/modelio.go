package logreg

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/mlstream/mlstream/learners"
	"github.com/mlstream/mlstream/runtime"
)

var _ runtime.ModelIO = (*logregJob)(nil)

// ExportModel writes the global model (runtime.ModelIO). The snapshot is a
// consistent cut: taken with the partitions between batches and no merge
// running; it is encoded after they are let go, so a slow reader holds
// nobody back.
func (j *logregJob) ExportModel(w io.Writer, format string) error {
	if format != "" && format != "binary" && format != "json" {
		return &runtime.ModelError{Field: "format", Msg: fmt.Sprintf("format %q: use binary (the default) or json", format)}
	}
	e, err := j.exportModel()
	if err != nil {
		return err
	}
	if format != "json" {
		return e.Encode(w)
	}
	js, err := e.JSON()
	if err != nil {
		return err
	}
	return json.NewEncoder(w).Encode(js)
}

func (j *logregJob) exportModel() (*ExportedModel, error) {
	var snap bytes.Buffer
	j.swap.Lock()
	j.merge.Lock()
	_, err := j.model.WriteTo(&snap)
	version, updates := j.model.Version(), j.model.Updates()
	j.merge.Unlock()
	j.swap.Unlock()
	if err != nil {
		return nil, err
	}
	names, err := j.names.marshal()
	if err != nil {
		return nil, err
	}
	return &ExportedModel{
		Names: names,
		Header: ModelHeader{Kind: Name, Job: j.name, ExportedAt: time.Now().UTC(), Params: paramsOf(j.model.Config()),
			Version: version, Updates: updates, Metrics: j.metrics()},
		Snapshot: snap.Bytes(),
	}, nil
}

// maxImportBytes is the largest export a job can import: the fixed parts,
// the header, a snapshot holding every one of the job's slots, and the
// names. A larger body cannot be a model of this job.
func (j *logregJob) maxImportBytes() int64 {
	const fixed = 8 + 2 + 4 + 8 + 4 + 4
	const snapFixed, perSlot = 37 + 4, 28
	return fixed + MaxHeaderBytes + snapFixed + int64(j.model.Slots())*perSlot + MaxNamesBytes
}

// ImportModel seeds the job with an exported model (runtime.ModelIO). The
// model must have been trained with the job's learner parameters (else a
// ModelError naming the first that differs). Ingest goes on meanwhile:
// the partitions finish the batch they are in and wait before the next
// one while the state is replaced, so each event is learned wholly on the
// old model or wholly on the new one. Learning of the old model that
// partitions had not merged yet (at most a group of batches, or γ events
// with fault tolerance) is dropped: it was computed against state that no
// longer exists. The model's version and update count go on from the
// imported ones; the job's own progressive metrics are kept (they measure
// this job's stream). With fault tolerance a full backup is taken at once,
// so that a crash recovers the imported model. A job that shares deltas
// (cluster mode) refuses with runtime.ErrNotSupported: an import would
// replace one node's copy of the model only.
func (j *logregJob) ImportModel(r io.Reader) error {
	if j.sharing() {
		return fmt.Errorf("%w: job %q shares its model across the cluster; a model import would change one node's copy only", runtime.ErrNotSupported, j.name)
	}
	limit := j.maxImportBytes()
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return err
	}
	if int64(len(data)) > limit {
		return &runtime.ModelError{Field: "body", Msg: fmt.Sprintf("a model for this job (hash_bits %d) is at most %d bytes", j.model.Config().HashBits, limit)}
	}
	e, err := DecodeModel(data)
	if err != nil {
		return err
	}
	want := paramsOf(j.model.Config())
	if j.normDefault {
		want.Normalize = e.Header.Params.Normalize // the job takes the model's
		if err := (learners.Config{Normalize: want.Normalize}).Validate(); err != nil {
			return snapshotError(err)
		}
	}
	if field, got, want := e.Header.Params.mismatch(want); field != "" {
		return &runtime.ModelError{Field: "params." + field, Msg: fmt.Sprintf("the model has %s %v, the job %v", field, got, want)}
	}
	if _, err := learners.SnapshotCount(e.Snapshot); err != nil {
		return snapshotError(err)
	}
	names, err := j.names.load(e.Names, j.model.Slots())
	if err != nil {
		return err
	}
	return j.replaceModel(e.Snapshot, e.Header.Params.Normalize, names)
}

// replaceModel installs a checked snapshot, learned with normalization
// normalize, with the partitions held between batches and no merge
// running.
func (j *logregJob) replaceModel(snap []byte, normalize string, names *nameDict) error {
	j.swap.Lock()
	defer j.swap.Unlock()
	j.merge.Lock()
	defer j.merge.Unlock()
	var backup runtime.FullBackuper
	if j.merge.tracker != nil {
		backup, _ = j.ft.Unit(0).(runtime.FullBackuper)
	}
	if backup != nil && backup.Closing() {
		return runtime.ErrStopping
	}
	if _, err := j.model.ReadFrom(bytes.NewReader(snap)); err != nil {
		return snapshotError(err)
	}
	// A format 1 snapshot does not name its normalization: the header
	// does (checked against the job's by ImportModel).
	if normalize != "" {
		if err := j.model.UseNormalize(normalize); err != nil {
			return snapshotError(err)
		}
	}
	for i, p := range j.parts {
		p.learner.Discard()
		p.unacked.Store(0)
		p.unlogged = 0
		// The new model stands for every event processed so far: none is
		// replayed onto it after a crash.
		j.merge.lastSeqs[i] = p.lastSeq
	}
	j.names.install(names)
	j.mu.Lock()
	j.mu.snapAt = time.Time{}
	j.mu.Unlock()
	if j.merge.tracker != nil {
		j.merge.tracker.Reset()
	}
	if backup != nil {
		backup.BackupFull()
	}
	return nil
}
