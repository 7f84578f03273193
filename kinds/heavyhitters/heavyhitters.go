// Package heavyhitters is the job kind "heavy_hitters": the most frequent
// values of an event field, per tumbling event-time window or over the
// whole stream. Each partition keeps its own Space-Saving summary
// (package synopses); a query merges the partitions' published copies.
// Load shedding keeps events with probability p and counts them 1/p
// times, and the reported bounds widen by what it dropped and added.
package heavyhitters

import (
	"math"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/mlstream/mlstream/kinds/internal/synopsis"
	"github.com/mlstream/mlstream/runtime"
	"github.com/mlstream/mlstream/synopses"
	"github.com/valyala/fastjson"
)

// Name is the kind's name in a spec.
const Name = "heavy_hitters"

// Ranges and defaults of params.
const (
	defaultCounters = 2000
	maxCounters     = 1 << 20
	maxK            = 10_000
	// counterBytes is a counter with its share of the summary's index,
	// measured on amd64, for the memory estimate.
	counterBytes = 130 + 32
)

func init() {
	runtime.Register(runtime.Kind{
		Name: Name, New: newJob, Memory: memory,
		Divergence: 1000, // largest counter difference
		Spreadable: true,
		Shed: &runtime.ShedPolicy{
			Drops:    "events, keeping each with probability p and counting it 1/p times",
			Reweight: true,
		},
		Messages: []string{TypeTopK},
		Describe: describe,
	})
}

// job is a job of kind heavy_hitters. Params: field, k (items reported by
// default, 20), counters (per summary, 2000), window (none or a duration),
// keep (closed windows kept, 3), key_field, ts_field.
type job struct {
	sp       synopsis.Params
	name     string // the job's, for its status
	wm       *runtime.Watermark
	k        int
	counters int
	parts    []*part
	shed     runtime.ShedTotals // the job's, when it sheds
	lastKeys []string           // of the last topk message; only the sampler touches it
}

var (
	_ runtime.FaultTolerant = (*job)(nil)
	_ runtime.Announcing    = (*job)(nil)
	_ runtime.ShedAware     = (*job)(nil)
	_ runtime.Compensating  = (*part)(nil)
	_ runtime.LiveDiverging = (*part)(nil)
)

func newJob(spec runtime.Spec, p *runtime.Params) (runtime.Instance, error) {
	sp, err := synopsis.ReadParams(p)
	if err != nil {
		return nil, err
	}
	j := &job{sp: sp, name: spec.Name, wm: sp.NewWatermark(nil)}
	if j.k, err = p.Int("k", 20, 1, maxK); err != nil {
		return nil, err
	}
	if j.counters, err = p.Int("counters", defaultCounters, 1, maxCounters); err != nil {
		return nil, err
	}
	if j.counters < j.k {
		return nil, runtime.ParamError("counters", "must be at least k (%d), got %d", j.k, j.counters)
	}
	return j, nil
}

func memory(spec runtime.Spec, p *runtime.Params, _ bool) (int64, string, error) {
	counters, err := p.Int("counters", defaultCounters, 1, maxCounters)
	if err != nil {
		return 0, "", err
	}
	n, err := synopsis.Summaries(p)
	if err != nil {
		return 0, "", err
	}
	return int64(spec.Partitions) * n * int64(counters) * counterBytes, "params.counters", nil
}

func (j *job) Extract(v *fastjson.Value, rec *runtime.Record, a *runtime.Arena, now int64) error {
	return j.sp.Extract(v, rec, a, now)
}

func (j *job) NewPartition(index int, out runtime.Emitter) runtime.Operator {
	p := &part{}
	p.Index, p.Sketch = index, synopses.NewWindowedHH(j.counters, j.sp.Window, j.sp.Keep)
	p.Sketch.SetMaxOpen(j.sp.Open)
	p.Join(j.wm)
	p.Publish(time.Now())
	j.parts = append(j.parts, p)
	return p
}

func (j *job) SetShed(t runtime.ShedTotals) { j.shed = t }

// part is one partition's heavy hitters.
type part struct {
	synopsis.Summary[*synopses.HeavyHitters, *synopses.WindowedHH]
}

// Process counts each value once, or, for events kept by load shedding,
// with their weight.
func (p *part) Process(recs []runtime.Record, logged bool) {
	p.ProcessWith(recs, logged, func(v string, w float64, ts int64) (bool, bool) { return p.Sketch.Update(v, max(uint64(w), 1), ts) })
}

// TopK is the answer of query topk (GET /v1/jobs/{job}/topk).
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
	synopsis.WindowInfo
	// Shed and ExtraWeight are what load shedding dropped and added (the
	// bounds include both); absent without shedding.
	Shed        uint64 `json:"shed,omitempty"`
	ExtraWeight uint64 `json:"extra_weight,omitempty"`
}

