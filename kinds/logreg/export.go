package logreg

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/mlstream/mlstream/learners"
	"github.com/mlstream/mlstream/runtime"
)

// Exported model format, version 1 (little endian). The envelope carries
// what the learners' snapshot (learners.Model.WriteTo, checksummed on its
// own) does not: the learner parameters that give the state its meaning,
// and the job's progressive metrics, for reading.
//
//	magic     [8]byte "MLSMODEL"
//	format    uint16 = 1
//	hdrLen    uint32, then hdrLen bytes: the header, JSON (ModelHeader)
//	snapLen   uint64, then snapLen bytes: the model snapshot (learners format)
//	namesLen  uint32, then namesLen bytes: the feature names seen per slot, JSON
//	          {"every": N, "slots": {"<slot>": [{"name": ..., "count": ...}, ...]}}
//	          (counts of one event in N sampled; empty without a dictionary)
//	crc       uint32: CRC-32C (Castagnoli) of everything before it
const (
	FormatVersion  = 1
	MaxHeaderBytes = 1 << 20
	MaxNamesBytes  = 64 << 20
)

// ModelMagic opens every exported model.
var ModelMagic = [8]byte{'M', 'L', 'S', 'M', 'O', 'D', 'E', 'L'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ModelParams are the learner parameters an exported model was trained
// with. An import refuses a model whose parameters differ from the job's:
// the same optimizer state means other weights under other parameters.
type ModelParams struct {
	HashBits  int     `json:"hash_bits"`
	Optimizer string  `json:"optimizer"`
	Alpha     float64 `json:"alpha"`
	Beta      float64 `json:"beta"`
	L1        float64 `json:"l1"`
	L2        float64 `json:"l2"`
	Clip      float64 `json:"clip"`
	Normalize string  `json:"normalize"`
	Adaptive  bool    `json:"adaptive"`
}

// ModelHeader is the JSON header of an exported model.
type ModelHeader struct {
	Kind       string           `json:"kind"`
	Job        string           `json:"job"`
	ExportedAt time.Time        `json:"exported_at"`
	Params     ModelParams      `json:"params"`
	Version    uint64           `json:"version"`
	Updates    uint64           `json:"updates"`
	Metrics    learners.Metrics `json:"metrics"`
}

// ExportedModel is a decoded export.
type ExportedModel struct {
	Header   ModelHeader
	Snapshot []byte // the learners snapshot
	Names    []byte
}

func paramsOf(c learners.Config) ModelParams {
	return ModelParams{HashBits: c.HashBits, Optimizer: c.Optimizer, Alpha: c.Alpha, Beta: c.Beta,
		L1: c.L1, L2: c.L2, Clip: c.Clip, Normalize: c.Normalize, Adaptive: *c.Adaptive}
}

// Config is the learners configuration of the parameters.
func (p ModelParams) Config() learners.Config {
	a := p.Adaptive
	return learners.Config{HashBits: p.HashBits, Optimizer: p.Optimizer, Alpha: p.Alpha, Beta: p.Beta,
		L1: p.L1, L2: p.L2, Clip: p.Clip, Normalize: p.Normalize, Adaptive: &a}
}

// mismatch names the first parameter of p that differs from job's, or "".
func (p ModelParams) mismatch(job ModelParams) (field string, got, want any) {
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"hash_bits", p.HashBits, job.HashBits}, {"optimizer", p.Optimizer, job.Optimizer},
		{"adaptive", p.Adaptive, job.Adaptive}, {"normalize", p.Normalize, job.Normalize},
		{"alpha", p.Alpha, job.Alpha}, {"beta", p.Beta, job.Beta}, {"l1", p.L1, job.L1},
		{"l2", p.L2, job.L2}, {"clip", p.Clip, job.Clip},
	} {
		if c.got != c.want {
			return c.name, c.got, c.want
		}
	}
	return "", nil, nil
}

// Encode writes the model in the binary format.
func (e *ExportedModel) Encode(w io.Writer) error {
	hdr, err := json.Marshal(e.Header)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	buf.Write(ModelMagic[:])
	buf.Write(binary.LittleEndian.AppendUint16(nil, FormatVersion))
	buf.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(hdr))))
	buf.Write(hdr)
	buf.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(e.Snapshot))))
	buf.Write(e.Snapshot)
	buf.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(e.Names))))
	buf.Write(e.Names)
	buf.Write(binary.LittleEndian.AppendUint32(nil, crc32.Checksum(buf.Bytes(), castagnoli)))
	_, err = w.Write(buf.Bytes())
	return err
}

// formatError is a model that is not one of this format.
func formatError(format string, a ...any) error {
	return &runtime.ModelError{Field: "format", Msg: fmt.Sprintf(format, a...)}
}

