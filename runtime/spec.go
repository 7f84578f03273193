package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mlstream/mlstream/ft"
	yaml4 "go.yaml.in/yaml/v4"
	"sigs.k8s.io/yaml"
)

// Spec declares a job: what it computes (Kind), what it reads (Input) and
// how (Params). Specs come from the config file or from PUT /v1/jobs/{name}.
type Spec struct {
	Name  string `json:"name"`
	Kind  string `json:"kind"`
	Input string `json:"input,omitempty"`
	// Left and Right are the two streams of a kind that reads two (such as
	// a join), instead of Input.
	Left  string `json:"left,omitempty"`
	Right string `json:"right,omitempty"`
	// Partitions is the number of partition goroutines; 0 means the
	// engine's default (the number of CPUs).
	Partitions int `json:"partitions,omitempty"`
	// QueueSize is the capacity of each partition's queue in events; 0
	// means the engine's default.
	QueueSize int `json:"queue_size,omitempty"`
	// Params are the kind's own parameters (see each kind's doc).
	Params map[string]any `json:"params,omitempty"`
	// FT is the job's fault tolerance.
	FT FTSpec `json:"ft"`
	// Sync is the job's coordination: group scheduling and, for kinds
	// with consistency rounds, their consistency.
	Sync SyncSpec `json:"sync"`
	// Shed turns load shedding on (kinds with a ShedPolicy).
	Shed *ShedSpec `json:"shed,omitempty"`
	// Source feeds the job's input stream from NATS as well as HTTP
	// (cluster mode only).
	Source *SourceSpec `json:"source,omitempty"`
	// Autoscale lets the job change its partition count by itself
	// (autoscale.go); absent, it keeps the count it is given.
	Autoscale *AutoscaleSpec `json:"autoscale,omitempty"`
	// Spread shares the events of hot keys out over every partition
	// (skew.go; kinds that are Spreadable); absent, a key's events all go
	// to the partition it hashes to.
	Spread *SpreadSpec `json:"spread,omitempty"`
}

// SourceSpec is a NATS subject or JetStream stream that other systems
// publish events to (JSON objects, arrays of them, or NDJSON, a message
// each), read into the job's input stream as if posted to it. Exactly one
// of Subject (core NATS, read by a queue group: at most once) and Stream
// (a JetStream stream, read by a durable consumer and acknowledged once
// the cluster stored the events: at least once) is set; with Stream,
// Subject may filter it.
type SourceSpec struct {
	Subject string `json:"subject,omitempty"`
	Stream  string `json:"stream,omitempty"`
}

func (s *SourceSpec) validate(kind *Kind) error {
	if s == nil {
		return nil
	}
	if kind.TwoStreams {
		return &SpecError{"source", "a kind that reads two streams takes no source"}
	}
	if s.Subject == "" && s.Stream == "" {
		return &SpecError{"source", "give subject (core NATS) or stream (JetStream)"}
	}
	if len(s.Subject) > 256 || strings.ContainsAny(s.Subject, " \t\r\n") {
		return &SpecError{"source.subject", "a NATS subject of at most 256 characters without spaces"}
	}
	if len(s.Stream) > 64 || strings.ContainsAny(s.Stream, " .*>/\\\t\r\n") {
		return &SpecError{"source.stream", "a JetStream stream name: at most 64 characters, no spaces, . * > / or \\"}
	}
	return nil
}

// FTSpec is a job's fault-tolerance section: the mode and AF-Stream's
// three bounds (package ft). Zero fields take defaults.
type FTSpec struct {
	// Mode is none, approx (default) or exact.
	Mode string `json:"mode,omitempty"`
	// MaxDivergence is Θ, in the kind's unit of state divergence (default
	// the kind's, Kind.Divergence).
	MaxDivergence float64 `json:"max_divergence,omitempty"`
	// MaxPending is L, events at risk in queues and in state since its
	// last backup (default 10,000: ingest takes events in requests of
	// thousands, and a request larger than a partition's share l is
	// always logged).
	MaxPending int `json:"max_pending,omitempty"`
	// MaxUnacked is Γ, events sent downstream and not acknowledged (e.g.
	// learned by a partition and not yet merged into a global model;
	// default 10,000).
	MaxUnacked int `json:"max_unacked,omitempty"`
	// CompactEvery bounds a chain of delta backups (default 16): the next
	// backup is full again after this many deltas once they also add up to
	// this many times the full backup's size, and always after 8x this many
	// deltas, so a job never takes more full backups than by count alone.
	CompactEvery int `json:"compact_every,omitempty"`
	// Window is a hopping window in events: at each of its ends the
	// thresholds, halved by recoveries, reset (default 1,000,000).
	Window int64 `json:"window,omitempty"`
}

