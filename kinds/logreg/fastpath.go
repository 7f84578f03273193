package logreg

import (
	"math"

	"github.com/mlstream/mlstream/learners"
	"github.com/mlstream/mlstream/runtime"
)

// The byte fast path (runtime.ByteExtractor): an event is read in one
// pass over its bytes, its feature names hashed as they are met, with no
// parsed values. It takes the common spellings only: the fields the job
// reads at most once each and no other member, no backslash anywhere in
// a name or a string. Every other event, and every event Extract would refuse, goes
// to the parser and Extract, which read or refuse it as ever.

var _ runtime.ByteExtractor = (*logregJob)(nil)

// fastFields says whether the job's fields allow the fast path: names
// that JSON spells as themselves between quotes, and a features field
// apart from the others (one member cannot be both the features and a
// scalar that Extract reads).
func fastFields(f runtime.Fields, idField string) bool {
	names := []string{f.Key, f.TS, f.Label, idField}
	for _, n := range append(names, f.Features) {
		for i := 0; i < len(n); i++ {
			if c := n[i]; c < 0x20 || c == '"' || c == '\\' {
				return false
			}
		}
	}
	for _, n := range names {
		if n == f.Features {
			return false
		}
	}
	return true
}

// rawField is a scalar member a fast extraction read.
type rawField struct {
	kind runtime.RawKind
	text []byte
}

// rawEvent is what one fast extraction found: the scalar fields the job
// reads, and the features if read (hasFeatures).
type rawEvent struct {
	key, ts, label, id rawField
	features           []learners.Feature
	hasFeatures        bool
}

// ExtractBytes is Extract of the event whose JSON text is ev, for the
// events it can read (runtime.ByteExtractor).
func (j *logregJob) ExtractBytes(ev []byte, rec *runtime.Record, a *runtime.Arena, now int64) bool {
	if !j.fast {
		return false
	}
	var s runtime.RawScan
	s.Reset(ev)
	var e rawEvent
	if !s.Take('{') || !j.scanMembers(&s, &e, a) || !s.End() || !e.hasFeatures {
		return false
	}
	return j.fill(&e, rec, a, now)
}

// scanMembers reads the members of the event, past its opening brace,
// hashing the features into a.
func (j *logregJob) scanMembers(s *runtime.RawScan, e *rawEvent, a *runtime.Arena) bool {
	for first := true; ; first = false {
		name, done, ok := s.Member(first)
		if done || !ok {
			return ok
		}
		if string(name) == j.fields.Features {
			if e.hasFeatures {
				return false // which one Extract reads is the parser's to say
			}
			e.hasFeatures = true
			if e.features, ok = a.RawFeatures(s); !ok {
				return false
			}
		} else if !j.scanScalar(s, e, name) {
			return false
		}
	}
}

// scanScalar reads the value of a member other than the features: into
// each of the fields it names (more than one if the job reads one member
// as several). A member the job does not read declines the event: the
// parser's path judges it, taking it if another job reading the stream,
// or the conventions, name it (runtime.Batch.Add), refusing it otherwise.
func (j *logregJob) scanScalar(s *runtime.RawScan, e *rawEvent, name []byte) bool {
	k, text := s.Value()
	if k == runtime.RawOther || k == runtime.RawObject || k == runtime.RawArray {
		return false
	}
	v := rawField{k, text}
	read := 0
	return v.into(&e.key, name, j.fields.Key, &read) && v.into(&e.ts, name, j.fields.TS, &read) &&
		v.into(&e.label, name, j.fields.Label, &read) && v.into(&e.id, name, j.labels.idField, &read) && read > 0
}

// into stores v, the value of the member name, in dst, the field of the
// given name, if that is its name, counting it in read; ok is false for a
// second member of the name.
func (v rawField) into(dst *rawField, name []byte, field string, read *int) bool {
	if string(name) != field {
		return true
	}
	if dst.kind != runtime.RawAbsent {
		return false
	}
	*dst = v
	*read++
	return true
}

// fill completes the record from the scalar fields, as Extract does,
// once the features are in a.
func (j *logregJob) fill(e *rawEvent, rec *runtime.Record, a *runtime.Arena, now int64) bool {
	key, ok := runtime.RawKeyText(e.key.kind, e.key.text)
	if !ok {
		return false
	}
	if rec.TS, ok = runtime.RawTS(e.ts.kind, e.ts.text, now); !ok {
		return false
	}
	if rec.Label, ok = runtime.RawLabel(e.label.kind, e.label.text); !ok {
		return false
	}
	id, ok := runtime.RawKeyText(e.id.kind, e.id.text)
	if !ok || e.id.kind != runtime.RawAbsent && e.id.kind != runtime.RawNull && (len(id) == 0 || len(id) > MaxIDBytes) {
		return false
	}
	rec.Key = a.Str(key)
	if len(id) > 0 && rec.Label < 0 {
		holdID(rec, a.Str(id), a)
	}
	rec.Features = e.features
	return true
}

// KeepBytes samples the names of an event the fast path took, as Extract
// does (names.go).
func (j *logregJob) KeepBytes(ev []byte, rec *runtime.Record) {
	if j.names.sample() {
		j.names.observeRaw(ev, j.fields.Features, rec.Features, j.model)
	}
}

// appendRawFeatureNames is appendFeatureNames of the features field of
// ev, an event the fast path took.
func appendRawFeatureNames(buf []byte, ends []int, ev []byte, field string) ([]byte, []int) {
	var s runtime.RawScan
	s.Reset(ev)
	if !s.Take('{') {
		return buf, ends
	}
	for first := true; ; first = false {
		name, done, ok := s.Member(first)
		if done || !ok {
			return buf, ends
		}
		if k, _ := s.Value(); string(name) == field {
			return appendRawNames(buf, ends, &s, k)
		}
	}
}

// appendRawNames appends the names of the features object or array whose
// opening bracket s read (k).
func appendRawNames(buf []byte, ends []int, s *runtime.RawScan, k runtime.RawKind) ([]byte, []int) {
	switch k {
	case runtime.RawObject:
		for first := true; ; first = false {
			name, done, ok := s.Member(first)
			if done || !ok {
				break
			}
			switch k, text := s.Value(); k {
			case runtime.RawNumber:
				if n, _ := runtime.RawNumberValue(text, math.Inf(1)); n != 0 {
					buf = append(buf, name...)
					ends = append(ends, len(buf))
				}
			case runtime.RawString:
				buf = append(append(append(buf, name...), '='), text...)
				ends = append(ends, len(buf))
			case runtime.RawTrue:
				buf = append(buf, name...)
				ends = append(ends, len(buf))
			}
		}
	case runtime.RawArray:
		for !s.Take(']') {
			k, text := s.Value()
			if k != runtime.RawString {
				break
			}
			buf = append(buf, text...)
			ends = append(ends, len(buf))
			s.Take(',')
		}
	}
	return buf, ends
}