// DecodeModel reads an exported model from data, checking its magic,
// format version, section lengths (against the bytes present, so nothing
// announced is allocated) and checksum. The snapshot inside is checked
// when it is read (learners.DecodeSnapshot, Model.ReadFrom).
func DecodeModel(data []byte) (*ExportedModel, error) {
	const fixed = 8 + 2 + 4 + 8 + 4 + 4
	if len(data) < fixed || [8]byte(data[:8]) != ModelMagic {
		return nil, formatError("not an exported mlstream model (bad magic or too short)")
	}
	if v := binary.LittleEndian.Uint16(data[8:]); v != FormatVersion {
		return nil, formatError("format version %d, this server reads version %d", v, FormatVersion)
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, formatError("checksum mismatch: the file is damaged or truncated")
	}
	rest := body[10:]
	hdr, rest, err := section(rest, 4, MaxHeaderBytes, "header")
	if err != nil {
		return nil, err
	}
	snap, rest, err := section(rest, 8, int(^uint(0)>>1), "snapshot")
	if err != nil {
		return nil, err
	}
	names, rest, err := section(rest, 4, MaxNamesBytes, "names")
	if err != nil {
		return nil, err
	}
	if len(rest) != 0 {
		return nil, formatError("%d bytes after the last section", len(rest))
	}
	e := &ExportedModel{Snapshot: snap, Names: names}
	if err := json.Unmarshal(hdr, &e.Header); err != nil {
		return nil, formatError("header: %v", err)
	}
	if e.Header.Kind != Name {
		return nil, &runtime.ModelError{Field: "kind", Msg: fmt.Sprintf("a model of kind %q, not %q", e.Header.Kind, Name)}
	}
	return e, nil
}

// section splits a length-prefixed section (a width-byte length) off data.
func section(data []byte, width int, limit int, what string) (sec, rest []byte, err error) {
	if len(data) < width {
		return nil, nil, formatError("%s: truncated", what)
	}
	var n uint64
	if width == 4 {
		n = uint64(binary.LittleEndian.Uint32(data))
	} else {
		n = binary.LittleEndian.Uint64(data)
	}
	data = data[width:]
	if n > uint64(limit) || n > uint64(len(data)) {
		return nil, nil, formatError("%s of %d bytes: at most %d, and %d present", what, n, limit, len(data))
	}
	return data[:n], data[n:], nil
}

// Summary reads the snapshot's header and strongest weights.
func (e *ExportedModel) Summary(top int) (learners.Summary, error) {
	s, err := learners.Summarize(e.Snapshot, e.Header.Params.Config(), top)
	return s, snapshotError(err)
}

// snapshotError turns a damaged or incompatible snapshot into a
// ModelError.
func snapshotError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, learners.ErrIncompatible):
		return &runtime.ModelError{Field: "params", Msg: err.Error()}
	case errors.Is(err, learners.ErrCorrupt):
		return formatError("%v", err)
	}
	var pe *learners.ParamError
	if errors.As(err, &pe) {
		return &runtime.ModelError{Field: "params." + pe.Param, Msg: pe.Error()}
	}
	return err
}

// ModelJSON is the readable form of an exported model (?format=json).
type ModelJSON struct {
	Format        string `json:"format"`
	FormatVersion int    `json:"format_version"`
	ModelHeader
	NonZero int                  `json:"nonzero_weights"`
	Slots   []learners.SlotState `json:"slots"`
	Names   *namesJSON           `json:"names,omitempty"`
}

// JSON is the readable form of e.
func (e *ExportedModel) JSON() (*ModelJSON, error) {
	s, slots, err := learners.DecodeSnapshot(e.Snapshot, e.Header.Params.Config())
	if err != nil {
		return nil, snapshotError(err)
	}
	out := &ModelJSON{Format: "mlstream-model", FormatVersion: FormatVersion, ModelHeader: e.Header, NonZero: s.NonZero, Slots: slots}
	if out.Names, err = e.names(); err != nil {
		return nil, err
	}
	return out, nil
}

// names decodes the names section; nil when empty.
func (e *ExportedModel) names() (*namesJSON, error) {
	if len(e.Names) == 0 {
		return nil, nil
	}
	var n namesJSON
	if err := json.Unmarshal(e.Names, &n); err != nil {
		return nil, formatError("names: %v", err)
	}
	return &n, nil
}

// SlotNames returns the names the export recorded for each slot, the most
// frequent first.
func (e *ExportedModel) SlotNames() (map[int][]NameCount, error) {
	n, err := e.names()
	if n == nil || err != nil {
		return nil, err
	}
	return n.Slots, nil
}
