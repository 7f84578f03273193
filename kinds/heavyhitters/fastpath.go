package heavyhitters

import "github.com/mlstream/mlstream/runtime"

var _ runtime.StringFielder = (*job)(nil)

// StringField lets events {field: "s"} skip parsing (runtime.StringFielder);
// the counters keep the strings.
func (j *job) StringField() (string, bool, bool) {
	f, ok := j.sp.StringField()
	return f, false, ok
}
