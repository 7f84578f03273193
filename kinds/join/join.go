// Package join is the job kind "join": a windowed symmetric hash join of
// two streams (package joins), with sampling and estimates of the join's
// size, sum and average per window. Events of both streams are
// partitioned by their join key, so each partition joins its keys alone;
// the partitions' estimates add up.
package join

import (
	"cmp"
	"io"
	"math"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/joins"
	"github.com/mlstream/mlstream/kinds/internal/synopsis"
	"github.com/mlstream/mlstream/learners"
	"github.com/mlstream/mlstream/runtime"
	"github.com/valyala/fastjson"
)

// Name is the kind's name in a spec.
const Name = "join"

const (
	defaultMaxState = 64 << 20
	maxJoinState    = 1 << 40
)

func init() {
	runtime.Register(runtime.Kind{
		Name: Name, New: newJoinJob, Memory: memory, TwoStreams: true,
		Divergence: 1e5, // tuples buffered or removed (AF-Stream's Θ for its join)
		Messages:   []string{TypeMatch, TypeJoin},
		Describe:   describe,
	})
}

var (
	_ runtime.FaultTolerant = (*joinJob)(nil)
	_ runtime.Announcing    = (*joinJob)(nil)
	_ runtime.Collecting    = (*joinJob)(nil)
	_ runtime.Compensating  = (*joinPart)(nil)
	_ runtime.LiveDiverging = (*joinPart)(nil)
)

// memory is max_state: the join's own bound on its buffered tuples,
// enforced by package joins; its lower bound is checked by the
// constructor.
func memory(spec runtime.Spec, p *runtime.Params, _ bool) (int64, string, error) {
	maxState, err := p.Bytes("max_state", defaultMaxState, 0, maxJoinState)
	if err != nil {
		return 0, "", err
	}
	return maxState, "params.max_state", nil
}

// joinJob is kind join. Params: on (the key field of both sides) or
// left_on and right_on, within (the join interval), allowed_lateness,
// max_state (bytes of the whole job, split over its partitions), sample
// (probability, default 1), window (estimates per tumbling window; none),
// keep, value and value_side (the field summed and averaged, and whose
// events carry it), confidence (of the intervals, 0.95), ts_field.
type joinJob struct {
	on         [2]string // key field per side
	tsField    string
	value      string // "" when the join sums nothing
	cfg        joins.Config
	maxState   int64
	confidence float64
	parts      []*joinPart

	// matchRate is matches per second over the last sample, as float64
	// bits; the sampler sets it.
	matchRate   atomic.Uint64
	lastMatches uint64
	lastAt      time.Time
}

// recentMatches is how many matches each partition keeps for queries.
const recentMatches = 20

func newJoinJob(spec runtime.Spec, p *runtime.Params) (runtime.Instance, error) {
	j := &joinJob{}
	on, err := p.Field("on", "")
	if err != nil {
		return nil, err
	}
	for side, name := range []string{"left_on", "right_on"} {
		if j.on[side], err = p.Field(name, on); err != nil {
			return nil, err
		}
		if j.on[side] == "" {
			return nil, runtime.ParamError("on", "required: the field both streams join on (or left_on and right_on)")
		}
	}
	within, err := p.Duration("within", 0, 0)
	if err != nil {
		return nil, err
	}
	if _, set := spec.Params["within"]; !set {
		return nil, runtime.ParamError("within", "required: the join interval, such as 30s: a left and a right event match when their times differ by at most this")
	}
	late, err := p.Duration("allowed_lateness", time.Second, 0)
	if err != nil {
		return nil, err
	}
	partitions := max(spec.Partitions, 1)
	if j.maxState, err = p.Bytes("max_state", defaultMaxState, int64(partitions)*joins.MinBytes, maxJoinState); err != nil {
		return nil, err
	}
	sample, err := p.Float("sample", 1, 1e-6, 1)
	if err != nil {
		return nil, err
	}
	win, err := synopsis.ReadWindow(p)
	if err != nil {
		return nil, err
	}
	keep, err := p.Int("keep", synopsis.DefaultKeep, 1, synopsis.MaxKeep)
	if err != nil {
		return nil, err
	}
	if j.value, err = p.Field("value", ""); err != nil {
		return nil, err
	}
	vside, err := p.String("value_side", "left", "left", "right")
	if err != nil {
		return nil, err
	}
	if j.confidence, err = p.Float("confidence", 0.95, 0.5, 0.9999); err != nil {
		return nil, err
	}
	if j.tsField, err = p.Field("ts_field", "ts"); err != nil {
		return nil, err
	}
	j.cfg = joins.Config{
		Within: within.Milliseconds(), Lateness: late.Milliseconds(), MaxBytes: j.maxState / int64(partitions),
		Sample: sample, Window: win.Milliseconds(), Keep: keep, Seed: learners.HashName(spec.Name),
	}
	if vside == "right" {
		j.cfg.ValueSide = joins.Right
	}
	if err := j.cfg.Validate(); err != nil {
		return nil, &runtime.SpecError{Field: "params", Msg: err.Error()}
	}
	return j, nil
}

