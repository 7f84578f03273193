package ft

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// BackupMeta is stored with every backup.
type BackupMeta struct {
	// Index is the position in this key's backups: 1, 2, 3... Assigned by
	// Put; the value passed to Put is ignored.
	Index uint64 `json:"index"`
	// Full is true for a full snapshot, false for a delta on top of the
	// previous backup.
	Full bool `json:"full"`
	// Failures is the number of recoveries so far, stored so a restart never
	// loosens the thresholds.
	Failures int `json:"failures"`
	// LastSeqs holds, per input partition, the sequence number of the last
	// event the state contains.
	LastSeqs []uint64 `json:"last_seqs"`
	// Divergence is the state divergence when the backup was taken. It must
	// be finite: JSON has no NaN or infinity, so Put refuses them.
	Divergence float64 `json:"divergence"`
	// Created is set by Put when zero.
	Created time.Time `json:"created"`
	// Durable asks Put to fsync the file and its directory. Without it the
	// backup survives a crash of the process (the operating system holds
	// it) but not of the machine; the checksum catches a file the machine
	// lost, and the previous chain is used. Mode approx does without, as
	// its item log does: the fsync would cost more than the whole backup.
	Durable bool `json:"durable"`
}

// Backup is one stored backup.
type Backup struct {
	Meta BackupMeta
	Data []byte
}

// Store keeps backups. Implementations are safe for concurrent use by
// different keys; calls for one key come from one goroutine.
type Store interface {
	// Put stores one backup durably and atomically, assigns meta.Index and
	// returns the stored meta. After a full backup the store may delete older
	// backups of the key, but keeps the previous full chain too (the fallback
	// when the newest is damaged).
	Put(key Key, meta BackupMeta, data []byte) (BackupMeta, error)
	// Chain returns the newest recoverable chain of key: the newest intact
	// full backup followed by its intact deltas in order, stopping before the
	// first missing, torn or corrupt one. Damaged files are returned in
	// skipped (one error each, wrapping ErrCorrupt, naming the file and what
	// is wrong) and never in the chain; if the newest full is damaged, the
	// previous chain is used. No backups: empty chain, nil error.
	Chain(key Key) (chain []Backup, skipped []error, err error)
	// Usage reports the backups of key currently stored: count and bytes.
	Usage(key Key) (count int, bytes int64)
	// RemoveJob deletes everything of a job.
	RemoveJob(job string) error
}

var _ Store = (*DirStore)(nil)

// ErrNoFullBackup is returned by Put for a delta when the key has no full
// backup to apply it to.
var ErrNoFullBackup = errors.New("ft: delta backup without a full backup before it")

// DirStore is the default Store: a local directory with one file per
// backup, <dir>/<job>/<partition or "global">/backup-<index>-<full|delta>.bin.
// Every Put writes a temporary file in the same directory, fsyncs it,
// renames it into place and fsyncs the directory, so a backup is either
// wholly there or absent; a CRC-32C over each file catches the rest.
//
// Retention: after a full Put, the store keeps that full backup, the full
// one before it and the deltas between them, and deletes everything older.
// The item log (OpenItemLog) may share the directory; the two never touch
// each other's files.
//
// DirStore is safe for concurrent use. It holds no open files, so it has no
// Close.
type DirStore struct {
	dir string
	now func() time.Time // clock for BackupMeta.Created; a field so tests can fix it

	mu   sync.Mutex // guards keys (the map only; each keyState has its own lock)
	keys map[Key]*keyState
}

// keyState caches the listing of one key's directory, so Put and Usage do
// not scan it. Chain rescans the disk and refreshes it.
type keyState struct {
	mu     sync.Mutex // held for a whole Put, Chain or Usage of the key
	loaded bool       // files and dir are valid
	dir    string     // the key's directory, "" until it exists
	files  []backupFile
}

// backupFile is one backup as known from its name.
type backupFile struct {
	index uint64
	full  bool
	size  int64
}

const (
	backupPrefix = "backup-"
	tempPrefix   = ".backup-"
	tempSuffix   = ".tmp"
)

func backupName(index uint64, full bool) string {
	kind := "delta"
	if full {
		kind = "full"
	}
	return fmt.Sprintf("%s%020d-%s.bin", backupPrefix, index, kind)
}

// parseBackupName is the inverse of backupName; ok is false for any other name.
func parseBackupName(name string) (index uint64, full, ok bool) {
	rest, found := strings.CutPrefix(name, backupPrefix)
	if !found || len(rest) < 21 || rest[20] != '-' {
		return 0, false, false
	}
	index, err := strconv.ParseUint(rest[:20], 10, 64)
	if err != nil || index == 0 {
		return 0, false, false
	}
	switch rest[21:] {
	case "full.bin":
		return index, true, true
	case "delta.bin":
		return index, false, true
	}
	return 0, false, false
}

