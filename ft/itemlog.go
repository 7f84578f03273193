package ft

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// ItemLogConfig tunes an ItemLog. The zero value of a field means its
// default (DefaultItemLogConfig).
type ItemLogConfig struct {
	// SegmentBytes is the size in bytes at which the log starts a new
	// segment file. Segments are the unit TruncateBefore deletes, so smaller
	// segments free space sooner. Default 64 MiB.
	SegmentBytes int64
	// MaxPayload is the largest payload in bytes Append accepts. Replay
	// treats a record claiming more as corrupt, so a damaged length never
	// allocates more than this. Default 16 MiB.
	MaxPayload int
	// BufferBytes is how many bytes Append buffers in memory before it
	// writes them to the file by itself. Default 256 KiB.
	BufferBytes int
}

// DefaultItemLogConfig returns the defaults.
func DefaultItemLogConfig() ItemLogConfig {
	return ItemLogConfig{SegmentBytes: 64 << 20, MaxPayload: 16 << 20, BufferBytes: 256 << 10}
}

// Validate fills zero fields with defaults and rejects negative ones.
func (c *ItemLogConfig) Validate() error {
	d := DefaultItemLogConfig()
	if c.SegmentBytes < 0 || c.MaxPayload < 0 || c.BufferBytes < 0 {
		return fmt.Errorf("ft: item log config: negative size in %+v", *c)
	}
	if c.SegmentBytes == 0 {
		c.SegmentBytes = d.SegmentBytes
	}
	if c.MaxPayload == 0 {
		c.MaxPayload = d.MaxPayload
	}
	if c.BufferBytes == 0 {
		c.BufferBytes = d.BufferBytes
	}
	if c.MaxPayload > 1<<30 {
		return fmt.Errorf("ft: item log config: MaxPayload %d above 1 GiB", c.MaxPayload)
	}
	return nil
}

// Errors of the item log.
var (
	ErrClosed   = errors.New("ft: item log closed")
	ErrSeqOrder = errors.New("ft: sequence number not above the last one")
	ErrTooLarge = errors.New("ft: payload larger than MaxPayload")
)

// tornReason starts the reason of a record that the end of its file cuts
// short.
const tornReason = "torn record"

// ReplayDamage is the error Replay returns when it met torn or corrupt
// records. It is informational: every intact record before the damage was
// delivered, and so were the later segments. It wraps ErrCorrupt.
type ReplayDamage struct {
	// Files has one entry per damaged segment, oldest first.
	Files []*CorruptError
	// TornTail is set when the only damage is a record cut short at the
	// end of the newest segment: what a crash during an append leaves.
	// Those records were never made durable by a Commit that returned,
	// unless Committed says they were (a file cut short by other means).
	TornTail bool
	// Skipped are the sequence numbers (inclusive ranges, above the
	// replay's after) the damaged records held: between the last intact
	// record before the damage and the first after it.
	Skipped [][2]uint64
	// TailFrom, when not 0, is the first sequence number of damage that
	// runs to the end of the log: how far it went is not known.
	TailFrom uint64
}

