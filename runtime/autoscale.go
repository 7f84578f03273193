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
	// Cores is, in a cluster, the cores of its live nodes: the count is
	// capped there, and NeedsNode says that the cluster as a whole needs
	// another node (more partitions are needed than it has cores).
	Cores     int  `json:"cores,omitempty"`
	NeedsNode bool `json:"needs_node,omitempty"`
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
	// cores is, in a cluster, the cores of its live nodes (0 single-node:
	// maxParts holds GOMAXPROCS's cap).
	cores    int
	stop     chan struct{}
	stopOnce sync.Once

	tickMu sync.Mutex // serialises ticks
	mu     sync.Mutex // guards the fields below, never held over a rescale
	last   LoadSample
	// work is the events and busy time of the last rateWindow measures
	// with any: the true rate is theirs, steadier than one measure's.
	work      []workDone
	rescaled  time.Time
	decisions []AutoscaleDecision
}

// LoadSample is what an autoscaler's decision measures from: the events a
// job was offered so far and its partitions' work. The engine measures
// its own jobs; a cluster measures its jobs across its nodes
// (ClusterAutoscaling).
type LoadSample struct {
	At time.Time
	// Layout names the job's layout measured (a rescale makes another):
	// busy times compare only within one layout.
	Layout any
	// Offered counts the events offered to the job so far (accepted, and
	// refused as busy); it compares across layouts when OfferedSpansLayouts.
	Offered             uint64
	OfferedSpansLayouts bool
	Parts               []PartLoad // by partition
}

// PartLoad is a partition's work so far.
type PartLoad struct {
	Processed uint64
	Busy      time.Duration
	// Source names whose counters these are (in a cluster, the owner's
	// node and lease): a partition's work compares only within one source.
	Source string
}

// newAutoscaler is the autoscaler of spec: capped at the process's cores,
// or in a cluster (clustered) at its live nodes' cores, which it learns
// at each decision.
func newAutoscaler(spec AutoscaleSpec, maxPartitions int, clustered bool) *autoscaler {
	cd, _ := time.ParseDuration(spec.Cooldown) // checked by validate
	maxParts := min(spec.Max, maxPartitions)
	if !clustered {
		maxParts = min(maxParts, goruntime.GOMAXPROCS(0))
	}
	return &autoscaler{spec: spec, cooldown: cd, maxParts: maxParts, stop: make(chan struct{})}
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
	return &AutoscaleStatus{Min: a.spec.Min, Max: a.spec.Max, EffectiveMax: a.effectiveMax(), TargetUtilization: a.spec.TargetUtilization,
		Cooldown: a.spec.Cooldown, Decisions: slices.Clone(a.decisions)}
}

// halt ends the autoscaler's loop; it does not wait for it (a tick may
// be waiting for the rescale lock its caller holds).
func (a *autoscaler) halt() { a.stopOnce.Do(func() { close(a.stop) }) }

// offered counts the events a job was offered: accepted, or refused as
// busy.
func (j *Job) offered() uint64 { return j.accepted.Load() + j.refusedBusy.Load() }

// measure reads the job's counters.
func (j *Job) measure(now time.Time) LoadSample {
	s := LoadSample{At: now, Layout: j, Offered: j.offered(), OfferedSpansLayouts: true}
	for _, p := range j.parts {
		s.Parts = append(s.Parts, partLoad(p))
	}
	return s
}

func partLoad(p *partition) PartLoad {
	return PartLoad{Processed: p.processed.Load(), Busy: time.Duration(p.busyNs.Load())}
}

// PartitionLoad is partition p's work so far on this node: a cluster's
// LoadSample is made of its owners'.
func (j *Job) PartitionLoad(p int) PartLoad { return partLoad(j.parts[p]) }

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

