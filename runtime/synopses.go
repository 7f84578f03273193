package runtime

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/ft"
	"github.com/mlstream/mlstream/synopses"
	"github.com/valyala/fastjson"
)

// The synopsis kinds, heavy_hitters and distinct: each partition keeps its
// own summary of a field's values (tumbling event-time windows, or one
// window for the whole stream), publishes a copy after each group of
// batches (group.go), and a
// query merges the partitions' copies (mergeable summaries). Each
// partition's summary is its own unit of state for fault tolerance.

// wholeStream is the window size that makes one window of the whole
// stream: no event time reaches its end.
const wholeStream = time.Duration(math.MaxInt64)

// synopsisParams are the params both kinds share.
type synopsisParams struct {
	fields Fields
	field  string
	window time.Duration // wholeStream when none
	keep   int
}

func readSynopsisParams(p *Params) (synopsisParams, error) {
	var sp synopsisParams
	var err error
	if sp.field, err = p.String("field", ""); err != nil {
		return sp, err
	}
	if sp.field == "" {
		return sp, perr("field", "required: the event field whose values are counted")
	}
	w, err := p.String("window", "none")
	if err != nil {
		return sp, err
	}
	sp.window = wholeStream
	if w != "none" {
		d, err := time.ParseDuration(w)
		if err != nil || d < time.Millisecond {
			return sp, perr("window", "must be none or a duration of at least 1ms such as 10s or 1m, got %q", w)
		}
		sp.window = d
	}
	if sp.keep, err = p.Int("keep", defaultKeep, 1, maxKeep); err != nil {
		return sp, err
	}
	if sp.fields, err = readFields(p); err != nil {
		return sp, err
	}
	return sp, nil
}

// extract reads the key, event time and the field's values: a string,
// number or boolean is one value; an array gives each element; an object
// gives its keys.
func (sp synopsisParams) extract(v *fastjson.Value, rec *Record, a *arena, now int64) error {
	var err error
	if rec.Key, err = extractKey(v, sp.fields.Key, a); err != nil {
		return err
	}
	if rec.TS, err = extractTS(v, sp.fields.TS, now); err != nil {
		return err
	}
	rec.Label = -1
	x := v.Get(sp.field)
	if x == nil {
		return badField(sp.field, "required")
	}
	start := len(a.vals)
	switch x.Type() {
	case fastjson.TypeArray:
		elems, _ := x.Array()
		for i, e := range elems {
			s, ok := scalarText(e, a)
			if !ok {
				return badField(sp.field+"["+strconv.Itoa(i)+"]", "must be a string, number or boolean, got %s", e.Type())
			}
			a.vals = append(a.vals, s)
		}
	case fastjson.TypeObject:
		o, _ := x.Object()
		o.Visit(func(k []byte, _ *fastjson.Value) { a.vals = append(a.vals, a.str(k)) })
	default:
		s, ok := scalarText(x, a)
		if !ok {
			return badField(sp.field, "must be a string, number, boolean, array or object, got %s", x.Type())
		}
		a.vals = append(a.vals, s)
	}
	rec.Values = a.vals[start:len(a.vals):len(a.vals)]
	return nil
}

// scalarText is a string's value, or a number's or boolean's JSON text.
func scalarText(v *fastjson.Value, a *arena) (string, bool) {
	switch v.Type() {
	case fastjson.TypeString:
		b, _ := v.StringBytes()
		return a.str(b), true
	case fastjson.TypeNumber, fastjson.TypeTrue, fastjson.TypeFalse:
		return a.str(v.MarshalTo(nil)), true
	}
	return "", false
}

// Windows of a synopsis query.
const (
	WindowCurrent = "current"
	WindowLast    = "last"
	WindowAll     = "all"
)

// synPart is what the two kinds' partitions share: the bookkeeping of
// fault tolerance and of published copies.
type synPart struct {
	index     int
	lastSeq   uint64
	unlogged  int           // events since the last check that are not in the item log
	pending   int           // events since the last check
	maxVals   atomic.Int64  // most values in one event: α; read by status
	div       atomic.Uint64 // divergence as float64 bits, published for status
	processed int64
	unit      *stateUnit // nil without fault tolerance
	pubAt     time.Time
	dirty     bool // processed events since the last publish at idle
}

