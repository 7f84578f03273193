package runtime

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mlstream/mlstream/learners"
	"github.com/valyala/fastjson"
)

// Record is one event as a job sees it after extraction: only the fields
// the job reads, already typed and hashed. Records travel through the
// partition queues in batches, and the item log stores them (appendRecord).
//
// It is the engine's one generic event: a set of typed slots that any kind
// may use for its own meaning, rather than a type per kind, so that the
// queues, the item log and its format stay the same whatever the kinds.
// A new kind maps its fields onto these slots (Key partitions; the others
// are the kind's to read).
type Record struct {
	// Seq is the per-partition sequence number, assigned when queued.
	Seq uint64
	// TS is the event time in epoch milliseconds (arrival time when the
	// event has none).
	TS  int64
	Key string
	// Label is -1 when the event has no label, else 0 or 1.
	Label int8
	// Side is the stream an event came from for a kind of two streams
	// (Kind.TwoStreams: 0 left, 1 right), set before extraction. (Beside
	// Label: one word for both.)
	Side     uint8
	Features []learners.Feature
	// Values are strings the kind reads from the event (e.g. the values
	// a sketch counts).
	Values []string
	// Value is a number of the kind's (e.g. what a join sums) or, for an
	// event that load shedding kept with Reweight, its weight 1/p (0
	// means 1).
	Value float64
}

// InputError says which event of a request and which field is wrong.
// Line is the 1-based line of an NDJSON body, or the 1-based position of
// the event in a JSON array.
type InputError struct {
	Line  int
	Field string
	Msg   string
}

func (e *InputError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return fmt.Sprintf("line %d: field %q: %s", e.Line, e.Field, e.Msg)
}

// fieldErr is returned by extractors; the batch adds the line.
type fieldErr struct{ field, msg string }

func (e *fieldErr) Error() string { return e.field + ": " + e.msg }

func badField(field, format string, a ...any) error {
	return &fieldErr{field, fmt.Sprintf(format, a...)}
}

// BadField is an extraction error naming the event field; the request's
// answer adds the line.
func BadField(field, format string, a ...any) error { return badField(field, format, a...) }

// AtLine places an extraction error at the line of a request, as an
// *InputError.
func AtLine(err error, line int) error { return inputError(err, line) }

// Fields names the event fields a job reads. The defaults are the
// conventional names (key, ts, label, features), and each can be renamed
// per job (params key_field, ts_field, label_field, features_field).
type Fields struct {
	Key, TS, Label, Features string
}

// ReadFields reads the params key_field, ts_field, label_field and
// features_field (as Params.Field: the event fields the job reads).
func ReadFields(p *Params) (Fields, error) {
	var f Fields
	var err error
	for _, x := range []struct {
		dst        *string
		param, def string
	}{{&f.Key, "key_field", "key"}, {&f.TS, "ts_field", "ts"}, {&f.Label, "label_field", "label"}, {&f.Features, "features_field", "features"}} {
		if *x.dst, err = p.Field(x.param, x.def); err != nil {
			return f, err
		}
		if *x.dst == "" {
			return f, perr(x.param, "must not be empty")
		}
	}
	return f, nil
}

// ConventionalFields are the event fields every stream takes, whether or
// not a job reading it reads them: a producer may send the same events to
// streams whose jobs read different parts of them.
var ConventionalFields = []string{"key", "ts", "label", "features"}

// knownFields is the set of top-level fields an event of a stream may
// have: the conventional ones and every field that a job reading the
// stream names (Params.Field). Any other field is refused, so that a
// misspelt "lable" is an error rather than an event silently taken as
// unlabelled.
func knownFields(jobs []*Job) []string {
	known := slices.Clone(ConventionalFields)
	for _, j := range jobs {
		for _, f := range j.kind.fields() {
			if !slices.Contains(known, f) {
				known = append(known, f)
			}
		}
	}
	return known
}

// checkFields refuses an event, an object, with a field that no job
// reading the batch's stream names (knownFields).
func (b *Batch) checkFields(v *fastjson.Value, line int) error {
	if b.known == nil {
		jobs := make([]*Job, len(b.jobs))
		for i, jb := range b.jobs {
			jobs[i] = jb.job
		}
		b.known = knownFields(jobs)
	}
	return unknownField(v, b.known, b.stream, line)
}

