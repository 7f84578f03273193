// Package synopsis is what the kinds whose partitions each keep their own
// summary share (heavy_hitters and distinct, and the bookkeeping of join):
// their common params, extraction of the counted values, a partition's
// fault-tolerance bookkeeping (one unit of state per partition,
// AF-Stream's n operator copies), and the published copies of a windowed
// summary that queries merge (mergeable summaries).
package synopsis

import (
	"io"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/ft"
	"github.com/mlstream/mlstream/runtime"
	"github.com/mlstream/mlstream/synopses"
	"github.com/valyala/fastjson"
)

// WholeStream is the window size that makes one window of the whole
// stream: no event time reaches its end.
const WholeStream = time.Duration(math.MaxInt64)

// Ranges and defaults of the shared params.
const (
	DefaultKeep = 3
	MaxKeep     = 100
)

// Params are the params both synopsis kinds share: field (the event field
// whose values are counted), window (none or a duration), keep (closed
// windows kept), allowed_lateness and idle_timeout (the job's watermark,
// runtime.Watermark) and the field names.
type Params struct {
	Fields   runtime.Fields
	Field    string
	Window   time.Duration // WholeStream when none
	Keep     int
	Lateness time.Duration
	Idle     time.Duration // 0: a partition is never left out
	Open     int           // most open windows a partition holds
}

// DefaultIdle is idle_timeout's default: a partition without events for
// this long no longer holds the job's watermark back.
const DefaultIdle = 10 * time.Second

// ReadParams reads the shared params.
func ReadParams(p *runtime.Params) (Params, error) {
	var sp Params
	var err error
	if sp.Field, err = p.Field("field", ""); err != nil {
		return sp, err
	}
	if sp.Field == "" {
		return sp, runtime.ParamError("field", "required: the event field whose values are counted")
	}
	if sp.Window, err = ReadWindow(p); err != nil {
		return sp, err
	}
	if sp.Window == 0 {
		sp.Window = WholeStream
	}
	if sp.Keep, err = p.Int("keep", DefaultKeep, 1, MaxKeep); err != nil {
		return sp, err
	}
	if sp.Open, err = readOpen(p); err != nil {
		return sp, err
	}
	if sp.Lateness, err = p.Duration("allowed_lateness", 0, 0); err != nil {
		return sp, err
	}
	if sp.Idle, err = p.Duration("idle_timeout", DefaultIdle, 0); err != nil {
		return sp, err
	}
	if sp.Fields, err = runtime.ReadFields(p); err != nil {
		return sp, err
	}
	return sp, nil
}

// readOpen reads param max_open_windows.
func readOpen(p *runtime.Params) (int, error) {
	return p.Int("max_open_windows", synopses.DefaultOpen, 1, MaxKeep)
}

// ReadWindow reads param window: none (0) or a duration of at least 1ms.
func ReadWindow(p *runtime.Params) (time.Duration, error) {
	w, err := p.String("window", "none")
	if err != nil || w == "none" {
		return 0, err
	}
	d, err := time.ParseDuration(w)
	if err != nil || d < time.Millisecond {
		return 0, runtime.ParamError("window", "must be none or a duration of at least 1ms such as 10s or 1m, got %q", w)
	}
	return d, nil
}

