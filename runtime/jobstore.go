package runtime

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/mlstream/mlstream/ft"
)

// JobStore records the jobs created at run time (PUT /v1/jobs/{name}), so
// that they survive a restart. ft.JobDir is the implementation over a
// directory. Calls for one name never overlap.
type JobStore interface {
	// Save records a job durably, replacing the record of its name.
	Save(rec ft.JobRecord) error
	// Delete removes the record of a name, durably; none is no error.
	Delete(name string) error
	// Load returns the records; damaged ones are reported in damaged and
	// left out.
	Load() (recs []ft.JobRecord, damaged []error, err error)
}

var _ JobStore = (*ft.JobDir)(nil)

// ErrJobRecord says the job's record could not be written or removed.
var ErrJobRecord = errors.New("runtime: could not record the job")

// Incarnations. Each job has one: a new random id when it is created at
// run time, kept in its record; the config file's jobs share
// fileIncarnation, so that they recover their data across restarts (and
// edits of the file) as before records existed. A job's data holds its
// incarnation (ft.IncarnationFile), and a job never recovers the data of
// another incarnation: see claimData.
const fileIncarnation = "config"

// newIncarnation is a new job's. Without Config.Jobs nothing tells a new
// job from a restarted one, so every job is of fileIncarnation and
// recovers the data of its name, as before records existed.
func (e *Engine) newIncarnation() string {
	if e.cfg.Jobs == nil {
		return fileIncarnation
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// record saves a job created at run time in Config.Jobs, and, for a job
// with data (fault tolerance), a copy beside its data (ft.JobRecordCopy),
// from which a damaged record is rebuilt.
func (e *Engine) record(spec Spec, incarnation string) error {
	if e.cfg.Jobs == nil {
		return nil
	}
	js, err := json.Marshal(spec)
	rec := ft.JobRecord{Name: spec.Name, Incarnation: incarnation, Spec: js}
	if err == nil {
		err = e.cfg.Jobs.Save(rec)
	}
	if err != nil {
		e.log.Error("recording the job", "job", spec.Name, "err", err)
		return fmt.Errorf("%w %q: %v", ErrJobRecord, spec.Name, err)
	}
	e.copyRecord(rec, spec.FT.Mode)
	return nil
}

// copyRecord writes the record of a job with data (of ft mode) beside its
// data.
func (e *Engine) copyRecord(rec ft.JobRecord, mode string) {
	if e.cfg.Storage == nil || mode == ft.ModeNone {
		return
	}
	js, err := e.cfg.Storage.Job(rec.Name)
	var b []byte
	if err == nil {
		b, err = json.Marshal(rec)
	}
	if err == nil {
		err = js.WriteMeta(ft.JobRecordCopy, b, true)
	}
	if err != nil {
		e.log.Warn("copying the job's record beside its data (a damaged record cannot be rebuilt)", "job", rec.Name, "err", err)
	}
}

// rebuildRecord rebuilds the damaged record of job name from its copy
// beside the job's data, and saves it.
func (e *Engine) rebuildRecord(name string) (ft.JobRecord, error) {
	var rec ft.JobRecord
	if e.cfg.Storage == nil {
		return rec, errors.New("no data directory")
	}
	js, err := e.cfg.Storage.Job(name)
	if err != nil {
		return rec, err
	}
	b, _, err := js.ReadMeta(ft.JobRecordCopy)
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil || rec.Name != name {
		return rec, fmt.Errorf("the copy %q is not the record of %s (%v)", b, name, err)
	}
	return rec, e.cfg.Jobs.Save(rec)
}

// claimData makes the job's data the incarnation's before the job opens
// it (ft.JobStorage.Claim). Nothing is deleted: data of another
// incarnation (a job deleted, or whose deletion a crash interrupted, or
// replaced by the config file, or whose record was damaged) goes to the
// quarantine, and so does data whose owner nothing tells (its incarnation
// file damaged and no intact backup naming the job's incarnation). Data
// without an incarnation is from before incarnations existed: the config
// file's jobs keep it. What it did goes in the job's recovery report.
func (e *Engine) claimData(name, incarnation string) (ft.Claimed, error) {
	js, err := e.cfg.Storage.Job(name)
	if err != nil {
		return ft.Claimed{}, err
	}
	c, err := js.Claim(incarnation, incarnation == fileIncarnation)
	if c.Repaired != "" {
		e.log.Warn("damaged job metadata rebuilt", "job", name, "incarnation", incarnation, "repaired", c.Repaired)
	}
	if c.Quarantined != "" {
		e.log.Warn("the data found under the job's name was moved to the quarantine, not used: restore it from there if it is this job's",
			"job", name, "incarnation", incarnation, "quarantine", c.Quarantined, "why", c.Why)
	}
	return c, err
}

// removeData removes everything the storage holds of a deleted job.
func (e *Engine) removeData(name string) {
	if e.cfg.Storage == nil {
		return
	}
	js, err := e.cfg.Storage.Job(name)
	if err == nil {
		err = js.Remove()
	}
	if err != nil {
		e.log.Warn("removing the job's data", "job", name, "err", err)
	}
}

// FileJobError is Start's error for a job of the config file.
type FileJobError struct {
	Index int // in the file's list
	Name  string
	Err   error
}

func (e *FileJobError) Error() string {
	return fmt.Sprintf("jobs[%d] (%q): %v", e.Index, e.Name, e.Err)
}
func (e *FileJobError) Unwrap() error { return e.Err }

// Start starts the config file's jobs, then restores the jobs recorded
// at run time (Config.Jobs). A recorded job whose name the file also has
// goes on with its data when the two specs agree; when they differ, the
// file wins: a warning names both, the record is removed and the file's
// job does not see the recorded job's data. A damaged record, or a recorded
// job that no longer starts (a lower budget, say), is logged and skipped:
// only the file's jobs can fail Start, with a *FileJobError.
func (e *Engine) Start(file []Spec) error {
	recorded := e.loadRecords()
	for i, spec := range file {
		incarnation := fileIncarnation
		if rec, ok := recorded[spec.Name]; ok {
			delete(recorded, spec.Name)
			incarnation = e.reconcile(spec, rec)
		}
		if _, err := e.putJob(spec, incarnation, false); err != nil {
			return &FileJobError{Index: i, Name: spec.Name, Err: err}
		}
	}
	for _, rec := range sortedRecords(recorded) {
		spec, err := DecodeSpec(rec.Spec)
		if err == nil {
			_, err = e.putJob(spec, rec.Incarnation, false)
		}
		if err != nil {
			e.log.Error("job recorded at run time not restored (its record is kept)", "job", rec.Name, "err", err)
			continue
		}
		e.log.Info("job restored", "job", rec.Name, "incarnation", rec.Incarnation)
		// Its data may have been restored by hand, or be of a version
		// that kept no copy.
		e.copyRecord(rec, spec.FT.Mode)
	}
	return nil
}

// loadRecords reads Config.Jobs. A damaged record is rebuilt from its
// copy beside the job's data, or reported and skipped.
func (e *Engine) loadRecords() map[string]ft.JobRecord {
	out := map[string]ft.JobRecord{}
	if e.cfg.Jobs == nil {
		return out
	}
	recs, damaged, err := e.cfg.Jobs.Load()
	if err != nil {
		e.log.Error("reading the jobs recorded at run time: none restored", "err", err)
	}
	for _, r := range recs {
		out[r.Name] = r
	}
	for _, d := range damaged {
		var bad *ft.JobRecordError
		if !errors.As(d, &bad) {
			e.log.Error("damaged job record ignored", "err", d)
			continue
		}
		rec, err := e.rebuildRecord(bad.Name)
		if err != nil {
			e.log.Error("damaged job record ignored (left in place): it cannot be rebuilt from the copy beside the job's data",
				"job", bad.Name, "err", d, "copy", err)
			continue
		}
		e.log.Warn("damaged job record rebuilt from the copy beside the job's data", "job", bad.Name, "err", d)
		out[rec.Name] = rec
	}
	return out
}

// reconcile decides the incarnation of a config file job that also has a
// record: the record's when the specs agree (the job created at run time
// goes on, with its data), else the file's, with a warning, and the
// record is removed.
func (e *Engine) reconcile(fileSpec Spec, rec ft.JobRecord) string {
	a, b := fileSpec, Spec{}
	recSpec, err := DecodeSpec(rec.Spec)
	if err == nil {
		b = recSpec
		err = errors.Join(a.validate(e.cfg.Partitions, e.cfg.QueueSize), b.validate(e.cfg.Partitions, e.cfg.QueueSize))
	}
	if err == nil && (sameSpec(a, b) || onlyPartitionsDiffer(b, a)) {
		// Only the partitions differ: the job was rescaled at run time,
		// and goes on with its data (whose layout decides its partitions).
		return rec.Incarnation
	}
	e.log.Warn("the config file and a job recorded at run time differ: the file wins, the recorded job and its data are dropped",
		"job", fileSpec.Name, "file_spec", specJSON(fileSpec), "recorded_spec", string(rec.Spec))
	if err := e.cfg.Jobs.Delete(rec.Name); err != nil {
		e.log.Error("removing the dropped job's record", "job", rec.Name, "err", err)
	}
	return fileIncarnation
}

func specJSON(s Spec) string {
	b, err := json.Marshal(s)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

func sortedRecords(m map[string]ft.JobRecord) []ft.JobRecord {
	out := make([]ft.JobRecord, 0, len(m))
	for _, r := range m {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b ft.JobRecord) int { return strings.Compare(a.Name, b.Name) })
	return out
}
