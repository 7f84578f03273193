package runtime

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/ft"
	"github.com/mlstream/mlstream/learners"
)

// Job is a running job: its spec, its kind's state and its partitions.
// Safe for concurrent use.
type Job struct {
	spec  Spec
	kind  kindJob
	parts []*partition
	// lineage is what the job's successors after a rescale (rescale.go)
	// share with it: counters, latencies, rates, the rescale history.
	*lineage

	rr atomic.Uint64 // round-robin cursor for events without a key
	// cluster is the engine's Cluster (nil single-node).
	cluster Cluster
	// featsPerEvent is the mean feature count of the last request, to
	// size the next one's buffers.
	featsPerEvent atomic.Int64
	gate          gate
	// ingest holds requests back while the job is rescaled, and sends
	// them on to its successor after (rescale.go).
	ingest ingestGate
	// slot is where the job's fault-tolerance data lives in its storage
	// (rescale.go): 0 or 1, alternating at each rescale.
	slot int
	// incarnation is the job's, for its record after a rescale.
	incarnation string
	// claimed is what claiming its data did (rebuilt, moved aside), for
	// the recovery report.
	claimed ft.Claimed
	// processedBase counts the events the job's predecessors processed.
	processedBase uint64
	// maxPartitions is Config.MaxPartitions, for the status.
	maxPartitions int
	// loads are the partitions' loads at the engine's samples (skew.go).
	loads     loadMeter
	shedDelay time.Duration  // max_delay of load shedding; 0 when off
	wg        sync.WaitGroup // partition goroutines
	ft        *jobFT         // nil when the job has no fault tolerance
	mem       MemoryEstimate // what the job counts against Config.MaxMemory
}

// gate holds partitions back while a job is paused.
type gate struct {
	mu sync.Mutex
	ch chan struct{} // non-nil while paused; closed by resume
}

func (g *gate) pause() {
	g.mu.Lock()
	if g.ch == nil {
		g.ch = make(chan struct{})
	}
	g.mu.Unlock()
}

func (g *gate) resume() {
	g.mu.Lock()
	if g.ch != nil {
		close(g.ch)
		g.ch = nil
	}
	g.mu.Unlock()
}

// paused says whether the job is paused (Pause).
func (g *gate) paused() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ch != nil
}

