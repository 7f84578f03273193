package runtime

import (
	"context"
	"fmt"
	"math"
	goruntime "runtime"
	"slices"
	"sync"
	"time"
)

// The autoscaler: a job with an autoscale section changes its partition
// count by itself (rescale.go), from two measures: the job's input rate
// since the previous decision (events accepted, and refused as busy, per
// second) and its partitions' true rate over the last rateWindow
// decisions (events processed per second busy processing, which does not
// depend on how loaded they are). It wants
//
//	partitions = ceil(input rate / (true rate per partition × target utilization))
//
// within [min, max]. It scales up to that as soon as it is above the
// count, and down only to ceil(needed × (1 + autoscaleHysteresis)), when
// that is below the count: a count n holds while the partitions needed
// stay within ((n-1)/(1+h), n], a band wide enough that noise in the
// measures does not make it oscillate; and never two rescales within the
// cool-down. Its max never passes GOMAXPROCS (single-node mode:
// partitions beyond the cores only queue).

// AutoscaleSpec is a job's autoscale section; absent, the autoscaler is off.
type AutoscaleSpec struct {
	// Min and Max bound the partition count (default 1 and GOMAXPROCS;
	// Max is capped at GOMAXPROCS and --max-partitions when it acts).
	Min int `json:"min,omitempty"`
	Max int `json:"max,omitempty"`
	// TargetUtilization is the share of a partition's true rate it aims
	// to use (default 0.7), in (0, 1].
	TargetUtilization float64 `json:"target_utilization,omitempty"`
	// Cooldown is the least time between two rescales (default 30s).
	Cooldown string `json:"cooldown,omitempty"`
}

// autoscaleHysteresis widens the target utilization for scaling down.
const autoscaleHysteresis = 0.15

// keepDecisions is how many decisions a job's status lists.
const keepDecisions = 20

func (a *AutoscaleSpec) validate(s *Spec) error {
	if a == nil {
		return nil
	}
	if a.Min == 0 {
		a.Min = 1
	}
	if a.Max == 0 {
		a.Max = max(a.Min, min(goruntime.GOMAXPROCS(0), MaxPartitions))
	}
	if a.Min < 1 || a.Min > MaxPartitions {
		return &SpecError{"autoscale.min", fmt.Sprintf("must be in [1, %d], got %d", MaxPartitions, a.Min)}
	}
	if a.Max < a.Min || a.Max > MaxPartitions {
		return &SpecError{"autoscale.max", fmt.Sprintf("must be in [min (%d), %d], got %d", a.Min, MaxPartitions, a.Max)}
	}
	if a.TargetUtilization == 0 {
		a.TargetUtilization = 0.7
	}
	if !(a.TargetUtilization > 0 && a.TargetUtilization <= 1) {
		return &SpecError{"autoscale.target_utilization", fmt.Sprintf("must be in (0, 1], got %v", a.TargetUtilization)}
	}
	if a.Cooldown == "" {
		a.Cooldown = "30s"
	}
	if d, err := time.ParseDuration(a.Cooldown); err != nil || d < 0 || d > 24*time.Hour {
		return &SpecError{"autoscale.cooldown", fmt.Sprintf("must be a duration in [0, 24h] such as 30s, got %q", a.Cooldown)}
	}
	if s.Partitions == 0 {
		s.Partitions = a.Min
	}
	if s.Partitions < a.Min || s.Partitions > a.Max {
		return &SpecError{"partitions", fmt.Sprintf("must be within autoscale [min, max] = [%d, %d], got %d", a.Min, a.Max, s.Partitions)}
	}
	return nil
}

// AutoscaleDecision is one decision of the autoscaler, with its inputs.
type AutoscaleDecision struct {
	At time.Time `json:"at"`
	// Partitions is the count when it decided, Target the count decided
	// (the same when it holds).
	Partitions int `json:"partitions"`
	Target     int `json:"target"`
	// Action is up, down or hold.
	Action string `json:"action"`
	Reason string `json:"reason"`
	// InputRate is the events offered per second (accepted, and refused
	// as busy); TrueRate the events one partition processes per second it
	// is busy (the job's, and each partition's); Utilization the input
	// over partitions × true rate; Needed the partitions that make it the
	// target utilization.
	InputRate      float64   `json:"input_rate"`
	TrueRate       float64   `json:"true_rate"`
	PartitionRates []float64 `json:"partition_rates,omitempty"`
	Utilization    float64   `json:"utilization"`
	Needed         float64   `json:"needed"`
	// Error is why the rescale decided failed (the job kept its count).
	Error string `json:"error,omitempty"`
}

// AutoscaleStatus is the autoscaler's view in a job status.
type AutoscaleStatus struct {
	Min               int     `json:"min"`
	Max               int     `json:"max"`
	EffectiveMax      int     `json:"effective_max"`
	TargetUtilization float64 `json:"target_utilization"`
	Cooldown          string  `json:"cooldown"`
	// Decisions are the last decisions, newest last.
	Decisions []AutoscaleDecision `json:"decisions"`
}