// observe records one processed event; after it, check tells fault
// tolerance when a backup may be due.
func (s *synPart) observe(r *Record, logged bool) {
	s.lastSeq = r.Seq
	s.dirty = true
	// α: the most one event moves a summary; a heavy-hitter event kept by
	// load shedding counts with its weight (Value).
	if n := int64(len(r.Values)) * int64(max(r.Value, 1)); n > s.maxVals.Load() {
		s.maxVals.Store(n)
	}
	s.pending++
	if !logged {
		s.unlogged++
	}
}

// windowEnded backs the summary up at a window's end, as AF-Stream backs
// up punctuation items always, and resets the unit's thresholds: errors of
// earlier windows no longer add up.
func (s *synPart) windowEnded() {
	if s.unit != nil {
		s.unit.windowEnded()
	}
}

// check hands the events since the last check to fault tolerance when the
// state's divergence or the events at risk passed their thresholds (or at
// the end of a batch, force), so that they hold to the event.
func (s *synPart) check(div float64, force bool) {
	if !force {
		s.div.Store(math.Float64bits(div))
	}
	if s.unit == nil || s.pending == 0 || !force && !s.unit.due(div, s.unlogged) {
		return
	}
	s.processed += int64(s.pending)
	s.unit.merged(s.pending, s.unlogged, s.processed)
	s.pending, s.unlogged = 0, 0
}

// idlePublishGap is the least time between two publishes at idle: a queue
// that runs dry after every small batch would otherwise have the summary
// copied after each; the last changes are published at most this late.
const idlePublishGap = 5 * time.Millisecond

// idlePublish publishes what changed since the last publish, unless the
// last one is too recent: then it says when to come back. The final call
// always publishes.
func (s *synPart) idlePublish(final bool, publish func(time.Time)) time.Duration {
	if !s.dirty {
		return 0
	}
	now := time.Now()
	if gap := now.Sub(s.pubAt); gap < idlePublishGap && !final {
		return idlePublishGap - gap
	}
	publish(now)
	s.dirty = false
	return 0
}

// liveDivergence is the divergence as of the last event, for status.
func (s *synPart) liveDivergence() float64 { return math.Float64frombits(s.div.Load()) }

// alphaOf is α: the most values one event had, at least 1.
func (s *synPart) alphaOf() float64 { return float64(max(s.maxVals.Load(), 1)) }

func (s *synPart) partitions() []int           { return []int{s.index} }
func (s *synPart) stateSeqs() []uint64         { return []uint64{s.lastSeq} }
func (s *synPart) recoveredSeqs(seqs []uint64) { s.lastSeq = seqs[0] }

// ---- heavy_hitters ----

// hhJob is kind heavy_hitters. Params: field, k (items reported by
// default, 20), counters (per summary, 2000), window (none or a duration),
// keep (closed windows kept, 3), key_field, ts_field.
type hhJob struct {
	sp       synopsisParams
	k        int
	counters int
	parts    []*hhPart
	ft       *jobFT
	shed     *shedCounters // the job's, when it sheds
	lastKeys []string      // of the last topk message; only the sampler touches it
}

func newHHJob(spec Spec, p *Params) (kindJob, error) {
	sp, err := readSynopsisParams(p)
	if err != nil {
		return nil, err
	}
	j := &hhJob{sp: sp}
	if j.k, err = p.Int("k", 20, 1, maxK); err != nil {
		return nil, err
	}
	if j.counters, err = p.Int("counters", defaultCounters, 1, maxCounters); err != nil {
		return nil, err
	}
	if j.counters < j.k {
		return nil, perr("counters", "must be at least k (%d), got %d", j.k, j.counters)
	}
	return j, nil
}

func (j *hhJob) extract(v *fastjson.Value, rec *Record, a *arena, now int64) error {
	return j.sp.extract(v, rec, a, now)
}

func (j *hhJob) newPartition(index int, out emitter) partitionOp {
	p := &hhPart{job: j}
	p.index, p.sk = index, synopses.NewWindowedHH(j.counters, j.sp.window, j.sp.keep)
	p.publish(time.Now())
	j.parts = append(j.parts, p)
	return p
}

// hhPart is one partition's heavy hitters.
type hhPart struct {
	summaryPart[*synopses.HeavyHitters, *synopses.WindowedHH]
	job *hhJob
}