func (g *gate) wait() {
	g.mu.Lock()
	ch := g.ch
	g.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// Pause holds the job's partitions before their next batch: events still
// queue, and once the queues are full ingest answers ErrBusy. For
// maintenance and for tests of flow control.
func (j *Job) Pause() { j.gate.pause() }

// Resume lets a paused job process again.
func (j *Job) Resume() { j.gate.resume() }

// partition is one goroutine's share of a job.
type partition struct {
	job       *Job
	index     int
	q         *queue
	op        partitionOp
	group     *groupSizer
	processed atomic.Uint64
	// wake is set while a timer will call the op's idle again.
	wake atomic.Bool
	// rate is the partition's drain rate while backlogged, in events per
	// wall second (float64 bits, a moving average), for load shedding.
	rate atomic.Uint64
	// busyNs is the time the partition spent processing batches, for the
	// autoscaler's true rate (events per busy second).
	busyNs atomic.Int64
	// retired ends the goroutine after the job was rescaled (rescale.go):
	// its state went to the successor, so it must not flush again.
	retired atomic.Bool
	// rateEvents and rateSecs are the moving averages behind rate, the
	// partition's own.
	rateEvents, rateSecs float64
	// wait is the recent time from queued to processed of its batches, in
	// seconds (float64 bits, a moving average), for load shedding.
	wait atomic.Uint64
	// kept holds the records of a batch shed late (shedStale).
	kept []Record
}

func newJob(spec Spec, hub *Hub, cfg *Config) (*Job, error) {
	return newJobIn(spec, hub, cfg, 0, &lineage{created: time.Now()})
}

// newJobIn makes a job whose fault-tolerance data is in slot, sharing
// the lineage of the job it succeeds (a new one for a new job).
func newJobIn(spec Spec, hub *Hub, cfg *Config, slot int, lin *lineage) (*Job, error) {
	k, err := newKindJob(spec)
	if err != nil {
		return nil, err
	}
	gcfg, err := spec.Sync.validate(k.def())
	if err != nil {
		return nil, err
	}
	if _, ok := k.instance().(Rescaling); spec.Autoscale != nil && !ok {
		return nil, &SpecError{"autoscale", fmt.Sprintf("kind %s cannot move its state to another partition count", spec.Kind)}
	}
	j := &Job{spec: spec, kind: k, lineage: lin, slot: slot, cluster: cfg.Cluster}
	if spec.Spread != nil {
		j.keys.above = spec.Spread.Above
	}
	if spec.Shed != nil {
		j.shedDelay, _ = spec.Shed.delay() // checked by spec.validate
		if sa, ok := k.instance().(ShedAware); ok {
			sa.SetShed(&j.shed) // its bounds widen by what is shed
		}
	}
	for i := 0; i < spec.Partitions; i++ {
		part := &partition{job: j, index: i, q: newQueue(spec.QueueSize), group: newGroupSizer(gcfg, j.created)}
		part.op = opAdapter{k.instance().NewPartition(i, Emitter{hub: hub, job: spec.Name, slot: i + 1})}
		j.parts = append(j.parts, part)
	}
	if cfg.Storage != nil && spec.FT.Mode != ft.ModeNone {
		ftk, ok := k.instance().(FaultTolerant)
		if !ok {
			return nil, &SpecError{"ft.mode", fmt.Sprintf("kind %s has no fault tolerance yet; set mode none", spec.Kind)}
		}
		fk := newFTAdapter(ftk)
		f, err := newJobFT(spec, cfg.Storage, fk, hub, cfg.Logger, slot)
		if err != nil {
			return nil, err
		}
		fk.setFT(f)
		j.ft = f
		for i, part := range j.parts {
			part.q.ft = f.parts[i]
		}
	}
	return j, nil
}

// start recovers the job from its backups, if it has fault tolerance, and
// starts its partitions.
func (j *Job) start(hub *Hub) error {
	if j.ft != nil {
		go j.ft.writeLoop()
		rep, err := j.recover()
		if err != nil {
			close(j.ft.backups)
			<-j.ft.backupDone
			j.ft.closeFiles()
			return err
		}
		j.loadHistory()
		if rep.Backups > 0 || rep.Replayed > 0 || rep.Lost > 0 || len(rep.Skipped) > 0 || len(rep.Quarantined) > 0 || len(rep.Repaired) > 0 {
			for _, p := range j.parts {
				p.group.restart()
			}
			j.ft.recovery.Store(rep)
			j.ft.recordRecovery(rep)
			j.ft.log.Info("job recovered", "job", j.spec.Name, "clean", rep.Clean, "failures", rep.Failures,
				"backups", rep.Backups, "replayed", rep.Replayed, "lost", rep.Lost, "bound_events", rep.Bound.Events,
				"within_bound", rep.Within, "duration_ms", rep.DurationMs)
			if msg, err := EncodeRecovery(j.spec.Name, rep); err == nil {
				hub.Publish(j.spec.Name, TypeRecovery, msg)
			}
		}
	}
	j.startPartitions()
	return nil
}

// stop closes the queues, waits until every queued event is processed and,
// with fault tolerance, takes a last full backup.
func (j *Job) stop() {
	j.gate.resume()
	for _, p := range j.parts {
		p.q.close()
	}
	j.wg.Wait()
	if j.ft != nil {
		j.saveHistory()
		j.ft.close()
	}
}

// run is the partition goroutine: take whatever is queued, process it in
// order, and tell the operator when the queue runs dry. The queue and the
// partition swap two slices back and forth: buf is always the one the
// queue does not hold.
func (p *partition) run() {
	var buf []*batch
	var prevEnd time.Time // end of the previous batch while backlogged
	for range p.q.notify {
		for {
			batches, closed := p.q.take(buf)
			buf = batches
			if len(batches) == 0 {
				if again := p.idle(closed); again > 0 && p.wake.CompareAndSwap(false, true) {
					time.AfterFunc(again, func() {
						p.wake.Store(false)
						select {
						case p.q.notify <- struct{}{}:
						default:
						}
					})
				}
				p.group.idle(time.Now())
				prevEnd = time.Time{}
				if closed {
					return
				}
				break
			}
			for i, b := range batches {
				if b.run != nil {
					b.run()
					p.q.done(b)
					batches[i] = nil
					if p.retired.Load() {
						return
					}
					continue
				}
				p.job.gate.wait()
				if !b.commit.admitted() {
					// Its request was refused, not durable: never processed.
					p.q.done(b)
					batches[i] = nil
					continue
				}
				n := len(b.recs)
				start := time.Now()
				recs := p.shedStale(b, start)
				p.op.process(recs, p.q.logged(b))
				end := time.Now()
				served := len(recs)
				p.job.shed.observeServed(end.Sub(b.enqueued), p.job.shedDelay, served)
				// Retired (its arrays back in their pool) before it counts
				// as processed: whoever waits for the count finds them there.
				p.q.done(b)
				batches[i] = nil
				p.processed.Add(uint64(n))
				p.busyNs.Add(int64(end.Sub(start)))
				// Latency is that of the events served: those shed late are
				// counted as shed.
				p.job.lat.observe(end.Sub(b.enqueued), served)
				// The drain rate counts the wall time since the previous batch
				// while the queue is backlogged: coordination, pauses and CPU
				// taken by others slow draining as much as the work does.
				// Events shed late cost nothing and do not count.
				from := start
				if !prevEnd.IsZero() {
					from = prevEnd
				}
				p.observeRate(served, end.Sub(from))
				p.observeWait(end.Sub(b.enqueued))
				prevEnd = end
				if p.group.batchDone(end.Sub(start), end) {
					p.op.coordinate()
					now := time.Now()
					p.group.coordinated(now.Sub(end), now)
				}
			}
		}
	}
}

// observeRate folds a batch of n events processed in d into the drain
// rate: events over time, each a moving average over about the last 16
// batches. (A moving average of each batch's rate would be dominated by
// the quick batches: four batches of 22 events in 0.7, 0.7, 0.7 and 13 ms
// drain 5,800 events/s, not the 24,000 their rates average to.)
func (p *partition) observeRate(n int, d time.Duration) {
	if d <= 0 {
		return
	}
	p.rateEvents, p.rateSecs = movingAvg(p.rateEvents, float64(n)), movingAvg(p.rateSecs, d.Seconds())
	p.rate.Store(math.Float64bits(p.rateEvents / p.rateSecs))
}

// movingAvg folds x into a moving average over about the last 16 values
// (0: none yet).
func movingAvg(avg, x float64) float64 {
	if avg == 0 {
		return x
	}
	return avg + (x-avg)/16
}

// observeWait folds a batch's time from queued to processed into the
// partition's recent wait (a moving average over about 16 batches), the
// feedback of load shedding.
func (p *partition) observeWait(d time.Duration) {
	p.wait.Store(math.Float64bits(movingAvg(math.Float64frombits(p.wait.Load()), d.Seconds())))
}

// Spec returns the job's spec with defaults filled in.
func (j *Job) Spec() Spec { return j.spec }

// Name is the job's name.
func (j *Job) Name() string { return j.spec.Name }

func (j *Job) partitionFor(key string) int {
	n := len(j.parts)
	if n == 1 {
		return 0
	}
	if key == "" {
		return int(j.rr.Add(1) % uint64(n))
	}
	return int(learners.HashName(key) % uint64(n))
}

func (j *Job) processed() uint64 {
	n := j.processedBase
	for _, p := range j.parts {
		n += p.processed.Load()
	}
	return n
}

func (j *Job) depth() int64 {
	var n int64
	for _, p := range j.parts {
		n += p.q.depth.Load()
	}
	return n
}

func (j *Job) sample(now time.Time) {
	j.sampleLoads(now)
	x := sample{at: now, accepted: j.accepted.Load(), processed: j.processed(), lat: j.lat.snap(), depth: j.depth(), group: jobGroupStatus(j.parts)}
	if j.ft != nil {
		x.ft = j.ft.historyPoint()
	}
	if c, ok := j.kind.instance().(Charting); ok {
		x.kind = c.ChartValues(nil)
	}
	j.samples.add(x)
	j.saveHistoryDue(now)
}

// JobStatus is the live view of a job served by GET /v1/jobs/{job}.
type JobStatus struct {
	Name       string            `json:"name"`
	Kind       string            `json:"kind"`
	Input      string            `json:"input,omitempty"`
	Streams    []string          `json:"streams"`
	Spec       Spec              `json:"spec"`
	Created    time.Time         `json:"created"`
	Accepted   uint64            `json:"accepted"`
	Processed  uint64            `json:"processed"`
	Rates      Rates             `json:"rates"`
	QueueDepth int64             `json:"queue_depth"`
	QueueCap   int64             `json:"queue_capacity"`
	Latency    Latency           `json:"latency"`
	Partitions []PartitionStatus `json:"partitions"`
	// MemoryEstimate is what the job counts against the engine's memory
	// budget (budget.go).
	MemoryEstimate int64 `json:"memory_estimate_bytes"`
	// Elastic is the job's rescaling: its last rescales and, with an
	// autoscale section, the autoscaler's decisions (rescale.go).
	Elastic *ElasticStatus `json:"elastic,omitempty"`

	// FT is the fault-tolerance view; absent when the job has none.
	FT *FTStatus `json:"ft,omitempty"`
	// Group is the job's group scheduling (group.go); Shed its load
	// shedding, absent when off.
	Group *GroupStatus `json:"group"`
	Shed  *ShedStatus  `json:"shed,omitempty"`
	// HeldBack counts the senders held back now so that no more than l
	// events wait without an item backup (AF-Stream); HeldBackTotal every
	// time one was, HeldBackMs how long in all.
	HeldBack      int64   `json:"held_back"`
	HeldBackTotal uint64  `json:"held_back_total"`
	HeldBackMs    float64 `json:"held_back_ms"`
	// Health is ok, or what is wrong and why (health.go).
	Health Health `json:"health"`

	// Section is the kind's own view (Instance.Status): its fields are
	// encoded at the top level of the status, beside the engine's, so a
	// kind adds fields such as "model" or "topk" without a field here.
	// Decoded, it holds the fields the engine does not know, as a
	// map[string]json.RawMessage.
	Section any `json:"-"`
}

// PartitionStatus is one partition's share of a JobStatus.
type PartitionStatus struct {
	Partition  int    `json:"partition"`
	QueueDepth int64  `json:"queue_depth"`
	Processed  uint64 `json:"processed"`
	LastSeq    uint64 `json:"last_seq"`
	// DrainRate is events per second while busy (a moving average).
	DrainRate float64     `json:"drain_rate"`
	HeldBack  int64       `json:"held_back"`
	Group     GroupStatus `json:"group"`
}

// Status reports the job's live state. detail asks the kind for costly
// extras (model weights).
func (j *Job) Status(detail bool) JobStatus {
	st := JobStatus{
		Name: j.spec.Name, Kind: j.spec.Kind, Input: j.spec.Input, Streams: j.spec.Streams(), Spec: j.spec, Created: j.created,
		Accepted: j.accepted.Load(), QueueDepth: j.depth(), MemoryEstimate: j.mem.Total(), Processed: j.processedBase,
	}
	for _, p := range j.parts {
		pr := p.processed.Load()
		st.Processed += pr
		st.QueueCap += p.q.capacity
		hb := p.q.heldBack.Load()
		st.HeldBack += hb
		st.HeldBackTotal += p.q.heldBackTotal.Load()
		st.HeldBackMs += float64(p.q.heldBackNs.Load()) / 1e6
		st.Partitions = append(st.Partitions, PartitionStatus{Partition: p.index, QueueDepth: p.q.depth.Load(), Processed: pr, LastSeq: p.q.lastSeq(),
			DrainRate: math.Float64frombits(p.rate.Load()), HeldBack: hb, Group: p.group.status()})
	}
	st.Group, st.Shed = jobGroupStatus(j.parts), j.shedStatus()
	st.Rates, st.Latency = j.samples.recent()
	st.Health = j.health(st.Group)
	st.Section = j.kind.instance().Status(detail)
	st.Elastic = j.elasticStatus()
	if j.ft != nil {
		st.FT = j.ft.status(j)
	}
	return st
}