// extract reads the side's join key (required), the event time and, on
// the value side, the value (a number within Limits.MaxValue, required
// when value is set).
func (j *joinJob) Extract(v *fastjson.Value, rec *runtime.Record, a *runtime.Arena, now int64) error {
	field := j.on[rec.Side]
	key, err := runtime.ExtractKey(v, field, a)
	if err != nil {
		return err
	}
	if key == "" {
		return runtime.BadField(field, "required: the join key (a string or a number)")
	}
	rec.Key = key
	if rec.TS, err = runtime.ExtractTS(v, j.tsField, now); err != nil {
		return err
	}
	if j.value != "" && joins.Side(rec.Side) == j.cfg.ValueSide {
		x := v.Get(j.value)
		if x == nil || x.Type() != fastjson.TypeNumber {
			return runtime.BadField(j.value, "required on the %s stream: a number the join sums and averages", joins.Side(rec.Side))
		}
		if rec.Value, err = runtime.ExtractNumber(x, j.value); err != nil {
			return err
		}
	}
	return nil
}

func (j *joinJob) NewPartition(index int, out runtime.Emitter) runtime.Operator {
	jn, err := joins.New(j.cfg)
	if err != nil {
		panic(err) // the config was checked by newJoinJob
	}
	p := &joinPart{job: j, jn: jn, out: out}
	p.Index = index
	p.emitFn = p.emit
	p.publish(time.Now())
	j.parts = append(j.parts, p)
	return p
}

// joinPart is one partition's join.
type joinPart struct {
	synopsis.Part
	job    *joinJob
	jn     *joins.Join
	out    runtime.Emitter
	emitFn func(*joins.Match)
	wants  bool // someone listens to match messages (per batch)
	msg    []byte
	recent [recentMatches]joins.Match // ring
	nrec   uint64
	pub    struct {
		sync.Mutex
		c            joins.Counters
		tuples       int
		bytes        int64
		open, closed []joins.Acc
		recent       []joins.Match // newest first
	}
}

func (p *joinPart) Process(recs []runtime.Record, logged bool) {
	p.wants = p.out.Wants(TypeMatch)
	for i := range recs {
		r := &recs[i]
		p.Observe(r, logged)
		p.jn.Add(joins.Side(r.Side), r.Key, r.TS, r.Value, r.Seq, p.emitFn)
		p.Check(p.jn.StateDivergence(), false)
	}
	p.Check(0, true)
}

// Coordinate publishes the join's state at the end of a group of batches.
func (p *joinPart) Coordinate() { p.publish(time.Now()) }

// emit keeps the match among the recent ones and sends it to listeners.
func (p *joinPart) emit(m *joins.Match) {
	p.recent[p.nrec%recentMatches] = *m
	p.nrec++
	if !p.wants {
		return
	}
	b := AppendMatch(p.msg[:0], p.out.Job(), m)
	p.msg = b
	p.out.Publish(TypeMatch, append([]byte(nil), b...))
}

func (p *joinPart) Idle(final bool) time.Duration { return p.IdlePublish(final, p.publish) }

