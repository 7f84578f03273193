// Package wire is the binary encoding of operator backups shared by the
// synopses and joins: varints, a header of magic, version and kind, and a
// decoder whose first error sticks. A decoder never allocates more than
// its input justifies, so a corrupt length cannot exhaust memory.
package wire

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// Backup kinds, the byte after the magic and version.
const (
	KindFull  = 0
	KindDelta = 1
	// KindDelta2 is a delta in an owner's second, more compact format (the
	// first stays readable); only owners that ask for it via HeaderUpTo
	// accept it.
	KindDelta2 = 2
)

// ReadAll reads r to its end, failing with corrupt (wrapped) past limit
// bytes.
func ReadAll(r io.Reader, limit int, corrupt error) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		return nil, fmt.Errorf("%w: backup larger than %d bytes", corrupt, limit)
	}
	return b, nil
}

// Dec decodes a backup; the first error sticks in Err, so a caller checks
// it once at the end (or before allocating from a length).
type Dec struct {
	B       []byte
	Err     error
	corrupt error
}

// NewDec decodes b; its errors wrap corrupt.
func NewDec(b []byte, corrupt error) *Dec { return &Dec{B: b, corrupt: corrupt} }

// Fail records an error unless one is already recorded.
func (d *Dec) Fail(format string, a ...any) {
	if d.Err == nil {
		d.Err = fmt.Errorf("%w: "+format, append([]any{d.corrupt}, a...)...)
	}
}

func (d *Dec) Uvarint() uint64 {
	if d.Err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.B)
	if n <= 0 {
		d.Fail("bad varint")
		return 0
	}
	d.B = d.B[n:]
	return v
}

func (d *Dec) Varint() int64 {
	if d.Err != nil {
		return 0
	}
	v, n := binary.Varint(d.B)
	if n <= 0 {
		d.Fail("bad varint")
		return 0
	}
	d.B = d.B[n:]
	return v
}

// U64 reads 8 little-endian bytes.
func (d *Dec) U64() uint64 {
	b := d.Bytes(8)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}

// U32 reads 4 little-endian bytes.
func (d *Dec) U32() uint32 {
	b := d.Bytes(4)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

// F64 reads a float64 as 8 little-endian bytes.
func (d *Dec) F64() float64 { return math.Float64frombits(d.U64()) }

// Count reads a length that must be at most limit and at most the number of
// bytes left divided by minSize (each element takes at least minSize bytes),
// so that no allocation sized from it can exceed the input.
func (d *Dec) Count(limit uint64, minSize int) int {
	v := d.Uvarint()
	if d.Err != nil {
		return 0
	}
	if v > limit || v > uint64(len(d.B)/minSize) {
		d.Fail("count %d out of range", v)
		return 0
	}
	return int(v)
}

func (d *Dec) Byte() byte {
	if d.Err != nil {
		return 0
	}
	if len(d.B) < 1 {
		d.Fail("short input")
		return 0
	}
	c := d.B[0]
	d.B = d.B[1:]
	return c
}

func (d *Dec) Bytes(n int) []byte {
	if d.Err != nil {
		return nil
	}
	if n < 0 || n > len(d.B) {
		d.Fail("short input")
		return nil
	}
	v := d.B[:n:n]
	d.B = d.B[n:]
	return v
}

func (d *Dec) Str() string {
	n := d.Count(math.MaxInt32, 1)
	return string(d.Bytes(n))
}

// Header checks the magic and version 1 and returns the kind, full or
// delta.
func (d *Dec) Header(magic string) byte { return d.HeaderUpTo(magic, KindDelta) }

// HeaderUpTo is Header for an owner that also writes kinds up to last.
func (d *Dec) HeaderUpTo(magic string, last byte) byte {
	if string(d.Bytes(len(magic))) != magic {
		d.Fail("not a %s backup", magic)
		return 0
	}
	if v := d.Byte(); v != 1 && d.Err == nil {
		d.Fail("%s backup version %d", magic, v)
	}
	k := d.Byte()
	if k > last {
		d.Fail("%s backup kind %d", magic, k)
	}
	return k
}

// End requires the whole input to have been read.
func (d *Dec) End() error {
	if d.Err == nil && len(d.B) != 0 {
		d.Fail("%d trailing bytes", len(d.B))
	}
	return d.Err
}

// AppendHeader starts a backup: magic, version 1, kind full or delta.
func AppendHeader(b []byte, magic string, full bool) []byte {
	if full {
		return AppendHeaderKind(b, magic, KindFull)
	}
	return AppendHeaderKind(b, magic, KindDelta)
}

// AppendHeaderKind starts a backup of the given kind.
func AppendHeaderKind(b []byte, magic string, kind byte) []byte {
	b = append(b, magic...)
	return append(b, 1, kind)
}

func AppendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// AppendF64 appends a float64 as 8 little-endian bytes.
func AppendF64(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
}