// rates compares two samples: the input rate (unknown, ok false, across
// layouts whose offered counts do not compare), the work done (none
// across layouts) and each partition's true rate.
func rates(prev, cur LoadSample) (input float64, ok bool, work workDone, perPart []float64) {
	sameLayout := prev.Layout == cur.Layout
	if !sameLayout && !cur.OfferedSpansLayouts {
		return 0, false, work, nil
	}
	if dt := cur.At.Sub(prev.At).Seconds(); dt > 0 {
		input = float64(cur.Offered-prev.Offered) / dt
	}
	if !sameLayout {
		return input, true, work, nil // no busy time to compare
	}
	for i, p := range cur.Parts {
		if i >= len(prev.Parts) || prev.Parts[i].Source != p.Source {
			perPart = append(perPart, 0)
			continue
		}
		e, b := p.Processed-prev.Parts[i].Processed, p.Busy-prev.Parts[i].Busy
		work.events += e
		work.busy += b
		r := 0.0
		if b > 0 {
			r = float64(e) / b.Seconds()
		}
		perPart = append(perPart, r)
	}
	return input, true, work, perPart
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
	if a.cores > 0 {
		d.Cores = a.cores
		if math.Ceil(d.Needed) > float64(a.cores) && a.cores < min(a.spec.Max, a.maxParts) {
			d.NeedsNode = true
			why += fmt.Sprintf("; the cluster's nodes have %d cores: it needs another node", a.cores)
		}
	}
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

// effectiveMax is the most partitions it gives: the spec's max, capped
// at --max-partitions and the cores (of the process, or of a cluster's
// live nodes). Called with mu held.
func (a *autoscaler) effectiveMax() int {
	if a.cores > 0 {
		return max(min(a.maxParts, a.cores), a.spec.Min)
	}
	return a.maxParts
}

func (a *autoscaler) clamp(x float64) int {
	return int(min(max(x, float64(a.spec.Min)), float64(a.effectiveMax())))
}

// record keeps a decision for the status (once: a cluster's deciding
// node learns it also from the rescale it asked for).
func (a *autoscaler) record(d AutoscaleDecision) {
	if n := len(a.decisions); n > 0 && a.decisions[n-1].At.Equal(d.At) && a.decisions[n-1].Target == d.Target {
		return
	}
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
	cur := j.measure(now)
	ca, clustered := e.cfg.Cluster.(ClusterAutoscaling)
	if clustered {
		var decides bool
		if cur, decides = ca.AutoscaleSample(j, now); !decides {
			return a.recordAnnounced(ca.AnnouncedDecisions(j), AutoscaleDecision{At: now, Partitions: len(j.parts), Target: len(j.parts),
				Action: "hold", Reason: "another node decides"}), nil
		}
		a.setCores(ca.Cores())
	}
	d, act := a.measureAndDecide(len(j.parts), cur)
	if act {
		// Without a.mu: a rescale takes a while, and the status reads it.
		reason := "autoscale " + d.Action + ": " + d.Reason
		if clustered {
			_, err = ca.RescaleDecided(ctx, name, d.Target, reason, &d)
		} else {
			_, err = e.rescale(ctx, name, d.Target, reason, lin, &d)
		}
		if err != nil {
			d.Error = err.Error()
			d.Target, d.Action = d.Partitions, "hold"
		}
	}
	var after *LoadSample
	if act && err == nil {
		after = &LoadSample{} // a cluster's new layout measures from its next tick
		if nj, err := e.Job(name); err == nil && !clustered {
			*after = nj.measure(now)
		}
	}
	a.done(d, after, now)
	if clustered {
		ca.AnnounceDecision(j, d)
	}
	return d, nil
}

// ClusterAutoscaling is a Cluster whose jobs' autoscalers decide from the
// whole cluster: one node measures each job across the nodes and
// decides for it, capped at the cores of the cluster's live nodes, and
// the cluster rescales it.
type ClusterAutoscaling interface {
	// AutoscaleSample measures job j across the cluster at now; decides
	// is false on every node but the one that decides for j.
	AutoscaleSample(j *Job, now time.Time) (s LoadSample, decides bool)
	// Cores is the cores of the cluster's live nodes.
	Cores() int
	// RescaleDecided rescales the named job as the autoscaler decided (d).
	RescaleDecided(ctx context.Context, name string, partitions int, reason string, d *AutoscaleDecision) (RescaleReport, error)
	// AnnounceDecision tells every node the deciding node's decision d
	// for job j; AnnouncedDecisions are those a node heard for j's
	// layout, oldest first.
	AnnounceDecision(j *Job, d AutoscaleDecision)
	AnnouncedDecisions(j *Job) []AutoscaleDecision
}

func (a *autoscaler) setCores(n int) {
	a.mu.Lock()
	a.cores = n
	a.mu.Unlock()
}

// measureAndDecide decides for a job of n partitions from its measure
// cur against the last one; act says a rescale is wanted. The first
// measure (and the first of a layout whose offered count starts anew)
// only measures.
func (a *autoscaler) measureAndDecide(n int, cur LoadSample) (d AutoscaleDecision, act bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	prev := a.last
	a.last = cur
	if prev.At.IsZero() {
		return AutoscaleDecision{At: cur.At, Partitions: n, Target: n, Action: "hold", Reason: "first measure"}, false
	}
	input, ok, work, perPart := rates(prev, cur)
	if !ok {
		return AutoscaleDecision{At: cur.At, Partitions: n, Target: n, Action: "hold", Reason: "first measure of the new layout"}, false
	}
	d = a.decide(cur.At, n, input, a.trueRate(work))
	d.PartitionRates = perPart
	return d, d.Action != "hold"
}

// done records decision d; after, when not nil, is the measure of the
// job after the rescale d asked for, whose busy times start from zero.
func (a *autoscaler) done(d AutoscaleDecision, after *LoadSample, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if after != nil {
		a.rescaled = now
		a.last = *after
	}
	a.record(d)
}

// recordAnnounced records the decisions another node announced that are
// newer than the last recorded, and returns the newest (none: idle).
func (a *autoscaler) recordAnnounced(ds []AutoscaleDecision, idle AutoscaleDecision) AutoscaleDecision {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, d := range ds {
		if n := len(a.decisions); n == 0 || d.At.After(a.decisions[n-1].At) {
			a.record(d)
		}
	}
	if len(ds) == 0 {
		return idle
	}
	return ds[len(ds)-1]
}

// rescaledBy notes a rescale of the job (by another node of a cluster,
// whose autoscaler this one may succeed): the cool-down counts from it,
// and the decision that asked for it, if any, is in the status.
func (a *autoscaler) rescaledBy(rep RescaleReport) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if rep.At.After(a.rescaled) {
		a.rescaled = rep.At
	}
	if rep.Decision != nil {
		a.record(*rep.Decision)
	}
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
	a := newAutoscaler(*j.spec.Autoscale, e.cfg.MaxPartitions, e.cfg.Cluster != nil)
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