// unknownField returns the error of the first top-level field of the
// event v that is not in known, or nil.
func unknownField(v *fastjson.Value, known []string, stream string, line int) error {
	o, _ := v.Object()
	var bad []byte
	o.Visit(func(k []byte, _ *fastjson.Value) {
		if bad == nil && !slices.Contains(known, b2s(k)) {
			bad = k
		}
	})
	if bad == nil {
		return nil
	}
	name := string(bad)
	if name == "weight" {
		return &InputError{Line: line, Field: name, Msg: "no job kind honours a per-event weight yet (every event counts once): remove the field"}
	}
	sorted := slices.Sorted(slices.Values(known))
	return &InputError{Line: line, Field: name, Msg: fmt.Sprintf(
		"unknown field: an event of stream %q may have only %s (the conventional fields and those its jobs read)",
		stream, strings.Join(sorted, ", "))}
}

// Arena is scratch memory for the records of one request, so that
// extracting an event allocates nothing of its own. Bytes once handed out
// are never written again (appends only grow past them, and a reallocation
// leaves the old array to the strings that use it), so the strings stay
// valid for as long as a record holds them.
type Arena struct {
	feats []learners.Feature
	vals  []string
	bytes []byte
	text  []byte // scratch for Text
	// featHint, when not 0, is the capacity the first features get (a
	// decoder's bound on all it will read).
	featHint int
}

// minArenaBlock is the smallest block of bytes an arena allocates.
const minArenaBlock = 1 << 10

// arena is the name the engine's files use.
type arena = Arena

// Str copies b into the arena and returns it as a string.
func (a *Arena) Str(b []byte) string { return a.str(b) }

// Text copies v's JSON text (a number's digits, true, false) into the
// arena and returns it as a string.
func (a *Arena) Text(v *fastjson.Value) string {
	a.text = v.MarshalTo(a.text[:0])
	return a.str(a.text)
}

// AddValue appends one string to the values being built; Values returns
// those added since mark (ValueMark).
func (a *Arena) AddValue(s string) { a.vals = append(a.vals, s) }

// ValueMark is where the next record's values start.
func (a *Arena) ValueMark() int { return len(a.vals) }

// Values are the values added since mark, for Record.Values.
func (a *Arena) Values(mark int) []string { return a.vals[mark:len(a.vals):len(a.vals)] }

// Features reads the features field (see appendFeatures) into the arena,
// for Record.Features.
func (a *Arena) Features(v *fastjson.Value, field string) ([]learners.Feature, error) {
	start := len(a.feats)
	var err error
	a.feats, err = appendFeatures(a.feats, v, field)
	return a.feats[start:len(a.feats):len(a.feats)], err
}

// ResetFeatures forgets the features read, for a reader that does not keep
// its records (predictions).
func (a *Arena) ResetFeatures() { a.feats = a.feats[:0] }

func (a *Arena) str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if cap(a.bytes)-len(a.bytes) < len(b) {
		// A new block rather than append's copy into a larger one: the
		// strings handed out keep the old block alive either way.
		a.bytes = make([]byte, 0, max(2*cap(a.bytes), len(b), minArenaBlock))
	}
	start := len(a.bytes)
	a.bytes = append(a.bytes, b...)
	return b2s(a.bytes[start:len(a.bytes):len(a.bytes)])
}

// ExtractKey reads the partitioning key: see extractKey.
func ExtractKey(v *fastjson.Value, field string, a *Arena) (string, error) {
	return extractKey(v, field, a)
}

// ExtractTS reads an event time: see extractTS.
func ExtractTS(v *fastjson.Value, field string, now int64) (int64, error) {
	return extractTS(v, field, now)
}

// ExtractLabel reads a binary label: see extractLabel.
func ExtractLabel(v *fastjson.Value, field string) (int8, error) { return extractLabel(v, field) }

// ExtractNumber reads a number within ±Limits.MaxValue (the limit on
// every value an event carries).
func ExtractNumber(x *fastjson.Value, field string) (float64, error) {
	return boundedNumber(x, field, limits.Load().MaxValue)
}

