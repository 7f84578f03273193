package ft

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/mlstream/mlstream/internal/names"
)

// This file holds what the backup store and the item log share: keys and
// their directories, the damage error, and the two on-disk framings.
//
// Backup chain file (one per full backup: <key dir>/chain-<20-digit index of
// the full backup>.bin), a sequence of backup frames: the full backup first,
// then its deltas in index order, each appended as it is taken:
//
//	frame | frame | ...
//
// Backup frame:
//
//	"MLSB" | version byte | meta length uint32 | meta JSON | data length uint64 | data | CRC-32C uint32
//
// The CRC covers every byte of the frame before it. A frame carries its own
// lengths, so a reader walks the file frame by frame and stops at the first
// one that is torn (a crash during its append) or corrupt: what follows it
// cannot be found again.
//
// Item log record (many per segment, appended):
//
//	payload length uint32 | CRC-32C uint32 of seq and payload | seq uint64 | payload
//
// A record is either one event (the payload is the event; the earlier
// version wrote only these) or a frame of events with consecutive
// sequence numbers, marked by the top bit of the length (frameFlag); its
// seq is the last event's, and its payload:
//
//	event count uvarint | tag length uvarint | tag | (event length uint32 | event)...
//
// The tag is opaque to the log (the runtime names a request's parts in it).
// One CRC covers the whole frame, so a frame torn by a crash is dropped
// whole: its events are replayed all or none.
//
// All integers are little endian; the CRC uses the Castagnoli polynomial.

// GlobalPartition is the Partition of job-level state (for example logreg's
// global model) as opposed to the state of one partition.
const GlobalPartition = -1

// Key addresses the state of one partition of a job. Partition
// GlobalPartition is job-level state.
type Key struct {
	Job       string
	Partition int
}

// String returns "job/p0" for a partition and "job/global" for job-level state.
func (k Key) String() string {
	if k.Partition == GlobalPartition {
		return k.Job + "/global"
	}
	return k.Job + "/p" + strconv.Itoa(k.Partition)
}

// ErrCorrupt is wrapped by every error that reports a torn, truncated or
// corrupt file. Test with errors.Is(err, ErrCorrupt).
var ErrCorrupt = errors.New("ft: damaged file")

// ErrInvalidKey is returned for a job name or partition that could not be a
// directory of the store.
var ErrInvalidKey = errors.New("ft: invalid key")

// CorruptError names a damaged file, where the damage starts and what is
// wrong. It wraps ErrCorrupt.
type CorruptError struct {
	Path   string // the damaged file (or, for a missing backup, the file that should be there)
	Offset int64  // byte offset where the damage starts; 0 when the whole file is unusable
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("ft: %s: damaged at byte %d: %s", e.Path, e.Offset, e.Reason)
}

// Unwrap returns ErrCorrupt.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// maxJobBytes is the longest job name in a key: a job name (at most 64
// bytes) with its incarnation (cluster mode).
const maxJobBytes = 128

// validJob checks a key's job name. Its syntax cannot produce "." or ".."
// or a path separator, so a job name is always one directory below the
// store's root.
func validJob(job string) error {
	if names.Check(job, maxJobBytes) != nil {
		return fmt.Errorf("%w: job name %q", ErrInvalidKey, job)
	}
	return nil
}

func (k Key) validate() error {
	if err := validJob(k.Job); err != nil {
		return err
	}
	if k.Partition < GlobalPartition {
		return fmt.Errorf("%w: partition %d", ErrInvalidKey, k.Partition)
	}
	return nil
}

// dir is the directory of key under root: <root>/<job>/<partition or "global">.
func (k Key) dir(root string) string {
	part := "global"
	if k.Partition != GlobalPartition {
		part = strconv.Itoa(k.Partition)
	}
	return filepath.Join(root, k.Job, part)
}

