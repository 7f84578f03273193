package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	goruntime "runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/ft"
	"github.com/prometheus/client_golang/prometheus"
)

// Config configures an Engine. Zero fields take the defaults below.
type Config struct {
	// Partitions is the default partition count of a job (default: the
	// number of CPUs, at most MaxPartitions).
	Partitions int
	// QueueSize is the default capacity of a partition queue, in events
	// (default 65536, at most MaxQueueSize).
	QueueSize int
	// IngestWait is how long a request waits for room in full queues
	// before it is refused with ErrBusy (default 200ms).
	IngestWait time.Duration
	// Registry receives the engine's Prometheus metrics (default: none).
	Registry prometheus.Registerer
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Storage keeps everything of the jobs' fault tolerance: backups, item
	// logs, sequence marks, markers (ft.Dir is a local directory). Without
	// it no job has fault tolerance (as if its mode were none).
	Storage ft.Storage
	// Store and DataDir are the older way to say Storage: when Storage is
	// nil and Store is not, Storage is ft.NewDir(DataDir, Store).
	Store   ft.Store
	DataDir string
	// MaxMemory is the memory budget of the jobs, in bytes: a job whose
	// estimate (budget.go), added to the running jobs' estimates, would
	// pass it is refused with a *BudgetError. 0 means half the machine's
	// memory or of the cgroup's limit; negative means no budget.
	MaxMemory int64
	// MaxJobs is the most jobs the engine runs at once (default 64;
	// negative: no limit); past it PutJob answers ErrTooManyJobs.
	MaxJobs int
	// Jobs records the jobs created at run time, so that Start restores
	// them after a restart (nil: they last until the process ends).
	Jobs JobStore
	// MaxPartitions is the most partitions a rescale (PATCH, or the
	// autoscaler) may give a job (default and at most MaxPartitions).
	MaxPartitions int
	// RescaleTimeout bounds how long a rescale waits for the job's queued
	// events to be processed before it gives up (default 30s).
	RescaleTimeout time.Duration
	// AutoscaleInterval is the time between two decisions of a job's
	// autoscaler (default 10s); negative: none but Engine.AutoscaleTick's.
	AutoscaleInterval time.Duration
	// Cluster, when set, runs the engine as one node of a cluster
	// (cluster.go): requests are published to the cluster's log and
	// partitions get their events from it. Storage is then unused: fault
	// tolerance is the cluster's.
	Cluster Cluster
}