// publish copies what queries read.
func (p *joinPart) publish(now time.Time) {
	open, closed := p.jn.Windows()
	n := min(p.nrec, recentMatches)
	recent := make([]joins.Match, 0, n)
	for i := uint64(1); i <= n; i++ {
		recent = append(recent, p.recent[(p.nrec-i)%recentMatches])
	}
	p.pub.Lock()
	p.pub.c, p.pub.tuples, p.pub.bytes = p.jn.Counters(), p.jn.Tuples(), p.jn.StateBytes()
	p.pub.open, p.pub.closed, p.pub.recent = open, closed, recent
	p.pub.Unlock()
	p.PubAt = now
}

// JoinStatus is a join's live view: query matches (GET
// /v1/jobs/{job}/matches), and the join field of the job status.
type JoinStatus struct {
	Job string `json:"job,omitempty"`
	joins.Counters
	MatchRate     float64 `json:"match_rate"`
	StateTuples   int     `json:"state_tuples"`
	StateBytes    int64   `json:"state_bytes"`
	MaxStateBytes int64   `json:"max_state_bytes"`
	// BytesPerTuple is the state's accounted cost of one buffered tuple
	// (ring slot and its share of the key index at worst).
	BytesPerTuple int64 `json:"bytes_per_tuple"`
	Within        int64 `json:"within_ms"`
	Lateness      int64 `json:"allowed_lateness_ms"`
	// Estimate is of the window asked for: current (the newest open one,
	// the default; the whole stream when the join has no windows), last
	// (the newest closed one) or all (the windows kept, summed). Windows
	// lists every window kept, oldest first.
	Estimate *joins.Estimate  `json:"estimate,omitempty"`
	Windows  []joins.Estimate `json:"windows,omitempty"`
	Recent   []joins.Match    `json:"recent"`
}

// view merges the partitions' published copies: counters and state add up,
// and so do the sums of windows with the same start.
func (j *joinJob) view(window string, limit int) JoinStatus {
	st := JoinStatus{
		MaxStateBytes: j.maxState, BytesPerTuple: joins.TupleBytes + joins.IndexBytes,
		Within: j.cfg.Within, Lateness: j.cfg.Lateness,
		MatchRate: math.Float64frombits(j.matchRate.Load()),
	}
	type win struct {
		acc    joins.Acc
		closed bool
	}
	wins := map[int64]*win{}
	var starts []int64
	for _, p := range j.parts {
		p.pub.Lock()
		st.Counters.Add(&p.pub.c)
		st.StateTuples += p.pub.tuples
		st.StateBytes += p.pub.bytes
		for k, accs := range [][]joins.Acc{p.pub.closed, p.pub.open} {
			for _, a := range accs {
				w, ok := wins[a.Start]
				if !ok {
					w = &win{acc: joins.Acc{Start: a.Start, End: a.End}}
					wins[a.Start] = w
					starts = append(starts, a.Start)
				}
				w.acc.Add(&a)
				w.closed = w.closed || k == 0
			}
		}
		st.Recent = append(st.Recent, p.pub.recent...)
		p.pub.Unlock()
	}
	if st.Recent == nil {
		st.Recent = []joins.Match{} // [] in JSON, never null
	}
	sortMatchesNewest(st.Recent)
	if len(st.Recent) > limit {
		st.Recent = st.Recent[:limit]
	}
	slices.Sort(starts)
	var current, last int = -1, -1
	var all joins.Acc
	for _, s := range starts {
		w := wins[s]
		all.Add(&w.acc)
		st.Windows = append(st.Windows, w.acc.Estimate(j.cfg.Sample, j.confidence))
		if w.closed {
			last = len(st.Windows) - 1
		} else {
			current = len(st.Windows) - 1
		}
	}
	pick := map[string]int{synopsis.WindowCurrent: current, synopsis.WindowLast: last}[window]
	switch {
	case window == synopsis.WindowAll:
		e := all.Estimate(j.cfg.Sample, j.confidence)
		e.Start, e.End = 0, 0
		if len(starts) > 0 {
			e.Start, e.End = st.Windows[0].Start, st.Windows[len(st.Windows)-1].End
		}
		st.Estimate = &e
	case pick >= 0:
		e := st.Windows[pick]
		st.Estimate = &e
	}
	return st
}

// sortMatchesNewest orders matches by their later time, newest first.
func sortMatchesNewest(ms []joins.Match) {
	later := func(m joins.Match) int64 { return max(m.LeftTS, m.RightTS) }
	slices.SortStableFunc(ms, func(a, b joins.Match) int { return cmp.Compare(later(b), later(a)) })
}

