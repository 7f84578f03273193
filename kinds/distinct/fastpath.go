package distinct

import (
	"github.com/mlstream/mlstream/runtime"
	"github.com/valyala/fastjson"
)

// A distinct job's records carry the hashes of their values, not the
// values: a sketch reads no more of an item than its hash. The hash is
// the sketch's own (xxhash, learners.HashName), taken once at ingest,
// where the event's bytes are at hand, and no string is kept. Records
// of older item logs, with Values, are still counted.

var _ runtime.StringFielder = (*job)(nil)

// StringField lets events {field: "s"} skip parsing, and go to the
// partitions as hashes (runtime.StringFielder).
func (j *job) StringField() (string, bool, bool) {
	f, ok := j.sp.StringField()
	return f, true, ok
}

func (j *job) Extract(v *fastjson.Value, rec *runtime.Record, a *runtime.Arena, now int64) error {
	if err := j.sp.Extract(v, rec, a, now); err != nil {
		return err
	}
	a.HashValues(rec)
	return nil
}

func (p *part) Process(recs []runtime.Record, logged bool) {
	p.ProcessRecords(recs, logged, func(r *runtime.Record) (closed bool) {
		for _, f := range r.Features {
			_, c := p.Sketch.InsertHash(f.Hash, r.TS)
			closed = closed || c
		}
		for _, v := range r.Values {
			_, c := p.Sketch.InsertString(v, r.TS)
			closed = closed || c
		}
		return closed
	})
}
