package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Cluster is the engine's seam to cluster mode (package cluster). With
// Config.Cluster set, a request's records do not go to the local queues:
// Publish makes them durable in the cluster's log, and the node that owns
// each partition reads them back and hands them to Job.Deliver. The
// engine still extracts and validates every event where it arrives, so a
// request is refused whole, with the same errors, on any node.
type Cluster interface {
	// Attach is called for every new job before its partitions start:
	// the cluster gives the kind its fault tolerance (Job.SetFT) and, for
	// a Sharing kind, its delta channel.
	Attach(j *Job) error
	// Detach is called once the job's partitions stopped.
	Detach(j *Job)
	// Publish makes one request's records of job j durable: parts[p] are
	// partition p's (many may be empty). An error wrapping ErrBusy means
	// the cluster is behind and the request should be retried later.
	Publish(ctx context.Context, j *Job, parts [][]Record) error
}

// ErrNotOwner is returned by Deliver after the partition stopped taking
// events (its job is being deleted or the engine closing).
var ErrNotOwner = errors.New("runtime: the partition takes no more events")

// Partitions is the job's partition count.
func (j *Job) Partitions() int { return len(j.parts) }

// Units are the job's units of state under fault tolerance (nil when its
// kind has none).
func (j *Job) Units() []Unit {
	if ft, ok := j.kind.instance().(FaultTolerant); ok {
		return ft.Units()
	}
	return nil
}

// SetFT gives the job's kind the fault tolerance it drives (cluster mode;
// in single-node mode the engine does this itself). Call from Attach.
func (j *Job) SetFT(f FT) bool {
	ft, ok := j.kind.instance().(FaultTolerant)
	if ok {
		ft.SetFT(f)
	}
	return ok
}

// Sharing is the job's kind as a Sharing one, if it is.
func (j *Job) Sharing() (Sharing, bool) {
	s, ok := j.kind.instance().(Sharing)
	return s, ok
}

// ResetPartition has a Sharing kind forget what partition p learned after
// event lastSeq (PartitionResetting; nothing for a kind without it). Call
// on the partition's goroutine (Do).
func (j *Job) ResetPartition(p int, lastSeq uint64) {
	if r, ok := j.kind.instance().(PartitionResetting); ok {
		r.ResetPartition(p, lastSeq)
	}
}

// Deliver queues records read back from the cluster's log for partition
// p, waiting for room until ctx ends. They get the partition's next
// sequence numbers; done (may be nil) is called on the partition's
// goroutine once they are processed, with the sequence number of the
// last, and then their arrays go back to the pool. On an error the
// caller still owns them (Release).
func (j *Job) Deliver(ctx context.Context, p int, l Logged, done func(lastSeq uint64)) error {
	q := j.parts[p].q
	recs := l.Recs
	n := len(recs)
	if int64(n) > q.capacity {
		return fmt.Errorf("%w: %d events for a queue of %d", ErrTooLarge, n, q.capacity)
	}
	if err := q.reserve(ctx, n); err != nil {
		return err
	}
	b := &batch{recs: recs, enqueued: time.Now()}
	if l.bufs != nil {
		l.bufs.holders.Store(1)
		b.bufs = l.bufs
	}
	if done != nil && n > 0 {
		b.after = func() { done(recs[n-1].Seq) }
	}
	if err := q.pushBatch(b); err != nil {
		q.unreserve(n)
		return ErrNotOwner
	}
	j.accepted.Add(uint64(n))
	return nil
}

// Do runs fn on partition p's goroutine, after what is queued before it
// and before what comes after, and waits for it (or for ctx). The
// cluster restores and installs state this way, never racing the
// operator.
func (j *Job) Do(ctx context.Context, p int, fn func()) error {
	ran := make(chan struct{})
	b := &batch{run: func() { fn(); close(ran) }, enqueued: time.Now()}
	if err := j.parts[p].q.pushBatch(b); err != nil {
		return ErrNotOwner
	}
	select {
	case <-ran:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// NextSeq is the sequence number partition p gives its next event.
func (j *Job) NextSeq(p int) uint64 { return j.parts[p].q.lastSeq() + 1 }

// SetNextSeq numbers partition p's next event seq: after its state was
// restored from a backup holding the events up to seq-1, so that events
// replayed from the log get the numbers they had. Call through Do.
func (j *Job) SetNextSeq(p int, seq uint64) { j.parts[p].q.setNextSeq(seq) }

// Depth is how many events partition p has queued or in process.
func (j *Job) Depth(p int) int64 { return j.parts[p].q.depth.Load() }

// Route splits recs over the job's partitions as ingest does: by key, and
// the events without one in turn from partition 0, so that the same
// records always split the same way (a cluster forwards the late events
// of a replaced layout with this, under message ids that must repeat).
func (j *Job) Route(recs []Record) [][]Record {
	parts := make([][]Record, len(j.parts))
	keyless := 0
	for _, r := range recs {
		p := 0
		switch {
		case len(j.parts) == 1:
		case r.Key != "":
			p = j.partitionFor(r.Key)
		default:
			p = keyless % len(j.parts)
			keyless++
		}
		parts[p] = append(parts[p], r)
	}
	return parts
}

// CheckSpec validates spec as PutJob would, without starting anything,
// and returns it with its defaults filled in: for a cluster, which stores
// the spec before any node runs it.
func (e *Engine) CheckSpec(spec Spec) (Spec, error) {
	if err := spec.validate(e.cfg.Partitions, e.cfg.QueueSize); err != nil {
		return spec, err
	}
	if err := e.checkMode(spec); err != nil {
		return spec, err
	}
	if _, err := newKindJob(spec); err != nil {
		return spec, err
	}
	mem, err := estimateMemory(spec, false)
	if err != nil {
		return spec, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if old, ok := e.mu.jobs[spec.Name]; ok && !sameSpec(old.spec, spec) {
		return spec, fmt.Errorf("%w: %q", ErrJobExists, spec.Name)
	}
	return spec, e.admit(spec.Name, mem)
}

// Shares says whether jobs of spec's kind share deltas (Sharing), so that
// a cluster can make their delta stream before any node runs the job.
// It builds the kind's state once: for a job being declared, not per
// event. spec must be valid (CheckSpec).
func Shares(spec Spec) bool {
	k, err := newKindJob(spec)
	if err != nil {
		return false
	}
	_, ok := k.instance().(Sharing)
	return ok
}

// Flush has partition p's operator merge what it holds (Operator.Idle)
// on its goroutine, after everything queued before, then runs then (may
// be nil) there too: a graceful hand-off takes its last backup this way.
func (j *Job) Flush(ctx context.Context, p int, then func()) error {
	part := j.parts[p]
	return j.Do(ctx, p, func() {
		part.op.idle(false)
		if then != nil {
			then()
		}
	})
}

// ingestKey is the context key of a request's idempotency key.
type ingestKey struct{}

// WithIngestKey gives a request's idempotency key (the Idempotency-Key
// header) to Commit: in cluster mode the cluster's log drops a retried
// request's messages that it stored already.
func WithIngestKey(ctx context.Context, key string) context.Context {
	if key == "" {
		return ctx
	}
	return context.WithValue(ctx, ingestKey{}, key)
}

// IngestKey is the request's idempotency key ("" when none).
func IngestKey(ctx context.Context) string {
	k, _ := ctx.Value(ingestKey{}).(string)
	return k
}