// Status is the kind's section of the job status: matches, state and the
// current window's estimates.
type Status struct {
	Join *JoinStatus `json:"join,omitempty"`
}

// StatusOf is a join job's section of its status, nil for another kind.
func StatusOf(st runtime.JobStatus) *Status {
	s, _ := runtime.SectionAs[*Status](st)
	return s
}

func (j *joinJob) Status(detail bool) any {
	v := j.view(synopsis.WindowCurrent, recentMatches)
	v.Windows = nil
	return &Status{Join: &v}
}

// Announce updates the match rate and publishes the join's view once a
// second to listeners of join messages.
func (j *joinJob) Announce(out runtime.Emitter, now time.Time) {
	var matches uint64
	for _, p := range j.parts {
		p.pub.Lock()
		matches += p.pub.c.Matches
		p.pub.Unlock()
	}
	if !j.lastAt.IsZero() {
		if dt := now.Sub(j.lastAt).Seconds(); dt > 0 && matches >= j.lastMatches {
			j.matchRate.Store(math.Float64bits(float64(matches-j.lastMatches) / dt))
		}
	}
	j.lastMatches, j.lastAt = matches, now
	if !out.Wants(TypeJoin) {
		return
	}
	v := j.view(synopsis.WindowCurrent, 5)
	v.Job, v.Windows = out.Job(), nil
	out.PublishValue(JoinMessage{out.Envelope(TypeJoin, now.UnixMilli()), v})
}

// Queries: matches[?limit=20&window=current|last|all]: recent matches (at
// most limit, up to 1000), statistics and the estimates of the window.
func (j *joinJob) Queries() []runtime.Query {
	return []runtime.Query{{Name: "matches", Params: []string{"limit", "window"}, Run: j.query}}
}

func (j *joinJob) query(q runtime.QueryArgs) (any, error) {
	limit, err := runtime.QueryInt(q.Params, "limit", 20, 0, 1000)
	if err != nil {
		return nil, err
	}
	window, err := runtime.QueryWindow(q.Params)
	if err != nil {
		return nil, err
	}
	v := j.view(window, limit)
	v.Job = q.Job
	return v, nil
}

// Fault tolerance: one unit per partition, as for the synopses.

func (j *joinJob) Units() []runtime.Unit { return synopsis.UnitsOf(j.parts) }

func (j *joinJob) SetFT(f runtime.FT) { synopsis.AttachUnits(f, j.parts) }

func (p *joinPart) StateDivergence() float64                 { return p.jn.StateDivergence() }
func (p *joinPart) BackupState(w io.Writer, full bool) error { return p.jn.BackupState(w, full) }
func (p *joinPart) RecoverState(r io.Reader) error           { return p.jn.RecoverState(r) }
func (p *joinPart) Alpha() float64                           { return 1 }

func (p *joinPart) Recovered(seqs []uint64) {
	p.RecoveredSeqs(seqs)
	p.publish(time.Now())
}

// Compensate widens the intervals of the open windows after a crash by
// the tuples lost: AF-Stream's n − Θ − Lβ − Γ samples (β = 1). lost counts
// exactly the events after the restored backup that were not replayed,
// those the state held at the crash included, so θ is inside it already.
func (p *joinPart) Compensate(_ float64, lost int64) {
	p.jn.Widen(float64(lost))
	p.publish(time.Now())
}

// MatchesOf runs query matches on a job in this process.
func MatchesOf(j *runtime.Job, window string, limit int) (JoinStatus, error) {
	out, err := j.Query("matches", url.Values{"window": {window}, "limit": {strconv.Itoa(limit)}}, "")
	if err != nil {
		return JoinStatus{}, err
	}
	return out.(JoinStatus), nil
}

// ChartSeries are the join's own series in its history: the match rate
// and the bytes of its state, as its status has them.
func (j *joinJob) ChartSeries() []string { return []string{"match_rate", "state_bytes"} }

func (j *joinJob) ChartValues(dst []float64) []float64 {
	var bytes int64
	for _, p := range j.parts {
		p.pub.Lock()
		bytes += p.pub.bytes
		p.pub.Unlock()
	}
	return append(dst, math.Float64frombits(j.matchRate.Load()), float64(bytes))
}
