package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/learners"
)

// Elastic jobs: a running job's partition count changes (Engine.Rescale,
// PATCH /v1/jobs/{job}). A rescale holds the job's ingest, lets every
// partition drain its queue and stop at a group boundary, builds the job
// anew with the new count, and has its kind move the state over by key
// (Rescaling). With fault tolerance a rescale is an epoch: the new
// layout's state is backed up in full, in its own place in the job's
// storage, before a small pointer (layoutFile) says which layout is the
// job's; a crash before the pointer is written recovers the old layout,
// a crash after it the new one, never a mix. Then the new partitions
// start, ingest resumes on them, and the old ones end.
//
// Requests that arrive meanwhile wait (up to Config.IngestWait, then
// ErrBusy as for full queues); requests that had already queued their
// events are processed by the old partitions before the state moves.

// Rescaling is an Instance whose state can move to another partition
// count.
type Rescaling interface {
	// RescaleInto moves the job's state into next: a new Instance of the
	// same kind and params whose partitions were all made (NewPartition)
	// and have not started. It is called with every partition of this
	// instance stopped at a group boundary (after Idle(false)) and nothing
	// queued. Keyed state goes to the partition PartitionOf its key with
	// next's count. It must leave this instance as it was: when the
	// rescale fails later, this instance goes on. After it, the engine
	// calls Recovered on each of next's units (FaultTolerant) with the
	// sequence numbers before its partitions' first events: the moment for
	// a kind to publish the moved state for queries.
	RescaleInto(next Instance) error
}

// NotRescalable is the error of RescaleInto given an instance of another
// kind (never from the engine, which makes next of the same kind).
func NotRescalable(kind string, next Instance) error {
	return fmt.Errorf("%s: cannot rescale into a %T", kind, next)
}

// PartitionOf is the partition, of n, that the engine routes an event
// with key to (an event without a key goes round robin: 0 here).
func PartitionOf(key string, n int) int {
	if n <= 1 || key == "" {
		return 0
	}
	return int(learners.HashName(key) % uint64(n))
}

// Errors of a rescale, matched with errors.Is by the api package.
var (
	// ErrRescaleClustered: Engine.Rescale of a job of a cluster (the
	// cluster rescales it).
	ErrRescaleClustered = errors.New("runtime: a clustered job is rescaled by its cluster, not by one engine")
	// ErrRescalePaused: a paused job cannot drain its queues.
	ErrRescalePaused = errors.New("runtime: the job is paused; resume it before rescaling")
	// ErrRescaleFailed: the rescale did not happen; the job goes on with
	// its partitions.
	ErrRescaleFailed = errors.New("runtime: rescale failed")
)

// lineage is what a job shares with its successors after rescales: what
// the job's status counts since it was created.
type lineage struct {
	created  time.Time
	accepted atomic.Uint64 // events queued
	lat      latencyHist
	samples  sampler
	shed     shedCounters
	// rescaleMu serialises the job's rescales with each other, with its
	// deletion and with the engine's Close.
	rescaleMu sync.Mutex
	elastic   elasticState
	// refusedBusy counts the events refused as busy (ErrBusy): offered,
	// for the autoscaler, though not accepted.
	refusedBusy atomic.Uint64
	// keys summarises the job's event keys (skew.go).
	keys keySketch
}

// elasticState is the job's rescale history.
type elasticState struct {
	mu         sync.Mutex
	generation uint64
	total      uint64
	last       []RescaleReport // newest last, at most keepRescales
	// auto is the autoscaler of a job with an autoscale section.
	auto *autoscaler
}

// keepRescales is how many rescales a job's status lists.
const keepRescales = 10

