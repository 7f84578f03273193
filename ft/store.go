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
	// Incarnation is the owner of the job's data when the backup was
	// taken (JobStorage.Claim), set by the job's storage: a damaged
	// incarnation file is rebuilt from it.
	Incarnation string `json:"incarnation,omitempty"`
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
	// when the newest is damaged). It keeps no reference to data once it
	// returns: the caller reuses the buffer for its next backup.
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
// backup to apply it to. DirStore also returns it when the full backup is
// there but the delta cannot be appended to it: see DirStore.
var ErrNoFullBackup = errors.New("ft: delta backup without a full backup before it")

// DirStore is the default Store: a local directory with one file per chain,
// <dir>/<job>/<partition or "global">/chain-<index of its full backup>.bin,
// the full backup's frame followed by the frames of its deltas (frame.go).
// A full Put creates the chain's file (or renames a spare, an old chain's
// file kept for it, to it, and writes over the old chain) and keeps it
// open; each delta Put writes after the previous backup, so a backup
// costs a write, not a file creation. Every write ends with an end mark
// (frame.go) after the backup; the next one overwrites it. With
// BackupMeta.Durable, Put fsyncs the file (and, for a new chain, the
// directory) before it returns.
//
// A backup is wholly there or ignored: a frame torn by a crash fails its
// CRC (or the end mark is missing after it), and Chain stops the chain
// before it; a torn full backup makes Chain
// fall back to the previous chain. A delta is only ever appended right
// after the frame this process wrote before it, so DirStore refuses (with
// ErrNoFullBackup) a delta Put when it has no chain open for appends: after
// a restart, until the first full Put, since the file on disk may end in a
// torn frame after which nothing could be read back; and after a failed
// Put, whose frame the next delta would build on, until the next full Put.
// One process writes a directory at a time.
//
// Indices continue across chains and across restarts: a new store reads the
// chain files for the last index, and skips one more after a torn frame,
// whose index it cannot read. (A machine crash that lost several unsynced
// frames can see their indices given out again, in a new chain file, where
// they mislead nobody.) Indices may skip values after a failed Put or a
// torn frame.
//
// Retention: after a full Put, the store keeps that chain and the newest one
// before it whose full backup is intact (the fallback when the newest full
// backup is damaged) and deletes the other chains, but for those it keeps,
// as they are, as spares for the next full Puts: spare-1.bin and
// spare-2.bin, created empty with a key's first chain. Files of the earlier
// one-file-per-backup layout (backup-*.bin, a data directory of an earlier
// version) are recovered from while the key has no chain file, and are
// deleted with the older chains after the first full Put.
// The item log (OpenItemLog) may share the directory; the two never touch
// each other's files.
//
// DirStore is safe for concurrent use. It keeps the newest chain of each
// key open; Close closes them, but is not needed for correctness (a chain's
// file is closed when the next full backup replaces it or its job is
// removed, and the operating system closes the rest at exit).
type DirStore struct {
	dir string
	now func() time.Time // clock for BackupMeta.Created; a field so tests can fix it

	// mu guards keys (the map only; each keyState has its own lock) and
	// removing. It is taken before a keyState's lock, never while holding one.
	mu   sync.Mutex
	keys map[Key]*keyState
	// removing holds the jobs RemoveJob is deleting; each channel is closed
	// when it is done. Calls for their keys wait for it.
	removing map[string]chan struct{}
}

// keyState is what the store knows of one key's directory, so Put and
// Usage do not scan it, and the chain open for appends.
type keyState struct {
	mu      sync.Mutex // held for a whole Put, Chain or Usage of the key
	removed bool       // RemoveJob dropped this state: look the key up again
	loaded  bool       // dir, files, legacy and next are valid
	dir     string     // the key's directory, "" until it exists
	files   []chainFile
	legacy  []string // names of old-layout backup files, deleted after the next full Put
	next    uint64   // the index the next Put assigns
	// open is the file of files[len(files)-1], open for appends, when this
	// process wrote its every frame and the last write succeeded; else nil
	// and deltas are refused. open != nil implies loaded.
	open *os.File
}

// chainFile is one chain file.
type chainFile struct {
	index  uint64 // of its full backup, from the name
	frames int    // intact backups from its start
	size   int64  // bytes
}

