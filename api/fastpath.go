package api

import (
	"bytes"

	"github.com/mlstream/mlstream/runtime"
	"github.com/valyala/fastjson"
)

// The string fast path: when every job reading a stream takes one string
// field of its events (runtime.Batch.StringField), an event that is
// exactly {"field": "text"} is recognised by scanning its bytes and handed
// to the batch as its text, without parsing. Anything else, including
// every event that is not valid JSON, an escape in the text or a second
// member, goes the ordinary way (fastjson, then Batch.Add), which judges
// and reports it as before.

// decodeInto decodes body into b: decodeEvents with add, except that the
// events the string fast path recognises go to b.AddString.
func decodeInto(b *runtime.Batch, body []byte, contentType string, maxEvent int, add func(v *fastjson.Value, line int) error) (int, error) {
	field, ok := b.StringField()
	if !ok || !plainKey(field) {
		return decodeEvents(body, contentType, maxEvent, add)
	}
	return decodeEventsExcept(body, contentType, maxEvent, func(ev []byte) bool {
		s, ok := stringMember(ev, field)
		if ok {
			b.AddString(s)
		}
		return ok
	}, add)
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