// topK merges the partitions' published copies of a window.
func (j *job) topK(window string, k int) TopK {
	merged := synopses.NewHeavyHitters(j.counters)
	sel := synopsis.Select(j.sp, j.wm, j.parts, window, func(s *synopses.HeavyHitters) { merged.Merge(s) })
	out := TopK{Window: window, Late: sel.Late, Dropped: sel.Dropped, WindowInfo: j.sp.Info(sel)}
	if j.sp.Window != synopsis.WholeStream {
		out.Start, out.End = sel.Span.Start, sel.Span.End
	}
	out.Items, out.Total, out.MaxUntracked = merged.TopK(k), merged.Total(), merged.MaxUntracked()
	if j.shed != nil {
		widen(&out, j.shed)
	}
	return out
}

// widen makes a top k's bounds hold despite shedding: a count may be
// high by the extra weight and low by the events dropped. (An event kept
// with weight w at admission and shed late still stands for one event: the
// other w−1 were shed at admission and are counted there.)
func widen(t *TopK, totals runtime.ShedTotals) {
	shed, extra := totals.Totals()
	if shed == 0 && extra == 0 {
		return
	}
	for i := range t.Items {
		it := &t.Items[i]
		it.Lower -= min(it.Lower, extra)
		it.Upper += shed
	}
	t.MaxUntracked += shed
	t.Shed, t.ExtraWeight = shed, extra
}

// Status is the kind's section of the job status: the current window's
// top k.
type Status struct {
	TopK *TopK `json:"topk,omitempty"`
}

// StatusOf is a heavy_hitters job's section of its status, nil for
// another kind.
func StatusOf(st runtime.JobStatus) *Status {
	s, _ := runtime.SectionAs[*Status](st)
	return s
}

func (j *job) Status(detail bool) any {
	t := j.topK(synopsis.WindowCurrent, j.k)
	t.Job = j.name
	return &Status{TopK: &t}
}

// Queries: topk[?k=20&window=current|last|all].
func (j *job) Queries() []runtime.Query {
	return []runtime.Query{{Name: "topk", Params: []string{"k", "window"}, Run: j.query}}
}

func (j *job) query(q runtime.QueryArgs) (any, error) {
	k, err := runtime.QueryInt(q.Params, "k", 0, 1, math.MaxInt32)
	if err != nil {
		return nil, err
	}
	window, err := runtime.QueryWindow(q.Params)
	if err != nil {
		return nil, err
	}
	if k <= 0 {
		k = j.k
	}
	t := j.topK(window, min(k, j.counters))
	t.Job = q.Job
	return t, nil
}

// Announce publishes the current window's top k when its items or their
// order changed.
func (j *job) Announce(out runtime.Emitter, now time.Time) {
	j.wm.Advance() // once a second: partitions learn of closed windows and idleness without a query
	if !out.Wants(TypeTopK) {
		return
	}
	t := j.topK(synopsis.WindowCurrent, j.k)
	keys := make([]string, len(t.Items))
	for i, it := range t.Items {
		keys[i] = it.Key
	}
	if slices.Equal(keys, j.lastKeys) {
		return
	}
	j.lastKeys = keys
	t.Job = out.Job()
	out.PublishValue(TopKMessage{out.Envelope(TypeTopK, now.UnixMilli()), t})
}

// Fault tolerance: one unit per partition.

func (j *job) Units() []runtime.Unit { return synopsis.UnitsOf(j.parts) }

func (j *job) SetFT(f runtime.FT) { synopsis.AttachUnits(f, j.parts) }

// Compensate widens the bounds after a recovery by the most any item can
// have lost: α per lost event (lost counts every event after the restored
// backup that was not replayed, so also those the state held at the
// crash): AF-Stream's Count-Min compensation, here for Space-Saving, so no
// true heavy hitter is missed. θ adds nothing: the divergence the restored
// backup missed is that of the lost events, and a recovery that lost none
// restored the counts exactly.
func (p *part) Compensate(_ float64, lost int64) {
	p.Sketch.Widen(uint64(lost) * uint64(p.Alpha()))
	p.Publish(time.Now())
}

// TopKOf runs query topk on a job in this process.
func TopKOf(j *runtime.Job, window string, k int) (TopK, error) {
	q := url.Values{"window": {window}}
	if k > 0 {
		q.Set("k", strconv.Itoa(k))
	}
	out, err := j.Query("topk", q, "")
	if err != nil {
		return TopK{}, err
	}
	return out.(TopK), nil
}