func (d *ReplayDamage) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ft: item log: %d damaged segment(s)", len(d.Files))
	for _, e := range d.Files {
		b.WriteString("; ")
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap returns ErrCorrupt.
func (d *ReplayDamage) Unwrap() error { return ErrCorrupt }

// ItemLog is an append-only log of events for one Key: AF-Stream's item
// backup. Records are opaque payloads with the event's sequence number, or
// frames of events with consecutive sequence numbers (AppendFrame), which
// one checksum makes whole or absent after a crash. They are stored in
// segment files <dir>/<job>/<part>/items-<first seq>.log, next to the
// backups of the same key in a DirStore on the same dir.
//
// Durability has two levels: Flush hands buffered records to the operating
// system (they survive the process being killed, not a power cut) and
// Commit also fsyncs them. Concurrent Commit calls share one fsync.
//
// Damage is never written over: a log always appends to a new segment
// after OpenItemLog, so a torn tail left by a crash stays where it is and
// Replay reports it.
//
// ItemLog is safe for concurrent use. Appends must come in increasing seq
// order, so callers that append from several goroutines serialise their
// Append calls themselves (Commit needs no such care). Open one ItemLog per
// key per process. After Close, Append, Flush, Replay and TruncateBefore
// return ErrClosed, and so does a Commit with records still to sync.
//
// A failed write or fsync is sticky: every later call returns that error,
// because what reached the disk is then unknown. Close the log and open it
// again; it continues in a new segment.
type ItemLog struct {
	dir string
	cfg ItemLogConfig

	// mu guards everything below. It is not held during fsync, so appends
	// go on while a Commit waits for the disk.
	mu   sync.Mutex
	cond sync.Cond // on mu: signalled when a group commit ends
	// segs are the segment files, oldest first; the last one is the file
	// being appended to when f != nil.
	segs []segment
	f    *os.File // the active segment, nil until the first Append after open, a roll or a truncation
	buf  []byte   // records appended but not yet written to f
	// lastSeq is the highest seq appended or found on open.
	lastSeq uint64
	// appended and written count bytes ever given to Append and written to
	// a file; durable is the part of written known to be fsynced. Commit
	// waits until durable reaches the value appended had when it was called.
	appended, written, durable int64
	syncing                    bool     // a Commit leader is fsyncing
	syncs                      int64    // group commits done (fsync rounds)
	unsynced                   []string // rolled segments written but not yet fsynced
	dirDirty                   bool     // a segment was created since the directory was last fsynced
	err                        error    // sticky: after a failed write or fsync nothing more is accepted
	closed                     bool
	hook                       func(first, last uint64) error // SetAppendHook
	// committed is the mark (<dir>/committed) of the last seq a Commit
	// that returned made durable, committedSeq its value, and
	// committedKnown whether it is known (an intact mark, or a new log).
	committed      *SeqMark
	committedSeq   uint64
	committedKnown bool
}

// SetAppendHook is for tests: fn is called by every Append and AppendFrame
// before it buffers its record (seqs first to last), under the log's lock;
// an error from fn is returned instead, and nothing is appended. A test
// makes a writer "crash" between the parts of a request with it.
func (l *ItemLog) SetAppendHook(fn func(first, last uint64) error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hook = fn
}

// segment is one segment file.
type segment struct {
	first uint64 // seq in the name: the first record written to it
	last  uint64 // highest intact seq when known, else 0
	size  int64  // bytes in the file (for the active segment: written to it)
}

const (
	segPrefix = "items-"
	segSuffix = ".log"
)

func segName(first uint64) string { return fmt.Sprintf("%s%020d%s", segPrefix, first, segSuffix) }

func parseSegName(name string) (uint64, bool) {
	s, ok := strings.CutPrefix(name, segPrefix)
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, segSuffix)
	if !ok || len(s) != 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// OpenItemLog opens the item log of key under dir with the default config.
func OpenItemLog(dir string, key Key) (*ItemLog, error) {
	return OpenItemLogConfig(dir, key, ItemLogConfig{})
}

// OpenItemLogConfig opens (creating it if needed) the item log of key under
// dir. It reads the newest segments to find LastSeq; a segment that holds
// no intact record at all and is the newest is deleted when it is what a
// crash while its first record was written leaves (a torn first record),
// and kept as damage otherwise.
func OpenItemLogConfig(dir string, key Key, cfg ItemLogConfig) (*ItemLog, error) {
	if err := key.validate(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	kdir, err := makeKeyDir(dir, key)
	if err != nil {
		return nil, fmt.Errorf("ft: open item log %s: %w", key, err)
	}
	l := &ItemLog{dir: kdir, cfg: cfg}
	l.cond.L = &l.mu
	if err := l.openSegments(key); err != nil {
		return nil, err
	}
	if err := l.openCommitted(); err != nil {
		return nil, fmt.Errorf("ft: open item log %s: %w", key, err)
	}
	return l, nil
}

// openCommitted opens the log's commit mark and reads it: it is known
// when intact, or when the mark is new and so is the log.
func (l *ItemLog) openCommitted() error {
	m, created, err := openMark(filepath.Join(l.dir, committedMark))
	if err != nil {
		return err
	}
	l.committed = m
	if created {
		l.committedKnown = len(l.segs) == 0
		return nil
	}
	l.committedSeq, err = m.Read()
	l.committedKnown = err == nil
	return nil
}

// committedMark names the file of an item log's commit mark.
const committedMark = "committed"

// Committed returns the last seq a Commit that returned had made durable,
// across restarts: a record at or below it whose replay finds it missing
// or damaged was acknowledged (mode exact answers after the Commit). The
// mark is written in place after each Commit without an fsync of its
// own, so it survives the process being killed; after a power cut it may
// be behind, or damaged (known is then false).
func (l *ItemLog) Committed() (seq uint64, known bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.committedSeq, l.committedKnown
}

// openSegments lists the log's segments and finds LastSeq.
func (l *ItemLog) openSegments(key Key) error {
	kdir := l.dir
	entries, err := os.ReadDir(kdir)
	if err != nil {
		return fmt.Errorf("ft: open item log %s: %w", key, err)
	}
	for _, e := range entries {
		first, ok := parseSegName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return fmt.Errorf("ft: open item log %s: %w", key, err)
		}
		l.segs = append(l.segs, segment{first: first, size: info.Size()})
	}
	slices.SortFunc(l.segs, func(a, b segment) int { return cmp.Compare(a.first, b.first) })
	// Find LastSeq from the newest segment with an intact record.
	for len(l.segs) > 0 {
		i := len(l.segs) - 1
		path := l.path(l.segs[i].first)
		last, n, err := l.scan(path, l.segs[i], 0, nil)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			return fmt.Errorf("ft: open item log %s: %w", key, err)
		}
		if n > 0 {
			l.segs[i].last = last
			l.lastSeq = last
			break
		}
		if !l.tornFirstRecord(path, l.segs[i]) {
			// Damage, not a crash's remains: kept (replay reports it), and
			// appends go on above what its name says it held.
			l.lastSeq = l.segs[i].first
			break
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("ft: open item log %s: %w", key, err)
		}
		l.segs = l.segs[:i]
	}
	return nil
}

