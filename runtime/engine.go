package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	goruntime "runtime"
	"sort"
	"sync"
	"time"

	"github.com/mlstream/mlstream/ft"
	"github.com/prometheus/client_golang/prometheus"
)

// Config configures an Engine. Zero fields take the defaults below.
type Config struct {
	// Partitions is the default partition count of a job (default: the
	// number of CPUs).
	Partitions int
	// QueueSize is the default capacity of a partition queue, in events
	// (default 65536).
	QueueSize int
	// IngestWait is how long a request waits for room in full queues
	// before it is refused with ErrBusy (default 200ms).
	IngestWait time.Duration
	// Registry receives the engine's Prometheus metrics (default: none).
	Registry prometheus.Registerer
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Store keeps the jobs' state backups, and DataDir their item logs;
	// without a Store no job has fault tolerance (as if its mode were
	// none).
	Store   ft.Store
	DataDir string
}

func (c *Config) ensureDefaults() {
	if c.Partitions <= 0 {
		c.Partitions = goruntime.NumCPU()
	}
	if c.QueueSize <= 0 {
		c.QueueSize = 65536
	}
	if c.IngestWait <= 0 {
		c.IngestWait = 200 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
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
		closed  bool
	}
	stopSampler chan struct{}
	samplerDone chan struct{}
	closeOnce   sync.Once
}

// NewEngine returns a running engine with no jobs.
func NewEngine(cfg Config) *Engine {
	cfg.ensureDefaults()
	e := &Engine{cfg: cfg, hub: NewHub(), log: cfg.Logger, stopSampler: make(chan struct{}), samplerDone: make(chan struct{})}
	e.mu.jobs = map[string]*Job{}
	e.mu.streams = map[string][]*Job{}
	e.metrics = newMetrics(e, cfg.Registry)
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
		if a, ok := j.kind.(announcer); ok {
			a.announce(e.hub, j.spec.Name, now)
		}
	}
}

// announcer is a kind that publishes what changed, at most once per
// sample (a second): heavy hitters their top k, distinct their count.
type announcer interface {
	announce(hub *Hub, job string, now time.Time)
}

// PutJob validates spec and starts the job. It reports created=false when
// an identical job already runs, and ErrJobExists when the name is taken
// by a different spec. Invalid specs give a *SpecError.
func (e *Engine) PutJob(spec Spec) (created bool, err error) {
	if err := spec.validate(e.cfg.Partitions, e.cfg.QueueSize); err != nil {
		return false, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.closed {
		return false, ErrClosed
	}
	if old, ok := e.mu.jobs[spec.Name]; ok {
		if sameSpec(old.spec, spec) {
			return false, nil
		}
		return false, fmt.Errorf("%w: %q (delete it first)", ErrJobExists, spec.Name)
	}
	j, err := newJob(spec, e.hub, &e.cfg)
	if err != nil {
		return false, err
	}
	if err := j.start(e.hub); err != nil {
		return false, fmt.Errorf("job %q: %w", spec.Name, err)
	}
	j.sample(time.Now())
	e.mu.jobs[spec.Name] = j
	for _, st := range spec.Streams() {
		e.mu.streams[st] = append(e.mu.streams[st], j)
	}
	e.log.Info("job started", "job", spec.Name, "kind", spec.Kind, "streams", spec.Streams(), "partitions", spec.Partitions)
	return true, nil
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
// it.
func (e *Engine) DeleteJob(name string) error {
	e.mu.Lock()
	j, ok := e.mu.jobs[name]
	if !ok {
		e.mu.Unlock()
		return ErrUnknownJob
	}
	delete(e.mu.jobs, name)
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
	e.mu.Unlock()
	j.stop()
	if j.ft != nil {
		// Deleted means gone: its backups and logs too.
		if err := e.cfg.Store.RemoveJob(name); err != nil {
			e.log.Warn("removing the job's backups", "job", name, "err", err)
		}
		if err := os.RemoveAll(j.ft.dir); err != nil {
			e.log.Warn("removing the job's data", "job", name, "err", err)
		}
	}
	e.log.Info("job deleted", "job", name, "processed", j.processed())
	return nil
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
		var wg sync.WaitGroup
		for _, j := range jobs {
			wg.Add(1)
			go func() { defer wg.Done(); j.stop() }()
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
