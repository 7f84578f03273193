package logreg

import (
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/learners"
	"github.com/mlstream/mlstream/runtime"
	"github.com/valyala/fastjson"
)

// Delayed labels. An unlabelled event, or an event of a prediction
// request, that carries an id is held as pending in the partition its id
// hashes to (the id is the record's Key): the features and the
// probability that was served. A label (POST /v1/jobs/{job}/labels) for
// that id is routed to the same partition, which joins it with the
// pending features, learns from them, and scores the served probability
// in the progressive metrics. Pending entries expire label_ttl after their
// event time, measured by the event times the partition sees (labels
// carry their request's arrival time unless they give ts): operators have
// no clock of their own. A partition holds at most
// label_pending_bytes/partitions bytes of them; beyond it the oldest are
// evicted. Each outcome is counted (labelCounts).
//
// Records: a held prediction has Side sideHeld and Value the served
// probability; a label has Side sideLabel; both have Values[0] the id.
// An unlabelled ingested event with an id keeps Side 0, and its key, if
// any, in Values[1].

const (
	sideHeld  = 1
	sideLabel = 2
)

// Limits and defaults of delayed labels.
const (
	DefaultLabelTTL          = time.Hour
	DefaultLabelPendingBytes = 8 << 20
	maxLabelPendingBytes     = 1 << 36
	// MaxIDBytes is the longest id taken.
	MaxIDBytes = 256
	// entryOverhead is a pending entry's bytes besides its id and
	// features: the entry, its map slot and its place in the FIFO.
	entryOverhead = 120
	featureBytes  = 16
)

// labelParams are a job's delayed-label params.
type labelParams struct {
	idField string
	ttl     int64 // ms
	bytes   int64 // for the whole job
}

func readLabelParams(p *runtime.Params) (labelParams, error) {
	var lp labelParams
	var err error
	if lp.idField, err = p.Field("id_field", "id"); err != nil {
		return lp, err
	}
	if lp.idField == "" {
		return lp, runtime.ParamError("id_field", "must not be empty")
	}
	ttl, err := p.Duration("label_ttl", DefaultLabelTTL, time.Millisecond)
	if err != nil {
		return lp, err
	}
	lp.ttl = ttl.Milliseconds()
	lp.bytes, err = p.Bytes("label_pending_bytes", DefaultLabelPendingBytes, 0, maxLabelPendingBytes)
	return lp, err
}

// extractID reads the id of an event: a non-empty string or a number (its
// text) of at most MaxIDBytes; absent or null is none.
func extractID(v *fastjson.Value, field string, a *runtime.Arena) (string, error) {
	x := v.Get(field)
	if x == nil || x.Type() == fastjson.TypeNull {
		return "", nil
	}
	id, err := runtime.ExtractKey(v, field, a)
	if err != nil {
		return "", err
	}
	if id == "" {
		return "", runtime.BadField(field, "must not be empty")
	}
	if len(id) > MaxIDBytes {
		return "", runtime.BadField(field, "at most %d bytes, got %d", MaxIDBytes, len(id))
	}
	return id, nil
}

// holdID makes rec, an unlabelled event with an id, wait for its label:
// the id routes it, the key stays in Values[1] for the prediction message.
func holdID(rec *runtime.Record, id string, a *runtime.Arena) {
	mark := a.ValueMark()
	a.AddValue(id)
	if rec.Key != "" {
		a.AddValue(rec.Key)
	}
	rec.Values = a.Values(mark)
	rec.Key = id
}

// messageKey is the key a prediction message shows: the event's own, not
// the id that routed it.
func messageKey(r *runtime.Record) string {
	if len(r.Values) == 0 {
		return r.Key
	}
	if len(r.Values) > 1 {
		return r.Values[1]
	}
	return ""
}