// autoscaler is a job's autoscaler: its settings, the last measure, the
// decisions. Ticks come from its loop (Config.AutoscaleInterval) or from
// Engine.AutoscaleTick.
type autoscaler struct {
	spec     AutoscaleSpec
	cooldown time.Duration
	maxParts int // the effective max
	stop     chan struct{}
	stopOnce sync.Once

	tickMu sync.Mutex // serialises ticks
	mu     sync.Mutex // guards the fields below, never held over a rescale
	last   loadSample
	// work is the events and busy time of the last rateWindow measures
	// with any: the true rate is theirs, steadier than one measure's.
	work      []workDone
	rescaled  time.Time
	decisions []AutoscaleDecision
}

// loadSample is what a decision measures from.
type loadSample struct {
	job       *Job // the layout measured: busy times compare within one
	at        time.Time
	offered   uint64 // accepted + refused as busy
	processed uint64
	parts     []partLoad // per partition, of the job at the time
}

type partLoad struct {
	processed uint64
	busy      time.Duration
}

func newAutoscaler(spec AutoscaleSpec, maxPartitions int) *autoscaler {
	cd, _ := time.ParseDuration(spec.Cooldown) // checked by validate
	return &autoscaler{spec: spec, cooldown: cd, maxParts: min(spec.Max, maxPartitions, goruntime.GOMAXPROCS(0)), stop: make(chan struct{})}
}

// lastDecision is the newest decision (ok false: none yet).
func (a *autoscaler) lastDecision() (d AutoscaleDecision, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.decisions) == 0 {
		return d, false
	}
	return a.decisions[len(a.decisions)-1], true
}

func (a *autoscaler) status() *AutoscaleStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	return &AutoscaleStatus{Min: a.spec.Min, Max: a.spec.Max, EffectiveMax: a.maxParts, TargetUtilization: a.spec.TargetUtilization,
		Cooldown: a.spec.Cooldown, Decisions: slices.Clone(a.decisions)}
}

// halt ends the autoscaler's loop; it does not wait for it (a tick may
// be waiting for the rescale lock its caller holds).
func (a *autoscaler) halt() { a.stopOnce.Do(func() { close(a.stop) }) }

// offered counts the events a job was offered: accepted, or refused as
// busy.
func (j *Job) offered() uint64 { return j.accepted.Load() + j.refusedBusy.Load() }

// measure reads the job's counters.
func (j *Job) measure(now time.Time) loadSample {
	s := loadSample{job: j, at: now, offered: j.offered(), processed: j.processed()}
	for _, p := range j.parts {
		s.parts = append(s.parts, partLoad{processed: p.processed.Load(), busy: time.Duration(p.busyNs.Load())})
	}
	return s
}

// workDone is the events processed in some busy time.
type workDone struct {
	events uint64
	busy   time.Duration
}

// rateWindow is how many measures the true rate is taken over: a
// partition's true rate is a property of its kind and its events, which
// changes slowly, and one measure is noisy (a busy time ends with a wake
// that a loaded machine delays).
const rateWindow = 4

// trueRate adds one measure's work and returns the events per busy second
// of the window (0: none measured yet).
func (a *autoscaler) trueRate(w workDone) float64 {
	if w.busy > 0 {
		a.work = append(a.work, w)
		if len(a.work) > rateWindow {
			a.work = slices.Delete(a.work, 0, len(a.work)-rateWindow)
		}
	}
	var sum workDone
	for _, x := range a.work {
		sum.events += x.events
		sum.busy += x.busy
	}
	if sum.busy <= 0 {
		return 0
	}
	return float64(sum.events) / sum.busy.Seconds()
}

// rates compares two samples of one job layout: the input rate, the
// work done (none across layouts) and each partition's true rate.
func rates(prev, cur loadSample) (input float64, work workDone, perPart []float64) {
	dt := cur.at.Sub(prev.at).Seconds()
	if dt > 0 {
		input = float64(cur.offered-prev.offered) / dt
	}
	if prev.job != cur.job {
		return input, work, nil // another layout: no busy time to compare
	}
	for i, p := range cur.parts {
		e, b := p.processed-prev.parts[i].processed, p.busy-prev.parts[i].busy
		work.events += e
		work.busy += b
		r := 0.0
		if b > 0 {
			r = float64(e) / b.Seconds()
		}
		perPart = append(perPart, r)
	}
	return input, work, perPart
}

// decide is the autoscaler's rule (see the package comment of this file):
// the count for the input and true rates, with n partitions now.
func (a *autoscaler) decide(now time.Time, n int, input, trueRate float64) AutoscaleDecision {
	d := AutoscaleDecision{At: now, Partitions: n, Target: n, Action: "hold", InputRate: input, TrueRate: trueRate}
	if trueRate <= 0 {
		d.Reason = "no processing measured yet"
		return d
	}
	target := a.spec.TargetUtilization
	d.Utilization = input / (float64(n) * trueRate)
	d.Needed = input / (trueRate * target)
	up := a.clamp(math.Ceil(d.Needed))
	down := a.clamp(math.Ceil(d.Needed * (1 + autoscaleHysteresis)))
	why := fmt.Sprintf("input %.0f/s at %.0f/s per partition needs %.2f partitions for utilization %.2f", input, trueRate, d.Needed, target)
	switch {
	case up > n:
		d.Target, d.Action = up, "up"
	case down < n:
		d.Target, d.Action = down, "down"
	default:
		d.Reason = why + fmt.Sprintf("; %d is within the hysteresis band", n)
		return d
	}
	if since := now.Sub(a.rescaled); !a.rescaled.IsZero() && since < a.cooldown {
		d.Reason = why + fmt.Sprintf("; would go to %d, but the last rescale was %s ago (cooldown %s)", d.Target, since.Round(time.Millisecond), a.cooldown)
		d.Target, d.Action = n, "hold"
		return d
	}
	d.Reason = why
	return d
}

