package ft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Metadata files: everything the runtime keeps beside the backups and item
// logs. Each carries a checksum, so that a damaged one is recognised and
// treated like a damaged backup instead of being believed.
//
// Metadata file (job-level files, written whole by WriteJobFile):
//
//	"MLSM" | version byte | data length uint32 | data | CRC-32C uint32
//
// Sequence mark (one per partition, <job>/<partition>/seq, rewritten in
// place by SeqMark.Write at every request):
//
//	"MLSQ" | version byte | seq uint64 | CRC-32C uint32
//
// The CRC covers every byte before it. Files of the earlier version have
// no checksum: a job file that does not start with the magic, and a
// sequence mark of exactly 8 bytes that does not, are read once as that
// version (ReadJobFile says so; SeqMark.Read accepts it) and rewritten in
// the new format by the next write.

// Names of the job-level metadata files, in <root>/<job>/.
const (
	// CleanMarker is left by a graceful shutdown: the next start knows
	// nothing was lost.
	CleanMarker = "clean"
	// RecoveryHistory holds the job's last recovery reports.
	RecoveryHistory = "recoveries.json"
	// JobRecordCopy is a copy of the job's record (JobRecord, as JSON),
	// beside its data: a damaged record is rebuilt from it.
	JobRecordCopy = "record"
)

const (
	metaMagic   = "MLSM"
	metaVersion = 1
	metaHeader  = 4 + 1 + 4
	markMagic   = "MLSQ"
	markVersion = 1
	markLen     = 4 + 1 + 8 + 4
	legacyMark  = 8 // the earlier version's mark: the seq, little endian
)

func jobFile(root, job, name string) (string, error) {
	if err := validJob(job); err != nil {
		return "", err
	}
	return filepath.Join(root, job, name), nil
}

// WriteJobFile writes data as the metadata file name of job, with a
// checksum, atomically: a temporary file renamed over the old one. With
// durable it also fsyncs the file and the directory.
func WriteJobFile(root, job, name string, data []byte, durable bool) error {
	path, err := jobFile(root, job, name)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("ft: %s: %w", path, err)
	}
	b := make([]byte, 0, metaHeader+len(data)+4)
	b = append(b, metaMagic...)
	b = append(b, metaVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(data)))
	b = append(b, data...)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	tmp := path + ".tmp"
	if err := writeFile(tmp, b, durable); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("ft: %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("ft: %s: %w", path, err)
	}
	if durable {
		if err := syncDir(filepath.Dir(path)); err != nil {
			return fmt.Errorf("ft: %s: %w", path, err)
		}
	}
	return nil
}