func (c *Config) ensureDefaults() {
	if c.Partitions <= 0 {
		c.Partitions = goruntime.NumCPU()
	}
	c.Partitions = min(c.Partitions, MaxPartitions)
	if c.QueueSize <= 0 {
		c.QueueSize = 65536
	}
	c.QueueSize = min(c.QueueSize, MaxQueueSize)
	if c.IngestWait <= 0 {
		c.IngestWait = 200 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxMemory == 0 {
		c.MaxMemory = defaultMaxMemory()
	}
	if c.MaxJobs == 0 {
		c.MaxJobs = 64
	}
	if c.MaxPartitions <= 0 || c.MaxPartitions > MaxPartitions {
		c.MaxPartitions = MaxPartitions
	}
	if c.RescaleTimeout <= 0 {
		c.RescaleTimeout = 30 * time.Second
	}
	if c.AutoscaleInterval == 0 {
		c.AutoscaleInterval = 10 * time.Second
	}
	if c.Storage == nil && c.Store != nil {
		c.Storage = ft.NewDir(c.DataDir, c.Store)
	}
	if c.Cluster != nil {
		c.Storage = nil
	}
}

// Errors of the engine, matched with errors.Is by the api package.
var (
	ErrUnknownStream = errors.New("runtime: no job reads this stream")
	ErrUnknownJob    = errors.New("runtime: no such job")
	ErrJobExists     = errors.New("runtime: a job with this name and a different spec exists")
	ErrBusy          = errors.New("runtime: queues are full")
	ErrTooLarge      = errors.New("runtime: batch larger than a partition queue")
	ErrClosed        = errors.New("runtime: engine is shutting down")
	ErrDurability    = errors.New("runtime: could not make events durable")
)

// Engine runs jobs and routes streams to them. Safe for concurrent use.
// Lifecycle: NewEngine → PutJob/Ingest… → Close (drains every queue).
type Engine struct {
	cfg     Config
	hub     *Hub
	metrics *metrics
	log     *slog.Logger

	mu struct {
		sync.RWMutex
		jobs    map[string]*Job
		streams map[string][]*Job // readers of each stream, guarded by mu
		// deleting holds the names DeleteJob is removing: not free until
		// their data is gone.
		deleting map[string]bool
		// creating holds the names PutJob has reserved and is recovering
		// outside the lock: not free, and not yet running.
		creating map[string]*reservation
		inUse    int64 // the running jobs' memory estimates
		closed   bool
	}
	stopSampler chan struct{}
	samplerDone chan struct{}
	closeOnce   sync.Once
	// creations counts the PutJobs between reserve and publish, for Close.
	creations sync.WaitGroup
}

// NewEngine returns a running engine with no jobs.
func NewEngine(cfg Config) *Engine {
	cfg.ensureDefaults()
	e := &Engine{cfg: cfg, hub: NewHub(), log: cfg.Logger, stopSampler: make(chan struct{}), samplerDone: make(chan struct{})}
	e.mu.jobs = map[string]*Job{}
	e.mu.streams = map[string][]*Job{}
	e.mu.deleting = map[string]bool{}
	e.mu.creating = map[string]*reservation{}
	e.metrics = newMetrics(e, cfg.Registry)
	e.log.Info("job limits", "max_memory_bytes", cfg.MaxMemory, "max_jobs", cfg.MaxJobs, "max_partitions", MaxPartitions,
		"max_queue_size", MaxQueueSize, "job_records", cfg.Jobs != nil)
	go e.sampleLoop()
	return e
}

// Hub is where partitions publish their outputs.
func (e *Engine) Hub() *Hub { return e.hub }

// sampleLoop takes one sample of every job's counters per second, for rates
// and recent latency percentiles.
func (e *Engine) sampleLoop() {
	defer close(e.samplerDone)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	e.sampleAll(time.Now())
	for {
		select {
		case <-e.stopSampler:
			return
		case now := <-t.C:
			e.sampleAll(now)
		}
	}
}

func (e *Engine) sampleAll(now time.Time) {
	for _, j := range e.Jobs() {
		j.sample(now)
		if a, ok := j.kind.instance().(Announcing); ok {
			a.Announce(Emitter{hub: e.hub, job: j.spec.Name}, now)
		}
	}
}

// PutJob validates spec and starts the job. It reports created=false when
// an identical job already runs, and ErrJobExists when the name is taken
// by a different spec. Invalid specs give a *SpecError, a spec past the
// memory budget a *BudgetError, one job too many ErrTooManyJobs. With
// Config.Jobs the job is recorded, and Start restores it after a restart.
func (e *Engine) PutJob(spec Spec) (created bool, err error) {
	return e.putJob(spec, "", true)
}

// putJob starts a job of the given incarnation ("" for a new one) and,
// if record, records it in Config.Jobs. The spec is checked and its
// memory estimated before the lock, and before anything is allocated.
// It works in three steps, so that the engine's lock is never held
// while a job recovers (which may replay 100,000 events): reserve the
// name under the lock, create the job (claim its data, recover, start
// its partitions, record it) outside it, and publish its streams under
// it again.
// checkMode refuses what a spec asks of the engine's mode (single-node or
// cluster) that the mode cannot do.
func (e *Engine) checkMode(spec Spec) error {
	clustered := e.cfg.Cluster != nil
	switch {
	case spec.Source != nil && !clustered:
		return &SpecError{"source", "a NATS source needs cluster mode (serve with --cluster or --nats)"}
	case spec.Autoscale != nil && clustered:
		if _, ok := e.cfg.Cluster.(ClusterAutoscaling); !ok {
			return &SpecError{"autoscale", "this cluster cannot rescale its jobs"}
		}
		if spec.FT.Mode == ft.ModeNone {
			return &SpecError{"autoscale", "in cluster mode the autoscaler rescales the job, which moves its backed-up state: set ft.mode approx or exact"}
		}
	}
	return nil
}

func (e *Engine) putJob(spec Spec, incarnation string, record bool) (created bool, err error) {
	if err := spec.validate(e.cfg.Partitions, e.cfg.QueueSize); err != nil {
		return false, err
	}
	if err := e.checkMode(spec); err != nil {
		return false, err
	}
	if j, err := e.Job(spec.Name); err == nil && onlyPartitionsDiffer(j.spec, spec) {
		// A new partition count for a running job: rescale it.
		_, err := e.Rescale(context.Background(), spec.Name, spec.Partitions, "api")
		return false, err
	}
	withFT := e.cfg.Storage != nil && spec.FT.Mode != ft.ModeNone
	mem, err := estimateMemory(spec, withFT)
	if err != nil {
		return false, err
	}
	r, running, err := e.reserve(spec, mem)
	if running || err != nil {
		return false, err
	}
	defer e.creations.Done()
	if incarnation == "" {
		incarnation = e.newIncarnation()
	}
	j, err := e.create(r, incarnation, record, withFT)
	if err := e.publish(r, j, err); err != nil {
		return false, err
	}
	e.startAutoscaler(j)
	e.log.Info("job started", "job", spec.Name, "kind", spec.Kind, "streams", spec.Streams(), "partitions", spec.Partitions,
		"memory_estimate_bytes", mem.Total(), "incarnation", incarnation)
	return true, nil
}

// reservation is a name PutJob holds while it creates the job.
type reservation struct {
	spec Spec
	mem  MemoryEstimate
	// deleted is set, under the engine's lock, by a DeleteJob that came
	// while the job was being created: publish removes the job instead.
	// abort tells the recovery the same, so that it stops replaying.
	deleted bool
	abort   atomic.Bool
	// done is closed when the creation is over; err is then the outcome
	// of the removal a DeleteJob asked for.
	done chan struct{}
	err  error
}

// reserve takes spec's name and counts the job against the limits, under
// the lock. running says the same spec runs already (nothing reserved).
func (e *Engine) reserve(spec Spec, mem MemoryEstimate) (r *reservation, running bool, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if running, err := e.nameFree(spec); running || err != nil {
		return nil, running, err
	}
	if err := e.admit(spec.Name, mem); err != nil {
		return nil, false, err
	}
	r = &reservation{spec: spec, mem: mem, done: make(chan struct{})}
	e.mu.creating[spec.Name] = r
	e.mu.inUse += mem.Total()
	e.creations.Add(1)
	return r, false, nil
}

// create makes the job's data its incarnation's and launches the job of
// reservation r; outside the lock.
func (e *Engine) create(r *reservation, incarnation string, record, withFT bool) (*Job, error) {
	slot, gen := 0, uint64(0)
	var claimed ft.Claimed
	if withFT {
		var err error
		if claimed, err = e.claimData(r.spec.Name, incarnation); err != nil {
			return nil, fmt.Errorf("job %q: %w", r.spec.Name, err)
		}
		if slot, gen, err = e.adoptLayout(r); err != nil {
			return nil, fmt.Errorf("job %q: %w", r.spec.Name, err)
		}
	}
	j, err := e.launch(r.spec, r.mem, incarnation, claimed, record, &r.abort, slot)
	if err != nil {
		return nil, err
	}
	j.elastic.generation = gen
	if !record && gen > 0 && e.hasRecord(j) {
		// Restored from a record written before its last rescale.
		_ = e.record(j.spec, incarnation)
	}
	return j, nil
}

// publish ends the reservation r: the job j (or the error that created
// none) becomes visible and its streams are routed to it, unless a
// DeleteJob came meanwhile (the job is removed, and ErrJobExists says
// why) or the engine is closing (it is stopped: ErrClosed).
func (e *Engine) publish(r *reservation, j *Job, err error) error {
	name := r.spec.Name
	defer close(r.done)
	e.mu.Lock()
	delete(e.mu.creating, name)
	if err != nil || r.deleted || e.mu.closed {
		e.mu.inUse -= r.mem.Total()
	}
	switch {
	case r.deleted:
		e.mu.deleting[name] = true
		e.mu.Unlock()
		r.err = e.remove(name, j)
		return fmt.Errorf("%w: %q was deleted while it was being created", ErrJobExists, name)
	case err != nil:
		e.mu.Unlock()
		return err
	case e.mu.closed:
		e.mu.Unlock()
		j.stop()
		return ErrClosed
	}
	e.mu.jobs[name] = j
	for _, st := range r.spec.Streams() {
		e.mu.streams[st] = append(e.mu.streams[st], j)
	}
	e.mu.Unlock()
	return nil
}

// nameFree says whether spec's name can take a new job: running when the
// same spec runs already, an error when the engine is closing or the name
// is another job's, being created or being deleted. Called with mu held.
func (e *Engine) nameFree(spec Spec) (running bool, err error) {
	if e.mu.closed {
		return false, ErrClosed
	}
	if old, ok := e.mu.jobs[spec.Name]; ok {
		if sameSpec(old.spec, spec) {
			return true, nil
		}
		return false, fmt.Errorf("%w: %q runs with %s; delete it first", ErrJobExists, spec.Name, conflictMsg(old.spec, spec))
	}
	if e.mu.creating[spec.Name] != nil {
		return false, fmt.Errorf("%w: %q is being created (recovering its data); try again", ErrJobExists, spec.Name)
	}
	if e.mu.deleting[spec.Name] {
		return false, fmt.Errorf("%w: %q is being deleted; try again", ErrJobExists, spec.Name)
	}
	return false, nil
}

// launch makes the job, recovers and starts it, and records it. abort
// (may be nil), once set, makes the recovery give up.
func (e *Engine) launch(spec Spec, mem MemoryEstimate, incarnation string, claimed ft.Claimed, record bool, abort *atomic.Bool, slot int) (*Job, error) {
	j, err := newJobIn(spec, e.hub, &e.cfg, slot, &lineage{created: time.Now()})
	if err != nil {
		return nil, err
	}
	j.mem, j.incarnation, j.claimed, j.maxPartitions = mem, incarnation, claimed, e.cfg.MaxPartitions
	if j.ft != nil {
		j.ft.abort = abort
	}
	if e.cfg.Cluster != nil {
		if err := e.cfg.Cluster.Attach(j); err != nil {
			return nil, fmt.Errorf("job %q: %w", spec.Name, err)
		}
	}
	if err := j.start(e.hub); err != nil {
		return nil, fmt.Errorf("job %q: %w", spec.Name, err)
	}
	if record {
		if err := e.record(j.spec, incarnation); err != nil {
			j.stop()
			return nil, err
		}
	}
	j.sample(time.Now())
	return j, nil
}

// admit checks the job limits for one more job of the given estimate.
// Called with mu held.
func (e *Engine) admit(name string, mem MemoryEstimate) error {
	if e.cfg.MaxJobs > 0 && len(e.mu.jobs)+len(e.mu.creating) >= e.cfg.MaxJobs {
		e.log.Warn("job refused: too many jobs", "job", name, "max_jobs", e.cfg.MaxJobs)
		return fmt.Errorf("%w (%d; --max-jobs): delete one first", ErrTooManyJobs, e.cfg.MaxJobs)
	}
	if e.cfg.MaxMemory > 0 && mem.Total() > e.cfg.MaxMemory-e.mu.inUse {
		err := &BudgetError{Job: name, Estimate: mem, Budget: e.cfg.MaxMemory, InUse: e.mu.inUse}
		e.log.Warn("job refused: memory budget", "job", name, "estimate_bytes", mem.Total(), "budget_bytes", e.cfg.MaxMemory,
			"in_use_bytes", e.mu.inUse, "field", mem.Field)
		return err
	}
	return nil
}

// MemoryInUse is the sum of the running jobs' memory estimates, and the
// budget (Config.MaxMemory; not positive: none).
func (e *Engine) MemoryInUse() (inUse, budget int64) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.mu.inUse, e.cfg.MaxMemory
}

