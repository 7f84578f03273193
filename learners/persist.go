package learners

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math"
	"sync/atomic"
)

// Binary snapshot format 2 (little endian):
//
//	magic     [8]byte "MLSLR\x00\x00\x02"
//	hashBits  uint8, optimizer uint8 (1 ftrl, 2 adagrad, 3 sgd), adaptive uint8, delta uint8
//	          (delta 1: the slots that follow replace only themselves; 0: the whole state)
//	version   uint64, updates uint64, count uint64 (slots that follow)
//	normalize uint8 (0 none, 1 l2, 2 log1p_l2, 3 sqrt)
//	count x { slot uint32, a uint64, b uint64, inv uint64 } (float64 bits, slots increasing;
//	          a, b: optimizer state words, inv: 1/scale of the adaptive updates)
//	crc       uint32: CRC-32C of everything before it
//
// Format 1 ("MLSLR\x00\x00\x01") is the same without the normalize byte;
// it is still read. Only non-zero slots are written, so a snapshot is
// proportional to the features seen, not to 2^HashBits.
var (
	snapshotMagic   = [8]byte{'M', 'L', 'S', 'L', 'R', 0, 0, 2}
	snapshotMagicV1 = [8]byte{'M', 'L', 'S', 'L', 'R', 0, 0, 1}
)

