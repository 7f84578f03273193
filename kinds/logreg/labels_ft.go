package logreg

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/mlstream/mlstream/learners"
)

// Pending predictions under fault tolerance. A backup is a cut at each
// partition's last merge (the model holds the events up to then), so the
// pending sets it holds must be those of the same moment: each partition
// journals its changes and folds them, at its merge, into its committed
// set (entries are shared, never copied). Backups write the committed
// sets after the model: in full, or the changes since the previous
// backup. A change of a pending set moves the state divergence by Alpha,
// as one event does: losing it loses one label's learning.

// committedPending is a partition's pending set as of its last merge;
// under the job's merge lock.
type committedPending struct {
	m      map[string]*pendingEntry
	counts labelCounts
	// ops are the changes since the last backup, for the next delta.
	ops []pendingOp
}

func newCommittedPending() *committedPending {
	return &committedPending{m: map[string]*pendingEntry{}}
}

// commitPending folds the partition's journal into its committed set;
// under j.merge.
func (p *logregPart) commitPending() {
	s := p.pend
	if !s.journaled {
		return
	}
	p.job.committed[p.index].apply(s.counts, s.journal, false, true)
	s.clearJournal()
}

func (s *pendingSet) clearJournal() {
	clear(s.journal)
	s.journal = s.journal[:0]
}

// apply makes counts the set's and applies ops (after emptying the set
// when full); keep keeps the ops for the next delta backup.
func (c *committedPending) apply(counts labelCounts, ops []pendingOp, full, keep bool) {
	if full {
		clear(c.m)
	}
	for _, op := range ops {
		if op.add != nil {
			c.m[op.add.id] = op.add
		} else {
			delete(c.m, op.del)
		}
	}
	if keep {
		c.ops = append(c.ops, ops...)
	}
	c.counts = counts
}

// pendingDivergence is the committed changes since the last backup, in
// events.
func (j *logregJob) pendingDivergence() float64 {
	n := 0
	for _, c := range j.committed {
		n += len(c.ops)
	}
	return float64(n) * j.Alpha()
}

// The pending section of a backup, after the model.
const (
	pendingSection = 'P'
	pendingFull    = 1
	pendingChanges = 0
	opAdd, opDel   = 1, 0
	// maxEntryFeatures bounds an entry's features when reading a backup.
	maxEntryFeatures = 1 << 24
)

// backupPending writes the committed pending sets: in full when full or
// when the changes outnumber the entries, else the changes.
func (j *logregJob) backupPending(w io.Writer, full bool) error {
	for _, c := range j.committed {
		full = full || len(c.ops) > len(c.m)
	}
	b := []byte{pendingSection, pendingChanges}
	if full {
		b[1] = pendingFull
	}
	b = binary.AppendUvarint(b, uint64(len(j.committed)))
	for _, c := range j.committed {
		if full {
			b = appendFull(b, c)
		} else {
			b = appendChanges(b, &c.counts, c.ops)
		}
		clear(c.ops)
		c.ops = c.ops[:0]
	}
	_, err := w.Write(b)
	return err
}

// appendFull appends a set's counts and entries.
func appendFull(b []byte, c *committedPending) []byte {
	b = appendCounts(b, &c.counts)
	b = binary.AppendUvarint(b, uint64(len(c.m)))
	for _, e := range c.m {
		b = appendEntry(b, e)
	}
	return b
}

// appendChanges appends counts and changes of a set.
func appendChanges(b []byte, counts *labelCounts, ops []pendingOp) []byte {
	b = appendCounts(b, counts)
	b = binary.AppendUvarint(b, uint64(len(ops)))
	for _, op := range ops {
		if op.add != nil {
			b = appendEntry(append(b, opAdd), op.add)
		} else {
			b = appendString(append(b, opDel), op.del)
		}
	}
	return b
}

func appendCounts(b []byte, c *labelCounts) []byte {
	for _, n := range []int64{c.Held, c.Joined, c.Unknown, c.Expired, c.Evicted, c.Duplicates} {
		b = binary.AppendUvarint(b, uint64(n))
	}
	return b
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func appendEntry(b []byte, e *pendingEntry) []byte {
	b = appendString(b, e.id)
	b = binary.AppendVarint(b, e.ts)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(e.prob))
	b = binary.AppendUvarint(b, uint64(len(e.feats)))
	for _, f := range e.feats {
		b = binary.LittleEndian.AppendUint64(b, f.Hash)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f.Value))
	}
	return b
}

var errBadPending = errors.New("logreg state: malformed pending labels section")

// recoverPending applies the pending section of a backup; a backup
// without one (written before delayed labels) leaves the sets alone.
func (j *logregJob) recoverPending(r io.Reader) error {
	br := bufio.NewReader(r)
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err == io.EOF {
		return nil
	} else if err != nil || hdr[0] != pendingSection {
		return errBadPending
	}
	n, err := binary.ReadUvarint(br)
	if err != nil || n != uint64(len(j.committed)) {
		return fmt.Errorf("%w: %d partitions, the job has %d", errBadPending, n, len(j.committed))
	}
	full := hdr[1] == pendingFull
	for _, c := range j.committed {
		counts, ops, err := readPart(br, full)
		if err != nil {
			return err
		}
		c.apply(counts, ops, full, false)
	}
	return nil
}