func writeFile(path string, b []byte, durable bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ReadJobFile reads the metadata file name of job. A missing file is
// fs.ErrNotExist; a damaged one (bad checksum, truncated, empty, wrong
// length) a *CorruptError. legacy reports a file of the earlier version,
// without a checksum: data is then its raw content, for the caller to
// judge.
func ReadJobFile(root, job, name string) (data []byte, legacy bool, err error) {
	path, err := jobFile(root, job, name)
	if err != nil {
		return nil, false, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false, err
	}
	if !bytes.HasPrefix(b, []byte(metaMagic)) {
		if len(b) < len(metaMagic) && bytes.HasPrefix([]byte(metaMagic), b) && len(b) > 0 {
			return nil, false, &CorruptError{Path: path, Offset: int64(len(b)), Reason: fmt.Sprintf("truncated: %d bytes", len(b))}
		}
		return b, true, nil
	}
	data, off, reason := decodeMeta(b)
	if reason != "" {
		return nil, false, &CorruptError{Path: path, Offset: off, Reason: reason}
	}
	return data, false, nil
}

func decodeMeta(b []byte) (data []byte, off int64, reason string) {
	if len(b) < metaHeader+4 {
		return nil, int64(len(b)), fmt.Sprintf("truncated: %d bytes, a metadata file has at least %d", len(b), metaHeader+4)
	}
	if b[4] != metaVersion {
		return nil, 4, fmt.Sprintf("unknown format version %d", b[4])
	}
	n := uint64(binary.LittleEndian.Uint32(b[5:9]))
	if n+metaHeader+4 != uint64(len(b)) {
		return nil, 5, fmt.Sprintf("length %d, but the file has %d bytes of data", n, len(b)-metaHeader-4)
	}
	end := len(b) - 4
	if got, want := crc32.Checksum(b[:end], castagnoli), binary.LittleEndian.Uint32(b[end:]); got != want {
		return nil, int64(end), fmt.Sprintf("CRC mismatch: computed %08x, stored %08x", got, want)
	}
	return b[metaHeader:end], 0, ""
}

// RemoveJobFile deletes the metadata file name of job; a missing one is
// not an error.
func RemoveJobFile(root, job, name string) error {
	path, err := jobFile(root, job, name)
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// SeqMark is a partition's high-water mark of the sequence numbers it has
// handed out, <root>/<job>/<partition>/seq, rewritten in place (no fsync)
// every time it moves: after a crash, the events between what the state
// and the item log hold and the mark are the ones lost. Once a write has
// given the file its length, later writes store into a shared mapping of
// it (where the platform has one): the page cache has them as it has a
// write's bytes, without a system call per request. The file must not be
// truncated while it is open.
// Not safe for concurrent use.
type SeqMark struct {
	f   *os.File
	buf [markLen]byte
	// mem is the file's first markLen bytes mapped, after the first
	// write; nil before, or where it cannot be mapped.
	mem []byte
	// unmappable is set once mapping failed: writes stay writes.
	unmappable bool
}

// OpenSeqMark opens (creating it if needed) the sequence mark of key.
func OpenSeqMark(root string, key Key) (*SeqMark, error) {
	if err := key.validate(); err != nil {
		return nil, err
	}
	dir, err := makeKeyDir(root, key)
	if err != nil {
		return nil, fmt.Errorf("ft: sequence mark %s: %w", key, err)
	}
	m, _, err := openMark(filepath.Join(dir, "seq"))
	if err != nil {
		return nil, fmt.Errorf("ft: sequence mark %s: %w", key, err)
	}
	return m, nil
}

// openMark opens the mark at path, creating it at 0 (created) if needed.
func openMark(path string) (m *SeqMark, created bool, err error) {
	// A new mark is written at once, so that an empty file is damage, not
	// a mark never written.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	created = err == nil
	if errors.Is(err, fs.ErrExist) {
		f, err = os.OpenFile(path, os.O_RDWR, 0o644)
	}
	if err != nil {
		return nil, false, err
	}
	m = &SeqMark{f: f}
	if created {
		if err := m.Write(0); err != nil {
			f.Close()
			return nil, false, err
		}
	}
	return m, created, nil
}

// Read returns the mark as the file holds it, or a *CorruptError for a
// damaged one (bad checksum, truncated, empty). A mark of the earlier
// version (8 bytes, no checksum) is accepted.
func (m *SeqMark) Read() (uint64, error) {
	var b [markLen + 1]byte
	n, err := m.f.ReadAt(b[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	b2 := b[:n]
	corrupt := func(off int64, reason string) (uint64, error) {
		return 0, &CorruptError{Path: m.f.Name(), Offset: off, Reason: reason}
	}
	switch {
	case n == legacyMark && !bytes.HasPrefix(b2, []byte(markMagic)):
		return binary.LittleEndian.Uint64(b2), nil
	case n != markLen:
		return corrupt(int64(min(n, markLen)), fmt.Sprintf("%d bytes, a sequence mark has %d", n, markLen))
	case string(b2[:4]) != markMagic:
		return corrupt(0, fmt.Sprintf("bad magic %q", b2[:4]))
	case b2[4] != markVersion:
		return corrupt(4, fmt.Sprintf("unknown format version %d", b2[4]))
	}
	if got, want := crc32.Checksum(b2[:markLen-4], castagnoli), binary.LittleEndian.Uint32(b2[markLen-4:]); got != want {
		return corrupt(markLen-4, fmt.Sprintf("CRC mismatch: computed %08x, stored %08x", got, want))
	}
	return binary.LittleEndian.Uint64(b2[5:13]), nil
}

// Write sets the mark to seq at the start of the file. It survives the
// process being killed (the operating system has it), not necessarily a
// power cut; a write torn by one (or, in the mapping, by a kill within
// the nanoseconds of the store) fails the checksum.
func (m *SeqMark) Write(seq uint64) error {
	b := m.buf[:0]
	b = append(b, markMagic...)
	b = append(b, markVersion)
	b = binary.LittleEndian.AppendUint64(b, seq)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	if m.mem != nil {
		copy(m.mem, b)
		return nil
	}
	if _, err := m.f.WriteAt(b, 0); err != nil {
		return err
	}
	m.mapFile()
	return nil
}

// mapFile maps the mark once a write has made it whole: a file of exactly
// markLen bytes (a longer, damaged one keeps being written, and read as
// damaged). Failing to map only leaves the writes as they were.
func (m *SeqMark) mapFile() {
	if m.unmappable {
		return
	}
	if fi, err := m.f.Stat(); err != nil || fi.Size() != markLen {
		return
	}
	mem, err := mapMark(m.f)
	if err != nil {
		m.unmappable = true
		return
	}
	m.mem = mem
}

// Close unmaps and closes the file.
func (m *SeqMark) Close() error {
	if m.mem != nil {
		_ = unmapMark(m.mem)
		m.mem = nil
	}
	return m.f.Close()
}
