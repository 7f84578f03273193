package logreg

import (
	"bufio"
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
	s, c := p.pend, p.job.committed[p.index]
	if !s.journaled {
		return
	}
	for _, op := range s.journal {
		if op.add != nil {
			c.m[op.add.id] = op.add
		} else {
			delete(c.m, op.del)
		}
	}
	c.ops = append(c.ops, s.journal...)
	c.counts = s.counts
	clear(s.journal)
	s.journal = s.journal[:0]
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
		b = appendCounts(b, &c.counts)
		if full {
			b = binary.AppendUvarint(b, uint64(len(c.m)))
			for _, e := range c.m {
				b = appendEntry(b, e)
			}
		} else {
			b = binary.AppendUvarint(b, uint64(len(c.ops)))
			for _, op := range c.ops {
				if op.add != nil {
					b = appendEntry(append(b, opAdd), op.add)
				} else {
					b = appendString(append(b, opDel), op.del)
				}
			}
		}
		clear(c.ops)
		c.ops = c.ops[:0]
	}
	_, err := w.Write(b)
	return err
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
	for _, c := range j.committed {
		if err := readPart(br, c, hdr[1] == pendingFull); err != nil {
			return err
		}
	}
	return nil
}

// readPart reads one partition's counts and set (full) or changes.
func readPart(br *bufio.Reader, c *committedPending, full bool) error {
	var counts [6]int64
	for i := range counts {
		v, err := binary.ReadUvarint(br)
		if err != nil {
			return errBadPending
		}
		counts[i] = int64(v)
	}
	c.counts = labelCounts{counts[0], counts[1], counts[2], counts[3], counts[4], counts[5]}
	n, err := binary.ReadUvarint(br)
	if err != nil {
		return errBadPending
	}
	if full {
		clear(c.m)
	}
	for range n {
		op := byte(opAdd)
		if !full {
			if op, err = br.ReadByte(); err != nil {
				return errBadPending
			}
		}
		if op == opDel {
			id, err := readString(br)
			if err != nil {
				return err
			}
			delete(c.m, id)
			continue
		}
		e, err := readEntry(br)
		if err != nil {
			return err
		}
		c.m[e.id] = e
	}
	return nil
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
// after recovery: oldest first in the FIFO, the clock at the newest.
func (j *logregJob) restorePending() {
	for i, p := range j.parts {
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
		c.ops = c.ops[:0]
		s.publish()
		p.pend = s
	}
}