// Extract reads the key, event time and the field's values: a string,
// number or boolean is one value; an array gives each element; an object
// gives its keys.
func (sp Params) Extract(v *fastjson.Value, rec *runtime.Record, a *runtime.Arena, now int64) error {
	var err error
	if rec.Key, err = runtime.ExtractKey(v, sp.Fields.Key, a); err != nil {
		return err
	}
	if rec.TS, err = runtime.ExtractTS(v, sp.Fields.TS, now); err != nil {
		return err
	}
	rec.Label = -1
	x := v.Get(sp.Field)
	if x == nil {
		return runtime.BadField(sp.Field, "required")
	}
	mark := a.ValueMark()
	switch x.Type() {
	case fastjson.TypeArray:
		elems, _ := x.Array()
		for i, e := range elems {
			s, ok := scalarText(e, a)
			if !ok {
				return runtime.BadField(sp.Field+"["+strconv.Itoa(i)+"]", "must be a string, number or boolean, got %s", e.Type())
			}
			a.AddValue(s)
		}
	case fastjson.TypeObject:
		o, _ := x.Object()
		o.Visit(func(k []byte, _ *fastjson.Value) { a.AddValue(a.Str(k)) })
	default:
		// Counting the key itself, the key's copy serves as the value.
		s, ok := rec.Key, sp.Field == sp.Fields.Key && rec.Key != ""
		if !ok {
			s, ok = scalarText(x, a)
		}
		if !ok {
			return runtime.BadField(sp.Field, "must be a string, number, boolean, array or object, got %s", x.Type())
		}
		a.AddValue(s)
	}
	rec.Values = a.Values(mark)
	return nil
}

// scalarText is a string's value, or a number's or boolean's JSON text.
func scalarText(v *fastjson.Value, a *runtime.Arena) (string, bool) {
	switch v.Type() {
	case fastjson.TypeString:
		b, _ := v.StringBytes()
		return a.Str(b), true
	case fastjson.TypeNumber, fastjson.TypeTrue, fastjson.TypeFalse:
		return a.Text(v), true
	}
	return "", false
}

// Windows of a query (runtime.QueryWindow).
const (
	WindowCurrent = runtime.WindowCurrent
	WindowLast    = runtime.WindowLast
	WindowAll     = runtime.WindowAll
)

// Part is what the partitions of these kinds share: the bookkeeping of
// fault tolerance and of published copies.
type Part struct {
	Index     int
	lastSeq   uint64
	unlogged  int           // events since the last check that are not in the item log
	pending   int           // events since the last check
	maxVals   atomic.Int64  // most values in one event: α; read by status
	div       atomic.Uint64 // divergence as float64 bits, published for status
	lastDiv   float64       // what div holds, so that it is stored only when it changes
	processed int64
	unit      runtime.FTUnit // nil without fault tolerance
	PubAt     time.Time
	dirty     bool // processed events since the last publish at idle
	// quiet is the most divergence and the most events at risk the unit
	// has said are no reason to back up (lower bounds of its θ and l).
	quiet struct {
		div    float64
		events int
	}
}

// Observe records one processed event; after it, Check tells fault
// tolerance when a backup may be due.
func (s *Part) Observe(r *runtime.Record, logged bool) { s.observe(r, logged) }

// observe is Observe, and returns the most r can move a summary (its
// values times its weight).
func (s *Part) observe(r *runtime.Record, logged bool) int64 {
	s.lastSeq = r.Seq
	s.dirty = true
	// α: the most one event moves a summary; an event kept by load
	// shedding counts with its weight (Value).
	n := int64(len(r.Values)+len(r.Features)) * int64(max(r.Value, 1)) // Features: hashed values
	if n > s.maxVals.Load() {
		s.maxVals.Store(n)
	}
	s.pending++
	if !logged {
		s.unlogged++
	}
	return n
}

// WindowEnded backs the summary up at a window's end, as AF-Stream backs
// up punctuation items always, and resets the unit's thresholds: errors of
// earlier windows no longer add up.
func (s *Part) WindowEnded() {
	if s.unit != nil {
		s.unit.WindowEnded()
	}
}

// Check hands the events since the last check to fault tolerance when the
// state's divergence or the events at risk passed their thresholds (or at
// the end of a batch, force), so that they hold to the event.
func (s *Part) Check(div float64, force bool) {
	// An atomic store is a full barrier on amd64: only when it changed
	// (a summary's divergence moves on few of its events).
	if !force && div != s.lastDiv {
		s.lastDiv = div
		s.div.Store(math.Float64bits(div))
	}
	if s.unit == nil || s.pending == 0 || !force && !s.due(div) {
		return
	}
	s.processed += int64(s.pending)
	s.unit.Merged(s.pending, s.unlogged, s.processed)
	s.pending, s.unlogged = 0, 0
}

