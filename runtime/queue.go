package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sync/semaphore"
)

// b2s views bytes as a string without copying, for hashing only: the
// string must not outlive b.
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// batch is a run of records for one partition, queued together.
type batch struct {
	recs     []Record
	enqueued time.Time
	logged   bool // in the item log; guarded by the queue's mutex
	// bufs hold the arrays recs is in, released when the batch is done.
	bufs *buffers
	// after, if set, is called on the partition's goroutine once the
	// batch is processed (cluster mode acknowledges its message there).
	after func()
	// run, if set, makes this a batch of no records that runs run on the
	// partition's goroutine instead (Job.Do).
	run func()
	// commit, in mode exact, holds the batch until its request is durable,
	// and drops it if the request was refused (durability.go).
	commit *commitGate
}

// queue is a partition's bounded input: capacity is counted in events,
// reserved before anything is appended, so a request is queued whole or
// not at all. One goroutine (the partition) takes from it.
type queue struct {
	capacity int64
	room     *semaphore.Weighted // free capacity, in events
	depth    atomic.Int64        // events queued or being processed
	notify   chan struct{}       // capacity 1: wakes the partition
	ft       batchLogger         // nil without fault tolerance
	// heldBack counts senders held back by waitPending now, heldBackTotal
	// every time one was, heldBackNs the time they waited.
	heldBack      atomic.Int64
	heldBackTotal atomic.Uint64
	heldBackNs    atomic.Int64

	mu struct {
		sync.Mutex
		batches []*batch // queued: appended by push, swapped out by take
		// inflight are the batches taken and not yet done, oldest first:
		// still pending for fault tolerance until processed.
		inflight []*batch
		nextSeq  uint64 // next sequence number to assign
		closed   bool
		done     chan struct{} // closed when a batch is done, for waitPending
	}
}

// batchLogger is a partition's fault tolerance as its queue sees it. The
// queue tells it, under the queue's lock, of every batch pushed and
// retired, and it decides what goes to the item log (setting
// batch.logged); the queue's lists stay the queue's.
type batchLogger interface {
	// pushed is called when b got its sequence numbers; req is its
	// request's share in mode exact, or nil. An error refuses the batch.
	pushed(b *batch, req *ftRequest) error
	// retired is called when b was processed.
	retired(b *batch)
	// holdsBack says whether senders may ever be held back (waitPending);
	// called without the lock, it must not change.
	holdsBack() bool
	// mustWait says whether a sender of n events must be held back now.
	mustWait(n int) bool
	// pendingEvents is how many events are pending without an item backup.
	pendingEvents() int64
}

func newQueue(capacity int) *queue {
	q := &queue{capacity: int64(capacity), room: semaphore.NewWeighted(int64(capacity)), notify: make(chan struct{}, 1)}
	q.mu.nextSeq = 1
	return q
}

var errQueueClosed = errors.New("runtime: queue closed")

// waitPending holds a sender back, until ctx ends, while n more events
// would make more than l pending without an item backup (mode approx).
// A sender that waited in vain goes on, and its push logs the pending
// events: AF-Stream's rule. Holding back first keeps item backups for
// real overload, where the paper has them, instead of every time a deep
// queue forms.
func (q *queue) waitPending(ctx context.Context, n int) {
	if q.ft == nil || !q.ft.holdsBack() {
		return
	}
	var since time.Time
	defer func() {
		if !since.IsZero() {
			q.heldBack.Add(-1)
			q.heldBackNs.Add(int64(time.Since(since)))
		}
	}()
	for {
		q.mu.Lock()
		if !q.ft.mustWait(n) || q.mu.closed {
			q.mu.Unlock()
			return
		}
		if q.mu.done == nil {
			q.mu.done = make(chan struct{})
		}
		ch := q.mu.done
		q.mu.Unlock()
		if since.IsZero() {
			since = time.Now()
			q.heldBack.Add(1)
			q.heldBackTotal.Add(1)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// reserve waits until n events fit, or ctx ends. Room that is there now
// is taken even if ctx has just ended (Acquire alone would refuse it).
func (q *queue) reserve(ctx context.Context, n int) error {
	if q.room.TryAcquire(int64(n)) {
		return nil
	}
	return q.room.Acquire(ctx, int64(n))
}

// unreserve gives back room that was reserved but not used.
func (q *queue) unreserve(n int) { q.room.Release(int64(n)) }

// pushBatch appends b (its room reserved), stamping its records'
// sequence numbers.
func (q *queue) pushBatch(b *batch) error { return q.pushBatchFT(b, nil) }

// pushBatchFT appends b as pushBatch does; req is its request's share of
// the job in mode exact, or nil. b.bufs hold the arrays of its records (or
// are nil), released once they are processed.
func (q *queue) pushBatchFT(b *batch, req *ftRequest) error {
	q.mu.Lock()
	if q.mu.closed {
		q.mu.Unlock()
		return errQueueClosed
	}
	for i := range b.recs {
		b.recs[i].Seq = q.mu.nextSeq
		q.mu.nextSeq++
	}
	if q.ft != nil && b.run == nil {
		if err := q.ft.pushed(b, req); err != nil {
			q.mu.Unlock()
			return fmt.Errorf("%w: %w", ErrDurability, err)
		}
	}
	q.mu.batches = append(q.mu.batches, b)
	q.depth.Add(int64(len(b.recs)))
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
	return nil
}

// take swaps out everything queued; closed reports that no more will
// come. The batches stay in flight until done.
func (q *queue) take(buf []*batch) (out []*batch, closed bool) {
	q.mu.Lock()
	out, q.mu.batches = q.mu.batches, buf[:0]
	closed = q.mu.closed
	q.mu.inflight = append(q.mu.inflight, out...)
	q.mu.Unlock()
	return out, closed
}

// logged says whether b is in the item log, as the partition starts it.
func (q *queue) logged(b *batch) bool {
	if q.ft == nil {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return b.logged
}

// done retires the oldest batch in flight, b, once processed, and
// releases its room.
func (q *queue) done(b *batch) {
	n := len(b.recs)
	q.mu.Lock()
	q.mu.inflight[0] = nil
	q.mu.inflight = q.mu.inflight[1:]
	if q.ft != nil && b.run == nil {
		q.ft.retired(b)
	}
	if q.mu.done != nil {
		close(q.mu.done)
		q.mu.done = nil
	}
	q.mu.Unlock()
	q.depth.Add(-int64(n))
	q.room.Release(int64(n))
	if b.after != nil {
		b.after() // before the release: it may read the records
	}
	b.bufs.release()
}

// close stops new pushes; what is queued is still processed.
func (q *queue) close() {
	q.mu.Lock()
	q.mu.closed = true
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// unlogged is how many events are pending (queued or being processed)
// without an item backup: what fault tolerance's L bounds.
func (q *queue) unlogged() int64 {
	if q.ft == nil {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ft.pendingEvents()
}

// setNextSeq numbers the next event seq, after a recovery: before the
// partition starts.
func (q *queue) setNextSeq(seq uint64) {
	q.mu.Lock()
	q.mu.nextSeq = seq
	q.mu.Unlock()
}

// lastSeq is the sequence number of the last queued event.
func (q *queue) lastSeq() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.mu.nextSeq - 1
}
