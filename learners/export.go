package learners

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
)

// Discard drops the learner's local delta and pending count without
// merging them: after the global model was replaced (a model import), the
// delta was learned against the old state and would mean nothing on the
// new one. The owner of the learner must not be using it meanwhile.
func (l *Learner) Discard() {
	l.delta.reset()
	l.pending = 0
}

// Summary describes a binary snapshot (WriteTo) without loading it into a
// model: for `mlstream model inspect`.
type Summary struct {
	HashBits int           `json:"hash_bits"`
	Version  uint64        `json:"version"`
	Updates  uint64        `json:"updates"`
	Slots    uint64        `json:"slots"`
	NonZero  int           `json:"nonzero_weights"`
	Top      []WeightEntry `json:"top_weights,omitempty"`
}

// SnapshotCount returns the number of slots a snapshot announces, read
// from its header, so that a reader can refuse one that claims more slots
// than its bytes can hold before anything is allocated.
func SnapshotCount(data []byte) (uint64, error) {
	var size int
	switch {
	case len(data) >= headerSize && [8]byte(data[:8]) == snapshotMagic:
		size = headerSize
	case len(data) >= headerSizeV1 && [8]byte(data[:8]) == snapshotMagicV1:
		size = headerSizeV1
	default:
		return 0, fmt.Errorf("%w: bad magic or short header", ErrCorrupt)
	}
	count := binary.LittleEndian.Uint64(data[28:])
	if count > uint64(len(data)-size)/entrySize {
		return 0, fmt.Errorf("%w: %d slots announced, %d bytes present", ErrCorrupt, count, len(data))
	}
	return count, nil
}

// SlotState is one slot of a snapshot: its optimizer words (float64) and
// the effective weight they give.
type SlotState struct {
	Slot   int     `json:"slot"`
	Weight float64 `json:"weight"`
	A      float64 `json:"a"`
	B      float64 `json:"b"`
	Inv    float64 `json:"inv"`
}

// DecodeSnapshot reads a full snapshot taken with configuration cfg and
// returns its header and slots. It checks the snapshot as ReadFrom does,
// without allocating the model's dense state: its memory is proportional
// to the snapshot.
func DecodeSnapshot(data []byte, cfg Config) (Summary, []SlotState, error) {
	if _, err := SnapshotCount(data); err != nil {
		return Summary{}, nil, err
	}
	m, err := newModelShell(cfg)
	if err != nil {
		return Summary{}, nil, err
	}
	sr := &snapshotReader{r: bytes.NewReader(data), crc: crc32.New(crcTable)}
	h, err := sr.header()
	if err != nil {
		return Summary{}, nil, err
	}
	if err := m.checkCompatible(h); err != nil {
		return Summary{}, nil, err
	}
	entries, err := sr.entries(h.count, m.nslots)
	if err != nil {
		return Summary{}, nil, err
	}
	if err := sr.checksum(); err != nil {
		return Summary{}, nil, err
	}
	s := Summary{HashBits: h.bits, Version: h.version, Updates: h.updates, Slots: h.count}
	slots := make([]SlotState, len(entries))
	for i, e := range entries {
		a, b, inv := math.Float64frombits(e.a), math.Float64frombits(e.b), math.Float64frombits(e.inv)
		w := m.rawWeight(a, b)
		if m.adaptive {
			w *= inv
		}
		if w != 0 {
			s.NonZero++
		}
		slots[i] = SlotState{Slot: int(e.slot), Weight: w, A: a, B: b, Inv: inv}
	}
	return s, slots, nil
}

// Summarize is DecodeSnapshot keeping the top strongest non-zero weights
// in Summary.Top (all of them if top < 0).
func Summarize(data []byte, cfg Config, top int) (Summary, error) {
	s, slots, err := DecodeSnapshot(data, cfg)
	if err != nil {
		return s, err
	}
	for _, e := range slots {
		if e.Weight != 0 {
			s.Top = append(s.Top, WeightEntry{Slot: e.Slot, Weight: e.Weight})
		}
	}
	sortWeights(s.Top)
	if top >= 0 && len(s.Top) > top {
		s.Top = slices.Clip(s.Top[:top])
	}
	return s, nil
}

// sortWeights orders weights by magnitude, then slot.
func sortWeights(ws []WeightEntry) {
	slices.SortFunc(ws, func(a, b WeightEntry) int {
		aa, bb := math.Abs(a.Weight), math.Abs(b.Weight)
		switch {
		case aa > bb:
			return -1
		case aa < bb:
			return 1
		}
		return a.Slot - b.Slot
	})
}
