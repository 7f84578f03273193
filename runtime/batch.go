package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/learners"
	"github.com/valyala/fastjson"
)

// Batch collects the events of one ingest request. Add extracts each
// reading job's record from an event (any error rejects the request);
// Commit queues everything or nothing. Not safe for concurrent use.
type Batch struct {
	e      *Engine
	stream string
	now    time.Time
	nowMs  int64
	jobs   []*jobBatch
	events int
	// known are the fields its events may have (knownFields).
	known []string
}

type jobBatch struct {
	job *Job
	// rr is the request's own round robin over the partitions for events
	// without a key: it starts one step along the job's (NewBatch), or,
	// with an Idempotency-Key, at a function of the key (SetKey), so that
	// every attempt of a request sends each event to the same partition.
	rr uint64
	// sticky (cluster mode) sends runs of stickyRun keyless events to
	// one partition, starting at rr; keyless counts them.
	sticky  bool
	keyless uint64
	// spreading: the job spreads hot keys (SpreadSpec): single-node from
	// its hot set as events come, in cluster mode (sticky) from this
	// request's own hot keys once it is whole (spreadRequestHot).
	spreading bool
	side      uint8      // of a join: which of its streams this is
	parts     [][]Record // per partition
	arena     arena
	// bufs lend parts and the arena's features and values their arrays.
	bufs      *buffers
	shedStats shedStats
	hashed    bool // AddString gives the job hashes, not strings (fastpath.go)
	// bytes is the job's ByteExtractor, once ExtractsBytes found one;
	// feats and vals mark the arena's lengths before AddBytes's event.
	bytes       ByteExtractor
	feats, vals int
	// req is the job's share of the request in mode exact (ftrequest.go).
	req *ftRequest
	// rec is the record being extracted: a field rather than a local, as
	// a local would escape through the kind's Extract, one allocation per
	// event.
	rec Record
}

// NewBatch starts a request on a stream. It fails with ErrUnknownStream
// when no job reads the stream and ErrClosed during shutdown.
func (e *Engine) NewBatch(stream string) (*Batch, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.mu.closed {
		return nil, ErrClosed
	}
	readers := e.mu.streams[stream]
	if len(readers) == 0 {
		return nil, fmt.Errorf("%w: %q", ErrUnknownStream, stream)
	}
	now := time.Now()
	b := &Batch{e: e, stream: stream, now: now, nowMs: now.UnixMilli()}
	for _, j := range readers {
		jb := newJobBatch(j)
		jb.spreading, jb.sticky, jb.rr = j.keys.above > 0, e.cfg.Cluster != nil, j.rr.Add(1)
		if j.spec.Right == stream {
			jb.side = 1
		}
		b.jobs = append(b.jobs, jb)
	}
	return b, nil
}

// newJobBatch is one job's part of a request, on pooled buffers.
func newJobBatch(j *Job) *jobBatch {
	// parts is the batch's own: once lent, bufs.parts may go to another
	// request while this one still reads its lengths.
	jb := &jobBatch{job: j, bufs: getBuffers(len(j.parts)), parts: make([][]Record, len(j.parts))}
	copy(jb.parts, jb.bufs.parts)
	jb.arena.feats, jb.arena.vals = jb.bufs.feats, jb.bufs.vals
	return jb
}

// Expect sizes the batch for about n events, so that extraction does not
// grow its buffers event by event. Optional.
func (b *Batch) Expect(n int) {
	for _, jb := range b.jobs {
		per := n/len(jb.parts) + n/8 + 1
		for i := range jb.parts {
			jb.parts[i] = reserve(jb.parts[i], per)
		}
		// Features per event as seen in the job's last request.
		jb.arena.feats = reserve(jb.arena.feats, n*int(jb.job.featsPerEvent.Load()+1))
	}
}