// makeKeyDir creates the directory of key and makes its entry durable: a
// file fsynced inside a directory whose own entry is lost after a power cut
// is lost with it.
func makeKeyDir(root string, key Key) (string, error) {
	dir := key.dir(root)
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for _, d := range []string{filepath.Dir(dir), root} {
		if err := syncDir(d); err != nil {
			return "", err
		}
	}
	return dir, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const (
	backupMagic   = "MLSB"
	backupVersion = 1
	// backupHeaderLen is magic, version and the meta length.
	backupHeaderLen = 4 + 1 + 4
	// backupOverhead is every byte of a backup frame that is neither meta nor data.
	backupOverhead = backupHeaderLen + 8 + 4
)

// A chain file's last backup is followed by an end mark: the magic, then
// the index of the chain's full backup (so that an older chain's own mark
// is not taken for it). What follows the mark is left of an older chain
// in a reused file (see DirStore's createChain); without the mark, bytes
// after the last intact backup are a torn one. Each backup is written with
// the mark after it, in one write, and the next backup overwrites the mark.
// (Chain files of earlier versions end at their last backup, without one.)
const (
	endMagic   = "MLSE"
	endMarkLen = 4 + 8
)

func appendEndMark(b []byte, chain uint64) []byte {
	return binary.LittleEndian.AppendUint64(append(b, endMagic...), chain)
}

// isEndMark says whether b starts with the end mark of chain.
func isEndMark(b []byte, chain uint64) bool {
	return len(b) >= endMarkLen && string(b[:4]) == endMagic && binary.LittleEndian.Uint64(b[4:endMarkLen]) == chain
}

// backupParts returns the framing of a backup around its data, so the data
// (possibly megabytes) can be written from the caller's slice without a
// copy: the frame is head, data, tail.
func backupParts(meta BackupMeta, data []byte) (head, tail []byte, err error) {
	head = make([]byte, backupHeaderLen, backupHeaderLen+metaJSONRoom+8*len(meta.LastSeqs))
	copy(head, backupMagic)
	head[4] = backupVersion
	if head, err = appendMetaJSON(head, &meta); err != nil {
		return nil, nil, err
	}
	binary.LittleEndian.PutUint32(head[5:], uint32(len(head)-backupHeaderLen))
	head = binary.LittleEndian.AppendUint64(head, uint64(len(data)))
	crc := crc32.Update(crc32.Checksum(head, castagnoli), castagnoli, data)
	tail = binary.LittleEndian.AppendUint32(nil, crc)
	return head, tail, nil
}

// metaJSONRoom is about the most bytes a BackupMeta's JSON takes beside
// its LastSeqs.
const metaJSONRoom = 192 + 96

// appendMetaJSON appends meta as encoding/json marshals it, byte for byte,
// without its reflection: a backup is taken hundreds of times a minute, and
// json.Marshal took about as long as the CRC of a 8 KB delta. Values
// json.Marshal refuses or writes unusually (a divergence that is not
// finite, a time that RFC 3339 cannot carry) go through json.Marshal,
// which then decides.
func appendMetaJSON(b []byte, m *BackupMeta) ([]byte, error) {
	_, off := m.Created.Zone()
	if math.IsInf(m.Divergence, 0) || math.IsNaN(m.Divergence) || m.Created.Year() < 0 || m.Created.Year() > 9999 || off%60 != 0 || off <= -24*3600 || off >= 24*3600 ||
		!plainJSON(m.Incarnation) {
		mj, err := json.Marshal(m)
		return append(b, mj...), err
	}
	b = append(b, `{"index":`...)
	b = strconv.AppendUint(b, m.Index, 10)
	b = append(b, `,"full":`...)
	b = strconv.AppendBool(b, m.Full)
	b = append(b, `,"failures":`...)
	b = strconv.AppendInt(b, int64(m.Failures), 10)
	b = append(b, `,"last_seqs":`...)
	if m.LastSeqs == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, s := range m.LastSeqs {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, s, 10)
		}
		b = append(b, ']')
	}
	b = append(b, `,"divergence":`...)
	b = appendJSONFloat(b, m.Divergence)
	b = append(b, `,"created":"`...)
	b = m.Created.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","durable":`...)
	b = strconv.AppendBool(b, m.Durable)
	if m.Incarnation != "" {
		b = append(b, `,"incarnation":"`...)
		b = append(b, m.Incarnation...)
		b = append(b, '"')
	}
	return append(b, '}'), nil
}