// readPart reads one partition's counts and set (full: every entry as
// an addition) or changes.
func readPart(br *bufio.Reader, full bool) (labelCounts, []pendingOp, error) {
	var counts [6]int64
	for i := range counts {
		v, err := binary.ReadUvarint(br)
		if err != nil {
			return labelCounts{}, nil, errBadPending
		}
		counts[i] = int64(v)
	}
	c := labelCounts{counts[0], counts[1], counts[2], counts[3], counts[4], counts[5]}
	n, err := binary.ReadUvarint(br)
	if err != nil {
		return c, nil, errBadPending
	}
	// Grown as read: a count the bytes do not back allocates nothing.
	var ops []pendingOp
	for range n {
		op := byte(opAdd)
		if !full {
			if op, err = br.ReadByte(); err != nil {
				return c, nil, errBadPending
			}
		}
		switch op {
		case opDel:
			id, err := readString(br)
			if err != nil {
				return c, nil, err
			}
			ops = append(ops, pendingOp{del: id})
		case opAdd:
			e, err := readEntry(br)
			if err != nil {
				return c, nil, err
			}
			ops = append(ops, pendingOp{add: e})
		default:
			return c, nil, errBadPending
		}
	}
	return c, ops, nil
}

func readString(br *bufio.Reader) (string, error) {
	n, err := binary.ReadUvarint(br)
	if err != nil || n > MaxIDBytes {
		return "", errBadPending
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(br, b); err != nil {
		return "", errBadPending
	}
	return string(b), nil
}

func readEntry(br *bufio.Reader) (*pendingEntry, error) {
	id, err := readString(br)
	if err != nil {
		return nil, err
	}
	e := &pendingEntry{id: id}
	if e.ts, err = binary.ReadVarint(br); err != nil {
		return nil, errBadPending
	}
	var w [16]byte
	if _, err := io.ReadFull(br, w[:8]); err != nil {
		return nil, errBadPending
	}
	e.prob = math.Float64frombits(binary.LittleEndian.Uint64(w[:8]))
	nf, err := binary.ReadUvarint(br)
	if err != nil || nf > maxEntryFeatures {
		return nil, errBadPending
	}
	// Grown as read: a count the bytes do not back allocates nothing.
	for range nf {
		if _, err := io.ReadFull(br, w[:]); err != nil {
			return nil, errBadPending
		}
		e.feats = append(e.feats, learners.Feature{Hash: binary.LittleEndian.Uint64(w[:8]),
			Value: math.Float64frombits(binary.LittleEndian.Uint64(w[8:]))})
	}
	return e, nil
}

// restorePending makes each partition's pending set its committed one,
// after recovery.
func (j *logregJob) restorePending() {
	for i := range j.parts {
		j.committed[i].ops = j.committed[i].ops[:0]
		j.restorePart(i)
	}
}

// restorePart makes partition i's pending set its committed one: oldest
// first in the FIFO, the clock at the newest. Under j.merge, or before
// the partitions start.
func (j *logregJob) restorePart(i int) {
	c := j.committed[i]
	s := j.newPending()
	s.counts = c.counts
	for _, e := range c.m {
		s.live[e.id] = e
		s.fifo = append(s.fifo, e)
		s.bytes += e.bytes()
		s.clock = max(s.clock, e.ts)
	}
	slices.SortFunc(s.fifo, func(a, b *pendingEntry) int { return int(min(max(a.ts-b.ts, -1), 1)) })
	s.publish()
	j.parts[i].pend = s
}

// Held predictions in cluster mode: a partition's deltas carry the
// changes of its held set since its previous delta (share.go), and every
// node applies them to its committed copy of the set.

// heldChanges are a delta's changes of a partition's held set.
type heldChanges struct {
	counts labelCounts
	ops    []pendingOp
}

// heldChanged reports whether the partition's held set changed since its
// last delta.
func (p *logregPart) heldChanged() bool {
	return len(p.pend.journal) > 0 || p.pend.counts != p.share.sentCounts
}

// heldChanges encodes the changes for the next delta and clears the
// journal (a failed send restores the set: sendFailed); nil when none.
func (p *logregPart) heldChanges() []byte {
	if !p.heldChanged() {
		return nil
	}
	b := appendChanges(nil, &p.pend.counts, p.pend.journal)
	p.share.encCounts = p.pend.counts
	p.pend.clearJournal()
	return b
}

func readHeldChanges(b []byte) (*heldChanges, error) {
	br := bufio.NewReader(bytes.NewReader(b))
	counts, ops, err := readPart(br, false)
	if err != nil {
		return nil, err
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return nil, errBadPending
	}
	return &heldChanges{counts, ops}, nil
}