// ExtractLabel reads one delayed label (runtime.Labelling): the id, the
// label (required) and optionally the time.
func (j *logregJob) ExtractLabel(v *fastjson.Value, rec *runtime.Record, a *runtime.Arena, now int64) error {
	id, err := extractID(v, j.labels.idField, a)
	if err != nil {
		return err
	}
	if id == "" {
		return runtime.BadField(j.labels.idField, "required: the id of the prediction labelled")
	}
	if rec.Label, err = runtime.ExtractLabel(v, j.fields.Label); err != nil {
		return err
	}
	if rec.Label < 0 {
		return runtime.BadField(j.fields.Label, "required: 0, 1, true or false")
	}
	if rec.TS, err = runtime.ExtractTS(v, j.fields.TS, now); err != nil {
		return err
	}
	mark := a.ValueMark()
	a.AddValue(id)
	rec.Values, rec.Key, rec.Side = a.Values(mark), id, sideLabel
	return nil
}

// Held returns the record that holds the last prediction for its label,
// when its event had an id (runtime.Holding).
func (p *predictor) Held() (runtime.Record, bool) {
	if len(p.rec.Values) == 0 || p.rec.Label >= 0 {
		return runtime.Record{}, false
	}
	rec := p.rec
	rec.Side, rec.Value = sideHeld, p.last
	return rec, true
}

// pendingEntry is a prediction waiting for its label; never modified once
// made (the committed set shares it).
type pendingEntry struct {
	id    string
	ts    int64
	prob  float64 // the probability served
	feats []learners.Feature
}

func (e *pendingEntry) bytes() int64 {
	return int64(len(e.id)) + int64(len(e.feats))*featureBytes + entryOverhead
}

// labelCounts are the outcomes of delayed labels, for the status.
type labelCounts struct {
	Held       int64 `json:"held"`
	Joined     int64 `json:"joined"`
	Unknown    int64 `json:"unknown"`
	Expired    int64 `json:"expired"`
	Evicted    int64 `json:"evicted"`
	Duplicates int64 `json:"duplicates"`
}

func (c *labelCounts) add(o labelCounts) {
	c.Held += o.Held
	c.Joined += o.Joined
	c.Unknown += o.Unknown
	c.Expired += o.Expired
	c.Evicted += o.Evicted
	c.Duplicates += o.Duplicates
}

// pendingOp is a change of a pending set: an entry added, or the id
// removed (del set).
type pendingOp struct {
	add *pendingEntry
	del string
}

// pendingSet is a partition's predictions waiting for labels, on the
// partition's goroutine, with its FIFO for expiry and eviction (entries
// that left stay in the FIFO until they reach its head: fifo[i] is live
// only if live[id] is that entry).
type pendingSet struct {
	ttl, budget int64
	live        map[string]*pendingEntry
	fifo        []*pendingEntry
	bytes       int64
	clock       int64 // the latest event time seen
	counts      labelCounts
	// journal are the changes since the last merge, for the committed
	// set (fault tolerance only: nil journaling off).
	journal   []pendingOp
	journaled bool

	// For the status, from other goroutines.
	pub struct {
		counts        atomic.Pointer[labelCounts]
		entries, size atomic.Int64
	}
}

func newPendingSet(ttl, budget int64) *pendingSet {
	s := &pendingSet{ttl: ttl, budget: budget, live: map[string]*pendingEntry{}}
	s.pub.counts.Store(&labelCounts{})
	return s
}

// hold adds a prediction to wait for its label, replacing one of the same
// id (a duplicate), and evicts the oldest beyond the budget.
func (s *pendingSet) hold(id string, ts int64, prob float64, feats []learners.Feature) {
	e := &pendingEntry{id: id, ts: ts, prob: prob, feats: append([]learners.Feature(nil), feats...)}
	if s.remove(id) {
		s.counts.Duplicates++
	}
	s.counts.Held++
	s.live[id] = e
	s.fifo = append(s.fifo, e)
	s.bytes += e.bytes()
	s.log(pendingOp{add: e})
	for s.bytes > s.budget {
		if !s.dropHead(&s.counts.Evicted) {
			break
		}
	}
}

// take removes and returns the entry of id for its label at event time ts;
// nil when there is none or it expired (counted).
func (s *pendingSet) take(id string, ts int64) *pendingEntry {
	e := s.live[id]
	if e == nil {
		s.counts.Unknown++
		return nil
	}
	s.remove(id)
	if ts-e.ts > s.ttl {
		s.counts.Expired++
		return nil
	}
	s.counts.Joined++
	return e
}

