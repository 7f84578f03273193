package api

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"

	"github.com/valyala/fastjson"
)

// DecodeError is a request body that cannot be read as events. Status is
// 400 for bad JSON, 413 for an event over the size limit or a body over
// the queues' capacity, and 408 for a body that did not arrive in time.
type DecodeError struct {
	Status int
	Line   int
	Msg    string
}

func (e *DecodeError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return e.Msg
}

func badJSON(line int, format string, a ...any) error {
	return &DecodeError{http.StatusBadRequest, line, "not valid JSON: " + fmt.Sprintf(format, a...)}
}

func eventTooLarge(line, size, maxEvent int) error {
	return &DecodeError{http.StatusRequestEntityTooLarge, line, fmt.Sprintf("event of %d bytes is over the limit of %d bytes", size, maxEvent)}
}

var parsers fastjson.ParserPool

// format says how a body holds its events.
type format int

const (
	formatNDJSON format = iota // one object per line (a single object is the one-line case)
	formatArray                // a JSON array of objects
	formatSingle               // exactly one JSON value, which may span lines
)

// sniff picks the body format from the content type and the first byte.
// Without a JSON content type, a body starting with '{' is read as NDJSON,
// and, if its first line is not a whole object, as one pretty-printed
// object.
func sniff(body []byte, contentType string) format {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '[' {
		return formatArray
	}
	ct, _, _ := strings.Cut(contentType, ";")
	if strings.EqualFold(strings.TrimSpace(ct), "application/json") {
		return formatSingle
	}
	return formatNDJSON
}

// decodeEvents calls fn with each event of body, in order, with its line
// (NDJSON) or 1-based position (array). fn must not keep v: it is only
// valid during the call. Each event is parsed on its own, after its size
// was checked against maxEvent, so no more than one event's worth of
// parsed values exists at a time. It returns the number of events fn
// accepted.
func decodeEvents(body []byte, contentType string, maxEvent int, fn func(v *fastjson.Value, line int) error) (int, error) {
	return decodeEventsWith(body, contentType, maxEvent, shortcuts{}, fn)
}

// shortcuts take events without parsing them: whole lines of an NDJSON
// body (line: the line starting at body[off], returning where the next
// one starts), or single events of any body (event). Either returns false
// to leave the event to the parser.
type shortcuts struct {
	line  func(body []byte, off int) (next int, ok bool)
	event func(ev []byte) bool
}

// decodeEventsWith is decodeEvents, except that the events that sc takes
// are not parsed nor passed to fn.
func decodeEventsWith(body []byte, contentType string, maxEvent int, sc shortcuts, fn func(v *fastjson.Value, line int) error) (int, error) {
	p := parsers.Get()
	defer parsers.Put(p)
	return splitEvents(body, contentType, maxEvent, sc.line, func(ev []byte, line int) error {
		if sc.event != nil && sc.event(ev) {
			return nil
		}
		v, err := p.ParseBytes(ev)
		if err != nil {
			return badJSON(line, "%s", shortErr(err))
		}
		return fn(v, line)
	})
}

// countEvents counts the events of body without parsing them, checking
// the framing and every event's size.
func countEvents(body []byte, contentType string, maxEvent int) (int, error) {
	return splitEvents(body, contentType, maxEvent, nil, func([]byte, int) error { return nil })
}

// splitEvents calls fn with the bytes of each event of body and its line
// or position, refusing an event over maxEvent bytes before fn sees it.
// It returns the number of events fn accepted, or took (shortcuts.line).
func splitEvents(body []byte, contentType string, maxEvent int, take func(body []byte, off int) (int, bool), fn func(ev []byte, line int) error) (int, error) {
	switch sniff(body, contentType) {
	case formatArray:
		return splitArray(body, maxEvent, fn)
	case formatSingle:
		return splitSingle(bytes.TrimSpace(body), maxEvent, fn)
	}
	return splitLines(body, maxEvent, take, fn)
}

func splitSingle(ev []byte, maxEvent int, fn func(ev []byte, line int) error) (int, error) {
	if len(ev) == 0 {
		return 0, &DecodeError{http.StatusBadRequest, 0, "no events: the body is empty"}
	}
	if len(ev) > maxEvent {
		return 0, eventTooLarge(1, len(ev), maxEvent)
	}
	if err := fn(ev, 1); err != nil {
		return 0, err
	}
	return 1, nil
}

// splitLines splits an NDJSON body. A body whose first event spans
// several lines and is all the body holds is one pretty-printed event.
// take, if not nil, is offered each line first (shortcuts.line).
func splitLines(body []byte, maxEvent int, take func(body []byte, off int) (int, bool), fn func(ev []byte, line int) error) (int, error) {
	n := 0
	line := 0
	for off := 0; off < len(body); {
		line++
		if take != nil {
			if next, ok := take(body, off); ok {
				n++
				off = next
				continue
			}
		}
		l := body[off:]
		if i := bytes.IndexByte(l, '\n'); i >= 0 {
			l = l[:i]
		}
		start := off
		off += len(l) + 1
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		if lead := skipSpace(body, start); n == 0 && off < len(body) && spansLines(body[lead:], start+len(l)-lead) {
			return splitSingle(bytes.TrimSpace(body), maxEvent, fn)
		}
		if len(l) > maxEvent {
			return n, eventTooLarge(line, len(l), maxEvent)
		}
		if err := fn(l, line); err != nil {
			return n, err
		}
		n++
	}
	if n == 0 {
		return 0, &DecodeError{http.StatusBadRequest, 0, "no events: the body is empty"}
	}
	return n, nil
}