// Add extracts one event for every job reading the stream. line is the
// event's position in the request, used in the error.
func (b *Batch) Add(v *fastjson.Value, line int) error {
	if v.Type() != fastjson.TypeObject {
		return &InputError{Line: line, Msg: fmt.Sprintf("an event must be a JSON object, got %s", v.Type())}
	}
	if err := b.checkFields(v, line); err != nil {
		return err
	}
	for _, jb := range b.jobs {
		jb.rec = Record{Side: jb.side}
		if err := jb.job.kind.extract(v, &jb.rec, &jb.arena, b.nowMs); err != nil {
			return inputError(err, line)
		}
		p := jb.partition(jb.rec.Key)
		jb.parts[p] = append(jb.parts[p], jb.rec)
	}
	b.events++
	return nil
}

// stickyRun is how many consecutive keyless events of a request go to
// one partition in cluster mode. Each partition's share of a request is a
// message in the cluster's log, whose cost is mostly per message: a
// request of 1,000 keyless events is then one message rather than one
// per partition (Kafka's producers stick keyless records to a partition
// for the same reason). The load still spreads over partitions across
// requests and within larger ones.
const stickyRun = 2048

// partition is the partition of an event with the given key: its key's,
// unless the job spreads the key (hot); a keyless or spread event goes to
// the request's round robin, in cluster mode to its current sticky run.
func (jb *jobBatch) partition(key string) int {
	n := uint64(len(jb.job.parts))
	switch {
	case n == 1:
		return 0
	case key != "" && !(jb.spreading && !jb.sticky && jb.job.keys.isHot(key)):
		return jb.job.partitionFor(key)
	case jb.sticky:
		p := (jb.rr + jb.keyless/stickyRun) % n
		jb.keyless++
		return int(p)
	}
	jb.rr++
	return int(jb.rr % n)
}

// SetKey makes the request's partitioning of events without a key a
// function of its idempotency key (call before Add): a retry of the
// request then splits its events over the partitions exactly as the
// first attempt did, which a cluster's duplicate detection relies on.
func (b *Batch) SetKey(key string) {
	if key == "" {
		return
	}
	h := learners.HashName(key)
	for _, jb := range b.jobs {
		jb.rr = h
	}
}

// inputError places an extractor's error at a line.
func inputError(err error, line int) error {
	var fe *fieldErr
	if errors.As(err, &fe) {
		return &InputError{Line: line, Field: fe.field, Msg: fe.msg}
	}
	return &InputError{Line: line, Msg: err.Error()}
}

// Len is the number of events added.
func (b *Batch) Len() int { return b.events }

// Shed returns, after Commit, how many events each job with load shedding
// dropped from this request (nil when none did).
func (b *Batch) Shed() map[string]uint64 {
	var out map[string]uint64
	for _, jb := range b.jobs {
		if jb.shedStats.shed > 0 {
			if out == nil {
				out = map[string]uint64{}
			}
			out[jb.job.spec.Name] = jb.shedStats.shed
		}
	}
	return out
}

// Commit queues every record, waiting up to the engine's IngestWait for
// room. If any partition has no room in time, nothing is queued and it
// returns ErrBusy; a batch that could never fit returns ErrTooLarge.
func (b *Batch) Commit(ctx context.Context) (int, error) {
	if b.events == 0 {
		return 0, nil
	}
	if b.e.cfg.Cluster != nil {
		// Admitted like a local request: a rescale of the cluster holds
		// ingest on every node and waits for the requests admitted.
		if err := b.enter(ctx); err != nil {
			return 0, err
		}
		defer b.leaveJobs()
		return b.publish(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, b.e.cfg.IngestWait)
	defer cancel()
	if err := b.enter(ctx); err != nil {
		return 0, err
	}
	defer b.leaveJobs()
	b.shedLoad()
	held, err := b.reserve(ctx)
	if errors.Is(err, ErrBusy) && !errors.Is(err, ErrBackupsFailing) {
		b.countBusy()
	}
	if err != nil {
		held.release()
		b.releaseBuffers()
		return 0, err
	}
	if err := b.pushDurably(held); err != nil {
		b.e.metrics.refused(b.stream, "storage", b.events)
		return 0, err
	}
	b.e.metrics.accepted(b.stream, b.events)
	return b.events, nil
}

// pushDurably queues the reserved records and, in mode exact, makes them
// durable before it returns. A request that cannot be made durable is
// refused whole: none of its events is processed (commitGate).
func (b *Batch) pushDurably(held reservations) error {
	var gate *commitGate
	if b.exact() {
		gate = newCommitGate()
	}
	durable, err := b.push(held, gate)
	if err == nil {
		err = commitLogs(durable)
	}
	gate.resolve(err == nil)
	if err != nil {
		for _, jb := range b.jobs {
			jb.req.abandon()
		}
		return err
	}
	for _, jb := range b.jobs {
		jb.job.accepted.Add(uint64(b.events) - jb.shedStats.shed)
		jb.job.shed.add(jb.shedStats)
	}
	return nil
}

// exact says whether a job of the request is in mode exact.
func (b *Batch) exact() bool {
	for _, jb := range b.jobs {
		if jb.job.durablePart(0) != nil {
			return true
		}
	}
	return false
}

// enter admits the request to its jobs (enterJobs), waiting at most
// IngestWait, and counts a refusal.
func (b *Batch) enter(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, b.e.cfg.IngestWait)
	defer cancel()
	if err := b.enterJobs(ctx); err != nil {
		b.e.metrics.refused(b.stream, "busy", b.events)
		b.countBusy()
		b.releaseBuffers()
		return err
	}
	return nil
}

