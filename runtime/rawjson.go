package runtime

import (
	"math"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/mlstream/mlstream/learners"
	"github.com/valyala/fastjson/fastfloat"
)

// RawScan reads JSON straight from its bytes, for extractors of the fast
// path (ByteExtractor): no values are built, nothing is copied. It takes
// a strict subset of what fastjson parses, so that whatever it reads, the
// parser reads the same way: no backslash anywhere in a string (so a
// string's bytes are its text), numbers only in JSON's own spelling.
// Anything else makes a step fail, and the extractor then declines the
// event, leaving it to the parser, which judges it. The zero value scans
// nothing; Reset starts a scan.
type RawScan struct {
	b []byte
	i int
}

// RawKind is the kind of a value RawScan.Value read.
type RawKind uint8

const (
	// RawAbsent is no value: the kind of a field an event does not have.
	RawAbsent RawKind = iota
	// RawOther is a value the scan does not judge: the extractor
	// declines the event.
	RawOther
	RawString
	RawNumber
	RawTrue
	RawFalse
	RawNull
	// RawObject and RawArray: only the opening bracket is read; the
	// caller reads the members or elements.
	RawObject
	RawArray
)

// Reset starts a scan of b.
func (s *RawScan) Reset(b []byte) { s.b, s.i = b, 0 }

// Take reads white space then c, if c is next.
func (s *RawScan) Take(c byte) bool {
	s.i = space(s.b, s.i)
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// Member reads the name of the next member of an object whose brace was
// read, and what precedes it: white space, and a comma unless it is the
// first; done is true when the object ends instead. ok is false for
// anything else.
func (s *RawScan) Member(first bool) (name []byte, done, ok bool) {
	if s.Take('}') {
		return nil, true, true
	}
	if !first && !s.Take(',') {
		return nil, false, false
	}
	name, ok = s.Key()
	return name, false, ok
}

// More reads what follows an element of an array, or a member of an
// object: a comma (more), or end, the closing bracket (not more); ok is
// false for anything else.
func (s *RawScan) More(end byte) (more, ok bool) {
	if s.Take(',') {
		return true, true
	}
	return false, s.Take(end)
}

// End says whether only white space is left.
func (s *RawScan) End() bool {
	s.i = space(s.b, s.i)
	return s.i == len(s.b)
}

// Key reads a member's name and its colon: the name's bytes, which hold
// no backslash.
func (s *RawScan) Key() ([]byte, bool) {
	if !s.Take('"') {
		return nil, false
	}
	end := textEnd(s.b, s.i)
	if end < 0 {
		return nil, false
	}
	name := s.b[s.i:end]
	s.i = end + 1
	return name, s.Take(':')
}

// Value reads white space then a value: a string's bytes, a number's
// text, a literal; of an object or an array only the bracket. RawOther
// means the scan cannot read it.
func (s *RawScan) Value() (RawKind, []byte) {
	b := s.b
	i := space(b, s.i)
	if i == len(b) {
		return RawOther, nil
	}
	k, end := valueAt(b, i)
	switch k {
	case RawOther:
		return RawOther, nil
	case RawObject, RawArray:
		s.i = i + 1
		return k, nil
	case RawString:
		s.i = end + 1
		return k, b[i+1 : end]
	}
	s.i = end
	return k, b[i:end]
}

// valueAt reads the value that starts at b[i]: its kind and its end (a
// string's closing quote; an object's or array's bracket is not read).
func valueAt(b []byte, i int) (RawKind, int) {
	switch c := b[i]; {
	case c == '"':
		if end := textEnd(b, i+1); end >= 0 {
			return RawString, end
		}
	case c == '-' || c >= '0' && c <= '9':
		if end, _, _ := jsonNumber(b, i); end > 0 {
			return RawNumber, end
		}
	case c == '{':
		return RawObject, i
	case c == '[':
		return RawArray, i
	case c == 't':
		return literal(b, i, "true", RawTrue)
	case c == 'f':
		return literal(b, i, "false", RawFalse)
	case c == 'n':
		return literal(b, i, "null", RawNull)
	}
	return RawOther, 0
}

// space skips JSON white space at b[i], the four bytes fastjson skips.
func space(b []byte, i int) int {
	// A byte above ' ' is not white space: one comparison for most.
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

// textEnd returns the index of the quote that ends the string whose
// text starts at b[i], or -1 if a backslash or the end comes first.
func textEnd(b []byte, i int) int {
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			return i
		case '\\':
			return -1
		}
	}
	return -1
}

// literal reads word at b[i].
func literal(b []byte, i int, word string, k RawKind) (RawKind, int) {
	if len(b)-i < len(word) || string(b[i:i+len(word)]) != word {
		return RawOther, 0
	}
	return k, i + len(word)
}