// spansLines reports whether rest starts with an object that goes on past
// its first line (which ends at rest[newline]) and is followed by nothing
// but spaces: one pretty-printed event.
func spansLines(rest []byte, newline int) bool {
	if rest[0] != '{' {
		return false
	}
	end := valueEnd(rest)
	return end > newline && len(bytes.TrimSpace(rest[end:])) == 0
}

// splitArray splits a JSON array into its top-level elements by scanning
// brackets, strings and escapes only; each element is parsed later on its
// own. line is the element's 1-based position.
func splitArray(body []byte, maxEvent int, fn func(ev []byte, line int) error) (int, error) {
	i := skipSpace(body, 0) + 1 // past '['
	pos := 0
	if j := skipSpace(body, i); j < len(body) && body[j] == ']' {
		if k := skipSpace(body, j+1); k < len(body) {
			return 0, badJSON(0, "unexpected data after the array at byte %d", k)
		}
		return 0, &DecodeError{http.StatusBadRequest, 0, "no events: the array is empty"}
	}
	for {
		i = skipSpace(body, i)
		pos++
		if i == len(body) {
			return pos - 1, badJSON(pos, "the array ends before its closing bracket")
		}
		// Look no further than one byte past the limit: an event that has
		// not ended by then is too large, whatever follows.
		window := body[i:min(len(body), i+maxEvent+1)]
		end := valueEnd(window)
		switch {
		case end > maxEvent || end < 0 && len(window) > maxEvent:
			return pos - 1, eventTooLarge(pos, len(window), maxEvent)
		case end < 0:
			return pos - 1, badJSON(pos, "the body ends inside event %d", pos)
		case end == 0:
			return pos - 1, badJSON(pos, "expected an event, got %q", body[i])
		}
		if err := fn(body[i:i+end], pos); err != nil {
			return pos - 1, err
		}
		i = skipSpace(body, i+end)
		switch {
		case i == len(body):
			return pos, badJSON(pos, "the array ends before its closing bracket")
		case body[i] == ',':
			i++
			continue
		case body[i] != ']':
			return pos, badJSON(pos, "expected ',' or ']' after event %d, got %q", pos, body[i])
		}
		if k := skipSpace(body, i+1); k < len(body) {
			return pos, badJSON(0, "unexpected data after the array at byte %d", k)
		}
		return pos, nil
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// valueEnd returns the length of the JSON value at the start of b (which
// is not a space), or -1 if b ends inside it. It tracks only bracket
// depth, strings and escapes, never the grammar: the value is parsed
// afterwards, which finds any other error. A stray closing bracket is a
// value of one byte, which the parser then refuses.
func valueEnd(b []byte) int {
	if len(b) > 0 && structural[b[0]] == 0 {
		return scalarEnd(b, 0)
	}
	depth := 0
	for i := 0; i < len(b); i++ {
		// Skip what cannot change the depth: most of an event.
		for i < len(b) && structural[b[i]] == 0 {
			i++
		}
		if i == len(b) {
			break
		}
		switch b[i] {
		case '"':
			j := stringEnd(b, i+1)
			if j < 0 {
				return -1
			}
			i = j
		case '{', '[':
			depth++
			continue
		default: // '}', ']'
			depth--
		}
		if depth <= 0 {
			return i + 1
		}
	}
	return -1
}

// structural marks the bytes that valueEnd looks at.
var structural = [256]byte{'"': 1, '{': 1, '[': 1, '}': 1, ']': 1}

// stringEnd returns the index of the quote closing the string whose
// contents start at b[i], or -1.
func stringEnd(b []byte, i int) int {
	for {
		k := bytes.IndexByte(b[i:], '"')
		if k < 0 {
			return -1
		}
		k += i
		backslashes := 0
		for m := k - 1; m >= i && b[m] == '\\'; m-- {
			backslashes++
		}
		if backslashes%2 == 0 {
			return k
		}
		i = k + 1
	}
}

// scalarEnd returns the end of a number or literal starting at b[i]: the
// first delimiter.
func scalarEnd(b []byte, i int) int {
	for ; i < len(b); i++ {
		switch b[i] {
		case ',', ']', '}', '[', '{', '"', ' ', '\t', '\r', '\n':
			return i
		}
	}
	return i
}

// shortErr keeps fastjson's message but cuts the echoed tail of the input.
func shortErr(err error) string {
	s := err.Error()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