// extractKey reads the partitioning key: a string, or a number used as its
// text. Absent or null means no key (round-robin).
func extractKey(v *fastjson.Value, field string, a *arena) (string, error) {
	k := v.Get(field)
	if k == nil {
		return "", nil
	}
	switch k.Type() {
	case fastjson.TypeString:
		b, _ := k.StringBytes()
		return a.str(b), nil
	case fastjson.TypeNumber:
		return a.Text(k), nil
	case fastjson.TypeNull:
		return "", nil
	}
	return "", badField(field, "must be a string or a number, got %s", k.Type())
}

// extractTS reads the event time: epoch milliseconds, or an RFC 3339
// string, within Limits.MinTS..MaxTS. Absent means arrival time (now).
func extractTS(v *fastjson.Value, field string, now int64) (int64, error) {
	t := v.Get(field)
	if t == nil {
		return now, nil
	}
	switch t.Type() {
	case fastjson.TypeNumber:
		lim := limits.Load()
		f, err := boundedNumber(t, field, math.Inf(1))
		if err != nil {
			return 0, err
		}
		if f < float64(lim.MinTS) || f > float64(lim.MaxTS) {
			return 0, badField(field, "epoch milliseconds out of range [%d, %d]: %s", lim.MinTS, lim.MaxTS, shortJSON(t))
		}
		return int64(f), nil
	case fastjson.TypeString:
		b, _ := t.StringBytes()
		ts, err := time.Parse(time.RFC3339Nano, string(b))
		if err != nil {
			return 0, badField(field, "must be epoch milliseconds or an RFC 3339 time, got %q", b)
		}
		lim := limits.Load()
		if ms := ts.UnixMilli(); ms < lim.MinTS || ms > lim.MaxTS {
			return 0, badField(field, "time out of range [%s, %s]: %q", time.UnixMilli(lim.MinTS).UTC().Format(time.RFC3339), time.UnixMilli(lim.MaxTS).UTC().Format(time.RFC3339), b)
		}
		return ts.UnixMilli(), nil
	case fastjson.TypeNull:
		return now, nil
	}
	return 0, badField(field, "must be epoch milliseconds or an RFC 3339 time, got %s", t.Type())
}

// extractLabel reads a binary label: 0, 1, true or false; absent or null
// means unlabelled (-1).
func extractLabel(v *fastjson.Value, field string) (int8, error) {
	l := v.Get(field)
	if l == nil {
		return -1, nil
	}
	switch l.Type() {
	case fastjson.TypeTrue:
		return 1, nil
	case fastjson.TypeFalse:
		return 0, nil
	case fastjson.TypeNumber:
		f, err := l.Float64()
		if err == nil && (f == 0 || f == 1) {
			return int8(f), nil
		}
	case fastjson.TypeNull:
		return -1, nil
	}
	return 0, badField(field, "must be 0, 1, true or false, got %s", shortJSON(l))
}

// appendFeatures reads the features field: an object {name: number |
// string | bool} (a string value v under name is the one-hot feature
// "name=v"; false is skipped; a number must be finite and within
// Limits.MaxValue) or an array of strings (each a feature of
// value 1). The hashes are those of learners.HashName/HashNameValue.
func appendFeatures(dst []learners.Feature, v *fastjson.Value, field string) ([]learners.Feature, error) {
	f := v.Get(field)
	if f == nil {
		return dst, badField(field, "required: an object of numbers, strings and booleans, or an array of strings")
	}
	switch f.Type() {
	case fastjson.TypeObject:
		o, _ := f.Object()
		var err error
		maxValue := limits.Load().MaxValue
		o.Visit(func(k []byte, x *fastjson.Value) {
			if err != nil {
				return
			}
			switch x.Type() {
			case fastjson.TypeNumber:
				var n float64
				if n, err = featureNumber(x, field, k, maxValue); err == nil && n != 0 {
					dst = append(dst, learners.Feature{Hash: learners.HashName(b2s(k)), Value: n})
				}
			case fastjson.TypeString:
				s, _ := x.StringBytes()
				dst = append(dst, learners.Feature{Hash: learners.HashNameValue(b2s(k), b2s(s)), Value: 1})
			case fastjson.TypeTrue:
				dst = append(dst, learners.Feature{Hash: learners.HashName(b2s(k)), Value: 1})
			case fastjson.TypeFalse, fastjson.TypeNull:
			default:
				err = badField(field+"."+string(k), "must be a number, string or boolean, got %s", x.Type())
			}
		})
		return dst, err
	case fastjson.TypeArray:
		a, _ := f.Array()
		for i, x := range a {
			s, err := x.StringBytes()
			if err != nil {
				return dst, badField(field+"["+strconv.Itoa(i)+"]", "must be a string, got %s", x.Type())
			}
			dst = append(dst, learners.Feature{Hash: learners.HashName(b2s(s)), Value: 1})
		}
		return dst, nil
	}
	return dst, badField(field, "must be an object of numbers, strings and booleans, or an array of strings, got %s", f.Type())
}

