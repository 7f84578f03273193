package ft

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// JobRecord is a job created at run time, kept so that it survives a
// restart.
type JobRecord struct {
	Name string `json:"name"`
	// Incarnation tells apart the jobs that had one name one after
	// another: a job recovers only the data of its own incarnation.
	Incarnation string `json:"incarnation"`
	// Spec is the job's spec as JSON (package runtime's Spec).
	Spec json.RawMessage `json:"spec"`
}

// JobDir keeps JobRecords in a directory, one file per job,
// <dir>/<name>.job: a header line "mlstream-job 1 <CRC-32C of the body,
// 8 hex digits> <body bytes>" and the record as JSON. A file is written
// whole or not at all (a temporary file, fsynced and renamed, and the
// directory fsynced); a file that fails its checksum or does not parse is
// reported by Load and skipped. Safe for concurrent use.
type JobDir struct {
	dir string
	mu  sync.Mutex // serialises writers, so two renames of a name never cross
}

const (
	jobSuffix     = ".job"
	jobTempPrefix = ".tmp-" // never a job name: those start with a letter or digit
	jobHeader     = "mlstream-job 1"
	// maxJobRecord bounds what Load reads of one file: a spec is a few
	// hundred bytes.
	maxJobRecord = 1 << 20
)

var jobCRC = crc32.MakeTable(crc32.Castagnoli)

// ErrBadJobRecord marks a damaged record file in Load's damaged list.
var ErrBadJobRecord = errors.New("ft: damaged job record")

// JobRecordError is a damaged record file of Load's damaged list: the
// job Name's, at Path. It wraps ErrBadJobRecord.
type JobRecordError struct {
	Name, Path, Reason string
}

func (e *JobRecordError) Error() string {
	return fmt.Sprintf("%v: %s: %s", ErrBadJobRecord, e.Path, e.Reason)
}

// Unwrap returns ErrBadJobRecord.
func (e *JobRecordError) Unwrap() error { return ErrBadJobRecord }

// OpenJobDir opens (creating it if needed) a JobDir and deletes the
// temporary files of writes a crash interrupted.
func OpenJobDir(dir string) (*JobDir, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("ft: job records: %w", err)
	}
	temps, err := filepath.Glob(filepath.Join(dir, jobTempPrefix+"*"))
	if err != nil {
		return nil, fmt.Errorf("ft: job records: %w", err)
	}
	for _, t := range temps {
		if err := os.Remove(t); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("ft: job records: removing stray temporary file: %w", err)
		}
	}
	return &JobDir{dir: dir}, nil
}

// Dir is the directory of the records.
func (d *JobDir) Dir() string { return d.dir }

func (d *JobDir) path(name string) (string, error) {
	if err := validJob(name); err != nil {
		return "", err
	}
	return filepath.Join(d.dir, name+jobSuffix), nil
}

// Save records rec durably, replacing the record of the same name.
func (d *JobDir) Save(rec JobRecord) error {
	path, err := d.path(rec.Name)
	if err != nil {
		return err
	}
	body, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("ft: job record %s: %w", rec.Name, err)
	}
	data := fmt.Appendf(nil, "%s %08x %d\n", jobHeader, crc32.Checksum(body, jobCRC), len(body))
	data = append(data, body...)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := WriteFileAtomic(path, data); err != nil {
		return fmt.Errorf("ft: job record %s: %w", rec.Name, err)
	}
	return nil
}

// Delete removes the record of name, durably. No record is no error.
func (d *JobDir) Delete(name string) error {
	path, err := d.path(name)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("ft: job record %s: %w", name, err)
	}
	if err := syncDir(d.dir); err != nil {
		return fmt.Errorf("ft: job record %s: %w", name, err)
	}
	return nil
}

// Load reads every record, sorted by name. A damaged file is returned in
// damaged (a *JobRecordError that names the job, the file and what is
// wrong) and not in recs; err is for a directory that cannot be read.
func (d *JobDir) Load() (recs []JobRecord, damaged []error, err error) {
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		return nil, nil, fmt.Errorf("ft: job records: %w", err)
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), jobSuffix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		rec, err := readJobRecord(filepath.Join(d.dir, e.Name()), name)
		if err != nil {
			damaged = append(damaged, err)
			continue
		}
		recs = append(recs, rec)
	}
	slices.SortFunc(recs, func(a, b JobRecord) int { return strings.Compare(a.Name, b.Name) })
	return recs, damaged, nil
}

// readJobRecord reads and checks one record file, whose name says whose
// record it must be.
func readJobRecord(path, name string) (JobRecord, error) {
	var rec JobRecord
	bad := func(format string, a ...any) error {
		return &JobRecordError{Name: name, Path: path, Reason: fmt.Sprintf(format, a...)}
	}
	f, err := os.Open(path)
	if err != nil {
		return rec, bad("%v", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxJobRecord+1))
	if err != nil {
		return rec, bad("%v", err)
	}
	if len(data) > maxJobRecord {
		return rec, bad("larger than %d bytes", maxJobRecord)
	}
	head, body, ok := bytes.Cut(data, []byte("\n"))
	if !ok {
		return rec, bad("no header line")
	}
	fields := strings.Fields(string(head))
	if len(fields) != 4 || fields[0]+" "+fields[1] != jobHeader {
		return rec, bad("header %q is not %q <crc> <length>", head, jobHeader)
	}
	crc, err1 := strconv.ParseUint(fields[2], 16, 32)
	size, err2 := strconv.Atoi(fields[3])
	switch {
	case err1 != nil || err2 != nil:
		return rec, bad("header %q does not parse", head)
	case size != len(body):
		return rec, bad("body is %d bytes, the header says %d (torn write?)", len(body), size)
	case uint32(crc) != crc32.Checksum(body, jobCRC):
		return rec, bad("checksum mismatch")
	}
	if err := json.Unmarshal(body, &rec); err != nil {
		return rec, bad("%v", err)
	}
	if rec.Name != name {
		return rec, bad("holds job %q, not %q", rec.Name, name)
	}
	return rec, nil
}

// WriteFileAtomic replaces path with data so that after a crash it holds
// either the old or the new content: a temporary file in the same
// directory, fsynced, renamed over path, and the directory fsynced.
func WriteFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, jobTempPrefix+"*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}
