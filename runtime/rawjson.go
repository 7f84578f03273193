package runtime

import (
	"math"
	"time"

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
	// num is the value of the last number read, if exact.
	num   float64
	exact bool
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

// space skips JSON white space, the four bytes fastjson skips.
func (s *RawScan) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// Take reads white space then c, if c is next.
func (s *RawScan) Take(c byte) bool {
	// Small enough to inline: most tokens follow each other directly.
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return s.takeAfterSpace(c)
}

func (s *RawScan) takeAfterSpace(c byte) bool {
	s.space()
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

// More reads what follows a member or an element: a comma (more), or
// end, the closing bracket (not more); ok is false for anything else.
func (s *RawScan) More(end byte) (more, ok bool) {
	if s.Take(',') {
		return true, true
	}
	return false, s.Take(end)
}

// End says whether only white space is left.
func (s *RawScan) End() bool {
	s.space()
	return s.i == len(s.b)
}

// Key reads a member's name and its colon: the name's bytes, which hold
// no backslash.
func (s *RawScan) Key() ([]byte, bool) {
	if !s.Take('"') {
		return nil, false
	}
	text, ok := s.text()
	return text, ok && s.Take(':')
}

// text reads the rest of a string whose opening quote was read.
func (s *RawScan) text() ([]byte, bool) {
	b := s.b
	for j := s.i; j < len(b); j++ {
		switch b[j] {
		case '"':
			text := b[s.i:j]
			s.i = j + 1
			return text, true
		case '\\':
			return nil, false
		}
	}
	return nil, false
}

// Value reads white space then a value: a string's bytes, a number's
// text, a literal; of an object or an array only the bracket. RawOther
// means the scan cannot read it.
func (s *RawScan) Value() (RawKind, []byte) {
	s.space()
	if s.i == len(s.b) {
		return RawOther, nil
	}
	switch c := s.b[s.i]; {
	case c == '"':
		s.i++
		if text, ok := s.text(); ok {
			return RawString, text
		}
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	case c == '{':
		s.i++
		return RawObject, nil
	case c == '[':
		s.i++
		return RawArray, nil
	case c == 't':
		return s.literal("true", RawTrue)
	case c == 'f':
		return s.literal("false", RawFalse)
	case c == 'n':
		return s.literal("null", RawNull)
	}
	return RawOther, nil
}

// literal reads word, which the value starts with.
func (s *RawScan) literal(word string, k RawKind) (RawKind, []byte) {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return RawOther, nil
	}
	s.i += len(word)
	return k, nil
}

// number reads a number in JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?
// ([eE][+-]?[0-9]+)?. What follows it is left to the caller's next step
// (a delimiter or white space, or the event is declined), so a longer
// run that fastjson would take for one number ("1.2.3", "01") never
// passes. Of a number of at most 15 digits without exponent it computes
// the value as fastjson's fastfloat.Parse does, for Float.
func (s *RawScan) number() (RawKind, []byte) {
	b, start := s.b, s.i
	i := start
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
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			d = d*10 + uint64(b[i]-'0')
		}
	default:
		return RawOther, nil
	}
	n, frac := i-first, 0
	if i < len(b) && b[i] == '.' {
		i++
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			d = d*10 + uint64(b[i]-'0')
			frac++
		}
		if frac == 0 {
			return RawOther, nil
		}
	}
	s.exact = n+frac <= 15
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return RawOther, nil
		}
		i, s.exact = j, false
	}
	if s.exact {
		// fastfloat.Parse's own arithmetic for such numbers.
		s.num = float64(d) / pow10[frac]
		if neg {
			s.num = -s.num
		}
	}
	s.i = i
	return RawNumber, b[start:i]
}

var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// Float is the value of the number Value just read (text), as fastjson
// reads it (Value.Float64), when it is within ±max; ok is false for a
// value boundedNumber refuses.
func (s *RawScan) Float(text []byte, max float64) (float64, bool) {
	if s.exact {
		return s.num, math.Abs(s.num) <= max
	}
	return RawNumberValue(text, max)
}

// digits returns the end of the run of digits at b[i].
func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// The twins of the extractors of record.go for scanned values: each
// gives what its twin gives of the parsed value, or ok false where its
// twin fails (the event is then left to the parser, which reports the
// error).

// RawNumberValue is a number's value as fastjson reads it (Value.Float64),
// when it is within ±max; ok is false for a value boundedNumber refuses.
func RawNumberValue(text []byte, max float64) (float64, bool) {
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
		if f, err := fastfloat.Parse(b2s(text)); err == nil && (f == 0 || f == 1) {
			return int8(f), true
		}
	case RawNull, RawAbsent:
		return -1, true
	}
	return 0, false
}
