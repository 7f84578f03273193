package synopsis

import (
	"math"

	"github.com/mlstream/mlstream/runtime"
)

// StringField is the field of the ingest fast path
// (runtime.StringFielder): Extract of an event {field: "s"} gives TS now,
// Label -1, Values ["s"] and no key, unless the field is also the key or
// the time field.
func (sp Params) StringField() (string, bool) {
	return sp.Field, sp.Field != sp.Fields.Key && sp.Field != sp.Fields.TS
}

// ProcessRecords adds each record with add, which says whether the record
// closed a window, keeping fault tolerance informed so that θ and l hold
// to the event, and backing up at window ends. The divergence is not read
// after every event: one event moves it by at most its values times its
// weight (α's measure), so the events that fit in the slack below what
// the unit said is no reason to back up need no check.
func (p *Summary[S, W]) ProcessRecords(recs []runtime.Record, logged bool, add func(r *runtime.Record) (closed bool)) {
	p.beginBatch()
	defer p.endBatch(len(recs))
	if p.unit == nil {
		p.processUnchecked(recs, logged, add)
		return
	}
	p.expect(len(recs), logged)
	slack := p.slack(p.Sketch.StateDivergence(), logged)
	for i := range recs {
		r := &recs[i]
		// An event moves the divergence by at most n, and is one more
		// event at risk: an event of no values (n = 0), or of a weight n
		// cannot hold, is checked at once.
		n := p.observe(r, logged)
		closed := add(r)
		if slack -= n; n > 0 && slack >= 0 && !closed {
			continue
		}
		div := p.Sketch.StateDivergence()
		p.Check(div, closed)
		if closed {
			p.WindowEnded()
			div = p.Sketch.StateDivergence()
		}
		slack = p.slack(div, logged)
	}
	p.Check(p.Sketch.StateDivergence(), false)
	p.Check(0, true)
}

// slack is how much divergence, counted as observe does, the next events
// may add before due could say yes: the room below the divergence and the
// events at risk the unit has said are no reason to back up. Negative or
// 0: check after the next event.
func (s *Part) slack(div float64, logged bool) int64 {
	room := math.Floor(s.quiet.div - div)
	if !(room > 0) {
		return 0
	}
	n := int64(min(room, 1<<40))
	if !logged {
		n = min(n, int64(s.quiet.events-s.unlogged))
	}
	return n
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