func (s *pendingSet) remove(id string) bool {
	e := s.live[id]
	if e == nil {
		return false
	}
	delete(s.live, id)
	s.bytes -= e.bytes()
	s.log(pendingOp{del: id})
	return true
}

// dropHead removes the oldest live entry, counting it in n; false when
// none is left.
func (s *pendingSet) dropHead(n *int64) bool {
	for len(s.fifo) > 0 {
		e := s.fifo[0]
		s.fifo[0] = nil
		s.fifo = s.fifo[1:]
		if s.live[e.id] == e {
			s.remove(e.id)
			*n++
			return true
		}
	}
	return false
}

// advance moves the partition's clock to event time ts and expires the
// entries, oldest first, whose time is more than ttl before it.
func (s *pendingSet) advance(ts int64) {
	if ts <= s.clock {
		return
	}
	s.clock = ts
	for len(s.fifo) > 0 {
		e := s.fifo[0]
		if s.live[e.id] == e && s.clock-e.ts <= s.ttl {
			break
		}
		if s.live[e.id] != e {
			s.fifo[0] = nil
			s.fifo = s.fifo[1:]
			continue
		}
		s.dropHead(&s.counts.Expired)
	}
	if cap(s.fifo) > 1024 && len(s.fifo) < cap(s.fifo)/4 {
		s.fifo = append([]*pendingEntry(nil), s.fifo...)
	}
}

func (s *pendingSet) log(op pendingOp) {
	if s.journaled {
		s.journal = append(s.journal, op)
	}
}

// publish makes the counts visible to the status.
func (s *pendingSet) publish() {
	c := s.counts
	s.pub.counts.Store(&c)
	s.pub.entries.Store(int64(len(s.live)))
	s.pub.size.Store(s.bytes)
}

// processLabelled handles a record of delayed labels: a held prediction,
// a label, or an unlabelled event with an id (prob its prediction).
// It reports whether the partition learned.
func (p *logregPart) processDelayed(r *runtime.Record, prob float64) bool {
	s := p.pend
	s.advance(r.TS)
	switch r.Side {
	case sideHeld:
		s.hold(r.Values[0], r.TS, r.Value, r.Features)
	case sideLabel:
		e := s.take(r.Values[0], r.TS)
		if e == nil {
			return false
		}
		p.learn(r, e.feats, r.Label == 1, e.prob)
		return true
	default:
		s.hold(r.Values[0], r.TS, prob, r.Features)
	}
	return false
}

// LabelStatus is the delayed-labels section of a logreg job's status.
type LabelStatus struct {
	TTLMs        int64 `json:"ttl_ms"`
	MaxBytes     int64 `json:"pending_max_bytes"`
	Pending      int64 `json:"pending"`
	PendingBytes int64 `json:"pending_bytes"`
	labelCounts
}

func (j *logregJob) labelStatus() *LabelStatus {
	st := &LabelStatus{TTLMs: j.labels.ttl, MaxBytes: j.labels.bytes}
	for i, p := range j.parts {
		counts := *p.pend.pub.counts.Load()
		if j.sharing() && counts == (labelCounts{}) {
			// A partition this node has not run: as its deltas say.
			j.committedStatus(i, st)
			continue
		}
		st.labelCounts.add(counts)
		st.Pending += p.pend.pub.entries.Load()
		st.PendingBytes += p.pend.pub.size.Load()
	}
	return st
}

// committedStatus adds partition i's committed held set to st.
func (j *logregJob) committedStatus(i int, st *LabelStatus) {
	j.merge.Lock()
	defer j.merge.Unlock()
	c := j.committed[i]
	st.labelCounts.add(c.counts)
	st.Pending += int64(len(c.m))
	for _, e := range c.m {
		st.PendingBytes += e.bytes()
	}
}

// newPending is a partition's pending set, with its share of
// label_pending_bytes.
func (j *logregJob) newPending() *pendingSet {
	s := newPendingSet(j.labels.ttl, j.labels.bytes/int64(max(j.nparts, 1)))
	return s
}
