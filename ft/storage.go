package ft

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"
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
	// of it is opened. It never deletes data: data of another incarnation
	// (a job deleted, or whose deletion a crash interrupted), and data
	// whose owner nothing tells (its incarnation file missing or damaged,
	// and no intact backup naming the incarnation; data without an
	// incarnation file and whose backups name none is kept when
	// keepUnmarked), is moved into a quarantine folder, which Claimed
	// names. A damaged or missing
	// incarnation file beside intact backups of the incarnation is
	// rebuilt from them.
	Claim(incarnation string, keepUnmarked bool) (Claimed, error)
	// Quarantine copies the job's files at paths (damaged ones, found by
	// a recovery; a bare name is a metadata file's) into folder, a
	// quarantine folder of the job ("": a new one), and returns it; the
	// files stay where they are. Paths outside the job's data are passed
	// over.
	Quarantine(folder string, paths []string) (string, error)
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
	// Committed is the last seq a Commit that returned made durable
	// (before the log was opened too); known is false when that cannot be
	// told.
	Committed() (seq uint64, known bool)
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
// which incarnation of the job the data belongs to: plain text, one line
// (as earlier versions read it). Text that is not an incarnation is
// damage; every backup names its incarnation too, which Claim checks the
// file against.
const IncarnationFile = "incarnation"

// QuarantineDir, under the root, holds what the service will neither use
// nor delete: <root>/.quarantine/<job>-<time>/ is a job's data moved
// aside by Claim, or copies of its damaged files (Quarantine), in the
// layout of <root>/<job>/. A job name cannot start with a dot, so no
// job's directory can be it.
const QuarantineDir = ".quarantine"

// Claimed is what JobStorage.Claim found of a job's data and did with it.
type Claimed struct {
	// Previous is the incarnation the data carried: "" when there was
	// none, or its incarnation file was missing or damaged.
	Previous string
	// Repaired says what was rebuilt from the intact files beside it.
	Repaired string
	// Quarantined is the folder the data found was moved to, Why why;
	// "" when it was kept (or there was none).
	Quarantined, Why string
}

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

func (j *jobDir) Claim(incarnation string, keepUnmarked bool) (c Claimed, err error) {
	owner, _, ferr := j.readIncarnation()
	if ferr != nil && !errors.Is(ferr, fs.ErrNotExist) && !errors.Is(ferr, ErrCorrupt) {
		return c, fmt.Errorf("ft: reading the incarnation of the data of %s: %w", j.name, ferr)
	}
	c.Previous = owner
	switch {
	case ferr == nil && owner == incarnation:
		return c, nil
	case !j.holdsData():
		// Nothing anyone could lose (no directory, or empty files only):
		// cleared, as the job starts afresh.
		if exists(j.dir) {
			if err := j.Remove(); err != nil {
				return c, err
			}
		}
	case ferr == nil && j.backupOwners()[incarnation]:
		// The file is plain text: an overwrite may read as another's.
		c.Repaired = fmt.Sprintf("the incarnation file names %s, the job's intact backups %s: rewritten", owner, incarnation)
	case ferr == nil:
		c.Why = fmt.Sprintf("the data is incarnation %s's, the job is incarnation %s", owner, incarnation)
	default:
		c.Repaired, c.Why = j.judgeUnowned(incarnation, keepUnmarked, ferr)
	}
	if c.Why != "" {
		if c.Quarantined, err = j.moveAside(); err != nil {
			return c, fmt.Errorf("ft: moving the data of %s aside (%s): %w", j.name, c.Why, err)
		}
	}
	// Plain text, as earlier versions read it: one that finds another
	// format would take the data for another incarnation's and remove it.
	if err := os.MkdirAll(j.dir, 0o755); err != nil {
		return c, fmt.Errorf("ft: %w", err)
	}
	if err := WriteFileAtomic(filepath.Join(j.dir, IncarnationFile), []byte(incarnation+"\n")); err != nil {
		return c, fmt.Errorf("ft: writing the incarnation of %s: %w", j.name, err)
	}
	return c, nil
}

// readIncarnation reads the incarnation file: fs.ErrNotExist when there
// is none, a *CorruptError when it is damaged or holds no incarnation (a
// checksummed file is read too).
func (j *jobDir) readIncarnation() (owner string, legacy bool, err error) {
	data, legacy, err := ReadJobFile(j.d.root, j.name, IncarnationFile)
	if err != nil {
		return "", false, err
	}
	owner = string(bytes.TrimSpace(data))
	if owner == "" || len(owner) > maxJobBytes || !plainJSON(owner) {
		return "", false, &CorruptError{Path: filepath.Join(j.dir, IncarnationFile), Reason: fmt.Sprintf("%.40q is not an incarnation", data)}
	}
	return owner, legacy, nil
}