// tornFirstRecord says whether the segment s at path, which holds no
// intact record, is what a crash while its first record was written
// leaves: less than a record header, or a header of the segment's first
// record (a frame's seq is its last event's, which no segment puts 2^32
// past its first) whose record, of at most MaxPayload bytes, runs past
// the end of the file.
func (l *ItemLog) tornFirstRecord(path string, s segment) bool {
	if s.size < recordHeaderLen {
		return true
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var hdr [recordHeaderLen]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		return false
	}
	h := parseRecordHeader(hdr[:])
	size := int64(h.n &^ frameFlag)
	return h.seq >= s.first && h.seq-s.first <= 1<<32 && size <= int64(l.cfg.MaxPayload) && size > s.size-recordHeaderLen
}

func (l *ItemLog) path(first uint64) string { return filepath.Join(l.dir, segName(first)) }

// Append adds one record. It is buffered: see Flush and Commit. seq must be
// above every seq appended or found on open (ErrSeqOrder otherwise), and
// payload at most MaxPayload bytes. The log does not keep payload.
func (l *ItemLog) Append(seq uint64, payload []byte) error {
	return l.appendRecord(seq, seq, len(payload), func(b []byte) []byte { return appendRecord(b, seq, payload) })
}

// AppendFrame adds the events of f as one record, seqs f's first on: after
// a crash Replay delivers all of them or none. Like Append it is buffered,
// its first seq must be above every seq appended, and its record at most
// MaxPayload bytes. The log does not keep f; an empty frame is a no-op.
func (l *ItemLog) AppendFrame(f *Frame) error {
	if f.n == 0 {
		return nil
	}
	return l.appendRecord(f.first, f.last(), f.payloadLen(), func(b []byte) []byte { return appendFrameRecord(b, f) })
}

