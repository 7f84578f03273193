package synopsis

import "github.com/mlstream/mlstream/runtime"

// StringField is the field of the ingest fast path
// (runtime.StringFielder): Extract of an event {field: "s"} gives TS now,
// Label -1, Values ["s"] and no key, unless the field is also the key or
// the time field.
func (sp Params) StringField() (string, bool) {
	return sp.Field, sp.Field != sp.Fields.Key && sp.Field != sp.Fields.TS
}

// ProcessRecords adds each record with add, which says whether the record
// closed a window, keeping fault tolerance informed event by event and
// backing up at window ends.
func (p *Summary[S, W]) ProcessRecords(recs []runtime.Record, logged bool, add func(r *runtime.Record) (closed bool)) {
	if p.unit == nil {
		p.processUnchecked(recs, logged, add)
		return
	}
	p.expect(len(recs), logged)
	for i := range recs {
		r := &recs[i]
		p.Observe(r, logged)
		closed := add(r)
		p.Check(p.Sketch.StateDivergence(), closed)
		if closed {
			p.WindowEnded()
		}
	}
	p.Check(0, true)
}

// processUnchecked is ProcessRecords without fault tolerance: nothing to
// check event by event, and the divergence, which only the status reads,
// is taken once for the batch.
func (p *Summary[S, W]) processUnchecked(recs []runtime.Record, logged bool, add func(r *runtime.Record) (closed bool)) {
	for i := range recs {
		p.Observe(&recs[i], logged)
		add(&recs[i])
	}
	p.Check(p.Sketch.StateDivergence(), false)
}