func (f *FTSpec) validate(kind *Kind) error {
	if f.Mode == "" {
		f.Mode = ft.ModeApprox
	}
	if f.MaxDivergence == 0 {
		f.MaxDivergence = kind.Divergence
	}
	if f.MaxPending == 0 {
		f.MaxPending = 10_000
	}
	if f.MaxUnacked == 0 {
		f.MaxUnacked = 10_000
	}
	if f.CompactEvery == 0 {
		f.CompactEvery = 16
	}
	if f.Window == 0 {
		f.Window = 1_000_000
	}
	if field, err := f.bounds().Validate(); err != nil {
		return &SpecError{"ft." + field, err.Error()}
	}
	for _, r := range []struct {
		field string
		v, hi int64
	}{
		{"max_pending", int64(f.MaxPending), maxFTEvents},
		{"max_unacked", int64(f.MaxUnacked), maxFTEvents},
		{"compact_every", int64(f.CompactEvery), maxCompactEvery},
		{"window", f.Window, maxFTWindow},
	} {
		if r.v < 1 || r.v > r.hi {
			return &SpecError{"ft." + r.field, fmt.Sprintf("must be in [1, %d] (0 = default), got %d", r.hi, r.v)}
		}
	}
	return nil
}

func (f FTSpec) bounds() ft.Bounds {
	return ft.Bounds{Mode: f.Mode, MaxDivergence: f.MaxDivergence, MaxPending: f.MaxPending, MaxUnacked: f.MaxUnacked}
}

// SpecError says which field of a job spec is wrong. Field is a dotted
// path such as "params.hash_bits" or, in a config file, "jobs[1].kind".
type SpecError struct {
	Field string
	Msg   string
}

func (e *SpecError) Error() string { return e.Field + ": " + e.Msg }

// validate checks the fields common to all kinds and fills defaults.
func (s *Spec) validate(defPartitions, defQueue int) error {
	if err := CheckName(s.Name); err != nil {
		return &SpecError{"name", err.Error()}
	}
	if s.Kind == "" {
		return &SpecError{"kind", "required; one of " + strings.Join(Kinds(), ", ")}
	}
	kind, ok := lookupKind(s.Kind)
	if !ok {
		return &SpecError{"kind", fmt.Sprintf("unknown kind %q; one of %s", s.Kind, strings.Join(Kinds(), ", "))}
	}
	if err := s.validateStreams(kind); err != nil {
		return err
	}
	if s.Partitions < 0 || s.Partitions > MaxPartitions {
		return &SpecError{"partitions", fmt.Sprintf("must be in [1, %d] (0 = the engine's default), got %d", MaxPartitions, s.Partitions)}
	}
	if err := s.Autoscale.validate(s); err != nil {
		return err
	}
	if err := s.Spread.validate(kind); err != nil {
		return err
	}
	if s.Partitions == 0 {
		s.Partitions = defPartitions
	}
	if s.QueueSize < 0 || s.QueueSize > MaxQueueSize {
		return &SpecError{"queue_size", fmt.Sprintf("must be in [1, %d] events (0 = the engine's default), got %d", MaxQueueSize, s.QueueSize)}
	}
	if s.QueueSize == 0 {
		s.QueueSize = defQueue
	}
	if _, err := s.Sync.validate(kind); err != nil {
		return err
	}
	if s.Sync.Staleness > maxStaleness {
		return &SpecError{"sync.staleness", fmt.Sprintf("must be in [1, %d] groups, got %d", maxStaleness, s.Sync.Staleness)}
	}
	if err := s.Shed.validate(kind); err != nil {
		return err
	}
	if err := s.Source.validate(kind); err != nil {
		return err
	}
	return s.FT.validate(kind)
}

