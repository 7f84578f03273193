package runtime

import "github.com/mlstream/mlstream/learners"

// The string fast path of ingest: when every job reading a stream takes
// its events' one string field and nothing else (a distinct or
// heavy_hitters job fed {"item": "..."}), the API hands the text of each
// such event straight to AddString instead of parsing it into a
// fastjson.Value for Add. The records are the ones Extract makes.

// StringFielder is an Instance whose events may take the string fast path.
type StringFielder interface {
	// StringField names the field, and says (ok) whether Extract of any
	// event that is an object with that field as its only member, holding
	// a string s, fills the record with exactly TS now, Label -1, no key,
	// and s as its one value: in Values, or, when hashed, as the feature
	// {Hash: learners.HashName(s), Value: 1} in Features, with no Values
	// (see Arena.HashValues).
	StringField() (field string, hashed, ok bool)
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
		f, hashed, fok := sf.StringField()
		if !fok || i > 0 && f != field {
			return "", false
		}
		field, jb.hashed = f, hashed
	}
	return field, len(b.jobs) > 0
}

// AddString adds the event {field: "s"} for the field of StringField,
// given s as its JSON text between the quotes, which must hold no
// backslash (no escapes: the text is the string). Nothing can be wrong
// with such an event, so there is no error. The text is copied only for
// jobs that keep strings, once for all of them, and hashed only for jobs
// that take hashes, once for all of them.
func (b *Batch) AddString(s []byte) {
	var str string
	var hash uint64
	copied, hashed := false, false
	for _, jb := range b.jobs {
		rec := Record{TS: b.nowMs, Label: -1, Side: jb.side}
		if jb.hashed {
			if !hashed {
				hash, hashed = learners.HashName(b2s(s)), true
			}
			start := len(jb.arena.feats)
			jb.arena.feats = append(jb.arena.feats, learners.Feature{Hash: hash, Value: 1})
			rec.Features = jb.arena.feats[start : start+1 : start+1]
		} else {
			if !copied {
				// Arena bytes are never written again once handed out.
				str, copied = jb.arena.str(s), true
			}
			mark := len(jb.arena.vals)
			jb.arena.vals = append(jb.arena.vals, str)
			rec.Values = jb.arena.Values(mark)
		}
		p := jb.partition("")
		jb.parts[p] = append(jb.parts[p], rec)
	}
	b.events++
}

// HashValues replaces the values of rec, extracted into a, by their
// hashes (learners.HashName), as features of value 1, in order: the
// records of a kind that reads no more of a value than its hash
// (StringFielder's hashed).
func (a *Arena) HashValues(rec *Record) {
	start := len(a.feats)
	for _, v := range rec.Values {
		a.feats = append(a.feats, learners.Feature{Hash: learners.HashName(v), Value: 1})
	}
	rec.Features = a.feats[start:len(a.feats):len(a.feats)]
	rec.Values = nil
}

// The byte fast path of ingest: a kind whose Instance is a ByteExtractor
// reads an event straight from its JSON bytes (RawScan) when it can, and
// leaves it to the parser and Extract when it cannot. The API takes it
// when every job reading the stream is a ByteExtractor (Batch.
// ExtractsBytes). The records are the ones Extract makes.

// ByteExtractor is an Instance that can extract events from their bytes.
type ByteExtractor interface {
	// ExtractBytes fills rec, as Extract would of ev parsed, and returns
	// true; or it returns false to leave ev to the parser and Extract,
	// and must do so for every event Extract refuses. It has no effect
	// but on rec and a (the batch forgets what it added to a when it
	// returns false): the other effects of Extract belong in KeepBytes.
	ExtractBytes(ev []byte, rec *Record, a *Arena, now int64) bool
	// KeepBytes is called with each event, and the record ExtractBytes
	// made of it, once every job reading the stream has extracted it:
	// whatever Extract does besides filling the record (sampling, say)
	// happens here, once per event as with Extract.
	KeepBytes(ev []byte, rec *Record)
}

// ExtractsBytes says whether every job reading the batch's stream is a
// ByteExtractor, so that AddBytes may be offered events. Call it before
// AddBytes.
func (b *Batch) ExtractsBytes() bool {
	for _, jb := range b.jobs {
		be, ok := jb.job.kind.instance().(ByteExtractor)
		if !ok {
			return false
		}
		jb.bytes = be
	}
	return len(b.jobs) > 0
}

// AddBytes adds the event whose JSON text is ev, if every job's
// ByteExtractor takes it, and says whether it did; if it did not, the
// batch holds what it held (an arena may keep a few unused bytes), and
// the event is for Add.
func (b *Batch) AddBytes(ev []byte) bool {
	for i, jb := range b.jobs {
		jb.rec = Record{Side: jb.side}
		jb.feats, jb.vals = len(jb.arena.feats), len(jb.arena.vals)
		if !jb.bytes.ExtractBytes(ev, &jb.rec, &jb.arena, b.nowMs) {
			for _, jb := range b.jobs[:i+1] {
				jb.arena.feats, jb.arena.vals = jb.arena.feats[:jb.feats], jb.arena.vals[:jb.vals]
			}
			return false
		}
	}
	for _, jb := range b.jobs {
		p := jb.partition(jb.rec.Key)
		jb.parts[p] = append(jb.parts[p], jb.rec)
		jb.bytes.KeepBytes(ev, &jb.rec)
	}
	b.events++
	return true
}
