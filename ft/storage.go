package ft

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Storage is where fault tolerance keeps the state of jobs: per job, the
// state backups of its units, the item log and sequence mark of each
// partition, a few metadata files (CleanMarker, RecoveryHistory), and the
// incarnation that owns the data. Dir implements it over a local
// directory; see the package doc for what another implementation must
// provide.
type Storage interface {
	// Job returns the storage of the named job. It does no I/O; an invalid
	// name is an error wrapping ErrInvalidKey.
	Job(name string) (JobStorage, error)
}

// JobStorage is one job's share of a Storage. The runtime never has two
// users of one job's storage at a time (a name is created, run and
// deleted in turn), but the partitions and the backup writer of the job
// use its logs, marks and backups concurrently.
type JobStorage interface {
	// Claim makes the job's data the given incarnation's before anything
	// of it is opened: data of another incarnation (a job deleted, or
	// whose deletion a crash interrupted) is removed first, and so is data
	// that carries no incarnation (written before incarnations existed)
	// unless keepUnmarked. It reports the incarnation of the data it found
	// ("" when there was none or it was unmarked) and whether it removed it.
	Claim(incarnation string, keepUnmarked bool) (previous string, removed bool, err error)
	// Backups is where the state backups of one unit go: unit is a
	// partition, or GlobalPartition for a unit of all of them.
	Backups(unit int) UnitBackups
	// OpenItemLog opens (creating it if needed) the item log of a
	// partition.
	OpenItemLog(partition int, cfg ItemLogConfig) (PartitionLog, error)
	// OpenSeqMark opens (creating it at 0 if needed) the sequence mark of
	// a partition.
	OpenSeqMark(partition int) (Mark, error)
	// ReadMeta reads the metadata file name (CleanMarker,
	// RecoveryHistory): fs.ErrNotExist when missing, a *CorruptError when
	// damaged; legacy reports a file of the earlier, unchecksummed format.
	ReadMeta(name string) (data []byte, legacy bool, err error)
	// WriteMeta replaces the metadata file name atomically; durable asks
	// for it to survive a power cut before it returns.
	WriteMeta(name string, data []byte, durable bool) error
	// RemoveMeta deletes the metadata file name; a missing one is no error.
	RemoveMeta(name string) error
	// Remove deletes everything of the job. Its item logs and marks must
	// be closed first.
	Remove() error
}

// UnitBackups are the state backups of one unit of a job: Store's calls
// for one key.
type UnitBackups interface {
	// Put is Store.Put: no reference to data is kept once it returns.
	Put(meta BackupMeta, data []byte) (BackupMeta, error)
	Chain() (chain []Backup, skipped []error, err error)
	Usage() (count int, bytes int64)
}

// PartitionLog is the item log of one partition, as ItemLog documents it:
// frames appended in increasing sequence order, handed to the system by
// Flush, made durable by Commit, replayed whole or not at all, and dropped
// below a sequence number once the state holds it.
type PartitionLog interface {
	AppendFrame(f *Frame) error
	Flush() error
	Commit() error
	ReplayFrames(after uint64, fn func(f *StoredFrame) error) (n int, err error)
	TruncateBefore(seq uint64) error
	LastSeq() uint64
	Bytes() int64
	Close() error
}

// Mark is the high-water mark of the sequence numbers a partition handed
// out, as SeqMark documents it: Read returns a *CorruptError for a
// damaged mark.
type Mark interface {
	Read() (uint64, error)
	Write(seq uint64) error
	Close() error
}

var (
	_ Storage      = (*Dir)(nil)
	_ PartitionLog = (*ItemLog)(nil)
	_ Mark         = (*SeqMark)(nil)
)

// IncarnationFile is the name of the file in a job's directory that says
// which incarnation of the job the data belongs to (plain text, one line).
const IncarnationFile = "incarnation"

// jobRecordsDir is where OpenDir's JobRecords keeps the job records. A
// job name cannot start with a dot, so no job's directory can be it.
const jobRecordsDir = ".jobs"

// Dir is the Storage over a local directory, root:
//
//	<root>/.lock                       LockDir's lock (OpenDir)
//	<root>/.jobs/<job>.job             job records (JobRecords)
//	<root>/<job>/incarnation           the owner of the job's data
//	<root>/<job>/clean                 CleanMarker
//	<root>/<job>/recoveries.json       RecoveryHistory
//	<root>/<job>/<partition>/items-*.log  item log segments
//	<root>/<job>/<partition>/seq       sequence mark
//	<root>/<job>/<unit>/chain-*.bin    backups (DirStore; unit "global" or a partition)
//
// The backups go to the Store given to NewDir, which need not be a
// DirStore on root.
type Dir struct {
	root   string
	store  Store
	unlock func() error
}

