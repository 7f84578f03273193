package api

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"

	"github.com/valyala/fastjson"
)

// DecodeError is a request body that cannot be read as events. Status is
// 400 for bad JSON and 413 for an event over the size limit.
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
	ct := strings.ToLower(strings.TrimSpace(strings.Split(contentType, ";")[0]))
	if ct == "application/json" {
		return formatSingle
	}
	return formatNDJSON
}

// decodeEvents calls fn with each event of body, in order, with its line
// (NDJSON) or 1-based position (array). fn must not keep v: it is only
// valid during the call. Events larger than maxEvent bytes are refused.
// It returns the number of events seen.
func decodeEvents(body []byte, contentType string, maxEvent int, fn func(v *fastjson.Value, line int) error) (int, error) {
	p := parsers.Get()
	defer parsers.Put(p)
	switch sniff(body, contentType) {
	case formatArray:
		return decodeArray(p, body, maxEvent, fn)
	case formatSingle:
		return decodeSingle(p, body, maxEvent, fn)
	}
	n := 0
	line := 0
	for rest := body; len(rest) > 0; {
		line++
		var l []byte
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			l, rest = rest[:i], rest[i+1:]
		} else {
			l, rest = rest, nil
		}
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		if len(l) > maxEvent {
			return n, &DecodeError{http.StatusRequestEntityTooLarge, line, fmt.Sprintf("event of %d bytes is over the limit of %d bytes", len(l), maxEvent)}
		}
		v, err := p.ParseBytes(l)
		if err != nil {
			if n == 0 && line == 1 && len(rest) > 0 {
				// Maybe one object pretty-printed over several lines.
				if _, err2 := p.ParseBytes(body); err2 == nil {
					return decodeSingle(p, body, maxEvent, fn)
				}
			}
			return n, &DecodeError{http.StatusBadRequest, line, "not valid JSON: " + shortErr(err)}
		}
		if err := fn(v, line); err != nil {
			return n, err
		}
		n++
	}
	if n == 0 {
		return 0, &DecodeError{http.StatusBadRequest, 0, "no events: the body is empty"}
	}
	return n, nil
}

func decodeSingle(p *fastjson.Parser, body []byte, maxEvent int, fn func(v *fastjson.Value, line int) error) (int, error) {
	v, err := p.ParseBytes(body)
	if err != nil {
		return 0, &DecodeError{http.StatusBadRequest, 1, "not valid JSON: " + shortErr(err)}
	}
	if v.Type() == fastjson.TypeArray {
		return eachElement(v, len(body), maxEvent, fn)
	}
	if len(body) > maxEvent {
		return 0, &DecodeError{http.StatusRequestEntityTooLarge, 1, fmt.Sprintf("event of %d bytes is over the limit of %d bytes", len(body), maxEvent)}
	}
	if err := fn(v, 1); err != nil {
		return 0, err
	}
	return 1, nil
}

func decodeArray(p *fastjson.Parser, body []byte, maxEvent int, fn func(v *fastjson.Value, line int) error) (int, error) {
	v, err := p.ParseBytes(body)
	if err != nil {
		return 0, &DecodeError{http.StatusBadRequest, 0, "not valid JSON: " + shortErr(err)}
	}
	return eachElement(v, len(body), maxEvent, fn)
}

func eachElement(v *fastjson.Value, bodyLen, maxEvent int, fn func(v *fastjson.Value, line int) error) (int, error) {
	a, _ := v.Array()
	if len(a) == 0 {
		return 0, &DecodeError{http.StatusBadRequest, 0, "no events: the array is empty"}
	}
	var scratch []byte
	for i, x := range a {
		// Only a body over the limit can hold an event over the limit.
		if bodyLen > maxEvent {
			scratch = x.MarshalTo(scratch[:0])
			if len(scratch) > maxEvent {
				return i, &DecodeError{http.StatusRequestEntityTooLarge, i + 1, fmt.Sprintf("event of %d bytes is over the limit of %d bytes", len(scratch), maxEvent)}
			}
		}
		if err := fn(x, i+1); err != nil {
			return i, err
		}
	}
	return len(a), nil
}

// shortErr keeps fastjson's message but cuts the echoed tail of the input.
func shortErr(err error) string {
	s := err.Error()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