// sameSpec compares specs as their JSON would: params decoded from JSON
// hold json.Number, from Go code float64 or int.
func sameSpec(a, b Spec) bool {
	pa, pb := a.Params, b.Params
	a.Params, b.Params = nil, nil
	if !reflect.DeepEqual(a, b) || len(pa) != len(pb) {
		return false
	}
	for k, va := range pa {
		vb, ok := pb[k]
		if !ok {
			return false
		}
		na, oka := number(va)
		nb, okb := number(vb)
		if oka && okb {
			if na != nb {
				return false
			}
			continue
		}
		if !reflect.DeepEqual(va, vb) {
			return false
		}
	}
	return true
}

// DeleteJob stops a job after processing what it has queued, and removes
// it, its record (Config.Jobs) and its data. The name is free again when
// it returns. A job still being created (recovering) is removed as soon
// as its creation ends, and its PutJob fails.
func (e *Engine) DeleteJob(name string) error {
	if j, err := e.lockLineage(name); err == nil {
		// Not in the middle of a rescale.
		defer j.rescaleMu.Unlock()
	}
	e.mu.Lock()
	if r := e.mu.creating[name]; r != nil {
		r.deleted = true
		r.abort.Store(true)
		e.mu.Unlock()
		<-r.done
		return r.err
	}
	j, ok := e.mu.jobs[name]
	if !ok {
		e.mu.Unlock()
		return ErrUnknownJob
	}
	delete(e.mu.jobs, name)
	e.mu.inUse -= j.mem.Total()
	e.mu.deleting[name] = true
	e.unroute(j)
	e.mu.Unlock()
	return e.remove(name, j)
}