const (
	headerSizeV1 = 8 + 4 + 3*8
	headerSize   = headerSizeV1 + 1
	entrySize    = 4 + 3*8
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is returned (wrapped) by ReadFrom for a snapshot that is not
// one, is truncated, or fails its checksum.
var ErrCorrupt = errors.New("learners: corrupt model snapshot")

// ErrIncompatible is returned (wrapped) by ReadFrom for a snapshot taken with
// different hash bits, optimizer, adaptive setting or (set explicitly)
// normalization.
var ErrIncompatible = errors.New("learners: incompatible model snapshot")

// WriteTo writes a full binary snapshot of the global state (hash bits,
// optimizer, version, updates and every non-zero slot) to w, and returns the
// number of bytes written. It may run concurrently with syncs; each slot
// word is read atomically but the snapshot is not a consistent cut across
// slots (the difference is bounded by the syncs that ran meanwhile).
// Local deltas of Learners are not included.
func (m *Model) WriteTo(w io.Writer) (int64, error) {
	// Collect non-zero slots first: the count goes in the header.
	var slots []uint32
	for s := 0; s < m.nslots; s++ {
		base := s * stride
		if atomic.LoadUint64(&m.state[base+offA])|atomic.LoadUint64(&m.state[base+offB])|atomic.LoadUint64(&m.state[base+offInv]) != 0 {
			slots = append(slots, uint32(s))
		}
	}
	return m.writeSnapshot(w, slots, false)
}

// WriteDelta writes a partial snapshot: the given slots only, which must
// be increasing. ReadFrom applies it on top of the current state: a full
// snapshot followed by its deltas, in order, rebuilds the state.
func (m *Model) WriteDelta(w io.Writer, slots []uint32) (int64, error) {
	return m.writeSnapshot(w, slots, true)
}

func (m *Model) writeSnapshot(w io.Writer, slots []uint32, delta bool) (int64, error) {
	cw := &countWriter{w: w}
	bw := bufio.NewWriterSize(cw, 64<<10)
	crc := crc32.New(crcTable)
	out := io.MultiWriter(bw, crc)
	var hdr [headerSize]byte
	copy(hdr[:], snapshotMagic[:])
	hdr[8] = byte(m.cfg.HashBits)
	hdr[9] = byte(m.opt)
	if m.adaptive {
		hdr[10] = 1
	}
	if delta {
		hdr[11] = 1
	}
	binary.LittleEndian.PutUint64(hdr[12:], m.Version())
	binary.LittleEndian.PutUint64(hdr[20:], m.Updates())
	binary.LittleEndian.PutUint64(hdr[28:], uint64(len(slots)))
	hdr[headerSizeV1] = byte(m.norm)
	if _, err := out.Write(hdr[:]); err != nil {
		return cw.n, err
	}
	var e [entrySize]byte
	for _, s := range slots {
		base := int(s) * stride
		binary.LittleEndian.PutUint32(e[0:], s)
		binary.LittleEndian.PutUint64(e[4:], atomic.LoadUint64(&m.state[base+offA]))
		binary.LittleEndian.PutUint64(e[12:], atomic.LoadUint64(&m.state[base+offB]))
		binary.LittleEndian.PutUint64(e[20:], atomic.LoadUint64(&m.state[base+offInv]))
		if _, err := out.Write(e[:]); err != nil {
			return cw.n, err
		}
	}
	var sum [4]byte
	binary.LittleEndian.PutUint32(sum[:], crc.Sum32())
	if _, err := bw.Write(sum[:]); err != nil {
		return cw.n, err
	}
	err := bw.Flush()
	return cw.n, err
}

// ReadFrom replaces the global state of m with a snapshot written by
// WriteTo (or, for one written by WriteDelta, replaces the slots it holds),
// and returns the number of bytes read. It reads exactly the
// snapshot, never past it. The snapshot must have the same hash bits,
// optimizer and adaptive setting as m (else ErrIncompatible); a damaged one
// gives ErrCorrupt, and m is left unchanged on any error. ReadFrom is meant
// for recovery: it must not run while m is used (Learners of m learning or
// syncing, predictions), and Learners' local deltas are kept as they are.
//
// Normalization: a model whose Config set Normalize refuses a snapshot of
// another one (ErrIncompatible; a format 1 snapshot does not say, and is
// read). One that left it empty (the default) takes the snapshot's, and
// that of a format 1 snapshot is none, the default when those were
// written: state learned under one normalization goes on under it.
func (m *Model) ReadFrom(r io.Reader) (int64, error) {
	sr := &snapshotReader{r: r, crc: crc32.New(crcTable)}
	h, err := sr.header()
	if err != nil {
		return sr.n, err
	}
	if err := m.checkCompatible(h); err != nil {
		return sr.n, err
	}
	entries, err := sr.entries(h.count, m.nslots)
	if err != nil {
		return sr.n, err
	}
	if err := sr.checksum(); err != nil {
		return sr.n, err
	}
	m.applySnapshot(h, entries)
	return sr.n, nil
}

// UseNormalize sets the normalization of a model whose Config left
// Normalize empty to name (one of the Normalize names), for state learned
// under it (a model import whose header names it). A model whose
// normalization was set explicitly refuses another one (ErrIncompatible).
// Like ReadFrom, it must not run while m is used.
func (m *Model) UseNormalize(name string) error {
	k, ok := normKinds[name]
	if !ok {
		return &ParamError{"normalize", fmt.Sprintf("unknown normalization %q", name)}
	}
	if k == m.norm {
		return nil
	}
	if !m.normDefault {
		return fmt.Errorf("%w: normalize %s, model has %s", ErrIncompatible, name, m.cfg.Normalize)
	}
	m.norm, m.cfg.Normalize = k, name
	return nil
}

// snapshotReader reads a snapshot, counting the bytes read and summing
// those the checksum covers.
type snapshotReader struct {
	r   io.Reader
	n   int64
	crc hash.Hash32
}

// snapshotHeader is a decoded snapshot header.
type snapshotHeader struct {
	bits                    int
	opt                     optKind
	adaptive, delta         bool
	version, updates, count uint64
	norm                    normKind
	hasNorm                 bool // format 2: norm is the snapshot's
}

// snapshotEntry is one slot of a snapshot.
type snapshotEntry struct {
	slot      uint32
	a, b, inv uint64
}

// read fills buf; a short read is ErrCorrupt.
func (sr *snapshotReader) read(buf []byte) error {
	k, err := io.ReadFull(sr.r, buf)
	sr.n += int64(k)
	if err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return fmt.Errorf("%w: truncated", ErrCorrupt)
		}
		return err
	}
	return nil
}

// readSummed fills buf and adds it to the checksum.
func (sr *snapshotReader) readSummed(buf []byte) error {
	if err := sr.read(buf); err != nil {
		return err
	}
	sr.crc.Write(buf)
	return nil
}

// header reads and decodes the header (format 1 or 2), checking the
// magic, the delta flag and the normalization.
func (sr *snapshotReader) header() (snapshotHeader, error) {
	var hdr [headerSize]byte
	if err := sr.readSummed(hdr[:headerSizeV1]); err != nil {
		return snapshotHeader{}, err
	}
	v2 := [8]byte(hdr[:8]) == snapshotMagic
	if !v2 && [8]byte(hdr[:8]) != snapshotMagicV1 {
		return snapshotHeader{}, fmt.Errorf("%w: bad magic", ErrCorrupt)
	}
	if hdr[11] > 1 {
		return snapshotHeader{}, fmt.Errorf("%w: bad delta flag", ErrCorrupt)
	}
	h := snapshotHeader{
		bits: int(hdr[8]), opt: optKind(hdr[9]), adaptive: hdr[10] == 1, delta: hdr[11] == 1,
		version: binary.LittleEndian.Uint64(hdr[12:]),
		updates: binary.LittleEndian.Uint64(hdr[20:]),
		count:   binary.LittleEndian.Uint64(hdr[28:]),
	}
	if v2 {
		if err := sr.readSummed(hdr[headerSizeV1:]); err != nil {
			return snapshotHeader{}, err
		}
		h.norm, h.hasNorm = normKind(hdr[headerSizeV1]), true
		if h.norm > normSqrt {
			return snapshotHeader{}, fmt.Errorf("%w: bad normalization %d", ErrCorrupt, h.norm)
		}
	}
	return h, nil
}