// featureNumber is boundedNumber for the feature name of field: the
// field's name "field.name" is built only for the error, not for every
// feature of every event.
func featureNumber(x *fastjson.Value, field string, name []byte, max float64) (float64, error) {
	if f, err := x.Float64(); err == nil && math.Abs(f) <= max {
		return f, nil
	}
	return boundedNumber(x, field+"."+string(name), max)
}

// recordVersion is the first byte of an encoded record, so the item log
// format can grow. Version 3 added Side and Value;
// version 2 records still decode.
const recordVersion = 3

// appendRecord encodes r (without its Seq, which the item log keeps) for
// the item log.
func appendRecord(b []byte, r *Record) []byte {
	b = append(b, recordVersion)
	b = binary.AppendVarint(b, r.TS)
	b = append(b, byte(r.Label+1))
	b = binary.AppendUvarint(b, uint64(len(r.Key)))
	b = append(b, r.Key...)
	b = binary.AppendUvarint(b, uint64(len(r.Features)))
	for _, f := range r.Features {
		b = binary.LittleEndian.AppendUint64(b, f.Hash)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f.Value))
	}
	b = binary.AppendUvarint(b, uint64(len(r.Values)))
	for _, v := range r.Values {
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	b = append(b, r.Side)
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(r.Value))
}

var errBadRecord = errors.New("runtime: malformed record in the item log")

// decodeRecord is the inverse of appendRecord; the record's slices point
// into a.
func decodeRecord(data []byte, r *Record, a *arena) error {
	if len(data) < 1 || data[0] != recordVersion && data[0] != 2 {
		return errBadRecord
	}
	version := data[0]
	p := data[1:]
	ts, n := binary.Varint(p)
	if n <= 0 || len(p) < n+1 {
		return errBadRecord
	}
	r.TS = ts
	p = p[n:]
	if p[0] > 2 {
		return errBadRecord
	}
	r.Label = int8(p[0]) - 1
	p = p[1:]
	kl, n := binary.Uvarint(p)
	if n <= 0 || uint64(len(p)-n) < kl {
		return errBadRecord
	}
	r.Key = a.str(p[n : n+int(kl)])
	p = p[n+int(kl):]
	nf, n := binary.Uvarint(p)
	if n <= 0 || nf > uint64(len(p)) || uint64(len(p)-n) < nf*16 {
		return errBadRecord
	}
	p = p[n:]
	if nf > 0 && a.feats == nil && a.featHint > 0 {
		a.feats = make([]learners.Feature, 0, max(a.featHint, int(nf)))
	}
	start := len(a.feats)
	for i := uint64(0); i < nf; i++ {
		a.feats = append(a.feats, learners.Feature{
			Hash:  binary.LittleEndian.Uint64(p[16*i:]),
			Value: math.Float64frombits(binary.LittleEndian.Uint64(p[16*i+8:])),
		})
	}
	r.Features = a.feats[start:len(a.feats):len(a.feats)]
	p = p[16*nf:]
	nv, n := binary.Uvarint(p)
	if n <= 0 || nv > uint64(len(p)) {
		return errBadRecord
	}
	p = p[n:]
	vstart := len(a.vals)
	for range nv {
		vl, n := binary.Uvarint(p)
		if n <= 0 || uint64(len(p)-n) < vl {
			return errBadRecord
		}
		a.vals = append(a.vals, a.str(p[n:n+int(vl)]))
		p = p[n+int(vl):]
	}
	r.Side, r.Value = 0, 0
	if version >= 3 {
		if len(p) != 9 || p[0] > 1 {
			return errBadRecord
		}
		r.Side, r.Value = p[0], math.Float64frombits(binary.LittleEndian.Uint64(p[1:]))
		p = p[9:]
	}
	if len(p) != 0 {
		return errBadRecord
	}
	r.Values = a.vals[vstart:len(a.vals):len(a.vals)]
	return nil
}