const (
	chainPrefix = "chain-"
	chainSuffix = ".bin"
	// The earlier layout: one file per backup, written as a temporary file
	// and renamed.
	backupPrefix = "backup-"
	tempPrefix   = ".backup-"
	tempSuffix   = ".tmp"
)

func chainName(index uint64) string {
	return fmt.Sprintf("%s%020d%s", chainPrefix, index, chainSuffix)
}

// parseChainName is the inverse of chainName; ok is false for any other name.
func parseChainName(name string) (index uint64, ok bool) {
	rest, found := strings.CutPrefix(name, chainPrefix)
	if !found || len(rest) != 20+len(chainSuffix) || rest[20:] != chainSuffix {
		return 0, false
	}
	index, err := strconv.ParseUint(rest[:20], 10, 64)
	if err != nil || index == 0 {
		return 0, false
	}
	return index, true
}

// parseLegacyName recognises a backup file of the earlier layout,
// backup-<20-digit index>-<full|delta>.bin, and returns its index.
func parseLegacyName(name string) (index uint64, ok bool) {
	rest, found := strings.CutPrefix(name, backupPrefix)
	if !found || len(rest) < 21 || rest[20] != '-' || (rest[21:] != "full.bin" && rest[21:] != "delta.bin") {
		return 0, false
	}
	index, err := strconv.ParseUint(rest[:20], 10, 64)
	return index, err == nil
}

// NewDirStore opens (creating it if needed) a store in dir and deletes the
// temporary files that interrupted Puts of the earlier layout left behind.
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
	return &DirStore{dir: dir, now: time.Now, keys: make(map[Key]*keyState), removing: make(map[string]chan struct{})}, nil
}

// Dir returns the store's root directory.
func (s *DirStore) Dir() string { return s.dir }

// lock returns the state of key, locked.
func (s *DirStore) lock(key Key) *keyState {
	for {
		s.mu.Lock()
		if done := s.removing[key.Job]; done != nil {
			s.mu.Unlock()
			<-done
			continue
		}
		ks := s.keys[key]
		if ks == nil {
			ks = &keyState{next: 1}
			s.keys[key] = ks
		}
		s.mu.Unlock()
		ks.mu.Lock()
		if !ks.removed {
			return ks
		}
		ks.mu.Unlock() // RemoveJob got there first; the map has a new state now
	}
}

// readChainFile reads one chain file and returns its usable backups, as
// parseChain. err is an I/O error, fs.ErrNotExist included.
func readChainFile(path string, index uint64) (backups []Backup, size int64, damage *CorruptError, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, nil, err
	}
	backups, size, damage = parseChain(path, b, index)
	return backups, size, damage, nil
}

// parseChain returns the usable backups of b, the chain file at path: the
// full one, whose index must be the one in the name, and the deltas after
// it with consecutive indices, up to the end mark if there is one. The
// first damage, if any, is in damage (the backups before it are usable).
// size is where the backups end at the mark, else len(b).
func parseChain(path string, b []byte, index uint64) (backups []Backup, size int64, damage *CorruptError) {
	off := 0
	for off < len(b) || len(backups) == 0 {
		if len(backups) > 0 && isEndMark(b[off:], index) {
			// The rest is an older chain's, in a reused file; the size is
			// of the backups, as Put counts them.
			return backups, int64(off), nil
		}
		meta, data, n, doff, reason := decodeFrame(b[off:])
		if reason == "" {
			switch {
			case len(backups) == 0 && (!meta.Full || meta.Index != index):
				reason = fmt.Sprintf("the first backup has index %d, full %t; the name says full backup %d", meta.Index, meta.Full, index)
			case len(backups) > 0 && (meta.Full || meta.Index != backups[len(backups)-1].Meta.Index+1):
				reason = fmt.Sprintf("backup with index %d, full %t, out of order", meta.Index, meta.Full)
			}
		}
		if reason != "" {
			what := "full backup"
			if len(backups) > 0 {
				what = fmt.Sprintf("backup after index %d", backups[len(backups)-1].Meta.Index)
			}
			if doff > 0 {
				reason += fmt.Sprintf(" (at byte %d)", int64(off)+doff)
			}
			// Offset is where the unusable bytes start: the whole frame,
			// and every one after it.
			return backups, int64(len(b)), &CorruptError{Path: path, Offset: int64(off), Reason: what + ": " + reason}
		}
		backups = append(backups, Backup{Meta: meta, Data: data})
		off += n
	}
	return backups, int64(len(b)), nil
}