// RescaleReport is one rescale, in the job status and the rescale
// message.
type RescaleReport struct {
	From int       `json:"from"`
	To   int       `json:"to"`
	At   time.Time `json:"at"`
	// Reason is "api" (PATCH or PUT) or the autoscaler's reason.
	Reason string `json:"reason"`
	// PauseMs is how long the job's ingest was held; DrainMs of it went to
	// processing what was queued, BackupMs to the full backup of the new
	// layout (fault tolerance).
	PauseMs  float64 `json:"pause_ms"`
	DrainMs  float64 `json:"drain_ms"`
	MoveMs   float64 `json:"move_ms"`
	BackupMs float64 `json:"backup_ms"`
	// Generation counts the job's layouts: 1 after its first rescale.
	Generation uint64 `json:"generation"`
	// Processed is the job's processed count when its state moved.
	Processed uint64 `json:"processed"`
	// Decision is the autoscaler's, when it asked for the rescale.
	Decision *AutoscaleDecision `json:"decision,omitempty"`
}

// RescaleMessage is the rescale WebSocket message (type rescale).
type RescaleMessage struct {
	Envelope
	Rescale RescaleReport `json:"rescale"`
}

// ElasticStatus is the elastic section of a job status.
type ElasticStatus struct {
	Partitions int `json:"partitions"`
	// MaxPartitions is the most a rescale may give the job
	// (Config.MaxPartitions, --max-partitions).
	MaxPartitions int             `json:"max_partitions"`
	Generation    uint64          `json:"generation"`
	Rescales      uint64          `json:"rescales"`
	Last          []RescaleReport `json:"last,omitempty"`
	// Autoscale is the autoscaler's view; absent without autoscale.
	Autoscale *AutoscaleStatus `json:"autoscale,omitempty"`
	// Skew is how unevenly the partitions are loaded.
	Skew *SkewStatus `json:"skew,omitempty"`
}

func (j *Job) elasticStatus() *ElasticStatus {
	es := &j.elastic
	es.mu.Lock()
	st := &ElasticStatus{Partitions: len(j.parts), MaxPartitions: j.maxPartitions, Generation: es.generation, Rescales: es.total,
		Last: slices.Clone(es.last)}
	auto := es.auto
	es.mu.Unlock()
	if auto != nil {
		st.Autoscale = auto.status()
	}
	st.Skew = j.skew()
	return st
}

// record adds a rescale to the history.
func (es *elasticState) record(r RescaleReport) {
	es.mu.Lock()
	defer es.mu.Unlock()
	es.total++
	es.last = append(es.last, r)
	if len(es.last) > keepRescales {
		es.last = slices.Delete(es.last, 0, len(es.last)-keepRescales)
	}
}

// ingestGate holds a job's ingest requests while it is rescaled, and
// sends them on to its successor after.
type ingestGate struct {
	mu       sync.Mutex
	inflight int           // requests between enter and leave
	held     chan struct{} // non-nil while a rescale holds ingest; closed when it opens
	drained  chan struct{} // closed when inflight reaches 0 while held
	next     *Job          // the successor, once the job was rescaled
}

// enterIngest admits a request to j, or to its latest successor, which it
// returns; it waits while a rescale holds ingest, until ctx ends (ErrBusy).
func (j *Job) enterIngest(ctx context.Context) (*Job, error) {
	for {
		g := &j.ingest
		g.mu.Lock()
		switch {
		case g.next != nil:
			j = g.next
			g.mu.Unlock()
		case g.held != nil:
			ch := g.held
			g.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, fmt.Errorf("%w: job %q is being rescaled", ErrBusy, j.spec.Name)
			}
		default:
			g.inflight++
			g.mu.Unlock()
			return j, nil
		}
	}
}

// leaveIngest ends a request enterIngest admitted.
func (j *Job) leaveIngest() {
	g := &j.ingest
	g.mu.Lock()
	g.inflight--
	if g.inflight == 0 && g.drained != nil {
		close(g.drained)
		g.drained = nil
	}
	g.mu.Unlock()
}

// hold stops admitting requests and waits for those admitted to leave,
// until ctx ends.
func (g *ingestGate) hold(ctx context.Context) error {
	g.mu.Lock()
	if g.held == nil {
		g.held = make(chan struct{})
	}
	var drained chan struct{}
	if g.inflight > 0 {
		g.drained = make(chan struct{})
		drained = g.drained
	}
	g.mu.Unlock()
	if drained == nil {
		return nil
	}
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("requests in flight did not end: %w", ctx.Err())
	}
}