// synView is a published copy of one window of a summary.
type synView[S any] struct {
	span synopses.Span
	sum  S
}

// windowViews copies the three windows a query can ask for.
func windowViews[S any](current, last, all func() (synopses.Span, S)) map[string]synView[S] {
	views := map[string]synView[S]{}
	for name, f := range map[string]func() (synopses.Span, S){WindowCurrent: current, WindowLast: last, WindowAll: all} {
		span, sum := f()
		views[name] = synView[S]{span, sum}
	}
	return views
}

// windowed is what both windowed synopses offer.
type windowed[S any] interface {
	ft.Stateful
	Current() (synopses.Span, S)
	Last() (synopses.Span, S)
	All() (synopses.Span, S)
	Late() uint64
	Dropped() uint64
}

// summaryPart is what the two kinds' partitions share beyond synPart: the
// summary, its published copies and its fault-tolerance hooks.
type summaryPart[S any, W windowed[S]] struct {
	synPart
	sk  W
	pub struct {
		sync.Mutex
		views         map[string]synView[S]
		late, dropped uint64
		// lostValues counts the values of events lost in crashes (kept by
		// distinct: each can be a distinct value the sketch never saw).
		lostValues uint64
	}
}

// processWith adds every value of each record with add, keeping fault
// tolerance informed event by event and backing up at window ends.
func (p *summaryPart[S, W]) processWith(recs []Record, logged bool, add func(v string, weight float64, ts int64) (late, closed bool)) {
	for i := range recs {
		r := &recs[i]
		p.observe(r, logged)
		closed := false
		for _, v := range r.Values {
			_, c := add(v, r.Value, r.TS)
			closed = closed || c
		}
		p.check(p.sk.StateDivergence(), closed)
		if closed {
			p.windowEnded()
		}
	}
	p.check(0, true)
}

// coordinate publishes the summary at the end of a group of batches.
func (p *summaryPart[S, W]) coordinate() { p.publish(time.Now()) }

func (p *summaryPart[S, W]) idle(final bool) time.Duration {
	return p.idlePublish(final, p.publish)
}

func (p *summaryPart[S, W]) publish(now time.Time) {
	views := windowViews(p.sk.Current, p.sk.Last, p.sk.All)
	p.pub.Lock()
	p.pub.views, p.pub.late, p.pub.dropped = views, p.sk.Late(), p.sk.Dropped()
	p.pub.Unlock()
	p.pubAt = now
}

// view returns the published copy of a window and the counters.
func (p *summaryPart[S, W]) view(window string) (v synView[S], late, dropped, lost uint64) {
	p.pub.Lock()
	defer p.pub.Unlock()
	return p.pub.views[window], p.pub.late, p.pub.dropped, p.pub.lostValues
}

func (p *summaryPart[S, W]) StateDivergence() float64 { return p.sk.StateDivergence() }
func (p *summaryPart[S, W]) BackupState(w io.Writer, full bool) error {
	return p.sk.BackupState(w, full)
}
func (p *summaryPart[S, W]) RecoverState(r io.Reader) error { return p.sk.RecoverState(r) }
func (p *summaryPart[S, W]) alpha() float64                 { return p.alphaOf() }

// recovered publishes the restored summary at once: queries must not wait
// for the first event.
func (p *summaryPart[S, W]) recovered(seqs []uint64) {
	p.recoveredSeqs(seqs)
	p.publish(time.Now())
}

// attachUnits hands each partition its unit of state.
func attachUnits[P interface{ setUnit(*stateUnit) }](f *jobFT, parts []P) {
	for i, p := range parts {
		p.setUnit(f.units[i])
	}
}

func (s *synPart) setUnit(u *stateUnit) { s.unit = u }