// checkCompatible refuses a snapshot of another configuration of the model
// (ErrIncompatible) or with more slots than the model has (ErrCorrupt).
func (m *Model) checkCompatible(h snapshotHeader) error {
	if h.bits != m.cfg.HashBits {
		return fmt.Errorf("%w: hash_bits %d, model has %d", ErrIncompatible, h.bits, m.cfg.HashBits)
	}
	if h.opt != m.opt {
		return fmt.Errorf("%w: optimizer %d, model has %d", ErrIncompatible, h.opt, m.opt)
	}
	if h.adaptive != m.adaptive {
		return fmt.Errorf("%w: adaptive %v, model has %v", ErrIncompatible, h.adaptive, m.adaptive)
	}
	if h.hasNorm && h.norm != m.norm && !m.normDefault {
		return fmt.Errorf("%w: normalize %s, model has %s", ErrIncompatible, normName(h.norm), m.cfg.Normalize)
	}
	if h.count > uint64(m.nslots) {
		return fmt.Errorf("%w: %d slots, model has %d", ErrCorrupt, h.count, m.nslots)
	}
	return nil
}

// entries reads count slots in chunks, checking that they increase, lie
// below nslots and hold finite numbers.
func (sr *snapshotReader) entries(count uint64, nslots int) ([]snapshotEntry, error) {
	entries := make([]snapshotEntry, 0, count)
	buf := make([]byte, 1024*entrySize)
	next := int64(0)
	for left := int(count); left > 0; {
		k := min(left, 1024)
		chunk := buf[:k*entrySize]
		if err := sr.readSummed(chunk); err != nil {
			return nil, err
		}
		for off := 0; off < len(chunk); off += entrySize {
			e := snapshotEntry{
				slot: binary.LittleEndian.Uint32(chunk[off:]),
				a:    binary.LittleEndian.Uint64(chunk[off+4:]),
				b:    binary.LittleEndian.Uint64(chunk[off+12:]),
				inv:  binary.LittleEndian.Uint64(chunk[off+20:]),
			}
			if int64(e.slot) < next || int(e.slot) >= nslots {
				return nil, fmt.Errorf("%w: slot %d out of order or range", ErrCorrupt, e.slot)
			}
			for _, v := range [3]uint64{e.a, e.b, e.inv} {
				if f := math.Float64frombits(v); math.IsNaN(f) || math.IsInf(f, 0) {
					return nil, fmt.Errorf("%w: slot %d is not finite", ErrCorrupt, e.slot)
				}
			}
			next = int64(e.slot) + 1
			entries = append(entries, e)
		}
		left -= k
	}
	return entries, nil
}

// checksum reads the trailing CRC and compares it with what was read.
func (sr *snapshotReader) checksum() error {
	var sum [4]byte
	if err := sr.read(sum[:]); err != nil {
		return err
	}
	if binary.LittleEndian.Uint32(sum[:]) != sr.crc.Sum32() {
		return fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	return nil
}

// applySnapshot installs a checked snapshot: a full one replaces every slot, a
// delta only those it holds.
func (m *Model) applySnapshot(h snapshotHeader, entries []snapshotEntry) {
	if !h.delta {
		for i := range m.state {
			atomic.StoreUint64(&m.state[i], 0)
		}
	}
	for _, e := range entries {
		base := int(e.slot) * stride
		atomic.StoreUint64(&m.state[base+offA], e.a)
		atomic.StoreUint64(&m.state[base+offB], e.b)
		atomic.StoreUint64(&m.state[base+offInv], e.inv)
	}
	m.updates.Store(h.updates)
	m.version.Store(h.version)
	if m.normDefault {
		norm := normNone // format 1: written when the default was none
		if h.hasNorm {
			norm = h.norm
		}
		_ = m.UseNormalize(normName(norm))
	}
}

// normName is the Config.Normalize name of a normalization.
func normName(k normKind) string {
	for name, kk := range normKinds {
		if kk == k {
			return name
		}
	}
	return fmt.Sprintf("normalization %d", k)
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	k, err := c.w.Write(p)
	c.n += int64(k)
	return k, err
}