// appendRecord buffers the record that encode appends, whose events have
// seqs first to last and whose payload has n bytes.
func (l *ItemLog) appendRecord(first, last uint64, n int, encode func([]byte) []byte) error {
	if n > l.cfg.MaxPayload {
		return fmt.Errorf("%w: %d bytes", ErrTooLarge, n)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	if first <= l.lastSeq {
		return fmt.Errorf("%w: %d after %d", ErrSeqOrder, first, l.lastSeq)
	}
	if l.hook != nil {
		if err := l.hook(first, last); err != nil {
			return err
		}
	}
	recLen := int64(recordHeaderLen + n)
	if l.f != nil {
		if used := l.segs[len(l.segs)-1].size + int64(len(l.buf)); used > 0 && used+recLen > l.cfg.SegmentBytes {
			if err := l.roll(); err != nil {
				return err
			}
		}
	}
	if l.f == nil {
		if err := l.create(first); err != nil {
			return err
		}
	}
	l.buf = encode(l.buf)
	l.lastSeq = last
	l.segs[len(l.segs)-1].last = last
	l.appended += recLen
	if len(l.buf) >= l.cfg.BufferBytes {
		return l.writeBuf()
	}
	return nil
}

// usable reports why the log takes no more work. Called with mu held.
func (l *ItemLog) usable() error {
	if l.closed {
		return ErrClosed
	}
	return l.err
}

// create starts a new active segment whose first record is seq. Called
// with mu held and f == nil.
func (l *ItemLog) create(seq uint64) error {
	f, err := os.OpenFile(l.path(seq), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return l.fail(err)
	}
	l.f = f
	l.segs = append(l.segs, segment{first: seq})
	l.dirDirty = true
	return nil
}

// roll writes out and closes the active segment; the next Append creates a
// new one. The closed file is fsynced by the next Commit. Called with mu held.
func (l *ItemLog) roll() error {
	if err := l.writeBuf(); err != nil {
		return err
	}
	path := l.f.Name()
	if err := l.f.Close(); err != nil {
		return l.fail(err)
	}
	l.f = nil
	if l.written > l.durable {
		l.unsynced = append(l.unsynced, path)
	}
	return nil
}

// writeBuf writes the buffer to the active segment. Called with mu held.
func (l *ItemLog) writeBuf() error {
	if len(l.buf) == 0 {
		return nil
	}
	n, err := l.f.Write(l.buf)
	if err != nil && n > 0 && l.f.Truncate(l.segs[len(l.segs)-1].size) == nil {
		// A record cut short (a full disk) would read as damage in the
		// middle of the log once the log is reopened and appends after
		// it. None of the buffer was ever durable: cut it all off (a
		// truncation needs no space).
		n = 0
	}
	l.segs[len(l.segs)-1].size += int64(n)
	if err != nil {
		// A partial record may be on disk now; never append after it.
		return l.fail(err)
	}
	l.written += int64(n)
	l.buf = l.buf[:0]
	return nil
}

// fail makes err sticky. After a failed write or fsync the state of the
// file is unknown (a retried fsync can report success for pages the kernel
// already dropped), so the log refuses further work; reopening it starts a
// fresh segment. Called with mu held.
func (l *ItemLog) fail(err error) error {
	if l.err == nil {
		l.err = fmt.Errorf("ft: item log %s: %w", l.dir, err)
	}
	return l.err
}

// Flush writes buffered records to the segment file: they survive the
// process being killed, not a power cut.
func (l *ItemLog) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	return l.writeBuf()
}

