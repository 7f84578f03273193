// Package distinct is the job kind "distinct": the number of distinct
// values of an event field, per tumbling event-time window or over the
// whole stream, with HyperLogLog sketches (package synopses), one per
// partition, merged by queries.
package distinct

import (
	"math"
	"net/url"
	"time"

	"github.com/mlstream/mlstream/kinds/internal/synopsis"
	"github.com/mlstream/mlstream/runtime"
	"github.com/mlstream/mlstream/synopses"
)

// Name is the kind's name in a spec.
const Name = "distinct"

const (
	defaultPrec = 14
	// registerBytes is a register: the sketch's byte, our copy of it and
	// the changed bit (measured on amd64, for the memory estimate).
	registerBytes = 2.2
)

func init() {
	runtime.Register(runtime.Kind{
		Name: Name, New: newJob, Memory: memory,
		Divergence: 64, // HyperLogLog registers changed
		Spreadable: true,
		Messages:   []string{TypeDistinct},
		Describe:   describe,
	})
}

// job is a job of kind distinct. Params: field, precision (HyperLogLog,
// 4..18, default 14), window (none or a duration), keep (closed windows
// kept, 3), key_field, ts_field.
type job struct {
	sp        synopsis.Params
	name      string // the job's, for its status
	wm        *runtime.Watermark
	precision uint8
	parts     []*part
	last      uint64 // estimate of the last distinct message; only the sampler touches it
}

var (
	_ runtime.FaultTolerant = (*job)(nil)
	_ runtime.Announcing    = (*job)(nil)
	_ runtime.Compensating  = (*part)(nil)
	_ runtime.LiveDiverging = (*part)(nil)
)

func newJob(spec runtime.Spec, p *runtime.Params) (runtime.Instance, error) {
	sp, err := synopsis.ReadParams(p)
	if err != nil {
		return nil, err
	}
	prec, err := p.Int("precision", defaultPrec, 4, 18)
	if err != nil {
		return nil, err
	}
	return &job{sp: sp, name: spec.Name, wm: sp.NewWatermark(nil), precision: uint8(prec)}, nil
}

func memory(spec runtime.Spec, p *runtime.Params, _ bool) (int64, string, error) {
	prec, err := p.Int("precision", defaultPrec, 4, 18)
	if err != nil {
		return 0, "", err
	}
	n, err := synopsis.Summaries(p)
	if err != nil {
		return 0, "", err
	}
	sketch := int64(float64(int64(1)<<prec) * registerBytes)
	return int64(spec.Partitions) * n * sketch, "params.precision", nil
}

func (j *job) NewPartition(index int, out runtime.Emitter) runtime.Operator {
	sk, err := synopses.NewWindowedDistinct(j.precision, j.sp.Window, j.sp.Keep)
	if err != nil {
		panic(err) // precision was checked by newJob
	}
	p := &part{}
	p.Index, p.Sketch = index, sk
	p.Sketch.SetMaxOpen(j.sp.Open)
	p.Join(j.wm)
	p.Publish(time.Now())
	j.parts = append(j.parts, p)
	return p
}

// part is one partition's distinct counter.
type part struct {
	synopsis.Summary[*synopses.Distinct, *synopses.WindowedDistinct]
}

// Count is the answer of query distinct (GET /v1/jobs/{job}/distinct).
type Count struct {
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
	synopsis.WindowInfo
}

// count merges the partitions' published copies of a window.
func (j *job) count(window string) Count {
	merged, err := synopses.NewDistinct(j.precision)
	if err != nil {
		panic(err) // precision was checked by newJob
	}
	sel := synopsis.Select(j.sp, j.wm, j.parts, window, func(s *synopses.Distinct) {
		if err := merged.Merge(s); err != nil {
			panic(err) // same precision everywhere
		}
	})
	out := Count{Window: window, Late: sel.Late, Dropped: sel.Dropped, WindowInfo: j.sp.Info(sel)}
	if j.sp.Window != synopsis.WholeStream {
		out.Start, out.End = sel.Span.Start, sel.Span.End
	}
	out.Estimate, out.StdError = merged.Estimate(), merged.StdError()
	out.Lower, out.Upper = merged.Bounds(3)
	out.Upper += sel.Lost
	return out
}

// Status is the kind's section of the job status: the current window's
// count.
type Status struct {
	Distinct *Count `json:"distinct,omitempty"`
}

// StatusOf is a distinct job's section of its status, nil for another
// kind.
func StatusOf(st runtime.JobStatus) *Status {
	s, _ := runtime.SectionAs[*Status](st)
	return s
}

func (j *job) Status(detail bool) any {
	c := j.count(synopsis.WindowCurrent)
	c.Job = j.name
	return &Status{Distinct: &c}
}

// Queries: distinct[?window=current|last|all].
func (j *job) Queries() []runtime.Query {
	return []runtime.Query{{Name: "distinct", Params: []string{"window"}, Run: j.query}}
}

func (j *job) query(q runtime.QueryArgs) (any, error) {
	window, err := runtime.QueryWindow(q.Params)
	if err != nil {
		return nil, err
	}
	c := j.count(window)
	c.Job = q.Job
	return c, nil
}

// Announce publishes the current window's count when it changed.
func (j *job) Announce(out runtime.Emitter, now time.Time) {
	j.wm.Advance() // once a second: partitions learn of closed windows and idleness without a query
	if !out.Wants(TypeDistinct) {
		return
	}
	c := j.count(synopsis.WindowCurrent)
	if c.Estimate == j.last {
		return
	}
	j.last = c.Estimate
	c.Job = out.Job()
	out.PublishValue(CountMessage{out.Envelope(TypeDistinct, now.UnixMilli()), c})
}

func (j *job) Units() []runtime.Unit { return synopsis.UnitsOf(j.parts) }

func (j *job) SetFT(f runtime.FT) { synopsis.AttachUnits(f, j.parts) }

// Compensate widens the bounds after a crash: the sketch by the registers
// it may have lost (θ of the unit plus α per lost event), and the upper
// bound by the values of the lost events, each possibly one more distinct
// value.
func (p *part) Compensate(theta float64, lost int64) {
	p.Sketch.Widen(int(math.Ceil(theta)) + int(lost)*int(p.Alpha()))
	p.AddLostValues(uint64(lost) * uint64(p.Alpha()))
	p.Publish(time.Now())
}

// CountOf runs query distinct on a job in this process.
func CountOf(j *runtime.Job, window string) (Count, error) {
	out, err := j.Query("distinct", url.Values{"window": {window}}, "")
	if err != nil {
		return Count{}, err
	}
	return out.(Count), nil
}

// ChartSeries are the distinct count's series in its history: the
// current window's estimate and its bounds.
func (j *job) ChartSeries() []string { return []string{"estimate", "lower", "upper"} }

func (j *job) ChartValues(dst []float64) []float64 {
	c := j.count(synopsis.WindowCurrent)
	return append(dst, float64(c.Estimate), float64(c.Lower), float64(c.Upper))
}