// open admits requests again: to next when the job was rescaled (nil:
// to the job itself).
func (g *ingestGate) open(next *Job) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.next = next
	if g.held != nil {
		close(g.held)
		g.held = nil
	}
	g.drained = nil
}

// latest is the job's newest successor (itself when never rescaled).
func (j *Job) latest() *Job {
	for {
		j.ingest.mu.Lock()
		next := j.ingest.next
		j.ingest.mu.Unlock()
		if next == nil {
			return j
		}
		j = next
	}
}

// parking holds a job's partitions at a group boundary.
type parking struct {
	release chan struct{}
	retire  bool // set before release is closed: the goroutines end
}

// park has every partition process what is queued, merge (Idle), end its
// group and wait: the operators are then still, and their state can be
// read from another goroutine. It returns once all are parked, or ctx
// ended; either way unpark must follow.
func (j *Job) park(ctx context.Context) (*parking, error) {
	pk := &parking{release: make(chan struct{})}
	parked := make(chan struct{}, len(j.parts))
	for _, p := range j.parts {
		b := &batch{enqueued: time.Now(), run: func() {
			p.op.idle(false)
			p.group.idle(time.Now())
			parked <- struct{}{}
			<-pk.release
			if pk.retire {
				p.retired.Store(true)
			}
		}}
		if err := p.q.pushBatch(b); err != nil {
			return pk, fmt.Errorf("partition %d: %w", p.index, err)
		}
	}
	for range j.parts {
		select {
		case <-parked:
		case <-ctx.Done():
			return pk, fmt.Errorf("the partitions did not drain their queues in time: %w", ctx.Err())
		}
	}
	return pk, nil
}

// unpark lets the partitions go on, or end with retire.
func (pk *parking) unpark(retire bool) {
	pk.retire = retire
	close(pk.release)
}

// rescaleHook, set by tests, is called at the points of a rescale where
// a crash must leave one layout or the other: a test "crashes" there.
var rescaleHook atomic.Pointer[func(job, point string)]

// Crash points of a rescale (rescaleHook).
const (
	pointParked    = "parked"    // old partitions still, nothing written
	pointBackedUp  = "backed-up" // new layout backed up, not yet the job's
	pointCommitted = "committed" // the layout pointer names the new layout
	pointStarted   = "started"   // new partitions run, ingest resumed
)

func atRescalePoint(job, point string) {
	if h := rescaleHook.Load(); h != nil {
		(*h)(job, point)
	}
}

// Rescale changes the job's partition count to partitions, waiting at
// most Config.RescaleTimeout for its queues to drain. reason says who
// asked ("api", or the autoscaler's reason). Errors: ErrUnknownJob,
// *SpecError (field partitions) for a count out of [1, MaxPartitions],
// ErrRescaleClustered, ErrRescalePaused, ErrNotSupported (the kind cannot
// move its state), *BudgetError, ErrClosed, ErrRescaleFailed (nothing
// changed). A rescale to the current count changes nothing.
func (e *Engine) Rescale(ctx context.Context, name string, partitions int, reason string) (RescaleReport, error) {
	return e.rescale(ctx, name, partitions, reason, nil, nil)
}

