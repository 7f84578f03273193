package runtime

import (
	"errors"
	"strings"
	"testing"
)

// Config errors say where and what in the user's words: the YAML line of
// the mistake, a list where a mapping was wanted, a name given twice.
func TestConfigErrorsSayWhereAndWhat(t *testing.T) {
	for _, c := range []struct{ name, doc, want, not string }{
		{"YAML line", "jobs:\n  - name: a\n    kind: logreg\n    input: mail\n   partitions: 2\n", "line 5:", "line 4:"},
		{"top-level list", "- name: a\n  kind: logreg\n  input: mail\n", "must be a mapping with a list of jobs, {jobs: [...]}, got a list", "runtime.configFile"},
		{"jobs not a list", "jobs: {name: a}\n", "jobs: must be a list (array), got a mapping (object)", "json.RawMessage"},
		{"a number", "jobs:\n  - name: a\n    kind: logreg\n    input: mail\n    partitions: many\n", "jobs[0].partitions: must be an integer, got a string", "of type"},
		{"duplicate name", "jobs:\n  - {name: a, kind: logreg, input: mail}\n  - {name: b, kind: logreg, input: mail}\n  - {name: a, kind: logreg, input: mail}\n",
			`jobs[2].name: "a" is jobs[0]'s name too: job names are unique`, "delete it first"},
	} {
		_, err := ParseConfig([]byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), c.not) {
			t.Errorf("%s: %v; want %q, not %q", c.name, err, c.want, c.not)
		}
	}
}

// A PUT that conflicts with the running job names the field that
// differs, with both values.
func TestConflictingPutNamesTheField(t *testing.T) {
	e := testEngine(t, Config{Partitions: 1})
	mustPut(t, e, hhSpec())
	for _, c := range []struct {
		edit func(s *Spec)
		want string
	}{
		{func(s *Spec) { s.Params["k"] = 7 }, `"hh" runs with another spec (params.k: not set there, 7 here); delete it first`},
		{func(s *Spec) { s.Params["field"] = "v" }, `(params.field: "u" there, "v" here)`},
		{func(s *Spec) { s.QueueSize = 99 }, `queue_size:`},
	} {
		spec := hhSpec()
		c.edit(&spec)
		_, err := e.PutJob(spec)
		if !errors.Is(err, ErrJobExists) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("PUT: %v; want ErrJobExists naming %q", err, c.want)
		}
	}
}