// validateStreams checks the streams a job reads: input, or left and right
// for a kind of two streams.
func (s *Spec) validateStreams(kind *Kind) error {
	type field struct{ name, value, what string }
	var need, refuse []field
	if kind.TwoStreams {
		need = []field{{"left", s.Left, "the left stream of the " + s.Kind}, {"right", s.Right, "the right stream of the " + s.Kind}}
		refuse = []field{{"input", s.Input, "kind " + s.Kind + " reads left and right"}}
	} else {
		two := "only kinds " + kindsWhere(func(k *Kind) bool { return k.TwoStreams }) + " read two streams"
		need = []field{{"input", s.Input, "the name of the stream the job reads"}}
		refuse = []field{{"left", s.Left, two}, {"right", s.Right, two}}
	}
	for _, f := range refuse {
		if f.value != "" {
			return &SpecError{f.name, "not allowed: " + f.what}
		}
	}
	for _, f := range need {
		if f.value == "" {
			return &SpecError{f.name, "required: " + f.what}
		}
		if err := CheckName(f.value); err != nil {
			return &SpecError{f.name, "stream name: " + err.Error()}
		}
	}
	if kind.TwoStreams && s.Left == s.Right {
		return &SpecError{"right", fmt.Sprintf("must differ from left (%q): a self-join is not supported", s.Left)}
	}
	return nil
}

// Streams are the streams the job reads: its input, or its left and
// right (in that order: the index is the side).
func (s *Spec) Streams() []string {
	if s.Input != "" {
		return []string{s.Input}
	}
	return []string{s.Left, s.Right}
}

// DecodeSpec reads one job spec from JSON, refusing unknown fields and
// wrong types with a SpecError that names the field.
func DecodeSpec(data []byte) (Spec, error) {
	var s Spec
	if err := strictJSON(data, &s); err != nil {
		return s, err
	}
	return s, nil
}

// Config file: {"jobs": [spec, ...]} in YAML or JSON.
type configFile struct {
	Jobs []json.RawMessage `json:"jobs"`
}

// ParseConfig reads a YAML or JSON config file holding a list of jobs.
// Errors name the job by its index: "jobs[1].params.k: ...".
func ParseConfig(data []byte) ([]Spec, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("config: not valid YAML or JSON: %w", yamlError(data, err))
	}
	if t := bytes.TrimSpace(js); len(t) > 0 && t[0] != '{' && !bytes.Equal(t, []byte("null")) {
		return nil, fmt.Errorf("config: must be a mapping with a list of jobs, {jobs: [...]}, got %s", jsonWord(t[0]))
	}
	var cf configFile
	if err := strictJSON(js, &cf); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	specs := make([]Spec, 0, len(cf.Jobs))
	first := map[string]int{}
	for i, raw := range cf.Jobs {
		s, err := DecodeSpec(raw)
		if err != nil {
			var se *SpecError
			if errors.As(err, &se) {
				return nil, &SpecError{fmt.Sprintf("jobs[%d].%s", i, se.Field), se.Msg}
			}
			return nil, fmt.Errorf("jobs[%d]: %w", i, err)
		}
		if j, dup := first[s.Name]; dup && s.Name != "" {
			return nil, &SpecError{fmt.Sprintf("jobs[%d].name", i), fmt.Sprintf("%q is jobs[%d]'s name too: job names are unique", s.Name, j)}
		}
		first[s.Name] = i
		specs = append(specs, s)
	}
	return specs, nil
}

// yamlError is the error of a YAML document that YAMLToJSON refused,
// as go.yaml.in/yaml/v4 words it: the YAML 1.1 parser under YAMLToJSON
// reports its parser's errors a line early.
func yamlError(data []byte, err error) error {
	var v any
	if err4 := yaml4.Unmarshal(data, &v); err4 != nil {
		return err4
	}
	return err
}

// jsonWord names the JSON value that starts with c, for errors.
func jsonWord(c byte) string {
	switch {
	case c == '[':
		return "a list"
	case c == '"':
		return "a string"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == '{':
		return "a mapping"
	}
	return "a number"
}

// goTypeWord names, for errors, the JSON that a Go type decodes from.
func goTypeWord(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "a mapping (object)"
	case reflect.Slice, reflect.Array:
		return "a list (array)"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return t.String()
}

// jsonValueWord names a JSON value of json.UnmarshalTypeError.Value.
func jsonValueWord(v string) string {
	switch {
	case v == "array":
		return "a list (array)"
	case v == "object":
		return "a mapping (object)"
	case v == "string" || v == "bool":
		return "a " + map[string]string{"string": "string", "bool": "boolean"}[v]
	case strings.HasPrefix(v, "number"):
		return "a number (" + strings.TrimSpace(strings.TrimPrefix(v, "number")) + ")"
	}
	return v
}