// rescale is Rescale of the job of lineage lin (nil: whichever has the
// name), which the autoscaler's decision d (nil: none) asked for.
func (e *Engine) rescale(ctx context.Context, name string, partitions int, reason string, lin *lineage, d *AutoscaleDecision) (RescaleReport, error) {
	if e.cfg.Cluster != nil {
		return RescaleReport{}, fmt.Errorf("%w: job %q runs in cluster mode, where its partitions move between nodes", ErrRescaleClustered, name)
	}
	if err := e.checkPartitions(partitions); err != nil {
		return RescaleReport{}, err
	}
	j, err := e.lockLineage(name)
	if err != nil {
		return RescaleReport{}, err
	}
	defer j.rescaleMu.Unlock()
	if lin != nil && j.lineage != lin {
		return RescaleReport{}, ErrUnknownJob // deleted, and another job took the name
	}
	from := len(j.parts)
	if from == partitions {
		return RescaleReport{From: from, To: from, At: time.Now(), Reason: reason}, nil
	}
	if err := j.rescalable(partitions); err != nil {
		return RescaleReport{}, err
	}
	spec := j.spec
	spec.Partitions = partitions
	rs := &rescale{e: e, old: j, spec: spec, reason: reason, decision: d}
	if rs.mem, err = estimateMemory(spec, j.ft != nil); err != nil {
		return RescaleReport{}, err
	}
	if err := e.admitRescale(j, rs.mem); err != nil {
		return RescaleReport{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.RescaleTimeout)
	defer cancel()
	e.log.Info("rescaling job: ingest held", "job", name, "from", from, "to", partitions, "reason", reason)
	rep, err := rs.run(ctx)
	if err != nil {
		e.unadmitRescale(j, rs.mem)
		e.log.Warn("rescale failed: the job goes on with its partitions", "job", name, "from", from, "to", partitions, "err", err)
		var se *SpecError
		if errors.As(err, &se) {
			// The kind refuses its params with this count (a join's
			// max_state too small for its partitions, say).
			return RescaleReport{}, fmt.Errorf("with %d partitions: %w", partitions, err)
		}
		return RescaleReport{}, fmt.Errorf("%w: job %q stays at %d partitions: %v", ErrRescaleFailed, name, from, err)
	}
	return rep, nil
}

// rescalable refuses a rescale of j to partitions that its spec, its kind
// or its state forbids.
func (j *Job) rescalable(partitions int) error {
	if a := j.spec.Autoscale; a != nil && (partitions < a.Min || partitions > a.Max) {
		return &SpecError{"partitions", fmt.Sprintf("must be within the job's autoscale [min, max] = [%d, %d], got %d", a.Min, a.Max, partitions)}
	}
	if _, ok := j.kind.instance().(Rescaling); !ok {
		return fmt.Errorf("%w: job %q is of kind %q, which cannot move its state to another partition count", ErrNotSupported, j.spec.Name, j.spec.Kind)
	}
	if j.gate.paused() {
		return fmt.Errorf("%w: job %q", ErrRescalePaused, j.spec.Name)
	}
	return nil
}

// checkPartitions refuses a partition count a rescale may not give.
func (e *Engine) checkPartitions(n int) error {
	if n < 1 || n > e.cfg.MaxPartitions {
		return &SpecError{"partitions", fmt.Sprintf("must be in [1, %d] (--max-partitions), got %d", e.cfg.MaxPartitions, n)}
	}
	return nil
}

// lockLineage returns the named job with its lineage's rescale lock
// held: the job cannot be rescaled, deleted or stopped meanwhile.
func (e *Engine) lockLineage(name string) (*Job, error) {
	for {
		j, err := e.Job(name)
		if err != nil {
			return nil, err
		}
		j.rescaleMu.Lock()
		cur, err := e.Job(name)
		if err == nil && cur.lineage == j.lineage {
			return cur, nil
		}
		j.rescaleMu.Unlock()
		if err != nil {
			return nil, err
		}
	}
}

// admitRescale counts the new layout's memory estimate instead of the
// old one's, if the budget allows.
func (e *Engine) admitRescale(j *Job, mem MemoryEstimate) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.closed {
		return ErrClosed
	}
	delta := mem.Total() - j.mem.Total()
	if e.cfg.MaxMemory > 0 && delta > 0 && delta > e.cfg.MaxMemory-e.mu.inUse {
		e.log.Warn("rescale refused: memory budget", "job", j.spec.Name, "estimate_bytes", mem.Total(), "budget_bytes", e.cfg.MaxMemory)
		return &BudgetError{Job: j.spec.Name, Estimate: mem, Budget: e.cfg.MaxMemory, InUse: e.mu.inUse - j.mem.Total()}
	}
	e.mu.inUse += delta
	return nil
}

func (e *Engine) unadmitRescale(j *Job, mem MemoryEstimate) {
	e.mu.Lock()
	e.mu.inUse -= mem.Total() - j.mem.Total()
	e.mu.Unlock()
}