// NewDirStore opens (creating it if needed) a store in dir and deletes the
// temporary files that interrupted Puts left behind.
func NewDirStore(dir string) (*DirStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("ft: store: %w", err)
	}
	// <dir>/<job>/<part>/.backup-*.tmp
	temps, err := filepath.Glob(filepath.Join(dir, "*", "*", tempPrefix+"*"+tempSuffix))
	if err != nil {
		return nil, fmt.Errorf("ft: store: %w", err)
	}
	for _, t := range temps {
		if err := os.Remove(t); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("ft: store: removing stray temporary file: %w", err)
		}
	}
	return &DirStore{dir: dir, now: time.Now, keys: make(map[Key]*keyState)}, nil
}

// Dir returns the store's root directory.
func (s *DirStore) Dir() string { return s.dir }

func (s *DirStore) state(key Key) *keyState {
	s.mu.Lock()
	defer s.mu.Unlock()
	ks := s.keys[key]
	if ks == nil {
		ks = &keyState{}
		s.keys[key] = ks
	}
	return ks
}

// load lists the key's directory into ks. Called with ks.mu held.
func (s *DirStore) load(key Key, ks *keyState) error {
	dir := key.dir(s.dir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		ks.loaded, ks.dir, ks.files = true, "", nil
		return nil
	}
	if err != nil {
		return err
	}
	files := ks.files[:0]
	for _, e := range entries {
		index, full, ok := parseBackupName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return err
		}
		files = append(files, backupFile{index: index, full: full, size: info.Size()})
	}
	// ReadDir sorts by name and names sort by index, but do not depend on it.
	slices.SortFunc(files, func(a, b backupFile) int { return cmp.Compare(a.index, b.index) })
	ks.loaded, ks.dir, ks.files = true, dir, files
	return nil
}

// Put stores one backup. See Store.Put. A delta is refused with
// ErrNoFullBackup when the key has no full backup at all.
func (s *DirStore) Put(key Key, meta BackupMeta, data []byte) (BackupMeta, error) {
	if err := key.validate(); err != nil {
		return BackupMeta{}, err
	}
	ks := s.state(key)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if !ks.loaded {
		if err := s.load(key, ks); err != nil {
			return BackupMeta{}, fmt.Errorf("ft: put %s: %w", key, err)
		}
	}
	if !meta.Full && !slices.ContainsFunc(ks.files, func(f backupFile) bool { return f.full }) {
		return BackupMeta{}, fmt.Errorf("ft: put %s: %w", key, ErrNoFullBackup)
	}
	if ks.dir == "" {
		dir, err := makeKeyDir(s.dir, key)
		if err != nil {
			return BackupMeta{}, fmt.Errorf("ft: put %s: %w", key, err)
		}
		ks.dir = dir
	}
	meta.Index = 1
	if n := len(ks.files); n > 0 {
		meta.Index = ks.files[n-1].index + 1
	}
	if meta.Created.IsZero() {
		meta.Created = s.now().UTC()
	}
	size, err := writeBackup(ks.dir, backupName(meta.Index, meta.Full), meta, data, meta.Durable)
	if err != nil {
		// The file may be in place all the same (a failed directory fsync):
		// list the directory again so the next Put never reuses its index.
		ks.loaded = false
		return BackupMeta{}, fmt.Errorf("ft: put %s: %w", key, err)
	}
	ks.files = append(ks.files, backupFile{index: meta.Index, full: meta.Full, size: size})
	if meta.Full {
		ks.files = s.retain(ks.dir, ks.files)
	}
	return meta, nil
}