// Commit makes every record appended before the call durable (written and
// fsynced, with the directory entries of new segments). Concurrent callers
// share fsyncs: one caller (the leader) syncs everything written so far
// while the others wait, and a caller whose records the leader's sync did
// not cover becomes the next leader.
func (l *ItemLog) Commit() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	target := l.appended
	for l.durable < target {
		if err := l.usable(); err != nil {
			return err
		}
		if l.syncing {
			l.cond.Wait()
			continue
		}
		if err := l.writeBuf(); err != nil {
			return err
		}
		l.syncing = true
		pos, seq, f, paths, dirty := l.written, l.lastSeq, l.f, l.unsynced, l.dirDirty
		l.unsynced, l.dirDirty = nil, false
		if f != nil {
			// The active segment last: a roll during the sync closes f.
			paths = append(paths, f.Name())
		}
		l.mu.Unlock()
		err := syncAll(l.dir, f, paths, dirty)
		l.mu.Lock()
		l.syncing = false
		l.syncs++
		if err != nil {
			l.fail(err)
		} else {
			l.durable = max(l.durable, pos)
			l.markCommitted(seq)
		}
		l.cond.Broadcast()
	}
	return nil
}

// markCommitted moves the commit mark to seq. A mark that cannot be
// written is no longer known: recovery then cannot tell acknowledged
// records from others, and says so. Called with mu held.
func (l *ItemLog) markCommitted(seq uint64) {
	if seq <= l.committedSeq {
		return
	}
	l.committedSeq = seq
	if l.committed.Write(seq) != nil {
		l.committedKnown = false
	}
}

// syncAll fsyncs the segments in paths and, if a segment was created, the
// directory. f, when not nil, is the active segment and the last of paths:
// it is synced through its descriptor, or, if a concurrent roll, truncation
// or Close closed it first, reopened by name like the rolled segments
// (fsync acts on the file, not the descriptor). A segment that
// TruncateBefore deleted needs no sync: its records were consumed.
func syncAll(dir string, f *os.File, paths []string, dirDirty bool) error {
	if f != nil {
		err := f.Sync()
		if err != nil && !errors.Is(err, os.ErrClosed) {
			return err
		}
		if err == nil {
			paths = paths[:len(paths)-1]
		}
	}
	for _, p := range paths {
		r, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		err = r.Sync()
		r.Close()
		if err != nil {
			return err
		}
	}
	if dirDirty {
		return syncDir(dir)
	}
	return nil
}

// Replay calls fn for every record with seq > after, in seq order across
// segments, and returns how many it delivered. payload is valid only until
// fn returns. An error from fn stops the replay and is returned as is.
// Records at or below the last delivered seq are skipped, so fn always sees
// strictly increasing seqs.
//
// Damage: a torn or corrupt record is passed over, and the replay goes on
// from the next intact record of its segment (the next offset where a
// record's length, sequence number and checksum hold), and with the later
// segments, which were written after the damage (a reopened log starts a
// new segment): the records lost are the damaged ones, and when the
// damage is the torn tail of a crash, they are records whose Commit never
// returned (Committed tells). Replay then returns n and a *ReplayDamage
// (errors.Is(err, ErrCorrupt)) that callers log and go on from. Inside a
// segment, a record whose seq is not above the one before it, or a first
// record whose seq differs from the segment's name, counts as corruption.
//
// Replay sees the records appended before it was called (it flushes the
// buffer first) and may run concurrently with Append.
func (l *ItemLog) Replay(after uint64, fn func(seq uint64, payload []byte) error) (n int, err error) {
	return l.ReplayFrames(after, func(f *StoredFrame) error { return f.Each(fn) })
}