// survey lists the key's directory and reads its chain files newest first,
// until it has found the newest recoverable chain, or all of them when
// update is set: then ks is set from what is on disk. Called with ks.mu held.
func (s *DirStore) survey(key Key, ks *keyState, update bool) (chain []Backup, skipped []error, err error) {
	dir := key.dir(s.dir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if update {
			ks.loaded, ks.dir, ks.files, ks.legacy = true, "", nil, nil
		}
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var indices []uint64
	var legacy []string
	next := ks.next
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if index, ok := parseChainName(e.Name()); ok {
			indices = append(indices, index)
		} else if index, ok := parseLegacyName(e.Name()); ok {
			legacy = append(legacy, e.Name())
			next = max(next, index+1)
		}
	}
	// ReadDir sorts by name and names sort by index, but do not depend on it.
	slices.Sort(indices)
	var files []chainFile // newest first
	found := false
	for i := len(indices) - 1; i >= 0 && (update || !found); i-- {
		index := indices[i]
		path := filepath.Join(dir, chainName(index))
		backups, size, damage, err := readChainFile(path, index)
		if errors.Is(err, fs.ErrNotExist) {
			// Gone since the listing: deleted by the retention of another
			// process.
			if !found {
				skipped = append(skipped, &CorruptError{Path: path, Reason: "missing"})
			}
			continue
		}
		if err != nil {
			return nil, skipped, err
		}
		// Indices go on after the name and the last intact backup, and after
		// the one a torn frame after it would have had.
		next = max(next, index+1)
		if n := len(backups); n > 0 {
			next = max(next, backups[n-1].Meta.Index+1)
			if damage != nil {
				next = max(next, backups[n-1].Meta.Index+2)
			}
		}
		files = append(files, chainFile{index: index, frames: len(backups), size: size})
		if found {
			continue // only read for update
		}
		if damage != nil {
			skipped = append(skipped, damage)
		}
		if len(backups) > 0 {
			chain, found = backups, true
		}
	}
	if update {
		slices.Reverse(files)
		ks.loaded, ks.dir, ks.files, ks.legacy, ks.next = true, dir, files, legacy, next
	}
	return chain, skipped, nil
}

// load sets ks from the disk. Called with ks.mu held and ks.open nil.
func (s *DirStore) load(key Key, ks *keyState) error {
	_, _, err := s.survey(key, ks, true)
	return err
}

// framePool holds buffers for framing small backups, so that a frame takes
// one write.
var framePool = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledFrame is the largest frame copied into one buffer; larger ones
// are written in three pieces.
const maxPooledFrame = 64 << 10

// writeFrame writes head, data and tail to f at offset off, followed by
// the end mark of chain, and returns the frame's length (the mark is not
// counted: the next frame goes over it); an error means the frame may be
// partly written.
func writeFrame(f *os.File, off int64, chain uint64, head, data, tail []byte) (int64, error) {
	n := len(head) + len(data) + len(tail)
	if n+endMarkLen <= maxPooledFrame {
		bp := framePool.Get().(*[]byte)
		b := appendEndMark(append(append(append((*bp)[:0], head...), data...), tail...), chain)
		_, err := f.WriteAt(b, off)
		*bp = b
		framePool.Put(bp)
		return int64(n), err
	}
	at := off
	for _, b := range [][]byte{head, data, appendEndMark(tail[:len(tail):len(tail)], chain)} {
		if _, err := f.WriteAt(b, at); err != nil {
			return 0, err
		}
		at += int64(len(b))
	}
	return int64(n), nil
}