// plainJSON says whether s is written as is inside a JSON string: letters,
// digits, '-' and '_' (what incarnations are made of).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// appendJSONFloat appends a finite f as encoding/json writes a float64:
// like ES6, exponents only below 1e-6 and from 1e21, without a leading
// zero in a negative exponent.
func appendJSONFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		b[n-2] = b[n-1]
		b = b[:n-1]
	}
	return b
}

// decodeFrame parses the backup frame at the front of b and returns how many
// bytes it takes (n); what follows it in b is not looked at. The returned
// data aliases b. It reports any damage as a reason string and the offset in
// b where it was seen, never panics, and never allocates more than the
// metadata it decodes.
func decodeFrame(b []byte) (meta BackupMeta, data []byte, n int, off int64, reason string) {
	if len(b) < backupOverhead {
		return meta, nil, 0, int64(len(b)), fmt.Sprintf("truncated: %d bytes, a backup has at least %d", len(b), backupOverhead)
	}
	if string(b[:4]) != backupMagic {
		return meta, nil, 0, 0, fmt.Sprintf("bad magic %q", b[:4])
	}
	if b[4] != backupVersion {
		return meta, nil, 0, 4, fmt.Sprintf("unknown format version %d", b[4])
	}
	metaLen := uint64(binary.LittleEndian.Uint32(b[5:9]))
	rest := uint64(len(b) - backupOverhead) // bytes there are for meta and data
	if metaLen > rest {
		return meta, nil, 0, 5, fmt.Sprintf("meta length %d, only %d bytes follow", metaLen, rest)
	}
	dataOff := backupHeaderLen + metaLen + 8
	dataLen := binary.LittleEndian.Uint64(b[dataOff-8 : dataOff])
	if dataLen > rest-metaLen {
		return meta, nil, 0, int64(dataOff - 8), fmt.Sprintf("data length %d, only %d bytes follow", dataLen, rest-metaLen)
	}
	end := dataOff + dataLen // of the data; the CRC follows
	if got, want := crc32.Checksum(b[:end], castagnoli), binary.LittleEndian.Uint32(b[end:end+4]); got != want {
		return meta, nil, 0, int64(end), fmt.Sprintf("CRC mismatch: computed %08x, stored %08x", got, want)
	}
	if err := json.Unmarshal(b[backupHeaderLen:backupHeaderLen+metaLen], &meta); err != nil {
		return BackupMeta{}, nil, 0, backupHeaderLen, "metadata: " + err.Error()
	}
	return meta, b[dataOff:end:end], int(end + 4), 0, ""
}

const (
	recordHeaderLen = 4 + 4 + 8
)

// appendRecord appends one framed item log record to b.
func appendRecord(b []byte, seq uint64, payload []byte) []byte {
	start := len(b)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
	b = append(b, 0, 0, 0, 0) // CRC, filled in below
	b = binary.LittleEndian.AppendUint64(b, seq)
	b = append(b, payload...)
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(b[start+8:], castagnoli))
	return b
}

// recordHeader is the fixed part of a record.
type recordHeader struct {
	n   uint32 // payload length
	crc uint32
	seq uint64
}

func parseRecordHeader(h []byte) recordHeader {
	return recordHeader{
		n:   binary.LittleEndian.Uint32(h[0:4]),
		crc: binary.LittleEndian.Uint32(h[4:8]),
		seq: binary.LittleEndian.Uint64(h[8:16]),
	}
}

// check verifies the CRC of a record whose header is h (the raw 16 bytes)
// and whose payload is p.
func (r recordHeader) check(h, p []byte) bool {
	return crc32.Update(crc32.Checksum(h[8:16], castagnoli), castagnoli, p) == r.crc
}

// frameFlag marks a frame in a record's length. MaxPayload is at most
// 1 GiB, so the bit is never part of a length.
const frameFlag = 1 << 31

// Frame collects events with consecutive sequence numbers that the item
// log writes as one record (ItemLog.AppendFrame): after a crash, Replay
// delivers all of them or none. A Frame is reusable: Reset empties it.
type Frame struct {
	first uint64
	tag   []byte
	n     int
	body  []byte // (length uint32 | event)...
}

// Reset empties f for events from seq first on, with tag (kept, not
// copied, until the frame is appended).
func (f *Frame) Reset(first uint64, tag []byte) {
	f.first, f.tag, f.n, f.body = first, tag, 0, f.body[:0]
}

