package distinct

import "github.com/mlstream/mlstream/runtime"

var _ runtime.StringFielder = (*job)(nil)

// StringField lets events {field: "s"} skip parsing (runtime.StringFielder).
func (j *job) StringField() (string, bool) { return j.sp.StringField() }