// Put stores one backup. See Store.Put. A full backup starts a new chain
// file; a delta is appended to the open one, and refused with
// ErrNoFullBackup when there is none (see DirStore).
func (s *DirStore) Put(key Key, meta BackupMeta, data []byte) (BackupMeta, error) {
	if err := key.validate(); err != nil {
		return BackupMeta{}, err
	}
	ks := s.lock(key)
	defer ks.mu.Unlock()
	if !ks.loaded {
		if err := s.load(key, ks); err != nil {
			return BackupMeta{}, fmt.Errorf("ft: put %s: %w", key, err)
		}
	}
	if !meta.Full && ks.open == nil {
		if len(ks.files) == 0 {
			return BackupMeta{}, fmt.Errorf("ft: put %s: %w", key, ErrNoFullBackup)
		}
		return BackupMeta{}, fmt.Errorf("ft: put %s: %w: no chain open for appends (a delta follows only a full backup this store wrote, with no failed Put since)", key, ErrNoFullBackup)
	}
	if ks.dir == "" {
		dir, err := makeKeyDir(s.dir, key)
		if err != nil {
			return BackupMeta{}, fmt.Errorf("ft: put %s: %w", key, err)
		}
		ks.dir = dir
	}
	meta.Index = ks.next
	if meta.Created.IsZero() {
		meta.Created = s.now().UTC()
	}
	head, tail, err := backupParts(meta, data)
	if err != nil {
		// Nothing written, but the caller has taken its snapshot all the
		// same, and its next delta builds on this one: end the chain.
		ks.closeOpen()
		return BackupMeta{}, fmt.Errorf("ft: put %s: %w", key, err)
	}
	// From here the index is used up, whether the write succeeds or not.
	ks.next++
	if meta.Full {
		err = s.putFull(ks, meta, head, data, tail)
	} else {
		err = putDelta(ks, meta, head, data, tail)
	}
	if err != nil {
		return BackupMeta{}, fmt.Errorf("ft: put %s: %w", key, err)
	}
	return meta, nil
}

// putFull starts a new chain with a full backup. Called with ks.mu held.
func (s *DirStore) putFull(ks *keyState, meta BackupMeta, head, data, tail []byte) error {
	// The chain before takes no more deltas whatever happens here: they
	// build on this backup.
	ks.closeOpen()
	name := chainName(meta.Index)
	path := filepath.Join(ks.dir, name)
	// No temporary file and rename: a full backup torn by a crash fails its
	// CRC, and Chain falls back to the previous chain.
	f, err := s.createChain(ks, path)
	if err != nil {
		ks.loaded = false // list the directory again before the next Put
		return err
	}
	size, err := writeFrame(f, 0, meta.Index, head, data, tail)
	if err == nil && meta.Durable {
		if err = f.Sync(); err == nil {
			err = syncDir(ks.dir)
		}
	}
	if err != nil {
		f.Close()
		// Not a chain: an error means the backup is not stored. Should the
		// removal fail, Chain passes the file over if it is torn, and the
		// reload before the next Put accounts for it.
		os.Remove(path)
		ks.loaded = false
		return err
	}
	ks.open = f
	ks.files = append(ks.files, chainFile{index: meta.Index, frames: 1, size: size})
	s.retain(ks)
	return nil
}

// spareNames are files for the next full backups to take: older chain
// files that retention kept instead of deleting them, and two created
// empty with a key's first chain. Renaming a file costs ~10 µs, creating
// one 100-600 µs of CPU (ext4 on a 2-core VM), and mode approx starts a
// chain every few dozen backups: once a key has its files, it creates
// none. Neither chains nor files of the earlier layout: Chain and Usage
// pass them over.
var spareNames = [...]string{"spare-1.bin", "spare-2.bin"}