// unroute takes j off the streams it reads; mu held.
func (e *Engine) unroute(j *Job) {
	for _, st := range j.spec.Streams() {
		readers := e.mu.streams[st]
		kept := readers[:0:0]
		for _, r := range readers {
			if r != j {
				kept = append(kept, r)
			}
		}
		if len(kept) == 0 {
			delete(e.mu.streams, st)
			e.metrics.forgetStream(st)
		} else {
			e.mu.streams[st] = kept
		}
	}
}

// remove stops j (nil: its creation failed), removes its record and its
// data, and frees the name, which the caller put in deleting.
func (e *Engine) remove(name string, j *Job) error {
	defer func() {
		e.mu.Lock()
		delete(e.mu.deleting, name)
		e.mu.Unlock()
	}()
	var processed uint64
	if j != nil {
		e.stopJob(j)
		processed = j.processed()
	}
	// The record goes first: a crash before the data is gone leaves data
	// that no record claims, which the name's next incarnation removes.
	var err error
	if e.cfg.Jobs != nil {
		if err = e.cfg.Jobs.Delete(name); err != nil {
			e.log.Error("removing the job's record: it will be restored at the next start", "job", name, "err", err)
			err = fmt.Errorf("%w: %v", ErrJobRecord, err)
		}
	}
	if j == nil || j.ft != nil {
		// Deleted means gone: its backups and logs too.
		e.removeData(name)
	}
	e.log.Info("job deleted", "job", name, "processed", processed)
	return err
}