// rescale is one rescale of a job, old, to spec.
type rescale struct {
	e        *Engine
	old      *Job
	spec     Spec
	mem      MemoryEstimate
	reason   string
	decision *AutoscaleDecision
	rep      RescaleReport
}

// run holds ingest, parks the old partitions, builds the new job, makes
// its layout the job's and swaps it in. Until the layout is committed,
// any failure lets the old job go on untouched.
func (rs *rescale) run(ctx context.Context) (RescaleReport, error) {
	old, name := rs.old, rs.spec.Name
	start := time.Now()
	rs.rep = RescaleReport{From: len(old.parts), To: rs.spec.Partitions, At: start, Reason: rs.reason, Decision: rs.decision}
	if err := old.ingest.hold(ctx); err != nil {
		old.ingest.open(nil)
		return RescaleReport{}, err
	}
	pk, err := old.park(ctx)
	if err != nil {
		pk.unpark(false)
		old.ingest.open(nil)
		return RescaleReport{}, err
	}
	drained := time.Now()
	rs.rep.DrainMs = ms(drained.Sub(start))
	atRescalePoint(name, pointParked)
	nj, err := rs.build()
	if err == nil {
		atRescalePoint(name, pointBackedUp)
		err = rs.commit(nj)
	}
	if err != nil {
		if nj != nil {
			nj.discard()
		}
		pk.unpark(false)
		old.ingest.open(nil)
		return RescaleReport{}, err
	}
	atRescalePoint(name, pointCommitted)
	rs.swap(nj, pk)
	rs.rep.PauseMs = ms(time.Since(start))
	atRescalePoint(name, pointStarted)
	rs.finish(nj)
	return rs.rep, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// build makes the new job, moves the state into it and, with fault
// tolerance, backs the new layout up in full (not yet the job's).
func (rs *rescale) build() (*Job, error) {
	old, e := rs.old, rs.e
	slot := old.slot
	if old.ft != nil {
		slot = 1 - old.slot
	}
	nj, err := e.successorOf(old, rs.spec, rs.mem, slot)
	if err != nil {
		return nil, err
	}
	rs.rep.Processed = nj.processedBase
	if nj.ft != nil {
		go nj.ft.writeLoop()
	}
	moving := time.Now()
	if err := old.kind.instance().(Rescaling).RescaleInto(nj.kind.instance()); err != nil {
		return nj, fmt.Errorf("moving the state: %w", err)
	}
	seq := rs.firstSeq(nj)
	for _, p := range nj.parts {
		p.q.setNextSeq(seq)
	}
	base := slices.Repeat([]uint64{seq - 1}, len(nj.parts))
	rs.rep.MoveMs = ms(time.Since(moving))
	if nj.ft == nil {
		if ftk, ok := nj.kind.instance().(FaultTolerant); ok {
			unitsRecovered(newFTAdapter(ftk).units(), base)
		}
		return nj, nil
	}
	backing := time.Now()
	err = nj.ft.startEpoch(old.ft, base)
	rs.rep.BackupMs = ms(time.Since(backing))
	return nj, err
}

// successorOf makes, not started, old's successor of spec: its lineage,
// counts and limits go on, its memory estimate is mem, its place in the
// storage slot.
func (e *Engine) successorOf(old *Job, spec Spec, mem MemoryEstimate, slot int) (*Job, error) {
	nj, err := newJobIn(spec, e.hub, &e.cfg, slot, old.lineage)
	if err != nil {
		return nil, err
	}
	nj.mem, nj.incarnation, nj.maxPartitions = mem, old.incarnation, old.maxPartitions
	nj.processedBase = old.processed()
	return nj, nil
}

// firstSeq is the sequence number the new partitions start from: above
// every one the old partitions handed out, and above whatever an earlier
// layout left in the new one's place in the storage, so that nothing
// there is ever replayed into it.
func (rs *rescale) firstSeq(nj *Job) uint64 {
	var last uint64
	for _, p := range rs.old.parts {
		last = max(last, p.q.lastSeq())
	}
	if nj.ft != nil {
		for _, p := range nj.ft.parts {
			m, _ := p.mark.Read() // a damaged one reads as 0, and is rewritten
			last = max(last, m, p.log.LastSeq())
		}
	}
	return last + 1
}

// startEpoch starts the fault tolerance of a rescaled job, whose state
// holds every event up to base (per partition): the thresholds of the
// job before (prev) with its failure count, the partitions' marks at
// base, and a full backup of every unit, durable before it returns.
func (f *jobFT) startEpoch(prev *jobFT, base []uint64) error {
	for i, p := range f.parts {
		if err := p.mark.Write(base[i]); err != nil {
			return fmt.Errorf("sequence mark of partition %d: %w", i, err)
		}
	}
	prev.mu.Lock()
	failures := prev.partCtl.Failures()
	prev.mu.Unlock()
	f.resetThresholds(len(f.parts), failures, &RecoveryReport{})
	f.history = prev.history
	f.recovery.Store(prev.recovery.Load())
	f.recovered(base)
	f.reqs.recovered(base, nil)
	for _, u := range f.units {
		stored := make(chan struct{})
		u.backupThen(true, true, u.op.StateDivergence(), stored)
		<-stored
		if u.failed.Load() || f.errors.Load() > 0 {
			return fmt.Errorf("the full backup of the new layout (%s) failed", u.key)
		}
	}
	return nil
}

// unitsRecovered tells every unit which events it holds, from
// per-partition sequence numbers.
func unitsRecovered(units []stateful, seqs []uint64) {
	for _, u := range units {
		ps := u.partitions()
		mine := make([]uint64, len(ps))
		for i, p := range ps {
			mine[i] = seqs[p]
		}
		u.recovered(mine)
	}
}

// layoutFile is the job's metadata file (ft.JobStorage.WriteMeta) that
// says where its current layout is: absent, slot 0 with the spec's
// partitions.
const layoutFile = "layout.json"

// layout is the content of layoutFile.
type layout struct {
	Version    int    `json:"version"`
	Slot       int    `json:"slot"`
	Partitions int    `json:"partitions"`
	Generation uint64 `json:"generation"`
}

// slotBase is where slot 1 keeps its partitions in the job's storage:
// partition i's item log, mark and backups under slotBase+i, a global
// unit's under slotBase-1. Slot 0 is where a job that never rescaled
// keeps them (0.., ft.GlobalPartition), so older data reads as slot 0.
const slotBase = 1 << 16

// slotUnit is the storage index of partition p (-1: the global unit) in
// slot.
func slotUnit(slot, p int) int {
	if slot == 0 {
		return p
	}
	return slotBase + p
}

// commit makes the new layout the job's: the one atomic write of a
// rescale. Without fault tolerance there is nothing to write.
func (rs *rescale) commit(nj *Job) error {
	gen := rs.nextGeneration()
	rs.rep.Generation = gen
	if nj.ft == nil {
		return nil
	}
	data, _ := json.Marshal(layout{Version: 1, Slot: nj.slot, Partitions: len(nj.parts), Generation: gen})
	if err := nj.ft.storage.WriteMeta(layoutFile, data, true); err != nil {
		return fmt.Errorf("writing the layout: %w", err)
	}
	return nil
}

func (rs *rescale) nextGeneration() uint64 {
	es := &rs.old.elastic
	es.mu.Lock()
	defer es.mu.Unlock()
	return es.generation + 1
}

// swap starts the new partitions, routes the job's name and streams to
// the new job, lets the held requests through to it and ends the old
// partitions.
func (rs *rescale) swap(nj *Job, pk *parking) {
	old, e := rs.old, rs.e
	nj.startPartitions()
	e.route(old, nj)
	old.ingest.open(nj)
	pk.unpark(true)
	old.retire()
	rs.old.elastic.mu.Lock()
	rs.old.elastic.generation = rs.rep.Generation
	rs.old.elastic.mu.Unlock()
}

// finish records the rescale: the job's record (Config.Jobs), the
// history, the rescale message and the log.
func (rs *rescale) finish(nj *Job) {
	e := rs.e
	if e.hasRecord(nj) {
		// Best effort: with fault tolerance the layout file decides at the
		// next start, and the record is corrected then.
		_ = e.record(nj.spec, nj.incarnation)
	}
	nj.elastic.record(rs.rep)
	e.announceRescale(rs.spec.Name, rs.rep)
}

// announceRescale sends the rescale message and logs it.
func (e *Engine) announceRescale(name string, rep RescaleReport) {
	if msg, err := json.Marshal(RescaleMessage{Envelope{TypeRescale, name, rep.At.UnixMilli()}, rep}); err == nil {
		e.hub.Publish(name, TypeRescale, msg)
	}
	e.log.Info("job rescaled", "job", name, "from", rep.From, "to", rep.To, "reason", rep.Reason,
		"pause_ms", rep.PauseMs, "drain_ms", rep.DrainMs, "backup_ms", rep.BackupMs, "generation", rep.Generation)
}

// hasRecord says whether the job is in Config.Jobs: created at run time
// (the config file's jobs are of fileIncarnation).
func (e *Engine) hasRecord(j *Job) bool {
	return e.cfg.Jobs != nil && j.incarnation != "" && j.incarnation != fileIncarnation
}

// startPartitions starts the partition goroutines.
func (j *Job) startPartitions() {
	for _, p := range j.parts {
		j.wg.Add(1)
		go func() {
			defer j.wg.Done()
			p.run()
		}()
	}
}

// retire ends a rescaled job whose partitions were released to end: its
// state lives on in its successor. Its fault tolerance writes what it
// queued and closes its files, without the clean marker (the job goes
// on).
func (j *Job) retire() {
	j.wg.Wait()
	for _, p := range j.parts {
		p.q.close()
	}
	if f := j.ft; f != nil {
		close(f.backups)
		<-f.backupDone
		for _, p := range f.parts {
			_ = p.log.Commit()
		}
		f.closeFiles()
	}
}

// discard drops a job built for a rescale that failed: its partitions
// never started.
func (j *Job) discard() {
	for _, p := range j.parts {
		p.q.close()
	}
	if f := j.ft; f != nil {
		close(f.backups)
		<-f.backupDone
		f.closeFiles()
	}
}

// readLayout reads the job's layout file: nil when there is none.
func (e *Engine) readLayout(name string) (*layout, error) {
	js, err := e.cfg.Storage.Job(name)
	if err != nil {
		return nil, err
	}
	data, _, err := js.ReadMeta(layoutFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the job's layout (which of its rescaled layouts is current): %w", err)
	}
	var l layout
	if err := json.Unmarshal(data, &l); err != nil || l.Slot < 0 || l.Slot > 1 || l.Partitions < 1 || l.Partitions > MaxPartitions {
		return nil, fmt.Errorf("the job's layout file does not parse or is out of range: %q", data)
	}
	return &l, nil
}

// adoptLayout gives a job with fault tolerance the partition count and
// slot of its data's layout, which a rescale may have changed since its
// spec was written (in the config file or its record): the data decides.
func (e *Engine) adoptLayout(r *reservation) (slot int, gen uint64, err error) {
	l, err := e.readLayout(r.spec.Name)
	if err != nil || l == nil {
		return 0, 0, err
	}
	if l.Partitions != r.spec.Partitions {
		e.log.Info("the job was rescaled: its data's partition count replaces its spec's", "job", r.spec.Name,
			"spec_partitions", r.spec.Partitions, "partitions", l.Partitions, "generation", l.Generation)
		r.spec.Partitions = l.Partitions
		withFT := true
		mem, err := estimateMemory(r.spec, withFT)
		if err != nil {
			return 0, 0, err
		}
		e.mu.Lock()
		e.mu.inUse += mem.Total() - r.mem.Total()
		e.mu.Unlock()
		r.mem = mem
	}
	return l.Slot, l.Generation, nil
}

// onlyPartitionsDiffer says whether spec is the running job's spec but
// for its partition count: a PUT of it rescales the job.
func onlyPartitionsDiffer(running, spec Spec) bool {
	if running.Partitions == spec.Partitions {
		return false
	}
	spec.Partitions = running.Partitions
	return sameSpec(running, spec)
}