// enterJobs admits the request to each job (rescale.go): it waits while
// a job is rescaled, and goes to the job's successor after, its records
// routed again over the successor's partitions. On an error, the jobs
// entered are left.
func (b *Batch) enterJobs(ctx context.Context) error {
	for i, jb := range b.jobs {
		j, err := jb.job.enterIngest(ctx)
		if err != nil {
			for _, jb := range b.jobs[:i] {
				jb.job.leaveIngest()
			}
			return err
		}
		if j != jb.job {
			jb.rebind(j)
		}
	}
	return nil
}

// countBusy counts the request's events as offered to its jobs and
// refused as busy, for their autoscalers.
func (b *Batch) countBusy() {
	for _, jb := range b.jobs {
		jb.job.refusedBusy.Add(uint64(b.events))
	}
}

func (b *Batch) leaveJobs() {
	for _, jb := range b.jobs {
		jb.job.leaveIngest()
	}
}

// rebind moves the job's share of the request to j, the job's successor
// after a rescale, routing each record again by its key.
func (jb *jobBatch) rebind(j *Job) {
	old := jb.parts
	jb.job = j
	jb.parts = make([][]Record, len(j.parts))
	for _, recs := range old {
		for _, r := range recs {
			p := jb.partition(r.Key)
			jb.parts[p] = append(jb.parts[p], r)
		}
	}
}

// publish hands every job's records to the cluster (cluster mode): the
// request is accepted once the cluster holds all of them.
func (b *Batch) publish(ctx context.Context) (int, error) {
	defer b.releaseBuffers()
	for _, jb := range b.jobs {
		if jb.spreading {
			jb.spreadRequestHot()
		}
		// The keys this node takes in, for elastic.skew.hot_keys.
		jb.job.keys.observe(jb.parts)
		if err := b.e.cfg.Cluster.Publish(ctx, jb.job, jb.parts); err != nil {
			reason := "unavailable"
			if errors.Is(err, ErrBusy) {
				reason = "busy"
			}
			b.e.metrics.refused(b.stream, reason, b.events)
			return 0, err
		}
		jb.job.featsPerEvent.Store(int64(len(jb.arena.feats) / b.events))
	}
	b.e.metrics.accepted(b.stream, b.events)
	return b.events, nil
}

// spreadMin is the fewest events of one key in one request that a
// cluster spreads (with its share above spread.above): a request of a few
// events has no hot key.
const spreadMin = 32

