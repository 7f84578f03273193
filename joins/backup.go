package joins

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/mlstream/mlstream/internal/wire"
)

// ErrCorrupt is returned, wrapped, by RecoverState for bytes it cannot
// decode or a delta that does not follow the state it is applied to.
var ErrCorrupt = errors.New("joins: corrupt backup")

const (
	magic     = "MLJN"
	maxBackup = 1<<31 - 1 // 2 GiB, as far as an int goes on 32-bit platforms
	// tupleWire is the encoded size of a tuple: hash, ts, value, acc, m,
	// win, side.
	tupleWire = 8*4 + 4 + 4 + 1
	accWire   = 8*2 + 8*4 + 8*6 + 8 + 8
)

// StateDivergence is the number of tuples buffered or removed since the
// last backup.
func (j *Join) StateDivergence() float64 { return float64(j.div) }

// BackupState writes the join: all of it when full, else what changed
// since the previous backup (the ring's new front, the tuples added, the
// counts of older tuples that changed) and the windows' sums.
func (j *Join) BackupState(w io.Writer, full bool) error {
	tail := j.frontAbs + uint64(j.n)
	b := wire.AppendHeader(j.scratch[:0], magic, full)
	b = j.appendCounters(b)
	b = binary.AppendUvarint(b, j.frontAbs)
	from := j.frontAbs
	if !full {
		b = binary.AppendUvarint(b, j.backedTail)
		from = max(from, j.backedTail)
	}
	b = binary.AppendUvarint(b, tail-from)
	for abs := from; abs < tail; abs++ {
		b = appendTuple(b, &j.ring[j.indexOf(abs)])
	}
	if !full {
		// Counts of tuples in the previous backup that are still here.
		changed := j.changed[:0]
		for _, abs := range j.dirty {
			if abs >= j.frontAbs && abs < from {
				changed = append(changed, abs)
			}
		}
		b = binary.AppendUvarint(b, uint64(len(changed)))
		for _, abs := range changed {
			t := &j.ring[j.indexOf(abs)]
			b = binary.AppendUvarint(b, abs)
			b = wire.AppendF64(b, t.acc)
			b = binary.LittleEndian.AppendUint32(b, uint32(t.m))
			b = binary.LittleEndian.AppendUint32(b, t.win)
		}
		j.changed = changed
	}
	b = appendAccs(b, j.wins)
	b = appendAccs(b, j.closed)
	j.scratch = b
	if _, err := w.Write(b); err != nil {
		return err
	}
	j.epoch = (j.epoch + 1) &^ sideBit
	j.backedTail = tail
	j.dirty = j.dirty[:0]
	j.div = 0
	return nil
}

func (j *Join) indexOf(abs uint64) int {
	return (j.head + int(abs-j.frontAbs)) % len(j.ring)
}