// jsonNumber reads a number in JSON's grammar at b[i]: -?(0|[1-9][0-9]*)
// (.[0-9]+)?([eE][+-]?[0-9]+)?, returning its end, or 0 when b[i] starts
// no such number. What follows it is left to the caller's next step (a
// delimiter or white space, or the event is declined), so a longer run
// that fastjson would take for one number ("1.2.3", "01") never passes.
// Of a number of at most 15 digits without exponent it computes the
// value (exact) as fastjson's fastfloat.Parse does.
func jsonNumber(b []byte, i int) (end int, value float64, exact bool) {
	// One digit that no more of a number follows, as most counts of a bag
	// of words are: its value at once.
	if c := b[i] - '0'; c <= 9 && (i+1 == len(b) || !inNumber(b[i+1])) {
		return i + 1, float64(c), true
	}
	neg := b[i] == '-'
	if neg {
		i++
	}
	var d uint64 // the digits, exact while there are at most 15
	first := i
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		d, i = appendDigits(d, b, i)
	default:
		return 0, 0, false
	}
	n := i - first
	frac := 0
	if i < len(b) && b[i] == '.' {
		start := i + 1
		d, i = appendDigits(d, b, start)
		if frac = i - start; frac == 0 {
			return 0, 0, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := i
		for j < len(b) && digit(b[j]) {
			j++
		}
		if j == i {
			return 0, 0, false
		}
		return j, 0, false
	}
	if n+frac > 15 {
		return i, 0, false
	}
	// fastfloat.Parse's own arithmetic for such numbers (d is under 2^63:
	// the signed conversion gives the same value, faster).
	value = float64(int64(d))
	if frac > 0 {
		value /= pow10[frac]
	}
	if neg {
		value = -value
	}
	return i, value, true
}

// appendDigits appends the run of digits at b[i] to d, as decimal
// digits (exact while d has at most 19), and returns where the run ends.
func appendDigits(d uint64, b []byte, i int) (uint64, int) {
	for ; i < len(b); i++ {
		c := b[i] - '0' // one comparison: bytes below '0' wrap around
		if c > 9 {
			break
		}
		d = d*10 + uint64(c)
	}
	return d, i
}

// digit says whether c is a decimal digit (one comparison: bytes below
// '0' wrap around).
func digit(c byte) bool { return c-'0' <= 9 }

// inNumber says whether c can continue a number past its first digit.
func inNumber(c byte) bool { return digit(c) || c == '.' || c == 'e' || c == 'E' }

var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// RawFeatures reads the features value at s into the arena, as
// appendFeatures reads it parsed (Arena.Features): an object of numbers,
// strings and literals, or an array of strings. It returns false for a
// value appendFeatures refuses or that the scan does not judge; the
// features it added are then the caller's to forget.
func (a *Arena) RawFeatures(s *RawScan) ([]learners.Feature, bool) {
	start := len(a.feats)
	var ok bool
	switch k, _ := s.Value(); k {
	case RawObject:
		a.feats, s.i, ok = appendRawObject(a.feats, s.b, s.i, limits.Load().MaxValue)
	case RawArray:
		a.feats, s.i, ok = appendRawArray(a.feats, s.b, s.i)
	}
	return a.feats[start:len(a.feats):len(a.feats)], ok
}

// appendRawObject appends the features of the object whose members
// start at b[i] (past its brace), and returns where it ends. It reads
// with local indices rather than RawScan's steps: every event's features
// pass here.
func appendRawObject(dst []learners.Feature, b []byte, i int, maxValue float64) ([]learners.Feature, int, bool) {
	if i = space(b, i); i < len(b) && b[i] == '}' {
		return dst, i + 1, true
	}
	for more := true; more; {
		name, end := stringAt(b, space(b, i))
		if end < 0 {
			return dst, i, false
		}
		if i = space(b, end); i >= len(b) || b[i] != ':' {
			return dst, i, false
		}
		if i = space(b, i+1); i >= len(b) {
			return dst, i, false
		}
		var ok bool
		if dst, i, ok = appendRawFeature(dst, name, b, i, maxValue); !ok {
			return dst, i, false
		}
		if i, more, ok = next(b, i, '}'); !ok {
			return dst, i, false
		}
	}
	return dst, i, true
}

// stringAt reads the string at b[i], without backslashes: its text and
// where it ends, or end -1.
func stringAt(b []byte, i int) (text []byte, end int) {
	if i >= len(b) || b[i] != '"' {
		return nil, -1
	}
	if end = textEnd(b, i+1); end < 0 {
		return nil, -1
	}
	return b[i+1 : end], end + 1
}

// next reads what follows a member or an element at b[i]: a comma
// (more), or the closing bracket.
func next(b []byte, i int, closing byte) (j int, more, ok bool) {
	if i = space(b, i); i < len(b) {
		if b[i] == ',' {
			return i + 1, true, true
		}
		return i + 1, false, b[i] == closing
	}
	return i, false, false
}

