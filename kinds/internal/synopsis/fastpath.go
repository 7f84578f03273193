package synopsis

// StringField is the field of the ingest fast path
// (runtime.StringFielder): Extract of an event {field: "s"} gives TS now,
// Label -1, Values ["s"] and no key, unless the field is also the key or
// the time field.
func (sp Params) StringField() (string, bool) {
	return sp.Field, sp.Field != sp.Fields.Key && sp.Field != sp.Fields.TS
}