func (j *Join) appendCounters(b []byte) []byte {
	c := &j.c
	for _, v := range []uint64{c.Seen, c.Sampled, c.Matches, c.Late, c.Expired, c.Evicted, uint64(c.Recovers)} {
		b = binary.AppendUvarint(b, v)
	}
	b = binary.AppendVarint(b, c.MaxTS)
	b = wire.AppendF64(b, c.Lost)
	if j.started {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendTuple(b []byte, t *tuple) []byte {
	b = binary.LittleEndian.AppendUint64(b, t.hash)
	b = binary.LittleEndian.AppendUint64(b, uint64(t.ts))
	b = wire.AppendF64(b, t.value)
	b = wire.AppendF64(b, t.acc)
	b = binary.LittleEndian.AppendUint32(b, uint32(t.m))
	b = binary.LittleEndian.AppendUint32(b, t.win)
	return append(b, byte(t.side()))
}

func appendAccs(b []byte, accs []*Acc) []byte {
	b = binary.AppendUvarint(b, uint64(len(accs)))
	for _, a := range accs {
		b = binary.LittleEndian.AppendUint64(b, uint64(a.Start))
		b = binary.LittleEndian.AppendUint64(b, uint64(a.End))
		for _, v := range []uint64{a.Seen[0], a.Seen[1], a.Sampled[0], a.Sampled[1]} {
			b = binary.LittleEndian.AppendUint64(b, v)
		}
		for _, f := range []float64{a.M, a.Sy, a.Syy, a.Q11, a.Qyy, a.Qy1} {
			b = wire.AppendF64(b, f)
		}
		b = binary.LittleEndian.AppendUint64(b, a.Evicted)
		b = wire.AppendF64(b, a.Lost)
	}
	return b
}

// RecoverState applies a full backup (replacing the state) or a delta
// (which must follow the backup the state was last recovered from). On an
// error the join is left as it was.
func (j *Join) RecoverState(r io.Reader) error {
	data, err := wire.ReadAll(r, maxBackup, ErrCorrupt)
	if err != nil {
		return err
	}
	b, err := j.decodeBackup(data)
	if err != nil {
		return err
	}
	j.applyBackup(b)
	return nil
}

// backup is a decoded backup, checked against the join before any of its
// state changes.
type backup struct {
	full    bool
	c       Counters
	started bool
	front   uint64 // absolute number of the ring's front tuple
	tuples  []tuple
	updates []tupleUpdate // delta only: new counts of older tuples
	wins    []*Acc
	closed  []*Acc
}

// tupleUpdate is a delta's new counts of a tuple the state already holds.
type tupleUpdate struct {
	abs uint64
	acc float64
	m   int32
	win uint32
}

// decodeBackup decodes data written by BackupState and checks that a delta
// follows the state and that the windows fit the join's window.
func (j *Join) decodeBackup(data []byte) (backup, error) {
	d := wire.NewDec(data, ErrCorrupt)
	b := backup{full: d.Header(magic) == wire.KindFull}
	b.c, b.started = readCounters(d)
	b.front = d.Uvarint()
	from := b.front
	if !b.full {
		prev := d.Uvarint()
		if d.Err == nil && prev != j.backedTail {
			return b, fmt.Errorf("%w: delta follows a backup up to tuple %d, the state holds up to %d", ErrCorrupt, prev, j.backedTail)
		}
		from = max(b.front, prev)
	}
	if b.tuples = readTuples(d); d.Err != nil {
		return b, d.Err
	}
	if !b.full {
		b.updates = readUpdates(d, b.front, from)
	}
	b.wins = readAccs(d)
	b.closed = readAccs(d)
	if err := d.End(); err != nil {
		return b, err
	}
	if j.cfg.Window == 0 && len(b.wins) != 1 || j.cfg.Window > 0 && len(b.wins) == 0 && len(b.closed) == 0 && b.c.Seen > 0 {
		return b, fmt.Errorf("%w: windows do not fit the join's window of %d ms", ErrCorrupt, j.cfg.Window)
	}
	return b, nil
}

// applyBackup changes the state to a decoded backup: a full one replaces
// the ring, a delta trims its front, updates older tuples' counts and
// appends the new tuples.
func (j *Join) applyBackup(b backup) {
	if b.full {
		j.ring, j.head, j.n, j.frontAbs = nil, 0, 0, b.front
		clear(j.index)
	} else {
		for j.n > 0 && j.frontAbs < b.front {
			j.evictFront(false, nil, 0)
		}
		if j.n == 0 {
			j.frontAbs = b.front
		}
		for _, u := range b.updates {
			t := &j.ring[j.indexOf(u.abs)]
			t.acc, t.m, t.win = u.acc, u.m, u.win
		}
	}
	for i := range b.tuples {
		t := &b.tuples[i]
		ix, ok := j.index[t.hash]
		if !ok {
			ix = emptyIndex
		}
		j.insert(t, &ix)
		j.index[t.hash] = ix
	}
	j.c, j.started = b.c, b.started
	j.wins, j.closed = b.wins, b.closed
	j.backedTail = j.frontAbs + uint64(j.n)
	j.dirty = j.dirty[:0]
	j.div = 0
}

// readCounters reads what appendCounters wrote.
func readCounters(d *wire.Dec) (c Counters, started bool) {
	for _, p := range []*uint64{&c.Seen, &c.Sampled, &c.Matches, &c.Late, &c.Expired, &c.Evicted} {
		*p = d.Uvarint()
	}
	c.Recovers = int(d.Uvarint())
	c.MaxTS = d.Varint()
	c.Lost = d.F64()
	started = d.Byte() == 1
	return c, started
}

// readTuples reads a count and the tuples appendTuple wrote, unlinked.
func readTuples(d *wire.Dec) []tuple {
	n := d.Count(math.MaxInt32, tupleWire)
	if d.Err != nil {
		return nil
	}
	tuples := make([]tuple, n)
	for i := range tuples {
		t := &tuples[i]
		t.hash, t.ts, t.value, t.acc = d.U64(), int64(d.U64()), d.F64(), d.F64()
		t.m, t.win = int32(d.U32()), d.U32()
		if s := d.Byte(); s > 1 {
			d.Fail("side %d", s)
		} else {
			t.meta = uint32(s) << 31
		}
		t.next = -1
	}
	return tuples
}

// readUpdates reads a delta's updates, each of a tuple in [front, from):
// one the previous backup held and the ring still does.
func readUpdates(d *wire.Dec, front, from uint64) []tupleUpdate {
	var updates []tupleUpdate
	k := d.Count(math.MaxInt32, 17)
	for range k {
		u := tupleUpdate{abs: d.Uvarint(), acc: d.F64()}
		u.m, u.win = int32(d.U32()), d.U32()
		if d.Err == nil && (u.abs < front || u.abs >= from) {
			d.Fail("update of tuple %d outside [%d, %d)", u.abs, front, from)
		}
		updates = append(updates, u)
	}
	return updates
}

func readAccs(d *wire.Dec) []*Acc {
	n := d.Count(1<<20, accWire)
	accs := make([]*Acc, 0, n)
	for range n {
		a := &Acc{Start: int64(d.U64()), End: int64(d.U64())}
		for _, p := range []*uint64{&a.Seen[0], &a.Seen[1], &a.Sampled[0], &a.Sampled[1]} {
			*p = d.U64()
		}
		for _, p := range []*float64{&a.M, &a.Sy, &a.Syy, &a.Q11, &a.Qyy, &a.Qy1} {
			*p = d.F64()
		}
		a.Evicted = d.U64()
		a.Lost = d.F64()
		accs = append(accs, a)
	}
	return accs
}
