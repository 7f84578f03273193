package runtime

// The string fast path of ingest: when every job reading a stream takes
// its events' one string field and nothing else (a distinct or
// heavy_hitters job fed {"item": "..."}), the API hands the string of each
// such event straight to AddString instead of parsing it into a
// fastjson.Value for Add. The records are the ones Extract would make.

// StringFielder is an Instance whose events may take the string fast path.
type StringFielder interface {
	// StringField names the field, and says whether Extract of any event
	// that is an object with that field as its only member, holding a
	// string s, fills the record with exactly TS now, Label -1 and Values
	// [s], and no key.
	StringField() (field string, ok bool)
}

// StringField is the field of the string fast path when every job
// reading the batch's stream takes it (StringFielder, all with the same
// field); ok is false otherwise, and then only Add may be used. Call it
// after SetKey, before AddString.
func (b *Batch) StringField() (field string, ok bool) {
	for i, jb := range b.jobs {
		sf, isSF := jb.job.kind.instance().(StringFielder)
		if !isSF {
			return "", false
		}
		f, fok := sf.StringField()
		if !fok || i > 0 && f != field {
			return "", false
		}
		field = f
	}
	for _, jb := range b.jobs {
		if !jb.keyed {
			// A request without a key takes one step of the job's round
			// robin, not one per event: its events go round from there.
			jb.rr = jb.job.rr.Add(1)
		}
	}
	return field, len(b.jobs) > 0
}

// AddString adds the event {field: "s"} for the field of StringField,
// given s as its JSON text between the quotes, which must hold no
// backslash (no escapes: the text is the string). Nothing can be wrong
// with such an event, so there is no error.
func (b *Batch) AddString(s []byte) {
	var str string
	for i, jb := range b.jobs {
		if i == 0 {
			// One copy serves every job: arena bytes are never written
			// again once handed out.
			str = jb.arena.str(s)
		}
		mark := len(jb.arena.vals)
		jb.arena.vals = append(jb.arena.vals, str)
		p := jb.roundRobin()
		jb.parts[p] = append(jb.parts[p], Record{TS: b.nowMs, Label: -1, Side: jb.side, Values: jb.arena.Values(mark)})
	}
	b.events++
}

// roundRobin is the partition of the next event without a key on the fast
// path: the request's own round robin, which for a request with an
// Idempotency-Key is the one partition (SetKey) follows.
func (jb *jobBatch) roundRobin() int {
	n := uint64(len(jb.parts))
	if n == 1 {
		return 0
	}
	jb.rr++
	return int(jb.rr % n)
}