// writeBackup writes one backup file atomically and durably: temporary
// file, fsync, rename, fsync of the directory.
func writeBackup(dir, name string, meta BackupMeta, data []byte, durable bool) (int64, error) {
	head, tail, err := backupParts(meta, data)
	if err != nil {
		return 0, err
	}
	f, err := os.CreateTemp(dir, tempPrefix+"*"+tempSuffix)
	if err != nil {
		return 0, err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	for _, b := range [][]byte{head, data, tail} {
		if _, err := f.Write(b); err != nil {
			return 0, err
		}
	}
	if durable {
		if err := f.Sync(); err != nil {
			return 0, err
		}
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return 0, err
	}
	ok = true
	if durable {
		if err := syncDir(dir); err != nil {
			return 0, err
		}
	}
	return int64(len(head) + len(data) + len(tail)), nil
}

// retain deletes every backup older than the second newest full one and
// returns what is left. A file that cannot be deleted stays listed and is
// tried again after the next full Put.
func (s *DirStore) retain(dir string, files []backupFile) []backupFile {
	fulls := 0
	cut := -1 // files[:cut] go
	for i := len(files) - 1; i >= 0; i-- {
		if files[i].full {
			fulls++
			if fulls == 2 {
				cut = i
				break
			}
		}
	}
	if cut <= 0 {
		return files
	}
	kept := files[:0]
	for i, f := range files {
		if i < cut {
			err := os.Remove(filepath.Join(dir, backupName(f.index, f.full)))
			if err == nil || errors.Is(err, fs.ErrNotExist) {
				continue
			}
		}
		kept = append(kept, f)
	}
	return kept
}

// Chain returns the newest recoverable chain of key. See Store.Chain. It
// reads the directory afresh, so it also sees files another process wrote.
func (s *DirStore) Chain(key Key) (chain []Backup, skipped []error, err error) {
	if err := key.validate(); err != nil {
		return nil, nil, err
	}
	ks := s.state(key)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if err := s.load(key, ks); err != nil {
		return nil, nil, fmt.Errorf("ft: chain %s: %w", key, err)
	}
	files := ks.files
	// Try full backups newest first; a damaged one falls back to the one before.
	for i := len(files) - 1; i >= 0; i-- {
		if !files[i].full {
			continue
		}
		full, err := readBackup(ks.dir, files[i])
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				return nil, skipped, fmt.Errorf("ft: chain %s: %w", key, err)
			}
			skipped = append(skipped, err)
			continue
		}
		chain = append(chain, full)
		// Its deltas: contiguous indices up to the next full backup. Deltas
		// after a newer (damaged) full belong to that one and must not be
		// applied to this state.
		prev := files[i].index
		for _, f := range files[i+1:] {
			if f.full {
				break
			}
			if f.index != prev+1 {
				skipped = append(skipped, &CorruptError{
					Path:   filepath.Join(ks.dir, backupName(prev+1, false)),
					Reason: fmt.Sprintf("missing; deltas from %d on are not applied", f.index),
				})
				break
			}
			d, err := readBackup(ks.dir, f)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					return nil, skipped, fmt.Errorf("ft: chain %s: %w", key, err)
				}
				skipped = append(skipped, err)
				break
			}
			chain = append(chain, d)
			prev = f.index
		}
		return chain, skipped, nil
	}
	return nil, skipped, nil
}

// readBackup reads and checks one backup file. Damage is a *CorruptError;
// any other error is an I/O error.
func readBackup(dir string, f backupFile) (Backup, error) {
	path := filepath.Join(dir, backupName(f.index, f.full))
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Backup{}, &CorruptError{Path: path, Reason: "missing"}
		}
		return Backup{}, err
	}
	meta, data, off, reason := decodeBackup(b)
	if reason == "" && (meta.Index != f.index || meta.Full != f.full) {
		reason = fmt.Sprintf("metadata says index %d full=%t, the name says index %d full=%t", meta.Index, meta.Full, f.index, f.full)
	}
	if reason != "" {
		return Backup{}, &CorruptError{Path: path, Offset: off, Reason: reason}
	}
	return Backup{Meta: meta, Data: data}, nil
}

// Usage reports the number and total size of key's backup files.
func (s *DirStore) Usage(key Key) (count int, bytes int64) {
	if key.validate() != nil {
		return 0, 0
	}
	ks := s.state(key)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if !ks.loaded && s.load(key, ks) != nil {
		return 0, 0
	}
	for _, f := range ks.files {
		bytes += f.size
	}
	return len(ks.files), bytes
}

// RemoveJob deletes every backup and item log of job. Item logs of the job
// must be closed first.
func (s *DirStore) RemoveJob(job string) error {
	if err := validJob(job); err != nil {
		return err
	}
	s.mu.Lock()
	var states []*keyState
	for k, ks := range s.keys {
		if k.Job == job {
			states = append(states, ks)
			delete(s.keys, k)
		}
	}
	s.mu.Unlock()
	// Wait for Puts in flight, and leave their states unusable by anyone
	// still holding them (they reload from disk).
	for _, ks := range states {
		ks.mu.Lock()
		ks.loaded = false
		ks.mu.Unlock()
	}
	if err := os.RemoveAll(filepath.Join(s.dir, job)); err != nil {
		return fmt.Errorf("ft: remove job %s: %w", job, err)
	}
	if err := syncDir(s.dir); err != nil {
		return fmt.Errorf("ft: remove job %s: %w", job, err)
	}
	return nil
}
