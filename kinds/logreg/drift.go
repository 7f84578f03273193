package logreg

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/runtime"
)

// TypeDrift is the message of a drift: a partition's Page-Hinkley detector
// saw its per-event log loss rise. The message is sent once per drift of
// the job, by the partition that saw it first: the others that see the
// same change join it (drifts.noticed) and are named in the status.
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
// partition's count of labelled events then, for the partition that saw it
// first; Partitions are all those that saw it, in the order they did.
type LastDrift struct {
	At         time.Time `json:"at"`
	TS         int64     `json:"ts"`
	Seq        uint64    `json:"seq"`
	Partition  int       `json:"partition"`
	Events     int64     `json:"events"`
	Partitions []int     `json:"partitions"`
}

// drifts counts a job's drifts, for the status and /metrics. Each
// partition has its own detector, and a change of the stream shows in all
// of them: a partition's drift joins the job's last one when the partition
// has validated at most a recent window of events (the job's window) since
// that drift was first seen, and did not see it yet. It counts once.
type drifts struct {
	onDrift string
	count   atomic.Int64
	resets  atomic.Int64  // actions applied
	epoch   atomic.Uint64 // grows with each action: partitions restart their detectors
	mu      sync.Mutex
	last    *LastDrift
	// openAt holds each partition's count of validated events (as last
	// published) when the last drift was first seen; under mu.
	openAt []int64
}

// noticed records a drift found by partition part at record r, after it
// validated events: a new drift of the job, or one seen already by other
// partitions (joined). span is how many events a partition may validate
// after a drift was first seen and still join it; validated reads each
// partition's published count.
func (d *drifts) noticed(part int, r *runtime.Record, events, span int64, validated []int64) (last LastDrift, n int64, joined bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if l := d.last; l != nil && part < len(d.openAt) && !slices.Contains(l.Partitions, part) && events-d.openAt[part] <= span {
		l.Partitions = append(l.Partitions, part)
		return l.clone(), d.count.Load(), true
	}
	d.last = &LastDrift{At: time.Now().UTC(), TS: r.TS, Seq: r.Seq, Partition: part, Events: events, Partitions: []int{part}}
	d.openAt = validated
	if part < len(d.openAt) {
		d.openAt[part] = events
	}
	return d.last.clone(), d.count.Add(1), false
}

func (l *LastDrift) clone() LastDrift {
	c := *l
	c.Partitions = slices.Clone(l.Partitions)
	return c
}

func (d *drifts) status() *DriftStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := &DriftStatus{Detector: "page_hinkley", OnDrift: d.onDrift, Drifts: d.count.Load(), Actions: d.resets.Load()}
	if d.last != nil {
		last := d.last.clone()
		st.Last = &last
	}
	return st
}

// driftState is the job's drift counts in a backup (ft.go): a recovery
// brings back the count, the last drift and what later partitions may join.
type driftState struct {
	Count   int64      `json:"count"`
	Actions int64      `json:"actions"`
	Epoch   uint64     `json:"epoch"`
	Last    *LastDrift `json:"last,omitempty"`
	OpenAt  []int64    `json:"open_at,omitempty"`
}

func (d *drifts) marshal() ([]byte, error) {
	d.mu.Lock()
	st := driftState{Count: d.count.Load(), Actions: d.resets.Load(), Epoch: d.epoch.Load(), OpenAt: d.openAt}
	if d.last != nil {
		last := d.last.clone()
		st.Last = &last
	}
	data, err := json.Marshal(st)
	d.mu.Unlock()
	return data, err
}

// parseDrifts reads what marshal wrote, for a job of nparts partitions.
func parseDrifts(data []byte, nparts int) (driftState, error) {
	var st driftState
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("logreg state: drifts: %w", err)
	}
	if st.Count < 0 || st.Actions < 0 || len(st.OpenAt) > nparts || st.Last != nil && len(st.Last.Partitions) > nparts {
		return st, fmt.Errorf("logreg state: drifts: %d drifts, %d actions, %d partitions", st.Count, st.Actions, len(st.OpenAt))
	}
	return st, nil
}

func (d *drifts) restore(st driftState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.count.Store(st.Count)
	d.resets.Store(st.Actions)
	d.epoch.Store(st.Epoch)
	d.last, d.openAt = st.Last, st.OpenAt
}

// observeDrift feeds the partition's detector the log loss of the
// labelled event prog has just observed, and reports a drift it completes. Drifts are rare (the
// detector starts over after one), so the message is built with
// encoding/json.
func (p *logregPart) observeDrift(r *runtime.Record) {
	if !p.drift.UpdateLoss(p.prog.LastLoss()) {
		return
	}
	j := p.job
	validated := make([]int64, len(j.parts))
	for i, q := range j.parts {
		validated[i] = q.validated.Load()
	}
	d := &j.drifts
	last, n, joined := d.noticed(p.index, r, p.prog.Count(), int64(j.window), validated)
	if joined {
		return // counted, announced and acted on when first seen
	}
	if p.out.Wants(TypeDrift) {
		p.out.PublishValue(Drift{Envelope: p.out.Envelope(TypeDrift, r.TS), Partition: p.index, Seq: last.Seq,
			Events: last.Events, Drifts: n, OnDrift: d.onDrift})
	}
	p.respond()
}