// createChain opens the file of a new chain for writing from its start: a
// spare renamed when there is one, else a new file, and with a key's first
// chain the spares. A spare keeps the bytes of the chain it was: the new
// chain's backups are written over them, because writing over pages the
// operating system holds already costs a fifth of appending fresh ones
// (BenchmarkFileWrites); what is left after the new chain's end mark is
// not read (parseChain). Until its full backup is written, the file
// under the chain's name starts with another chain's full backup, or
// nothing: a crash in between reads as a damaged chain (its first backup
// is not the one the name says), and Chain falls back to the chain
// before. Called with ks.mu held.
func (s *DirStore) createChain(ks *keyState, path string) (*os.File, error) {
	// A rename would replace a file of the chain's name: none must be
	// there (one process writes a directory at a time).
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		for _, name := range spareNames {
			if os.Rename(filepath.Join(ks.dir, name), path) != nil {
				continue
			}
			if f, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
				return f, nil
			}
			os.Remove(path)
			break
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err == nil && len(ks.files) == 0 {
		for _, name := range spareNames {
			if g, err := os.OpenFile(filepath.Join(ks.dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err == nil {
				g.Close()
			}
		}
	}
	return f, err
}

// discard deletes an old chain file, or makes it a spare, as it is, if
// one is missing: its backups are written over by the chain that takes it
// (createChain), and a spare is never read as a chain. Called with ks.mu
// held.
func (s *DirStore) discard(ks *keyState, name string) error {
	path := filepath.Join(ks.dir, name)
	for _, spare := range spareNames {
		spare = filepath.Join(ks.dir, spare)
		if _, err := os.Lstat(spare); errors.Is(err, fs.ErrNotExist) {
			if os.Rename(path, spare) == nil {
				return nil
			}
			break
		}
	}
	return os.Remove(path)
}

// putDelta appends a delta to the open chain. Called with ks.mu held and
// ks.open set.
func putDelta(ks *keyState, meta BackupMeta, head, data, tail []byte) error {
	cf := &ks.files[len(ks.files)-1]
	n, err := writeFrame(ks.open, cf.size, cf.index, head, data, tail)
	if err == nil && meta.Durable {
		err = ks.open.Sync()
	}
	if err != nil {
		// Drop what was written of the frame, if that works, and append
		// no more to this chain: the next delta would build on this one.
		ks.open.Truncate(cf.size)
		ks.closeOpen()
		ks.loaded = false
		return err
	}
	cf.frames++
	cf.size += n
	return nil
}

// closeOpen closes the chain file open for appends, if any. Its frames
// were all written (and synced when asked for): a late error of close
// changes nothing for them, and only Close reports it.
func (ks *keyState) closeOpen() error {
	if ks.open == nil {
		return nil
	}
	err := ks.open.Close()
	ks.open = nil
	return err
}

// retain keeps the newest chain and the fallback, the newest chain before
// it whose full backup is intact, and deletes the other chain files (older,
// or with a damaged full backup) and the files of the earlier layout. A
// file that cannot be deleted stays listed and is tried again after the
// next full Put. Called with ks.mu held.
func (s *DirStore) retain(ks *keyState) {
	fallback := -1
	for i := len(ks.files) - 2; i >= 0 && fallback < 0; i-- {
		if ks.files[i].frames > 0 {
			fallback = i
		}
	}
	kept := ks.files[:0]
	for i, f := range ks.files {
		if i != fallback && i != len(ks.files)-1 {
			err := s.discard(ks, chainName(f.index))
			if err == nil || errors.Is(err, fs.ErrNotExist) {
				continue
			}
		}
		kept = append(kept, f)
	}
	clear(ks.files[len(kept):])
	ks.files = kept
	legacy := ks.legacy[:0]
	for _, name := range ks.legacy {
		if err := os.Remove(filepath.Join(ks.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			legacy = append(legacy, name)
		}
	}
	ks.legacy = legacy
}

// Chain returns the newest recoverable chain of key. See Store.Chain. It
// reads the directory and the files afresh, so it also sees what another
// process wrote. Damage is reported per chain file: a damaged full backup
// skips the file, a damaged delta ends the chain; the CorruptError's
// Offset is where the damaged frame starts.
func (s *DirStore) Chain(key Key) (chain []Backup, skipped []error, err error) {
	if err := key.validate(); err != nil {
		return nil, nil, err
	}
	ks := s.lock(key)
	defer ks.mu.Unlock()
	// With a chain open, this process is the writer and its state stands;
	// else what is on disk is the state.
	chain, skipped, err = s.survey(key, ks, ks.open == nil)
	if err != nil {
		return nil, skipped, fmt.Errorf("ft: chain %s: %w", key, err)
	}
	if len(chain) == 0 && len(ks.legacy) > 0 {
		// A store written by an earlier version: its backups still count
		// until the first full Put of this one replaces them.
		var more []error
		chain, more, err = readLegacyChain(ks.dir, ks.legacy)
		skipped = append(skipped, more...)
		if err != nil {
			return nil, skipped, fmt.Errorf("ft: chain %s: %w", key, err)
		}
	}
	return chain, skipped, nil
}

// readLegacyChain returns the newest recoverable chain among backup files
// of the earlier layout (one file per backup, named by index and kind):
// the newest intact full backup and its deltas with consecutive indices.
func readLegacyChain(dir string, names []string) (chain []Backup, skipped []error, err error) {
	type file struct {
		name  string
		index uint64
		full  bool
	}
	var files []file
	for _, n := range names {
		if index, ok := parseLegacyName(n); ok {
			files = append(files, file{n, index, strings.HasSuffix(n, "-full.bin")})
		}
	}
	slices.SortFunc(files, func(a, b file) int { return cmp.Compare(a.index, b.index) })
	read := func(f file) (Backup, error) {
		path := filepath.Join(dir, f.name)
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return Backup{}, &CorruptError{Path: path, Reason: "missing"}
		}
		if err != nil {
			return Backup{}, err
		}
		meta, data, n, off, reason := decodeFrame(b)
		switch {
		case reason != "":
		case n != len(b):
			off, reason = int64(n), fmt.Sprintf("%d bytes after the backup", len(b)-n)
		case meta.Index != f.index || meta.Full != f.full:
			reason = fmt.Sprintf("metadata says index %d full=%t, the name index %d full=%t", meta.Index, meta.Full, f.index, f.full)
		}
		if reason != "" {
			return Backup{}, &CorruptError{Path: path, Offset: off, Reason: reason}
		}
		return Backup{Meta: meta, Data: data}, nil
	}
	for i := len(files) - 1; i >= 0; i-- {
		if !files[i].full {
			continue
		}
		full, err := read(files[i])
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				return nil, skipped, err
			}
			skipped = append(skipped, err)
			continue
		}
		chain = append(chain, full)
		for _, f := range files[i+1:] {
			if f.full || f.index != chain[len(chain)-1].Meta.Index+1 {
				break
			}
			d, err := read(f)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					return nil, skipped, err
				}
				skipped = append(skipped, err)
				break
			}
			chain = append(chain, d)
		}
		return chain, skipped, nil
	}
	return nil, skipped, nil
}