// Add appends the next event's payload (copied).
func (f *Frame) Add(payload []byte) {
	f.AddFunc(func(b []byte) []byte { return append(b, payload...) })
}

// AddFunc appends the next event, whose payload appendTo appends to the
// slice it is given: an event encodes straight into the frame.
func (f *Frame) AddFunc(appendTo func([]byte) []byte) {
	start := len(f.body)
	f.body = append(f.body, 0, 0, 0, 0)
	f.body = appendTo(f.body)
	binary.LittleEndian.PutUint32(f.body[start:], uint32(len(f.body)-start-4))
	f.n++
}

// Len is the number of events in f.
func (f *Frame) Len() int { return f.n }

// last is the seq of the frame's last event.
func (f *Frame) last() uint64 { return f.first + uint64(f.n) - 1 }

// payloadLen is the length of the frame's record payload.
func (f *Frame) payloadLen() int {
	return uvarintLen(uint64(f.n)) + uvarintLen(uint64(len(f.tag))) + len(f.tag) + len(f.body)
}

func uvarintLen(x uint64) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}

// appendFrameRecord appends f as one framed item log record to b.
func appendFrameRecord(b []byte, f *Frame) []byte {
	start := len(b)
	b = binary.LittleEndian.AppendUint32(b, uint32(f.payloadLen())|frameFlag)
	b = append(b, 0, 0, 0, 0) // CRC, filled in below
	b = binary.LittleEndian.AppendUint64(b, f.last())
	b = binary.AppendUvarint(b, uint64(f.n))
	b = binary.AppendUvarint(b, uint64(len(f.tag)))
	b = append(b, f.tag...)
	b = append(b, f.body...)
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(b[start+8:], castagnoli))
	return b
}

// StoredFrame is a record as Replay finds it: one frame, or one event of
// the earlier single-event records (First == Last, no Tag). Its slices
// are valid only during the callback.
type StoredFrame struct {
	First, Last uint64
	Tag         []byte
	// After is the seq at or below which Each skips events: the state
	// already holds them.
	After  uint64
	n      int
	body   []byte // of a frame: (length uint32 | event)...
	single []byte // of a single-event record: the event
}

// Each calls fn for each event of the frame with seq > f.After, in order,
// and stops at fn's first error.
func (f *StoredFrame) Each(fn func(seq uint64, payload []byte) error) error {
	if f.body == nil {
		if f.First > f.After {
			return fn(f.First, f.single)
		}
		return nil
	}
	b := f.body
	for seq := f.First; seq <= f.Last; seq++ {
		n := binary.LittleEndian.Uint32(b) // lengths were checked by parseFrame
		if seq > f.After {
			if err := fn(seq, b[4:4+n]); err != nil {
				return err
			}
		}
		b = b[4+n:]
	}
	return nil
}

// events is how many events Each delivers.
func (f *StoredFrame) events() int {
	if f.Last <= f.After {
		return 0
	}
	return int(f.Last - max(f.After+1, f.First) + 1)
}

// parseFrame decodes the payload of a frame record whose seq is last, and
// checks that its events fill it exactly. reason says what is wrong.
func parseFrame(last uint64, p []byte) (f StoredFrame, reason string) {
	n, k := binary.Uvarint(p)
	if k <= 0 || n == 0 || n > last || n > uint64(len(p)) {
		return f, fmt.Sprintf("frame: bad event count (seq %d)", last)
	}
	p = p[k:]
	tl, k := binary.Uvarint(p)
	if k <= 0 || tl > uint64(len(p)-k) {
		return f, "frame: bad tag length"
	}
	f.Tag = p[k : k+int(tl)]
	f.body = p[k+int(tl):]
	f.First, f.Last, f.n = last-n+1, last, int(n)
	b := f.body
	for range n {
		if len(b) < 4 || uint64(binary.LittleEndian.Uint32(b)) > uint64(len(b)-4) {
			return StoredFrame{}, "frame: event length past its end"
		}
		b = b[4+binary.LittleEndian.Uint32(b):]
	}
	if len(b) != 0 {
		return StoredFrame{}, fmt.Sprintf("frame: %d bytes after its events", len(b))
	}
	return f, ""
}