// spreadRequestHot spreads the request's hot keys (cluster mode): a key
// whose events in this request are at least spreadMin and at least
// spread.above of its keyed events has them sent round robin over every
// partition, from a partition given by the request's round robin. A
// cluster drops the messages of a retried request by ids that assume it
// splits as its first attempt did, on whatever node: hotness judged from
// the request alone, and a start from its idempotency key (SetKey), make
// the split a function of the request.
func (jb *jobBatch) spreadRequestHot() {
	n := len(jb.parts)
	if n == 1 {
		return
	}
	counts := map[string]int{}
	keyed := 0
	for _, recs := range jb.parts {
		for i := range recs {
			if k := recs[i].Key; k != "" {
				counts[k]++
				keyed++
			}
		}
	}
	hot := map[string]bool{}
	for k, c := range counts {
		if c >= spreadMin && float64(c) >= jb.job.keys.above*float64(keyed) {
			hot[k] = true
		}
	}
	if len(hot) == 0 {
		return
	}
	parts := make([][]Record, n)
	next := int(jb.rr % uint64(n))
	moved := 0
	for p, recs := range jb.parts {
		for _, r := range recs {
			to := p
			if hot[r.Key] {
				to, next = next, (next+1)%n
				if to != p {
					moved++
				}
			}
			parts[to] = append(parts[to], r)
		}
	}
	jb.parts = parts
	jb.job.keys.spreadRequest(hot, moved)
}

// shedLoad drops part of the records of jobs with load shedding whose
// queues would hold more than they drain in max_delay (shed.go).
func (b *Batch) shedLoad() {
	for _, jb := range b.jobs {
		if jb.job.shedDelay == 0 {
			continue
		}
		for i := range jb.parts {
			if len(jb.parts[i]) > 0 {
				jb.shed(i)
			}
		}
	}
}

// reservations are the room taken in partition queues, given back when the
// request is refused.
type reservations []room

type room struct {
	q *queue
	n int
}

func (rs reservations) release() {
	for _, r := range rs {
		r.q.unreserve(r.n)
	}
}

// reserve takes room for every partition's records, or fails with what it
// took so far (for the caller to release): ErrTooLarge for records that no
// wait would fit, ErrBusy when ctx ends first.
func (b *Batch) reserve(ctx context.Context) (reservations, error) {
	// Holding a sender back for the item-log budget gets half the wait:
	// past it the events are logged, not refused.
	pendCtx, cancelPend := context.WithTimeout(ctx, b.e.cfg.IngestWait/2)
	defer cancelPend()
	var held reservations
	for _, jb := range b.jobs {
		for i, recs := range jb.parts {
			if len(recs) == 0 {
				continue
			}
			q := jb.job.parts[i].q
			if int64(len(recs)) > q.capacity {
				return held, fmt.Errorf("%w: %d events for partition %d of job %q, whose queue holds %d; send smaller requests",
					ErrTooLarge, len(recs), i, jb.job.spec.Name, q.capacity)
			}
			if jb.job.unprotected() {
				b.e.metrics.refused(b.stream, "backups_failing", b.events)
				return held, fmt.Errorf("%w: job %q", ErrBackupsFailing, jb.job.spec.Name)
			}
			q.waitPending(pendCtx, len(recs))
			if err := q.reserve(ctx, len(recs)); err != nil {
				b.e.metrics.refused(b.stream, "busy", b.events)
				return held, fmt.Errorf("%w: job %q partition %d", ErrBusy, jb.job.spec.Name, i)
			}
			held = append(held, room{q, len(recs)})
		}
	}
	return held, nil
}

// push queues the reserved records (held), each batch behind gate, and
// returns the item-log parts that must be committed before the reply
// (mode exact). On an error the room not yet used is given back.
func (b *Batch) push(held reservations, gate *commitGate) ([]durablePart, error) {
	var durable []durablePart
	for _, jb := range b.jobs {
		jb.job.keys.observe(jb.parts)
		jb.req = jb.job.ftRequest(jb.parts)
		bufs := jb.lend()
		for i, recs := range jb.parts {
			if len(recs) == 0 {
				continue
			}
			q := jb.job.parts[i].q
			held = held[1:] // this one's room: used, or given back here
			if err := q.pushBatchFT(&batch{recs: recs, enqueued: b.now, bufs: bufs, commit: gate}, jb.req); err != nil {
				q.unreserve(len(recs))
				bufs.release()
				if errors.Is(err, ErrDurability) {
					jb.releaseFrom(bufs, i+1)
					held.release()
					b.releaseBuffers() // of the jobs after this one
					return nil, err
				}
				// The job was deleted while this request was in flight; its
				// records go with it, the other jobs still get theirs.
				continue
			}
			if p := jb.job.durablePart(i); p != nil {
				durable = append(durable, durablePart{p, recs[len(recs)-1].Seq})
			}
		}
		jb.job.featsPerEvent.Store(int64(len(jb.arena.feats) / b.events))
	}
	return durable, nil
}