// judgeUnowned decides about data whose incarnation file is missing or
// damaged (ferr): it is the incarnation's when an intact backup names it,
// or, with keepUnmarked, when the file is missing and no backup names
// another (data of a version without incarnations); else it is moved
// aside, for why.
func (j *jobDir) judgeUnowned(incarnation string, keepUnmarked bool, ferr error) (repaired, why string) {
	what := "the incarnation file is missing"
	if errors.Is(ferr, ErrCorrupt) {
		what = ferr.Error()
	}
	owners := j.backupOwners()
	switch {
	case owners[incarnation]:
		return what + ": rebuilt from the job's intact backups, which name incarnation " + incarnation, ""
	case keepUnmarked && len(owners) == 0 && errors.Is(ferr, fs.ErrNotExist):
		return "", "" // data of a version without incarnations: kept, as it always was
	}
	return "", fmt.Sprintf("%s, and no intact backup names incarnation %s", what, incarnation)
}

// backupOwners returns the incarnations the newest intact backups of the
// job's units name (backups of earlier versions name none).
func (j *jobDir) backupOwners() map[string]bool {
	owners := map[string]bool{}
	entries, _ := os.ReadDir(j.dir)
	for _, e := range entries {
		unit, ok := parseUnitDir(e.Name())
		if !ok || !e.IsDir() {
			continue
		}
		chain, _, err := j.d.store.Chain(j.key(unit))
		if err == nil && len(chain) > 0 && chain[0].Meta.Incarnation != "" {
			owners[chain[0].Meta.Incarnation] = true
		}
	}
	return owners
}

// parseUnitDir is the unit of a directory of a job's: a partition, or
// "global".
func parseUnitDir(name string) (int, bool) {
	if name == "global" {
		return GlobalPartition, true
	}
	p, err := strconv.Atoi(name)
	return p, err == nil && p >= 0 && strconv.Itoa(p) == name
}

// holdsData says whether the job's directory has a file that is not
// empty, besides its incarnation file.
func (j *jobDir) holdsData() bool {
	found := false
	_ = filepath.WalkDir(j.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || found || d.IsDir() || path == filepath.Join(j.dir, IncarnationFile) {
			return nil
		}
		if info, err := d.Info(); err == nil && info.Size() > 0 {
			found = true
			return filepath.SkipAll
		}
		return nil
	})
	return found
}

// quarantineFolder is a new folder's path for the job in the quarantine:
// <root>/.quarantine/<job>-<UTC time>.
func (j *jobDir) quarantineFolder() string {
	return filepath.Join(j.d.root, QuarantineDir, j.name+"-"+time.Now().UTC().Format("20060102T150405.000000000Z"))
}

// jobMover is a Store that can move a job's backups (DirStore).
type jobMover interface {
	MoveJob(job, dest string) error
}

// moveAside moves the job's directory, backups included, into a new
// quarantine folder and returns it.
func (j *jobDir) moveAside() (string, error) {
	dest := j.quarantineFolder()
	ds, ok := j.d.store.(*DirStore)
	if !ok || filepath.Clean(ds.Dir()) != filepath.Clean(j.d.root) {
		return "", errors.New("the backups are kept outside the data directory, where they cannot be moved aside; move the job's data away by hand")
	}
	var m jobMover = ds
	if err := m.MoveJob(j.name, dest); err != nil {
		return "", err
	}
	return dest, nil
}

func (j *jobDir) Quarantine(folder string, paths []string) (string, error) {
	dest := folder
	if dest == "" {
		dest = j.quarantineFolder()
	}
	var errs []error
	for _, p := range paths {
		if filepath.Base(p) == p {
			p = filepath.Join(j.dir, p) // a metadata file's name
		}
		rel, err := filepath.Rel(j.dir, p)
		if err != nil || rel == "." || !filepath.IsLocal(rel) {
			continue
		}
		errs = append(errs, copyFile(p, filepath.Join(dest, rel)))
	}
	if !exists(dest) {
		return "", errors.Join(errs...)
	}
	if err := syncDir(filepath.Dir(dest)); err != nil {
		errs = append(errs, err)
	}
	return dest, errors.Join(errs...)
}

// copyFile copies src to dst (creating its directory), durably.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(filepath.Dir(dst))
	}
	return err
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Backups stamps every backup with the incarnation that owns the data,
// as the incarnation file says when they are opened (after Claim).
func (j *jobDir) Backups(unit int) UnitBackups {
	owner, _, _ := j.readIncarnation()
	return unitBackups{store: j.d.store, key: j.key(unit), incarnation: owner}
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
	store       Store
	key         Key
	incarnation string
}

func (u unitBackups) Put(meta BackupMeta, data []byte) (BackupMeta, error) {
	meta.Incarnation = u.incarnation
	return u.store.Put(u.key, meta, data)
}

func (u unitBackups) Chain() ([]Backup, []error, error) { return u.store.Chain(u.key) }

func (u unitBackups) Usage() (int, int64) { return u.store.Usage(u.key) }