func (a *autoscaler) clamp(x float64) int {
	return int(min(max(x, float64(a.spec.Min)), float64(a.maxParts)))
}

// record keeps a decision for the status.
func (a *autoscaler) record(d AutoscaleDecision) {
	a.decisions = append(a.decisions, d)
	if len(a.decisions) > keepDecisions {
		a.decisions = slices.Delete(a.decisions, 0, len(a.decisions)-keepDecisions)
	}
}

// AutoscaleTick makes one decision of the named job's autoscaler at now
// (the time its rates are measured to) and carries it out: a rescale, or
// nothing. The engine's own loop calls it every Config.AutoscaleInterval;
// with a negative interval only callers (tests) do. The first call only
// measures. ErrNotSupported when the job has no autoscale section.
func (e *Engine) AutoscaleTick(ctx context.Context, name string, now time.Time) (AutoscaleDecision, error) {
	j, err := e.Job(name)
	if err != nil {
		return AutoscaleDecision{}, err
	}
	return e.autoscaleTick(ctx, j.lineage, name, now)
}

func (e *Engine) autoscaleTick(ctx context.Context, lin *lineage, name string, now time.Time) (AutoscaleDecision, error) {
	a := lin.elastic.autoscaler()
	if a == nil {
		return AutoscaleDecision{}, fmt.Errorf("%w: job %q has no autoscale section", ErrNotSupported, name)
	}
	a.tickMu.Lock()
	defer a.tickMu.Unlock()
	j, err := e.Job(name)
	if err != nil || j.lineage != lin {
		return AutoscaleDecision{}, ErrUnknownJob
	}
	d, act := a.measureAndDecide(j, now)
	if act {
		// Without a.mu: a rescale takes a while, and the status reads it.
		_, err = e.rescale(ctx, name, d.Target, "autoscale "+d.Action+": "+d.Reason, lin, &d)
		if err != nil {
			d.Error = err.Error()
			d.Target, d.Action = d.Partitions, "hold"
		}
	}
	var nj *Job
	if act && err == nil {
		nj, _ = e.Job(name)
	}
	a.done(d, nj, now)
	return d, nil
}

// measureAndDecide measures j at now against the last measure and
// decides; act says a rescale is wanted. The first call only measures.
func (a *autoscaler) measureAndDecide(j *Job, now time.Time) (d AutoscaleDecision, act bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	cur := j.measure(now)
	prev := a.last
	a.last = cur
	if prev.at.IsZero() {
		return AutoscaleDecision{At: now, Partitions: len(j.parts), Target: len(j.parts), Action: "hold", Reason: "first measure"}, false
	}
	input, work, perPart := rates(prev, cur)
	d = a.decide(now, len(j.parts), input, a.trueRate(work))
	d.PartitionRates = perPart
	return d, d.Action != "hold"
}

// done records decision d; rescaled, when not nil, is the job after the
// rescale d asked for, whose busy times start from zero.
func (a *autoscaler) done(d AutoscaleDecision, rescaled *Job, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if rescaled != nil {
		a.rescaled = now
		a.last = rescaled.measure(now)
	}
	a.record(d)
}

// autoscaler is the job's autoscaler, nil without one.
func (es *elasticState) autoscaler() *autoscaler {
	es.mu.Lock()
	defer es.mu.Unlock()
	return es.auto
}

// startAutoscaler starts the job's autoscaler, if its spec has one: its
// loop ticks every Config.AutoscaleInterval (none when negative).
func (e *Engine) startAutoscaler(j *Job) {
	if j.spec.Autoscale == nil {
		return
	}
	a := newAutoscaler(*j.spec.Autoscale, e.cfg.MaxPartitions)
	j.elastic.mu.Lock()
	j.elastic.auto = a
	j.elastic.mu.Unlock()
	if e.cfg.AutoscaleInterval < 0 {
		return
	}
	go func() {
		t := time.NewTicker(e.cfg.AutoscaleInterval)
		defer t.Stop()
		for {
			select {
			case <-a.stop:
				return
			case now := <-t.C:
				if _, err := e.autoscaleTick(context.Background(), j.lineage, j.spec.Name, now); err == ErrUnknownJob {
					return
				}
			}
		}
	}()
}

// stopAutoscaler ends the job's autoscaler loop, if it has one.
func (j *Job) stopAutoscaler() {
	if a := j.elastic.autoscaler(); a != nil {
		a.halt()
	}
}
