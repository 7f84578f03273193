package api

import (
	"bytes"

	"github.com/mlstream/mlstream/runtime"
	"github.com/valyala/fastjson"
)

// The fast paths of ingest. The string fast path: when every job reading
// a stream takes one string field of its events (runtime.Batch.
// StringField), an event that is exactly {"field": "text"} is recognised
// by scanning its bytes and handed to the batch as its text, without
// parsing. The byte fast path: when every job reading a stream can read
// events from their bytes (runtime.ByteExtractor; logreg can), each event
// is offered to the batch as bytes first (Batch.AddBytes). Anything else,
// including every event that is not valid JSON, an escape in a string or
// an unexpected member, goes the ordinary way (fastjson, then Batch.Add),
// which judges and reports it as before.

// decodeInto decodes body into b: decodeEvents with add, except that the
// events a fast path takes go to b.AddString or b.AddBytes. At most most
// events are taken so; add is left to refuse more.
func decodeInto(b *runtime.Batch, body []byte, contentType string, maxEvent, most int, add func(v *fastjson.Value, line int) error) (int, error) {
	field, ok := b.StringField()
	if !ok || !plainKey(field) {
		if b.ExtractsBytes() {
			return decodeEventsWith(body, contentType, maxEvent, shortcuts{event: func(ev []byte) bool {
				return b.Len() < most && b.AddBytes(ev)
			}}, add)
		}
		return decodeEvents(body, contentType, maxEvent, add)
	}
	m := stringLines{prefix: []byte(`{"` + field + `":"`), maxEvent: maxEvent}
	return decodeEventsWith(body, contentType, maxEvent, shortcuts{
		line: func(body []byte, off int) (int, bool) {
			s, next, ok := m.match(body, off)
			if ok && b.Len() < most {
				b.AddString(s)
				return next, true
			}
			return 0, false
		},
		event: func(ev []byte) bool {
			s, ok := stringMember(ev, field)
			if ok && b.Len() < most {
				b.AddString(s)
				return true
			}
			return false
		},
	}, add)
}

// stringLines recognises lines that are exactly {"field":"text"}: the
// common spelling, in one pass over the bytes. Other spellings are left
// to stringMember, the rest to the parser.
type stringLines struct {
	prefix   []byte // {"field":"
	maxEvent int
}

// match returns the text of the line at body[off] and where the next line
// starts, if the line is {"field":"text"} with no escape in the text and
// no larger than maxEvent.
func (m *stringLines) match(body []byte, off int) (s []byte, next int, ok bool) {
	rest := body[off:]
	if !bytes.HasPrefix(rest, m.prefix) {
		return nil, 0, false
	}
	i := len(m.prefix)
	for i < len(rest) && rest[i] != '"' && rest[i] != '\\' && rest[i] != '\n' {
		i++
	}
	switch {
	case i+1 >= len(rest) || rest[i] != '"' || rest[i+1] != '}':
		return nil, 0, false
	case i+2 < len(rest) && rest[i+2] != '\n':
		return nil, 0, false
	case i+2 > m.maxEvent:
		return nil, 0, false // for the error of an event too large
	}
	return rest[len(m.prefix):i], off + i + 3, true
}

// plainKey says whether field appears in JSON as itself between quotes:
// no quote, backslash or control character, which JSON escapes.
func plainKey(field string) bool {
	for i := 0; i < len(field); i++ {
		if c := field[i]; c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// stringMember returns the text of the string in ev when ev is an object
// of exactly one member, named field, whose value is a string without
// escapes, with JSON white space allowed between the tokens. A string may
// hold any other byte: the parser takes those as they are too.
func stringMember(ev []byte, field string) ([]byte, bool) {
	i := skipSpace(ev, 0)
	if !hasByte(ev, i, '{') {
		return nil, false
	}
	i = skipSpace(ev, i+1)
	if !hasByte(ev, i, '"') || !bytes.HasPrefix(ev[i+1:], []byte(field)) {
		return nil, false
	}
	i += 1 + len(field)
	if !hasByte(ev, i, '"') {
		return nil, false
	}
	i = skipSpace(ev, i+1)
	if !hasByte(ev, i, ':') {
		return nil, false
	}
	i = skipSpace(ev, i+1)
	if !hasByte(ev, i, '"') {
		return nil, false
	}
	start := i + 1
	end := bytes.IndexByte(ev[start:], '"')
	if end < 0 {
		return nil, false
	}
	s := ev[start : start+end]
	if bytes.IndexByte(s, '\\') >= 0 {
		return nil, false
	}
	i = skipSpace(ev, start+end+1)
	if !hasByte(ev, i, '}') || skipSpace(ev, i+1) != len(ev) {
		return nil, false
	}
	return s, true
}

func hasByte(b []byte, i int, c byte) bool { return i < len(b) && b[i] == c }