// NewDir returns the Storage over root with backups in store. It takes no
// lock: see OpenDir.
func NewDir(root string, backups Store) *Dir {
	return &Dir{root: root, store: backups}
}

// OpenDir creates root if needed, locks it for this process (LockDir: a
// second process fails with a *LockedError) and opens a DirStore on it
// for the backups. Close releases the lock.
func OpenDir(root string) (*Dir, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("ft: %w", err)
	}
	unlock, err := LockDir(root)
	if err != nil {
		return nil, err
	}
	store, err := NewDirStore(root)
	if err != nil {
		_ = unlock()
		return nil, err
	}
	return &Dir{root: root, store: store, unlock: unlock}, nil
}

// Root is the directory.
func (d *Dir) Root() string { return d.root }

// JobRecords opens the records of the jobs created at run time, in
// <root>/.jobs.
func (d *Dir) JobRecords() (*JobDir, error) {
	return OpenJobDir(filepath.Join(d.root, jobRecordsDir))
}

// Close releases OpenDir's lock; nothing for a NewDir.
func (d *Dir) Close() error {
	if d.unlock == nil {
		return nil
	}
	unlock := d.unlock
	d.unlock = nil
	return unlock()
}

// Job returns the storage of job under root.
func (d *Dir) Job(name string) (JobStorage, error) {
	if err := validJob(name); err != nil {
		return nil, err
	}
	return &jobDir{d: d, name: name, dir: filepath.Join(d.root, name)}, nil
}

// jobDir is one job's directory, <root>/<job>.
type jobDir struct {
	d    *Dir
	name string
	dir  string
}

func (j *jobDir) key(partition int) Key { return Key{Job: j.name, Partition: partition} }

func (j *jobDir) Claim(incarnation string, keepUnmarked bool) (previous string, removed bool, err error) {
	marker := filepath.Join(j.dir, IncarnationFile)
	data, err := os.ReadFile(marker)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", false, fmt.Errorf("ft: reading the incarnation of the data of %s: %w", j.name, err)
	}
	previous, unmarked := string(bytes.TrimSpace(data)), err != nil
	switch {
	case !unmarked && previous == incarnation:
		return previous, false, nil
	case unmarked && (keepUnmarked || !exists(j.dir)):
	default:
		if err := j.Remove(); err != nil {
			return previous, false, err
		}
		removed = true
	}
	if err := os.MkdirAll(j.dir, 0o755); err != nil {
		return previous, removed, fmt.Errorf("ft: %w", err)
	}
	if err := WriteFileAtomic(marker, []byte(incarnation+"\n")); err != nil {
		return previous, removed, fmt.Errorf("ft: writing the incarnation of %s: %w", j.name, err)
	}
	return previous, removed, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func (j *jobDir) Backups(unit int) UnitBackups {
	return unitBackups{store: j.d.store, key: j.key(unit)}
}

func (j *jobDir) OpenItemLog(partition int, cfg ItemLogConfig) (PartitionLog, error) {
	l, err := OpenItemLogConfig(j.d.root, j.key(partition), cfg)
	if err != nil {
		return nil, err // not a typed nil in an interface
	}
	return l, nil
}

func (j *jobDir) OpenSeqMark(partition int) (Mark, error) {
	m, err := OpenSeqMark(j.d.root, j.key(partition))
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (j *jobDir) ReadMeta(name string) ([]byte, bool, error) {
	return ReadJobFile(j.d.root, j.name, name)
}

func (j *jobDir) WriteMeta(name string, data []byte, durable bool) error {
	return WriteJobFile(j.d.root, j.name, name, data, durable)
}

func (j *jobDir) RemoveMeta(name string) error {
	return RemoveJobFile(j.d.root, j.name, name)
}

// Remove deletes the job's backups from the store, then its directory.
func (j *jobDir) Remove() error {
	if err := j.d.store.RemoveJob(j.name); err != nil {
		return fmt.Errorf("ft: removing the backups of %s: %w", j.name, err)
	}
	if err := os.RemoveAll(j.dir); err != nil {
		return fmt.Errorf("ft: removing the data of %s: %w", j.name, err)
	}
	return nil
}

// unitBackups is a Store's calls for one key.
type unitBackups struct {
	store Store
	key   Key
}

func (u unitBackups) Put(meta BackupMeta, data []byte) (BackupMeta, error) {
	return u.store.Put(u.key, meta, data)
}

func (u unitBackups) Chain() ([]Backup, []error, error) { return u.store.Chain(u.key) }

func (u unitBackups) Usage() (int, int64) { return u.store.Usage(u.key) }