// releaseFrom gives back the holds on bufs (lent) of the partitions from
// i on, which will not be queued.
func (jb *jobBatch) releaseFrom(bufs *buffers, i int) {
	for _, recs := range jb.parts[i:] {
		if len(recs) > 0 {
			bufs.release()
		}
	}
}

// durablePart is a partition's item log and the last seq a request put
// in it.
type durablePart struct {
	p    *partFT
	last uint64
}

// commitLogs makes the item logs durable up to the request's records: a
// group commit, so concurrent requests share the fsyncs.
func commitLogs(logs []durablePart) error {
	for _, d := range logs {
		if err := d.p.log.(*healingLog).commitThrough(d.last); err != nil {
			return fmt.Errorf("%w: %w", ErrDurability, err)
		}
	}
	return nil
}

// buffers are the arrays a job's share of a request is extracted into:
// its records per partition, and the features and values they point to.
// They serve request after request: once every partition has processed
// the records, they go back to bufferPool. The arena's bytes do not, as
// kinds keep the strings (a sketch keeps the items it counts).
type buffers struct {
	parts [][]Record
	feats []learners.Feature
	vals  []string
	// holders counts the queued batches still reading the arrays.
	holders atomic.Int32
}

var bufferPool = sync.Pool{New: func() any { return new(buffers) }}

// Pooled buffers are at most this large (records over all partitions;
// features; values), so that one large request, or a job of many
// partitions, does not keep its arrays allocated.
const (
	maxPooledRecords  = 1 << 16
	maxPooledFeatures = 1 << 19
)

// getBuffers returns empty buffers for a job of n partitions.
func getBuffers(n int) *buffers {
	bufs := bufferPool.Get().(*buffers)
	if cap(bufs.parts) < n {
		bufs.parts = make([][]Record, n)
	}
	bufs.parts = bufs.parts[:n]
	for i := range bufs.parts {
		bufs.parts[i] = bufs.parts[i][:0]
	}
	bufs.feats, bufs.vals = bufs.feats[:0], bufs.vals[:0]
	return bufs
}

// lend hands the arrays, as extraction left them, to the partitions that
// will read them: one holder per partition with records. It returns nil
// when there are none, and the arrays go back to the pool now.
func (jb *jobBatch) lend() *buffers {
	bufs := jb.takeBuffers()
	n := int32(0)
	for _, recs := range jb.parts {
		if len(recs) > 0 {
			n++
		}
	}
	if n == 0 {
		bufs.put()
		return nil
	}
	bufs.holders.Store(n)
	return bufs
}

// release says one holder is done with the arrays; the last one returns
// them to the pool.
func (bufs *buffers) release() {
	if bufs != nil && bufs.holders.Add(-1) == 0 {
		bufs.put()
	}
}

func (bufs *buffers) put() {
	if cap(bufs.feats) > maxPooledFeatures || cap(bufs.vals) > maxPooledFeatures {
		return
	}
	records := 0
	for _, recs := range bufs.parts[:cap(bufs.parts)] { // those of a larger job too
		records += cap(recs)
	}
	if records > maxPooledRecords {
		return
	}
	bufferPool.Put(bufs)
}

// releaseBuffers returns the arrays of a batch that queued nothing (or
// that the cluster has encoded), as extraction grew them.
func (b *Batch) releaseBuffers() {
	for _, jb := range b.jobs {
		if jb.bufs != nil {
			jb.takeBuffers().put()
		}
	}
}

// takeBuffers takes the pooled buffers back with the arrays as extraction
// grew them.
func (jb *jobBatch) takeBuffers() *buffers {
	bufs := jb.bufs
	jb.bufs = nil
	copy(bufs.parts, jb.parts)
	bufs.feats, bufs.vals = jb.arena.feats, jb.arena.vals
	return bufs
}

// reserve returns s emptied, with room for n elements.
func reserve[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, 0, n)
	}
	return s[:0]
}