// ReplayFrames is Replay by record: it calls fn for every record (frame,
// or single event) with events above after, in seq order, with the frame's
// After set so that its Each delivers only those, and returns how many
// events that is. Damage, concurrency and errors are as for Replay.
func (l *ItemLog) ReplayFrames(after uint64, fn func(f *StoredFrame) error) (n int, err error) {
	l.mu.Lock()
	if err := l.usable(); err != nil {
		l.mu.Unlock()
		return 0, err
	}
	if err := l.writeBuf(); err != nil {
		l.mu.Unlock()
		return 0, err
	}
	segs := slices.Clone(l.segs)
	l.mu.Unlock()

	var damage ReplayDamage
	prev := after
	for i, s := range segs {
		// Every record of s is below the next segment's first seq: skip s
		// when that is all at or below after.
		if i+1 < len(segs) && segs[i+1].first <= after+1 {
			continue
		}
		last, k, sd, err := l.scanDamage(l.path(s.first), s, prev, fn)
		n += k
		if k > 0 {
			prev = last
		}
		var ce *CorruptError
		switch {
		case errors.As(err, &ce):
			damage.Files = append(damage.Files, ce)
			damage.TornTail = len(damage.Files) == 1 && i == len(segs)-1 && strings.HasPrefix(ce.Reason, tornReason)
			damage.Skipped = append(damage.Skipped, sd.skipped...)
			switch {
			case sd.openFrom == 0:
			case i+1 < len(segs):
				damage.Skipped = append(damage.Skipped, [2]uint64{sd.openFrom, segs[i+1].first - 1})
			default:
				damage.TailFrom = sd.openFrom
			}
		case errors.Is(err, fs.ErrNotExist):
			// deleted by a concurrent TruncateBefore: consumed records
		case err != nil:
			return n, err
		}
	}
	if len(damage.Files) > 0 {
		damage.Skipped = clipRanges(damage.Skipped, after)
		if damage.TailFrom != 0 {
			damage.TailFrom = max(damage.TailFrom, after+1)
		}
		return n, &damage
	}
	return n, nil
}

// clipRanges keeps the parts of inclusive ranges above after.
func clipRanges(rs [][2]uint64, after uint64) [][2]uint64 {
	out := rs[:0]
	for _, r := range rs {
		if r[1] > after && r[1] >= r[0] {
			out = append(out, [2]uint64{max(r[0], after+1), r[1]})
		}
	}
	return out
}

// scan reads the intact records of one segment, at most s.size bytes (so a
// concurrent append is not read half-written), and calls fn for those with
// seq > after (fn may be nil). It returns the last intact seq delivered to
// fn (or seen, when fn is nil), how many, and a *CorruptError for the
// first damaged record. Damage does not end the scan: it reads on from
// the next intact record (resync), so that one damaged record costs its
// own events and no others.
func (l *ItemLog) scan(path string, s segment, after uint64, fn func(*StoredFrame) error) (last uint64, n int, err error) {
	last, n, _, err = l.scanDamage(path, s, after, fn)
	return last, n, err
}

// segmentDamage is what scanDamage found damaged in a segment: the
// sequence numbers of the records passed over, and, when the damage runs
// to its end, the first sequence number it may hold (openFrom).
type segmentDamage struct {
	skipped  [][2]uint64
	openFrom uint64
}

