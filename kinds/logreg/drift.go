package logreg

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/runtime"
)

// TypeDrift is the message of a drift: a partition's Page-Hinkley detector
// saw its per-event log loss rise.
const TypeDrift = "drift"

// Drift is a drift message: ts is the event's that completed the drift,
// seq its sequence number, events how many labelled events the partition
// had validated then, drifts the job's drift count including this one.
type Drift struct {
	runtime.Envelope
	Partition int    `json:"partition"`
	Seq       uint64 `json:"seq"`
	Events    int64  `json:"events"`
	Drifts    int64  `json:"drifts"`
	OnDrift   string `json:"on_drift"`
}

// Values of the on_drift param. Only none is implemented: resetting the
// optimizers' accumulators or the model needs support the learners do not
// have yet, and the param refuses the other values rather than ignore them.
const onDriftNone = "none"

func readOnDrift(p *runtime.Params) (string, error) {
	v, err := p.String("on_drift", onDriftNone, onDriftNone, "reset_rates", "reset")
	if err == nil && v != onDriftNone {
		return "", runtime.ParamError("on_drift", "%q is not implemented yet: only none (drifts are reported, the model is left alone)", v)
	}
	return v, err
}

// DriftStatus is the drift section of a logreg job's status. Last is nil
// until the first drift.
type DriftStatus struct {
	Detector string     `json:"detector"`
	OnDrift  string     `json:"on_drift"`
	Drifts   int64      `json:"drifts"`
	Last     *LastDrift `json:"last,omitempty"`
}

// LastDrift is the latest drift: when it was noticed (wall clock), the
// event time and sequence number of the event that completed it, and the
// partition's count of labelled events then.
type LastDrift struct {
	At        time.Time `json:"at"`
	TS        int64     `json:"ts"`
	Seq       uint64    `json:"seq"`
	Partition int       `json:"partition"`
	Events    int64     `json:"events"`
}

// drifts counts a job's drifts, for the status and /metrics.
type drifts struct {
	onDrift string
	count   atomic.Int64
	mu      sync.Mutex
	last    *LastDrift
}

// noticed records a drift found by partition part at record r.
func (d *drifts) noticed(part int, r *runtime.Record, events int64) (LastDrift, int64) {
	last := LastDrift{At: time.Now().UTC(), TS: r.TS, Seq: r.Seq, Partition: part, Events: events}
	d.mu.Lock()
	n := d.count.Add(1)
	d.last = &last
	d.mu.Unlock()
	return last, n
}

func (d *drifts) status() *DriftStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := &DriftStatus{Detector: "page_hinkley", OnDrift: d.onDrift, Drifts: d.count.Load()}
	if d.last != nil {
		last := *d.last
		st.Last = &last
	}
	return st
}

// observeDrift feeds the partition's detector the log loss of the
// labelled event prog has just observed, and reports a drift it completes. Drifts are rare (the
// detector starts over after one), so the message is built with
// encoding/json.
func (p *logregPart) observeDrift(r *runtime.Record) {
	if !p.drift.UpdateLoss(p.prog.LastLoss()) {
		return
	}
	d := &p.job.drifts
	last, n := d.noticed(p.index, r, p.prog.Count())
	if p.out.Wants(TypeDrift) {
		p.out.PublishValue(Drift{Envelope: p.out.Envelope(TypeDrift, r.TS), Partition: p.index, Seq: last.Seq,
			Events: last.Events, Drifts: n, OnDrift: d.onDrift})
	}
}