// specDiff names the first field (a dotted path, in the order of the
// JSON names) in which two specs differ, with its value in each; "" when
// they are the same.
func specDiff(a, b Spec) (field string, va, vb any) {
	return jsonDiff("", specValue(a), specValue(b))
}

func specValue(s Spec) any {
	var v any
	if data, err := json.Marshal(s); err == nil {
		_ = json.Unmarshal(data, &v)
	}
	return v
}

func jsonDiff(path string, a, b any) (string, any, any) {
	ma, oka := a.(map[string]any)
	mb, okb := b.(map[string]any)
	if !oka || !okb {
		if reflect.DeepEqual(a, b) {
			return "", nil, nil
		}
		return path, a, b
	}
	keys := slices.Sorted(maps.Keys(ma))
	for k := range mb {
		if _, ok := ma[k]; !ok {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		p := k
		if path != "" {
			p = path + "." + k
		}
		if f, x, y := jsonDiff(p, ma[k], mb[k]); f != "" {
			return f, x, y
		}
	}
	return "", nil, nil
}

// conflictMsg says how spec differs from the running job's: the first
// differing field and its values.
func conflictMsg(running, spec Spec) string {
	f, a, b := specDiff(running, spec)
	if f == "" {
		return "another spec"
	}
	show := func(v any) string {
		if v == nil {
			return "not set"
		}
		data, _ := json.Marshal(v)
		return string(data)
	}
	return fmt.Sprintf("another spec (%s: %s there, %s here)", f, show(a), show(b))
}

// strictJSON decodes data into v, turning encoding/json's errors into
// SpecErrors that name the field.
func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te):
			return &SpecError{te.Field, fmt.Sprintf("must be %s, got %s", goTypeWord(te.Type), jsonValueWord(te.Value))}
		case errors.As(err, &se):
			return &SpecError{"", fmt.Sprintf("not valid JSON at byte %d: %v", se.Offset, se)}
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return &SpecError{f, "unknown field"}
		case errors.Is(err, io.EOF):
			return &SpecError{"", "empty document"}
		}
		return &SpecError{"", err.Error()}
	}
	if dec.More() {
		return &SpecError{"", "trailing data after the JSON document"}
	}
	return nil
}

// Params reads a kind's parameters, checking type and range and naming the
// parameter in every error. Unknown parameters are refused by Done, so a
// typo never silently falls back to a default.
type Params struct {
	m    map[string]any
	used map[string]bool
	// fields are the event fields the job reads, as read by Field: with
	// the conventional ones, the only top-level fields an event of its
	// streams may have (EventFields).
	fields []string
}

func newParams(m map[string]any) *Params { return &Params{m: m, used: map[string]bool{}} }

func (p *Params) get(name string) (any, bool) {
	p.used[name] = true
	v, ok := p.m[name]
	if ok && v == nil {
		return nil, false
	}
	return v, ok
}

// ParamError is a SpecError naming params.<name>.
func ParamError(name, format string, a ...any) error { return perr(name, format, a...) }

func perr(name, format string, a ...any) error {
	return &SpecError{"params." + name, fmt.Sprintf(format, a...)}
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	case float64:
		return x, true
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	}
	return 0, false
}

// Field reads a string param that names an event field the job reads
// (key_field, a synopsis's field, a join's on): an event posted to a
// stream may carry, besides the conventional fields, only the fields
// that the jobs reading it name so (Batch.Add refuses the others). An
// empty value names no field.
func (p *Params) Field(name, def string) (string, error) {
	f, err := p.String(name, def)
	if err == nil && f != "" && !slices.Contains(p.fields, f) {
		p.fields = append(p.fields, f)
	}
	return f, err
}

// Float reads a number in [lo, hi].
func (p *Params) Float(name string, def, lo, hi float64) (float64, error) {
	v, ok := p.get(name)
	if !ok {
		return def, nil
	}
	f, ok := number(v)
	if !ok {
		return 0, perr(name, "must be a number, got %s", jsonType(v))
	}
	if f < lo || f > hi || math.IsNaN(f) {
		return 0, perr(name, "must be in [%g, %g], got %g", lo, hi, f)
	}
	return f, nil
}

// Int reads an integer in [lo, hi].
func (p *Params) Int(name string, def, lo, hi int) (int, error) {
	v, ok := p.get(name)
	if !ok {
		return def, nil
	}
	f, ok := number(v)
	if !ok {
		return 0, perr(name, "must be an integer, got %s", jsonType(v))
	}
	if f != math.Trunc(f) {
		return 0, perr(name, "must be an integer, got %g", f)
	}
	if f < float64(lo) || f > float64(hi) {
		return 0, perr(name, "must be in [%d, %d], got %g", lo, hi, f)
	}
	return int(f), nil
}

