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

// Values of the on_drift param: what a drift does to the global model.
// none reports it only; reset_rates gives every weight the step size of a
// fresh model (learners.Model.ResetRates), so that the optimizer moves the
// weights as fast as at the start; reset zeroes the model
// (learners.Model.Reset).
const (
	onDriftNone       = "none"
	onDriftResetRates = "reset_rates"
	onDriftReset      = "reset"
)

func readOnDrift(p *runtime.Params) (string, error) {
	return p.String("on_drift", onDriftNone, onDriftNone, onDriftResetRates, onDriftReset)
}

// Drift actions as deltas carry them (share.go): 0 none.
const (
	actionResetRates = 1
	actionReset      = 2
)

func (d *drifts) action() uint64 {
	switch d.onDrift {
	case onDriftResetRates:
		return actionResetRates
	case onDriftReset:
		return actionReset
	}
	return 0
}

// respond carries out the job's on_drift after partition p found a drift.
// On one node the model changes at once, after p merged what it learned;
// in cluster mode the action rides on the partition's next delta, so that
// every node applies it at the same place of the deltas' order.
func (p *logregPart) respond() {
	j := p.job
	a := j.drifts.action()
	if a == 0 {
		return
	}
	if j.sharing() {
		p.share.action = a
		return
	}
	p.mergeLocal()
	j.merge.Lock()
	j.act(a)
	j.merge.Unlock()
}

// act applies a drift action to the global model; under j.merge. Every
// partition's detector starts over (their losses were of the old model),
// and fault tolerance hears of the change (a reset moves every weight).
func (j *logregJob) act(a uint64) {
	switch a {
	case actionResetRates:
		j.model.ResetRates(j.merge.tracker)
	case actionReset:
		j.model.Reset(j.merge.tracker)
	default:
		return
	}
	j.drifts.resets.Add(1)
	j.drifts.epoch.Add(1)
	if j.ft != nil {
		j.ft.Unit(0).Merged(0, 0, j.merge.learned)
	}
}

// restartDetector starts the partition's detector over after a drift
// action of the job (act), which changed the model its losses were of.
func (p *logregPart) restartDetector() {
	if e := p.job.drifts.epoch.Load(); e != p.driftEpoch {
		p.driftEpoch = e
		p.drift.Reset()
	}
}

// DriftStatus is the drift section of a logreg job's status. Last is nil
// until the first drift.
type DriftStatus struct {
	Detector string `json:"detector"`
	OnDrift  string `json:"on_drift"`
	Drifts   int64  `json:"drifts"`
	// Actions counts the drift actions applied to the model (on_drift
	// reset_rates or reset; in cluster mode, those applied on this node).
	Actions int64      `json:"actions"`
	Last    *LastDrift `json:"last,omitempty"`
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
	resets  atomic.Int64  // actions applied
	epoch   atomic.Uint64 // grows with each action: partitions restart their detectors
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
	st := &DriftStatus{Detector: "page_hinkley", OnDrift: d.onDrift, Drifts: d.count.Load(), Actions: d.resets.Load()}
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
	p.respond()
}