// appendRawFeature appends the feature of the member name whose value
// starts at b[i], and returns where the value ends.
func appendRawFeature(dst []learners.Feature, name, b []byte, i int, maxValue float64) ([]learners.Feature, int, bool) {
	switch c := b[i]; {
	case c == '"':
		text, end := stringAt(b, i)
		if end < 0 {
			return dst, i, false
		}
		return append(dst, learners.Feature{Hash: hashNameValue(name, text), Value: 1}), end, true
	case c == '-' || c >= '0' && c <= '9':
		end, n, exact := jsonNumber(b, i)
		if end == 0 {
			return dst, i, false
		}
		if !exact {
			var err error
			if n, err = fastfloat.Parse(b2s(b[i:end])); err != nil {
				return dst, i, false
			}
		}
		if !(math.Abs(n) <= maxValue) {
			return dst, i, false // featureNumber's error
		}
		if n != 0 {
			dst = append(dst, learners.Feature{Hash: xxhash.Sum64(name), Value: n})
		}
		return dst, end, true
	}
	k, end := valueAt(b, i)
	switch k {
	case RawTrue:
		return append(dst, learners.Feature{Hash: xxhash.Sum64(name), Value: 1}), end, true
	case RawFalse, RawNull:
		return dst, end, true
	}
	return dst, i, false
}

// appendRawArray appends the features of the array of strings whose
// elements start at b[i] (past its bracket), and returns where it ends.
func appendRawArray(dst []learners.Feature, b []byte, i int) ([]learners.Feature, int, bool) {
	if i = space(b, i); i < len(b) && b[i] == ']' {
		return dst, i + 1, true
	}
	for more := true; more; {
		text, end := stringAt(b, space(b, i))
		if end < 0 {
			return dst, i, false
		}
		dst = append(dst, learners.Feature{Hash: xxhash.Sum64(text), Value: 1})
		var ok bool
		if i, more, ok = next(b, end, ']'); !ok {
			return dst, i, false
		}
	}
	return dst, i, true
}

// hashNameValue is learners.HashNameValue of a name and a value in bytes:
// the hash of "name=value", in one call when it fits on the stack.
func hashNameValue(name, value []byte) uint64 {
	var buf [64]byte
	if len(name)+1+len(value) > len(buf) {
		return learners.HashNameValue(b2s(name), b2s(value))
	}
	n := copy(buf[:], name)
	buf[n] = '='
	n += 1 + copy(buf[n+1:], value)
	return xxhash.Sum64(buf[:n])
}

// The twins of the extractors of record.go for scanned values: each
// gives what its twin gives of the parsed value, or ok false where its
// twin fails (the event is then left to the parser, which reports the
// error).

// RawNumberValue is a number's value as fastjson reads it (Value.Float64),
// when it is within ±max; ok is false for a value boundedNumber refuses.
func RawNumberValue(text []byte, max float64) (float64, bool) {
	if len(text) == 0 {
		return 0, false
	}
	if end, f, exact := jsonNumber(text, 0); exact && end == len(text) {
		return f, math.Abs(f) <= max
	}
	f, err := fastfloat.Parse(b2s(text))
	return f, err == nil && math.Abs(f) <= max
}

// RawKeyText is extractKey of a scanned value: the text that Arena.Str
// copies into the key (nil for none), or ok false.
func RawKeyText(k RawKind, text []byte) ([]byte, bool) {
	switch k {
	case RawString, RawNumber:
		return text, true
	case RawNull, RawAbsent:
		return nil, true
	}
	return nil, false
}

// RawTS is extractTS of a scanned value.
func RawTS(k RawKind, text []byte, now int64) (int64, bool) {
	lim := limits.Load()
	switch k {
	case RawNumber:
		f, ok := RawNumberValue(text, math.Inf(1))
		if !ok || f < float64(lim.MinTS) || f > float64(lim.MaxTS) {
			return 0, false
		}
		return int64(f), true
	case RawString:
		ts, err := time.Parse(time.RFC3339Nano, b2s(text))
		if ms := ts.UnixMilli(); err != nil || ms < lim.MinTS || ms > lim.MaxTS {
			return 0, false
		}
		return ts.UnixMilli(), true
	case RawNull, RawAbsent:
		return now, true
	}
	return 0, false
}

// RawLabel is extractLabel of a scanned value.
func RawLabel(k RawKind, text []byte) (int8, bool) {
	switch k {
	case RawTrue:
		return 1, true
	case RawFalse:
		return 0, true
	case RawNumber:
		if f, ok := RawNumberValue(text, 1); ok && (f == 0 || f == 1) {
			return int8(f), true
		}
	case RawNull, RawAbsent:
		return -1, true
	}
	return 0, false
}
