package logreg

import (
	"fmt"
	"strconv"

	"github.com/mlstream/mlstream/learners"
	"github.com/mlstream/mlstream/runtime"
	"github.com/valyala/fastjson"
)

var _ runtime.Explaining = (*logregJob)(nil)

// Explained is one event's prediction taken apart by feature name
// (POST /v1/jobs/{job}/explain), as Vowpal Wabbit's --audit.
type Explained struct {
	Key    string  `json:"key,omitempty"`
	P      float64 `json:"p"`
	Margin float64 `json:"margin"`
	Bias   float64 `json:"bias"`
	// Features are the event's features in order: the margin is the bias
	// plus their contributions.
	Features []FeatureTerm `json:"features"`
}

// FeatureTerm is one feature's part: its name as hashed (a string value
// v of field f is the one-hot feature "f=v"), slot, value after
// normalization, weight and contribution (weight × value). CollidesWith
// names the event's other features hashed to the same slot: they share
// the weight.
type FeatureTerm struct {
	Name string `json:"name"`
	learners.Term
	CollidesWith []string `json:"collides_with,omitempty"`
}

// Explain reads one event and explains the global model's prediction of
// it (runtime.Explaining).
func (j *logregJob) Explain(v *fastjson.Value, line int) (any, error) {
	if v.Type() != fastjson.TypeObject {
		return nil, &runtime.InputError{Line: line, Msg: fmt.Sprintf("an event must be a JSON object, got %s", v.Type())}
	}
	var a runtime.Arena
	var rec runtime.Record
	if err := j.Extract(v, &rec, &a, 0); err != nil {
		return nil, runtime.AtLine(err, line)
	}
	j.swap.RLock()
	e := j.model.Explain(rec.Features)
	j.swap.RUnlock()
	names := featureNames(v.Get(j.fields.Features))
	out := Explained{Key: rec.Key, P: e.P, Margin: e.Margin, Bias: e.Bias, Features: make([]FeatureTerm, len(e.Terms))}
	for i, t := range e.Terms {
		out.Features[i] = FeatureTerm{Name: "#" + strconv.Itoa(i), Term: t}
		if len(names) == len(e.Terms) {
			out.Features[i].Name = names[i]
		}
	}
	markCollisions(out.Features)
	return out, nil
}

// featureNames lists the names of an event's features in the order the
// engine hashes them (runtime's feature extraction): a non-zero number or
// true under its field name, a string as "name=value", an array's strings
// as themselves; zeros, false and null are no feature.
func featureNames(f *fastjson.Value) []string {
	buf, ends := appendFeatureNames(nil, nil, f)
	names := make([]string, len(ends))
	start := 0
	for i, end := range ends {
		names[i] = string(buf[start:end])
		start = end
	}
	return names
}

// appendFeatureNames appends the names of the features of f to buf, in the
// order extraction hashes them, and the end of each name in buf to ends.
func appendFeatureNames(buf []byte, ends []int, f *fastjson.Value) ([]byte, []int) {
	if f == nil {
		return buf, ends
	}
	name := func(parts ...[]byte) {
		for _, p := range parts {
			buf = append(buf, p...)
		}
		ends = append(ends, len(buf))
	}
	switch f.Type() {
	case fastjson.TypeObject:
		o, _ := f.Object()
		o.Visit(func(k []byte, x *fastjson.Value) {
			switch x.Type() {
			case fastjson.TypeNumber:
				if n, _ := x.Float64(); n != 0 {
					name(k)
				}
			case fastjson.TypeString:
				name(k, []byte("="), x.GetStringBytes())
			case fastjson.TypeTrue:
				name(k)
			}
		})
	case fastjson.TypeArray:
		for _, x := range f.GetArray() {
			name(x.GetStringBytes())
		}
	}
	return buf, ends
}

// markCollisions fills CollidesWith for features sharing a slot.
func markCollisions(fs []FeatureTerm) {
	bySlot := make(map[int][]int, len(fs))
	for i, f := range fs {
		bySlot[f.Slot] = append(bySlot[f.Slot], i)
	}
	for _, idx := range bySlot {
		if len(idx) < 2 {
			continue
		}
		for _, i := range idx {
			for _, k := range idx {
				if k != i && fs[k].Name != fs[i].Name {
					fs[i].CollidesWith = append(fs[i].CollidesWith, fs[k].Name)
				}
			}
		}
	}
}