// unitsOf lists partitions as units of state, one each.
func unitsOf[P stateful](parts []P) []stateful {
	out := make([]stateful, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out
}

// process counts each value once, or, for events kept by load shedding,
// with their weight.
func (p *hhPart) process(recs []Record, logged bool) {
	p.processWith(recs, logged, func(v string, w float64, ts int64) (bool, bool) { return p.sk.Update(v, max(uint64(w), 1), ts) })
}

// TopK is the answer to GET /v1/jobs/{job}/topk.
type TopK struct {
	Job    string `json:"job"`
	Window string `json:"window"`
	// Start and End bound the window in event time (epoch ms); absent for
	// the whole stream.
	Start int64           `json:"start,omitempty"`
	End   int64           `json:"end,omitempty"`
	Items []synopses.Item `json:"items"`
	Total uint64          `json:"total"`
	// MaxUntracked bounds the count of any item not listed.
	MaxUntracked uint64 `json:"max_untracked"`
	Late         uint64 `json:"late"`
	Dropped      uint64 `json:"dropped"`
	// Shed and ExtraWeight are what load shedding dropped and added (the
	// bounds include both); absent without shedding.
	Shed        uint64 `json:"shed,omitempty"`
	ExtraWeight uint64 `json:"extra_weight,omitempty"`
}

// topK merges the partitions' published copies of a window.
func (j *hhJob) topK(window string, k int) TopK {
	merged := synopses.NewHeavyHitters(j.counters)
	out := TopK{Window: window}
	for _, p := range j.parts {
		v, late, dropped, _ := p.view(window)
		out.Late += late
		out.Dropped += dropped
		merged.Merge(v.sum)
		if j.sp.window != wholeStream {
			out.Start, out.End = v.span.Start, v.span.End
		}
	}
	out.Items, out.Total, out.MaxUntracked = merged.TopK(k), merged.Total(), merged.MaxUntracked()
	if j.shed != nil {
		j.shed.widen(&out)
	}
	return out
}

func (j *hhJob) status(st *JobStatus, detail bool) {
	t := j.topK(WindowCurrent, j.k)
	st.TopK = &t
}

// announce publishes the current window's top k when its items or their
// order changed.
func (j *hhJob) announce(hub *Hub, job string, now time.Time) {
	if !hub.Wants(job, TypeTopK) {
		return
	}
	t := j.topK(WindowCurrent, j.k)
	keys := make([]string, len(t.Items))
	for i, it := range t.Items {
		keys[i] = it.Key
	}
	if slices.Equal(keys, j.lastKeys) {
		return
	}
	j.lastKeys = keys
	t.Job = job
	publishJSON(hub, job, TypeTopK, now, t)
}

// TopK answers a heavy_hitters job's query.
func (j *Job) TopK(window string, k int) (TopK, error) {
	hj, err := kindAs[*hhJob](j, "top-k", "heavy_hitters")
	if err != nil {
		return TopK{}, err
	}
	if err := checkWindow(window); err != nil {
		return TopK{}, err
	}
	if k <= 0 {
		k = hj.k
	}
	t := hj.topK(window, min(k, hj.counters))
	t.Job = j.spec.Name
	return t, nil
}

// ErrBadWindow is a query for a window that is not current, last or all.
var ErrBadWindow = fmt.Errorf("runtime: window must be %s, %s or %s", WindowCurrent, WindowLast, WindowAll)

func checkWindow(w string) error {
	switch w {
	case WindowCurrent, WindowLast, WindowAll:
		return nil
	}
	return ErrBadWindow
}

// Fault tolerance: one unit per partition.

func (j *hhJob) units() []stateful { return unitsOf(j.parts) }

func (j *hhJob) setFT(f *jobFT) {
	j.ft = f
	attachUnits(f, j.parts)
}

// compensate widens the bounds after a recovery by the most any item can
// have lost: α per lost event (lost counts every event after the restored
// backup that was not replayed, so also those the state held at the
// crash), plus θ for good measure: AF-Stream's Count-Min compensation, here
// for Space-Saving, so no true heavy hitter is missed.
func (p *hhPart) compensate(theta float64, lost int64) {
	p.sk.Widen(uint64(math.Ceil(theta)) + uint64(lost)*uint64(p.alpha()))
	p.publish(time.Now())
}

// ---- distinct ----

// distinctJob is kind distinct. Params: field, precision (HyperLogLog,
// 4..18, default 14), window (none or a duration), keep (closed windows
// kept, 3), key_field, ts_field.
type distinctJob struct {
	sp        synopsisParams
	precision uint8
	parts     []*distinctPart
	ft        *jobFT
	last      uint64 // estimate of the last distinct message; only the sampler touches it
}

func newDistinctJob(spec Spec, p *Params) (kindJob, error) {
	sp, err := readSynopsisParams(p)
	if err != nil {
		return nil, err
	}
	prec, err := p.Int("precision", defaultPrec, 4, 18)
	if err != nil {
		return nil, err
	}
	return &distinctJob{sp: sp, precision: uint8(prec)}, nil
}

func (j *distinctJob) extract(v *fastjson.Value, rec *Record, a *arena, now int64) error {
	return j.sp.extract(v, rec, a, now)
}

func (j *distinctJob) newPartition(index int, out emitter) partitionOp {
	sk, err := synopses.NewWindowedDistinct(j.precision, j.sp.window, j.sp.keep)
	if err != nil {
		panic(err) // precision was checked by newDistinctJob
	}
	p := &distinctPart{job: j}
	p.index, p.sk = index, sk
	p.publish(time.Now())
	j.parts = append(j.parts, p)
	return p
}

// distinctPart is one partition's distinct counter.
type distinctPart struct {
	summaryPart[*synopses.Distinct, *synopses.WindowedDistinct]
	job *distinctJob
}

func (p *distinctPart) process(recs []Record, logged bool) {
	p.processWith(recs, logged, func(v string, _ float64, ts int64) (bool, bool) { return p.sk.InsertString(v, ts) })
}

// DistinctCount is the answer to GET /v1/jobs/{job}/distinct.
type DistinctCount struct {
	Job      string `json:"job"`
	Window   string `json:"window"`
	Start    int64  `json:"start,omitempty"`
	End      int64  `json:"end,omitempty"`
	Estimate uint64 `json:"estimate"`
	// StdError is the relative standard error of the estimate; Lower and
	// Upper are three standard errors around it, widened after a recovery
	// by the registers that may have been lost.
	StdError float64 `json:"std_error"`
	Lower    uint64  `json:"lower"`
	Upper    uint64  `json:"upper"`
	Late     uint64  `json:"late"`
	Dropped  uint64  `json:"dropped"`
}

func (j *distinctJob) count(window string) DistinctCount {
	out := DistinctCount{Window: window}
	var merged *synopses.Distinct
	var lost uint64
	for _, p := range j.parts {
		v, late, dropped, lostValues := p.view(window)
		out.Late += late
		out.Dropped += dropped
		lost += lostValues
		if merged == nil {
			merged = v.sum.Clone()
		} else if err := merged.Merge(v.sum); err != nil {
			panic(err) // same precision everywhere
		}
		if j.sp.window != wholeStream {
			out.Start, out.End = v.span.Start, v.span.End
		}
	}
	out.Estimate, out.StdError = merged.Estimate(), merged.StdError()
	out.Lower, out.Upper = merged.Bounds(3)
	out.Upper += lost
	return out
}

func (j *distinctJob) status(st *JobStatus, detail bool) {
	c := j.count(WindowCurrent)
	st.Distinct = &c
}

// announce publishes the current window's count when it changed.
func (j *distinctJob) announce(hub *Hub, job string, now time.Time) {
	if !hub.Wants(job, TypeDistinct) {
		return
	}
	c := j.count(WindowCurrent)
	if c.Estimate == j.last {
		return
	}
	j.last = c.Estimate
	c.Job = job
	publishJSON(hub, job, TypeDistinct, now, c)
}

// Distinct answers a distinct job's query.
func (j *Job) Distinct(window string) (DistinctCount, error) {
	dj, err := kindAs[*distinctJob](j, "a distinct count", "distinct")
	if err != nil {
		return DistinctCount{}, err
	}
	if err := checkWindow(window); err != nil {
		return DistinctCount{}, err
	}
	c := dj.count(window)
	c.Job = j.spec.Name
	return c, nil
}

func (j *distinctJob) units() []stateful { return unitsOf(j.parts) }

func (j *distinctJob) setFT(f *jobFT) {
	j.ft = f
	for i, p := range j.parts {
		p.unit = f.units[i]
	}
}

// compensate widens the bounds after a crash: the sketch by the registers
// it may have lost (θ of the unit plus α per lost event), and the upper
// bound by the values of the lost events, each possibly one more distinct
// value.
func (p *distinctPart) compensate(theta float64, lost int64) {
	p.sk.Widen(int(math.Ceil(theta)) + int(lost)*int(p.alpha()))
	p.pub.Lock()
	p.pub.lostValues += uint64(lost) * uint64(p.alpha())
	p.pub.Unlock()
	p.publish(time.Now())
}