// due asks the unit whether a backup is due, unless an earlier answer
// already said no: the unit's θ and l only rise between recoveries (a
// window end resets them upwards), so a no for divergence d and e events at
// risk is a no for any less of both. The divergence of a summary moves on
// few of its events, and ProcessWith asks for a whole batch's events at
// once, so most events cost no call.
func (s *Part) due(div float64) bool {
	if div <= s.quiet.div && s.unlogged <= s.quiet.events {
		return false
	}
	if s.unit.Due(div, s.unlogged) {
		return true
	}
	s.quiet.div, s.quiet.events = max(s.quiet.div, div), max(s.quiet.events, s.unlogged)
	return false
}

// expect tells due that n more events, unlogged or not, are about to be
// processed: when the unit says that all of them at risk would still be
// no reason to back up, due asks no more about their count.
func (s *Part) expect(n int, logged bool) {
	if s.unit == nil || logged {
		return
	}
	if e := s.unlogged + n; e > s.quiet.events && !s.unit.Due(0, e) {
		s.quiet.events = e
	}
}

// idlePublishGap is the least time between two publishes at idle: a queue
// that runs dry after every small batch would otherwise have the summary
// copied after each; the last changes are published at most this late.
const idlePublishGap = 5 * time.Millisecond

// IdlePublish publishes what changed since the last publish, unless the
// last one is too recent: then it says when to come back. The final call
// always publishes.
func (s *Part) IdlePublish(final bool, publish func(time.Time)) time.Duration {
	if !s.dirty {
		return 0
	}
	now := time.Now()
	if gap := now.Sub(s.PubAt); gap < idlePublishGap && !final {
		return idlePublishGap - gap
	}
	publish(now)
	s.dirty = false
	return 0
}

// LiveDivergence is the divergence as of the last event, for status.
func (s *Part) LiveDivergence() float64 { return math.Float64frombits(s.div.Load()) }

// AlphaOf is α: the most values one event had, at least 1.
func (s *Part) AlphaOf() float64 { return float64(max(s.maxVals.Load(), 1)) }

func (s *Part) Partitions() []int   { return []int{s.Index} }
func (s *Part) StateSeqs() []uint64 { return []uint64{s.lastSeq} }

// RecoveredSeqs takes the sequence numbers a recovery restored; the
// recovery halved the unit's thresholds, so what due learnt of them is
// forgotten.
func (s *Part) RecoveredSeqs(seqs []uint64) {
	s.lastSeq = seqs[0]
	s.quiet.div, s.quiet.events = 0, 0
}
func (s *Part) SetUnit(u runtime.FTUnit) { s.unit, s.quiet.div, s.quiet.events = u, 0, 0 }

// View is a published copy of one window of a summary.
type View[S any] = synopses.Window[S]

// Windowed is what both windowed synopses offer.
type Windowed[S any] interface {
	ft.Stateful
	// Views copies every window held, ascending, and what a window opened
	// later would owe (synopses.WindowedHH.Views).
	Views() (views []synopses.Window[S], owed S, owes bool)
	SetWatermark(wm int64, ok bool)
	MaxTime() (ts int64, ok bool)
	Late() uint64
	Dropped() uint64
	Evicted() uint64
}

// Summary is what the two kinds' partitions share beyond Part: the
// summary, its published copies, its report to the job's watermark and
// its fault-tolerance hooks.
type Summary[S any, W Windowed[S]] struct {
	Part
	Sketch W
	// WM is the job's watermark, Time this partition's report to it (nil:
	// the summary's own largest event time closes its windows).
	WM     *runtime.Watermark
	Time   *runtime.PartitionTime
	events uint64
	pub    struct {
		sync.Mutex
		views                  []View[S]
		owed                   S
		hasOwed                bool
		late, dropped, evicted uint64
		// lostValues counts the values of events lost in crashes (kept by
		// distinct: each can be a distinct value the sketch never saw).
		lostValues uint64
	}
}