// Job returns the named job.
func (e *Engine) Job(name string) (*Job, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	j, ok := e.mu.jobs[name]
	if !ok {
		return nil, ErrUnknownJob
	}
	return j, nil
}

// Jobs returns all jobs, sorted by name.
func (e *Engine) Jobs() []*Job {
	e.mu.RLock()
	out := make([]*Job, 0, len(e.mu.jobs))
	for _, j := range e.mu.jobs {
		out = append(out, j)
	}
	e.mu.RUnlock()
	sort.Slice(out, func(a, b int) bool { return out[a].spec.Name < out[b].spec.Name })
	return out
}

// Streams returns the names of the streams some job reads, sorted.
func (e *Engine) Streams() []string {
	e.mu.RLock()
	out := make([]string, 0, len(e.mu.streams))
	for s := range e.mu.streams {
		out = append(out, s)
	}
	e.mu.RUnlock()
	sort.Strings(out)
	return out
}

// Close refuses new events, then waits until every queued event has been
// processed (or ctx ends). Safe to call twice.
func (e *Engine) Close(ctx context.Context) error {
	var jobs []*Job
	e.closeOnce.Do(func() {
		e.mu.Lock()
		e.mu.closed = true
		for _, j := range e.mu.jobs {
			jobs = append(jobs, j)
		}
		e.mu.Unlock()
		close(e.stopSampler)
	})
	done := make(chan struct{})
	go func() {
		// A job being created when the lock was taken is stopped by its
		// PutJob, which sees the engine closed.
		e.creations.Wait()
		var wg sync.WaitGroup
		for _, j := range jobs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				j.rescaleMu.Lock() // a rescale under way ends first
				defer j.rescaleMu.Unlock()
				e.stopJob(j.latest())
			}()
		}
		wg.Wait()
		<-e.samplerDone
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("runtime: close: %w", ctx.Err())
	}
}

// stopJob stops j and tells the cluster.
func (e *Engine) stopJob(j *Job) {
	j.stopAutoscaler()
	j.stop()
	if e.cfg.Cluster != nil {
		e.cfg.Cluster.Detach(j)
	}
}

// RetryAfter estimates how long a refused sender should wait: the time the
// job's partitions need to drain what they hold at their measured rate.
func (e *Engine) RetryAfter(stream string) time.Duration {
	e.mu.RLock()
	readers := e.mu.streams[stream]
	e.mu.RUnlock()
	var worst time.Duration
	for _, j := range readers {
		r, _ := j.samples.recent()
		d := time.Second
		if r.Processed > 0 {
			d = time.Duration(float64(j.depth()) / r.Processed * float64(time.Second))
		}
		worst = max(worst, d)
	}
	return min(max(worst, 50*time.Millisecond), 10*time.Second)
}
