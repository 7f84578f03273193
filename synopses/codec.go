package synopses

import (
	"errors"
	"io"

	"github.com/mlstream/mlstream/internal/wire"
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
	kindFull   = wire.KindFull
	kindDelta  = wire.KindDelta
	kindDelta2 = wire.KindDelta2
)

func readAll(r io.Reader) ([]byte, error) { return wire.ReadAll(r, maxBackup, ErrCorrupt) }

type dec = wire.Dec

func newDec(b []byte) *dec { return wire.NewDec(b, ErrCorrupt) }

var (
	appendHeader     = wire.AppendHeader
	appendHeaderKind = wire.AppendHeaderKind
	appendStr        = wire.AppendStr
)