// String reads a string; when allowed is not empty it must be one of them.
func (p *Params) String(name, def string, allowed ...string) (string, error) {
	v, ok := p.get(name)
	if !ok {
		return def, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", perr(name, "must be a string, got %s", jsonType(v))
	}
	if len(s) > maxParamString {
		return "", perr(name, "must be at most %d bytes, got %d", maxParamString, len(s))
	}
	if len(allowed) > 0 {
		for _, a := range allowed {
			if s == a {
				return s, nil
			}
		}
		return "", perr(name, "must be one of %s, got %q", strings.Join(allowed, ", "), s)
	}
	return s, nil
}

// Duration reads a duration such as "30s" or "250ms" (a number is
// milliseconds), at least lo.
func (p *Params) Duration(name string, def, lo time.Duration) (time.Duration, error) {
	v, ok := p.get(name)
	if !ok {
		return def, nil
	}
	var d time.Duration
	if f, isNum := number(v); isNum {
		d = time.Duration(f * float64(time.Millisecond))
	} else if str, isStr := v.(string); isStr {
		var err error
		if d, err = time.ParseDuration(str); err != nil {
			return 0, perr(name, "must be a duration such as 30s, 250ms or 1m, got %q", str)
		}
	} else {
		return 0, perr(name, "must be a duration such as 30s, got %s", jsonType(v))
	}
	if d < lo {
		return 0, perr(name, "must be at least %v, got %v", lo, d)
	}
	return d, nil
}

// byteUnits are the suffixes Bytes accepts.
var byteUnits = []struct {
	suffix string
	mult   int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}

// Bytes reads a size: a number of bytes or a string such as "64MiB" or
// "500KB", in [lo, hi].
func (p *Params) Bytes(name string, def, lo, hi int64) (int64, error) {
	v, ok := p.get(name)
	if !ok {
		return def, nil
	}
	var n float64
	if f, isNum := number(v); isNum {
		n = f
	} else if str, isStr := v.(string); isStr {
		var err error
		if n, err = parseSize(str); err != nil {
			return 0, perr(name, "must be a size such as 64MiB, 500KB or a number of bytes, got %q", str)
		}
	} else {
		return 0, perr(name, "must be a size such as 64MiB, got %s", jsonType(v))
	}
	if n < float64(lo) || n > float64(hi) || math.IsNaN(n) {
		return 0, perr(name, "must be between %d and %d bytes, got %.0f", lo, hi, n)
	}
	return int64(n), nil
}

// parseSize reads a number of bytes with an optional unit of byteUnits.
func parseSize(str string) (float64, error) {
	mult, num := int64(1), strings.TrimSpace(str)
	for _, u := range byteUnits {
		if strings.HasSuffix(num, u.suffix) {
			mult, num = u.mult, strings.TrimSpace(strings.TrimSuffix(num, u.suffix))
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	return f * float64(mult), err
}

// ParseBytes reads a size such as "8GiB", "500MB" or "1048576" (bytes),
// for flags such as --max-memory. Negative sizes are allowed (they mean
// "no limit" where a flag says so).
func ParseBytes(s string) (int64, error) {
	f, err := parseSize(s)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) >= 1<<62 {
		return 0, fmt.Errorf("not a size such as 8GiB, 500MB or a number of bytes: %q", s)
	}
	return int64(f), nil
}

// Bool reads a boolean.
func (p *Params) Bool(name string, def bool) (bool, error) {
	v, ok := p.get(name)
	if !ok {
		return def, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, perr(name, "must be true or false, got %s", jsonType(v))
	}
	return b, nil
}

// Done refuses parameters that no reader asked for.
func (p *Params) Done() error {
	var unknown []string
	for k := range p.m {
		if !p.used[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	known := make([]string, 0, len(p.used))
	for k := range p.used {
		known = append(known, k)
	}
	sort.Strings(known)
	return perr(unknown[0], "unknown parameter; known: %s", strings.Join(known, ", "))
}

func jsonType(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("string %q", x)
	case bool:
		return fmt.Sprintf("boolean %v", x)
	case json.Number, float64, int, int64:
		return fmt.Sprintf("number %v", x)
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
