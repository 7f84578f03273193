package runtime

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// The kind's section of a job status (JobStatus.Section) is one field on
// the Go side and its own fields at the top level of the JSON, beside the
// engine's: {"name": ..., "processed": ..., "model": ..., "metrics": ...}.
// So a status reads the same whatever the kind, and what clients read
// (st.model, st.topk) did not move when the kinds became packages.

type plainStatus JobStatus

// MarshalJSON encodes the engine's fields, then the section's.
func (s JobStatus) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(plainStatus(s))
	if err != nil || s.Section == nil {
		return b, err
	}
	sec, err := json.Marshal(s.Section)
	if err != nil {
		return nil, err
	}
	sec = bytes.TrimSpace(sec)
	if bytes.Equal(sec, []byte("null")) || bytes.Equal(sec, []byte("{}")) {
		return b, nil
	}
	if len(sec) < 2 || sec[0] != '{' {
		return nil, fmt.Errorf("runtime: the status section of kind %s is not a JSON object", s.Kind)
	}
	out := append(b[:len(b)-1:len(b)-1], ',')
	return append(out, sec[1:]...), nil
}

// UnmarshalJSON decodes the engine's fields, and keeps the others in
// Section as a map[string]json.RawMessage (nil when there are none).
func (s *JobStatus) UnmarshalJSON(data []byte) error {
	var p plainStatus
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(data, &all); err != nil {
		return err
	}
	for name := range statusFields() {
		delete(all, name)
	}
	*s = JobStatus(p)
	if len(all) > 0 {
		s.Section = all
	}
	return nil
}

// statusFields are the JSON names of JobStatus's own fields.
var statusFields = sync.OnceValue(func() map[string]bool {
	names := map[string]bool{}
	t := reflect.TypeFor[JobStatus]()
	for i := range t.NumField() {
		tag := t.Field(i).Tag.Get("json")
		if name, _, _ := strings.Cut(tag, ","); name != "" && name != "-" {
			names[name] = true
		}
	}
	return names
})

// SectionAs reads the status's section as T: directly when the status
// was made in this process, by decoding when it was read from JSON. ok is
// false when the section is of another kind.
func SectionAs[T any](st JobStatus) (v T, ok bool) {
	switch sec := st.Section.(type) {
	case T:
		return sec, true
	case map[string]json.RawMessage:
		b, err := json.Marshal(sec)
		if err != nil {
			return v, false
		}
		return v, json.Unmarshal(b, &v) == nil
	}
	return v, false
}
