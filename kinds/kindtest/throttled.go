// Package kindtest holds job kinds for tests. Throttled ("throttled") is
// a kind whose partitions process at most a given number of events per
// second, to test the autoscaler against a known true rate. Import it
// for its side effect of registering the kind; it is not in kinds/all.
package kindtest

import (
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/runtime"
	"github.com/valyala/fastjson"
)

// Throttled is the kind's name.
const Throttled = "throttled"

func init() {
	runtime.Register(runtime.Kind{Name: Throttled, New: newThrottled, Divergence: 1})
}

// throttled counts events; its partitions take 1/rate seconds of wall
// time per event (params: rate, events per second per partition, default
// 1000; key_field, default key).
type throttled struct {
	rate  float64
	field string
	parts []*throttledPart
}

var _ runtime.Rescaling = (*throttled)(nil)

func newThrottled(_ runtime.Spec, p *runtime.Params) (runtime.Instance, error) {
	rate, err := p.Float("rate", 1000, 1, 1e7)
	if err != nil {
		return nil, err
	}
	field, err := p.Field("key_field", "key")
	if err != nil {
		return nil, err
	}
	return &throttled{rate: rate, field: field}, nil
}

func (t *throttled) Extract(v *fastjson.Value, rec *runtime.Record, a *runtime.Arena, _ int64) error {
	key, err := runtime.ExtractKey(v, t.field, a)
	rec.Key = key
	return err
}

func (t *throttled) NewPartition(int, runtime.Emitter) runtime.Operator {
	p := &throttledPart{per: time.Duration(float64(time.Second) / t.rate)}
	t.parts = append(t.parts, p)
	return p
}

// Count is the events the job counted.
func (t *throttled) Count() int64 {
	var n int64
	for _, p := range t.parts {
		n += p.n.Load()
	}
	return n
}

func (t *throttled) Status(bool) any { return map[string]int64{"count": t.Count()} }

func (t *throttled) Queries() []runtime.Query {
	return []runtime.Query{{Name: "count", Run: func(runtime.QueryArgs) (any, error) { return t.Count(), nil }}}
}

// RescaleInto hands the count to the new partition 0.
func (t *throttled) RescaleInto(next runtime.Instance) error {
	nt, ok := next.(*throttled)
	if !ok {
		return runtime.NotRescalable(Throttled, next)
	}
	nt.parts[0].n.Add(t.Count())
	return nil
}

// throttledPart processes at most one event per `per` of wall time while
// busy: a sleep that overshoots (a busy machine wakes it late) is made up
// by the next batch's, so that over a run of batches the time spent in
// Process is their cost, whatever the scheduler does.
type throttledPart struct {
	per  time.Duration
	over time.Duration // how late the last sleep ended: owed back
	n    atomic.Int64
}

func (p *throttledPart) Process(recs []runtime.Record, _ bool) {
	due := time.Now().Add(time.Duration(len(recs))*p.per - p.over)
	time.Sleep(time.Until(due)) // simulated work, not synchronisation
	p.over = max(0, time.Since(due))
	p.n.Add(int64(len(recs)))
}

func (p *throttledPart) Coordinate()             {}
func (p *throttledPart) Idle(bool) time.Duration { return 0 }