// scanDamage is scan, which also says which sequence numbers the damage
// took.
func (l *ItemLog) scanDamage(path string, s segment, after uint64, fn func(*StoredFrame) error) (last uint64, n int, sd segmentDamage, err error) {
	file, err := os.Open(path)
	if err != nil {
		return 0, 0, sd, err
	}
	defer file.Close()
	r := bufio.NewReaderSize(io.LimitReader(file, s.size), 64<<10)
	var (
		hdr     [recordHeaderLen]byte
		payload []byte
		off     int64
		prev    uint64 // last seq in this segment
		damage  *CorruptError
		regions int
	)
	for {
		fr, reason, err := l.readRecord(r, hdr[:], &payload, s, off, prev)
		if err == io.EOF {
			break
		}
		if err != nil {
			return last, n, sd, err
		}
		if reason != "" {
			next, found, err := l.resync(file, s, off, prev)
			if err != nil {
				return last, n, sd, err
			}
			from := max(prev+1, s.first)
			regions++
			if damage == nil {
				damage = &CorruptError{Path: path, Offset: off, Reason: reason}
				if found {
					damage.Reason += fmt.Sprintf("; %d bytes passed over, read on from the next intact record", next-off)
				}
			}
			if !found {
				sd.openFrom = from
				break
			}
			if nf := firstSeqAt(file, next); nf > from {
				sd.skipped = append(sd.skipped, [2]uint64{from, nf - 1})
			}
			off = next
			if _, err := file.Seek(off, io.SeekStart); err != nil {
				return last, n, sd, err
			}
			r.Reset(io.LimitReader(file, s.size-off))
			continue
		}
		prev, fr.After = fr.Last, after
		if fn == nil {
			last = fr.Last
			n++
		} else if fr.Last > after {
			if err := fn(&fr); err != nil {
				return last, n, sd, err
			}
			last = fr.Last
			n += fr.events()
		}
		off += recordHeaderLen + int64(len(payload))
	}
	if damage == nil {
		return last, n, sd, nil
	}
	if regions > 1 {
		damage.Reason += fmt.Sprintf(" (%d damaged regions in the segment)", regions)
	}
	return last, n, sd, damage
}

// firstSeqAt is the first sequence number of the intact record at off
// (resync found it): a frame's header holds its last, and its payload
// the count.
func firstSeqAt(file *os.File, off int64) uint64 {
	var b [recordHeaderLen + binary.MaxVarintLen64]byte
	k, _ := file.ReadAt(b[:], off)
	if k < recordHeaderLen {
		return 0
	}
	h := parseRecordHeader(b[:])
	if h.n&frameFlag == 0 {
		return h.seq
	}
	count, m := binary.Uvarint(b[recordHeaderLen:k])
	if m <= 0 || count == 0 || count > h.seq {
		return 0
	}
	return h.seq - count + 1
}

// readRecord reads the record at off, after the segment's record of seq
// prev. A damaged record is a reason; err is io.EOF at the segment's end,
// or an I/O error.
func (l *ItemLog) readRecord(r *bufio.Reader, hdr []byte, payload *[]byte, s segment, off int64, prev uint64) (fr StoredFrame, reason string, err error) {
	if _, err := io.ReadFull(r, hdr); err != nil {
		if err == io.ErrUnexpectedEOF {
			return fr, tornReason + " header", nil
		}
		return fr, "", err
	}
	h := parseRecordHeader(hdr)
	size := int64(h.n &^ frameFlag)
	if size > int64(l.cfg.MaxPayload) {
		return fr, fmt.Sprintf("record length %d above the %d limit", size, l.cfg.MaxPayload), nil
	}
	if left := s.size - off - recordHeaderLen; size > left {
		return fr, fmt.Sprintf("%s: length %d, %d bytes left", tornReason, size, left), nil
	}
	if int64(cap(*payload)) < size {
		*payload = make([]byte, size)
	}
	*payload = (*payload)[:size]
	if _, err := io.ReadFull(r, *payload); err != nil {
		if err == io.ErrUnexpectedEOF || err == io.EOF {
			return fr, tornReason, nil
		}
		return fr, "", err
	}
	fr, reason = checkRecord(hdr, *payload)
	switch {
	case reason != "":
	case off == 0 && fr.First != s.first:
		reason = fmt.Sprintf("first seq %d, the name says %d", fr.First, s.first)
	case off > 0 && fr.First <= prev:
		reason = fmt.Sprintf("seq %d not above %d", fr.First, prev)
	}
	return fr, reason, nil
}

