package synopses

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ErrCorrupt is returned, wrapped, by every RecoverState that is handed
// bytes it cannot decode; the receiver is then left unchanged.
var ErrCorrupt = errors.New("synopses: corrupt backup")

// ErrMismatch is returned, wrapped, when a delta does not fit the state it is
// applied to (wrong kind, capacity or precision, or no full snapshot before
// it), and by merges of summaries that cannot be merged.
var ErrMismatch = errors.New("synopses: mismatched summary")

// maxBackup caps what RecoverState reads, so that a corrupt length can never
// make it allocate without bound.
const maxBackup = 1 << 30

// Backup kinds, the byte after the magic.
const (
	kindFull  = 0
	kindDelta = 1
)

func readAll(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxBackup+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxBackup {
		return nil, fmt.Errorf("%w: backup larger than %d bytes", ErrCorrupt, maxBackup)
	}
	return b, nil
}

// dec reads the varint encoding of backups; the first error sticks, so a
// caller checks it once at the end (or before allocating from a length).
type dec struct {
	b   []byte
	err error
}

func (d *dec) fail(format string, a ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, a...)...)
	}
}

func (d *dec) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a length that must be at most limit and at most the number of
// bytes left divided by minSize (each element takes at least minSize bytes),
// so that no allocation sized from it can exceed the input.
func (d *dec) count(limit uint64, minSize int) int {
	v := d.uvarint()
	if d.err != nil {
		return 0
	}
	if v > limit || v > uint64(len(d.b)/minSize) {
		d.fail("count %d out of range", v)
		return 0
	}
	return int(v)
}

func (d *dec) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.fail("short input")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *dec) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.fail("short input")
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) str() string {
	n := d.count(maxBackup, 1)
	return string(d.bytes(n))
}

// header checks the magic and version and returns the kind.
func (d *dec) header(magic string) byte {
	if string(d.bytes(len(magic))) != magic {
		d.fail("not a %s backup", magic)
		return 0
	}
	if v := d.byte(); v != 1 && d.err == nil {
		d.fail("%s backup version %d", magic, v)
	}
	k := d.byte()
	if k != kindFull && k != kindDelta {
		d.fail("%s backup kind %d", magic, k)
	}
	return k
}

// end requires the whole input to have been read.
func (d *dec) end() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	return d.err
}

func appendHeader(b []byte, magic string, full bool) []byte {
	b = append(b, magic...)
	b = append(b, 1)
	if full {
		return append(b, kindFull)
	}
	return append(b, kindDelta)
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}