// Usage reports the number of backups (frames intact from the start of
// their file) and the total size of key's chain files.
func (s *DirStore) Usage(key Key) (count int, bytes int64) {
	if key.validate() != nil {
		return 0, 0
	}
	ks := s.lock(key)
	defer ks.mu.Unlock()
	if !ks.loaded && s.load(key, ks) != nil {
		return 0, 0
	}
	for _, f := range ks.files {
		count += f.frames
		bytes += f.size
	}
	return count, bytes
}

// RemoveJob deletes every backup and item log of job. Item logs of the job
// must be closed first. Calls for the job's keys wait until it is done.
func (s *DirStore) RemoveJob(job string) error {
	return s.dropJob(job, func(dir string) error { return os.RemoveAll(dir) })
}

// MoveJob moves the job's directory, every backup and item log in it, to
// dest (which must not exist), as RemoveJob removes it: the store then
// holds nothing of the job.
func (s *DirStore) MoveJob(job, dest string) error {
	return s.dropJob(job, func(dir string) error {
		if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
			return err
		}
		if err := os.Rename(dir, dest); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return syncDir(filepath.Dir(dest))
	})
}

// dropJob forgets everything the store knows of job and has drop take its
// directory away.
func (s *DirStore) dropJob(job string, drop func(dir string) error) error {
	if err := validJob(job); err != nil {
		return err
	}
	s.mu.Lock()
	for s.removing[job] != nil { // another RemoveJob of the job
		done := s.removing[job]
		s.mu.Unlock()
		<-done
		s.mu.Lock()
	}
	done := make(chan struct{})
	s.removing[job] = done
	var states []*keyState
	for k, ks := range s.keys {
		if k.Job == job {
			states = append(states, ks)
			delete(s.keys, k)
		}
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.removing, job)
		close(done)
		s.mu.Unlock()
	}()
	// Wait for the calls in flight; whoever holds a state next looks the
	// key up again, and waits for done.
	for _, ks := range states {
		ks.mu.Lock()
		ks.closeOpen()
		ks.removed, ks.loaded = true, false
		ks.mu.Unlock()
	}
	if err := drop(filepath.Join(s.dir, job)); err != nil {
		return fmt.Errorf("ft: remove job %s: %w", job, err)
	}
	if err := syncDir(s.dir); err != nil {
		return fmt.Errorf("ft: remove job %s: %w", job, err)
	}
	return nil
}

// Close closes the chain files open for appends. The store stays usable:
// until its next full Put, a key refuses deltas, as after a restart.
func (s *DirStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, ks := range s.keys {
		ks.mu.Lock()
		errs = append(errs, ks.closeOpen())
		ks.mu.Unlock()
	}
	return errors.Join(errs...)
}