// checkRecord checks the record of header hdr and payload p (its CRC, and
// a frame's events) and decodes it; reason says what is wrong.
func checkRecord(hdr, p []byte) (fr StoredFrame, reason string) {
	h := parseRecordHeader(hdr)
	if h.n&frameFlag == 0 {
		fr = StoredFrame{First: h.seq, Last: h.seq, single: p}
	} else if fr, reason = parseFrame(h.seq, p); reason != "" {
		// The structure before the checksum: resync tries every offset,
		// and a walk of a few lengths rejects garbage sooner than the
		// checksum of a long payload.
		return StoredFrame{}, reason
	}
	if !h.check(hdr, p) {
		return StoredFrame{}, "CRC mismatch"
	}
	return fr, ""
}

// resync finds the next intact record after the damaged one at off: the
// first offset past it where a record header's length fits, its seq is
// above prev (and the segment's first), and its checksum holds. found is
// false when there is none before the segment's end.
func (l *ItemLog) resync(file *os.File, s segment, off int64, prev uint64) (next int64, found bool, err error) {
	if s.size-off-1 < recordHeaderLen {
		return 0, false, nil
	}
	b := make([]byte, s.size-off-1)
	if _, err := file.ReadAt(b, off+1); err != nil && err != io.EOF {
		return 0, false, err
	}
	low := max(prev+1, s.first)
	for i := 0; i+recordHeaderLen <= len(b); i++ {
		h := parseRecordHeader(b[i:])
		size := int(h.n &^ frameFlag)
		// Cheap tests first. No segment skips 2^32 sequence numbers between
		// records: a random seq passes that test once in 2^32 offsets.
		if size > l.cfg.MaxPayload || size > len(b)-i-recordHeaderLen || h.seq < low || h.seq-low > 1<<32 {
			continue
		}
		fr, reason := checkRecord(b[i:i+recordHeaderLen], b[i+recordHeaderLen:i+recordHeaderLen+size])
		if reason == "" && fr.First > prev && fr.First >= s.first {
			return off + 1 + int64(i), true, nil
		}
	}
	return 0, false, nil
}

// TruncateBefore deletes the segments whose records all have seq <= seq:
// they were consumed by a state backup. The active segment goes too when
// everything appended is consumed; the next Append starts a new one.
func (l *ItemLog) TruncateBefore(seq uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	var del []uint64
	for i, s := range l.segs {
		active := l.f != nil && i == len(l.segs)-1
		// The highest seq of s: known, or bounded by the next segment's first.
		last := s.last
		if i+1 < len(l.segs) {
			last = l.segs[i+1].first - 1
		}
		if active {
			last = l.lastSeq
		}
		if last > seq {
			break
		}
		if active {
			if err := l.writeBuf(); err != nil {
				return err
			}
			if err := l.f.Close(); err != nil {
				return l.fail(err)
			}
			l.f = nil
		}
		del = append(del, s.first)
	}
	for _, first := range del {
		if err := os.Remove(l.path(first)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return l.fail(err)
		}
		l.segs = l.segs[1:]
	}
	return nil
}

// LastSeq returns the highest seq appended, or found intact on open.
func (l *ItemLog) LastSeq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastSeq
}

// Syncs returns how many group commits (rounds of fsync) the log has done;
// with the number of Commit calls it shows how well commits are grouped.
func (l *ItemLog) Syncs() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.syncs
}

// Bytes returns the size of the log: segment files plus buffered records.
func (l *ItemLog) Bytes() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := int64(len(l.buf))
	for _, s := range l.segs {
		n += s.size
	}
	return n
}

// Close writes out buffered records (without fsync: call Commit first for
// that) and closes the log. Safe to call twice; Commits waiting for it
// return ErrClosed.
func (l *ItemLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	var err error
	if l.err == nil {
		err = l.writeBuf()
	}
	if l.f != nil {
		if cerr := l.f.Close(); err == nil && cerr != nil {
			err = cerr
		}
		l.f = nil
	}
	if cerr := l.committed.Close(); err == nil && cerr != nil {
		err = cerr
	}
	l.closed = true
	l.cond.Broadcast()
	return err
}