// ProcessWith adds every value of each record with add, keeping fault
// tolerance informed event by event and backing up at window ends.
func (p *Summary[S, W]) ProcessWith(recs []runtime.Record, logged bool, add func(v string, weight float64, ts int64) (late, closed bool)) {
	p.ProcessRecords(recs, logged, func(r *runtime.Record) (closed bool) {
		for _, v := range r.Values {
			_, c := add(v, r.Value, r.TS)
			closed = closed || c
		}
		return closed
	})
}

// Coordinate publishes the summary at the end of a group of batches.
func (p *Summary[S, W]) Coordinate() { p.Publish(time.Now()) }

func (p *Summary[S, W]) Idle(final bool) time.Duration {
	return p.IdlePublish(final, p.Publish)
}

// Publish copies the windows queries read.
func (p *Summary[S, W]) Publish(now time.Time) {
	views, owed, hasOwed := p.Sketch.Views()
	p.pub.Lock()
	p.pub.views, p.pub.owed, p.pub.hasOwed = views, owed, hasOwed
	p.pub.late, p.pub.dropped, p.pub.evicted = p.Sketch.Late(), p.Sketch.Dropped(), p.Sketch.Evicted()
	p.pub.Unlock()
	p.PubAt = now
}

// beginBatch tells the summary the job's watermark before a batch.
func (p *Summary[S, W]) beginBatch() {
	if p.WM != nil {
		p.Sketch.SetWatermark(p.WM.Current())
	}
}

// endBatch reports the partition's event time to the job's watermark.
func (p *Summary[S, W]) endBatch(n int) {
	p.events += uint64(n)
	if p.Time != nil {
		ts, ok := p.Sketch.MaxTime()
		p.Time.Observe(ts, ok, p.events)
	}
}

// AddLostValues counts values of events lost in a crash.
func (p *Summary[S, W]) AddLostValues(n uint64) {
	p.pub.Lock()
	p.pub.lostValues += n
	p.pub.Unlock()
}

func (p *Summary[S, W]) StateDivergence() float64 { return p.Sketch.StateDivergence() }
func (p *Summary[S, W]) BackupState(w io.Writer, full bool) error {
	return p.Sketch.BackupState(w, full)
}
func (p *Summary[S, W]) RecoverState(r io.Reader) error { return p.Sketch.RecoverState(r) }
func (p *Summary[S, W]) Alpha() float64                 { return p.AlphaOf() }

// Recovered publishes the restored summary at once: queries must not wait
// for the first event; and reports the restored event time (the newest
// window's start, a lower bound) to the job's watermark.
func (p *Summary[S, W]) Recovered(seqs []uint64) {
	p.RecoveredSeqs(seqs)
	p.endBatch(0)
	p.Publish(time.Now())
}

// AttachUnits hands each partition its unit of state.
func AttachUnits[P interface{ SetUnit(runtime.FTUnit) }](f runtime.FT, parts []P) {
	for i, p := range parts {
		p.SetUnit(f.Unit(i))
	}
}

// UnitsOf lists partitions as units of state, one each.
func UnitsOf[P runtime.Unit](parts []P) []runtime.Unit {
	out := make([]runtime.Unit, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out
}

// publishedSummaries is what a synopsis partition holds besides its live
// windows over the whole stream: the published copy, the blank summary
// that stands for a missing window, and room for a query's merge.
const publishedSummaries = 4

// Summaries is how many summaries a synopsis partition holds at most: its
// live windows (keep closed ones and max_open_windows open ones, or one
// for the whole stream) and as many published copies, for memory
// estimates.
func Summaries(p *runtime.Params) (int64, error) {
	keep, err := p.Int("keep", DefaultKeep, 1, MaxKeep)
	if err != nil {
		return 0, err
	}
	open, err := readOpen(p)
	if err != nil {
		return 0, err
	}
	w, err := p.String("window", "none")
	if err != nil {
		return 0, err
	}
	live := int64(1)
	if w != "none" {
		live = int64(keep + open)
	}
	return live + max(live, publishedSummaries), nil
}
