package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/cluster/natsnode"
	"github.com/mlstream/mlstream/runtime"
	"github.com/nats-io/nats.go/jetstream"
)

// partState is the cluster's side of one partition of a job on this node:
// whether this node owns it and, while it does, the run that feeds it
// from the log.
type partState struct {
	st *jobState
	p  int

	owned atomic.Bool // processing events of the log (after the take-over)
	// running is set while a run exists (taking over or owning): views
	// are not installed then, a stale one would undo the restore.
	running atomic.Bool
	token   atomic.Uint64 // the lease's fencing token while owned
	ring    posRing       // where the partition's events came from in the log

	// lastDelta is the sequence of this partition's last message on its
	// delta subject (Sharing kinds): the next delta expects it, so an old
	// owner's delta after a take-over is refused by JetStream.
	lastDelta atomic.Uint64
	// lag is the events the owner is behind: queued here plus those the
	// consumer has not fetched.
	lag atomic.Int64
	// unfetched is the events of the partition's subject the owner has not
	// fetched yet (estimated from the size of the last message).
	unfetched atomic.Int64
	// viewRev is the state entry revision last installed as a view.
	viewRev atomic.Uint64
	// viewRec is the events the installed view holds (GET /v1/cluster).
	viewRec atomic.Uint64

	// orphaned is set when a run stopped by itself (a take-over refused,
	// a backup refused as fenced) rather than by the lease's loss or
	// release: if the lease turns out to be still this node's, the
	// partition is started again (Node.resumeOwned).
	orphaned atomic.Bool

	mu  sync.Mutex
	run *ownerRun // nil when not owned
}

// ownerRun is one period of ownership.
type ownerRun struct {
	token    uint64
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{}
	cons     jetstream.Consumer
	consName string
	attempt  int
}

func newPartState(st *jobState, p int) *partState { return &partState{st: st, p: p} }

func (ps *partState) log() []any { return []any{"job", ps.st.name(), "partition", ps.p} }

// start begins owning the partition with the lease's token.
func (ps *partState) start(token uint64) {
	ps.mu.Lock()
	if ps.run != nil && ps.run.token == token {
		ps.mu.Unlock()
		return
	}
	old := ps.run
	ctx, cancel := context.WithCancel(ps.st.n.ctx)
	r := &ownerRun{token: token, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	ps.run = r
	ps.mu.Unlock()
	if old != nil {
		old.cancel()
		<-old.done
	}
	// Not owned until the take-over is done: what the old run queued is
	// processed meanwhile and must not be backed up under the new token.
	ps.owned.Store(false)
	ps.orphaned.Store(false)
	ps.token.Store(token)
	ps.running.Store(true)
	go ps.own(r)
}

// stop ends the ownership: graceful hands over (what was delivered is
// processed and backed up, the consumer is deleted), otherwise it stops
// at once.
func (ps *partState) stop(graceful bool) {
	ps.mu.Lock()
	r := ps.run
	ps.run = nil
	ps.mu.Unlock()
	if r == nil {
		return
	}
	r.cancel()
	<-r.done
	if graceful && ps.owned.Load() {
		ps.handOver(r)
	}
	ps.owned.Store(false)
	ps.running.Store(false)
	ps.viewRev.Store(0) // the next view poll installs whoever owns it next
	if r.consName != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = ps.st.stream(ps.p).DeleteConsumer(ctx, r.consName)
		cancel()
	}
}

// fencedOff stops the run of token after a write of it (a backup, a
// delta) was refused as fenced, but not a newer run of this node that
// took the partition over since. Marked orphaned, the partition starts
// again if its lease turns out to be still this node's (Node.resumeOwned).
func (ps *partState) fencedOff(token uint64) {
	ps.stopOrphaned(token, "fenced off: a newer owner took the partition over", nil)
}

// startOver stops the run of token after a delta of it could not be
// stored (err), for Node.resumeOwned to take the partition over again
// from its last delta stored, which replays the events the lost one held.
func (ps *partState) startOver(token uint64, err error) {
	if ps.stopOrphaned(token, "a delta was not stored: the partition starts over from its last delta", err) {
		ps.st.n.stats.restarts.Add(1)
	}
}

// stopOrphaned stops the run of token, unless a newer run of this node
// took the partition over since, and marks the partition orphaned; it
// says whether it stopped it.
func (ps *partState) stopOrphaned(token uint64, why string, err error) bool {
	if ps.token.Load() != token {
		return false
	}
	args := append(ps.log(), "token", token)
	if err != nil {
		args = append(args, "err", err)
	}
	ps.st.n.log.Warn(why, args...)
	ps.stop(false)
	ps.orphaned.Store(true)
	return true
}

// handOver processes what was delivered, has the operator merge, and
// writes a last backup marked released, waiting for it.
func (ps *partState) handOver(r *ownerRun) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u := ps.unit()
	written := make(chan error, 1)
	err := ps.st.job.Flush(ctx, ps.p, func() {
		if u != nil {
			u.backup(true, written)
		} else {
			written <- nil
		}
	})
	if err == nil {
		select {
		case err = <-written:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if err != nil {
		ps.st.n.log.Warn("hand-over without a last backup: the next owner replays more", append(ps.log(), "err", err)...)
		return
	}
	if ps.st.share != nil {
		ps.st.share.released(ps)
	}
}

func (ps *partState) unit() *unitFT {
	if ps.st.ft == nil {
		return nil
	}
	return ps.st.ft.unitOf(ps.p)
}

// own is one ownership: take over, then consume until stopped.
func (ps *partState) own(r *ownerRun) {
	defer close(r.done)
	defer ps.ended(r)
	for r.ctx.Err() == nil {
		began := time.Now()
		// Each attempt is bounded: a call that keeps failing transiently
		// (a stream without a leader) surfaces in the log and is retried.
		ctx, cancel := context.WithTimeout(r.ctx, takeOverWait)
		pos, err := ps.takeOver(ctx, r)
		if err == nil {
			err = ps.subscribe(ctx, r, pos)
		}
		cancel()
		if errors.Is(err, errFenced) {
			ps.st.n.log.Warn("take-over refused: a newer owner exists", ps.log()...)
			return
		}
		if err != nil {
			if r.ctx.Err() == nil {
				ps.st.n.log.Warn("take-over failed; retrying", append(ps.log(), "err", err)...)
				sleep(r.ctx, 200*time.Millisecond)
			}
			continue
		}
		ps.owned.Store(true)
		ps.announce(r, pos, time.Since(began))
		err = ps.consumeResuming(r, pos)
		if r.ctx.Err() != nil {
			return
		}
		ps.owned.Store(false)
		ps.st.n.log.Warn("consuming stopped; taking over again", append(ps.log(), "err", err)...)
	}
}

// consumeResuming consumes from pos and, each time the consumer fails in
// a way that loses nothing handed over (its server fell silent, it
// stalled, deliveries were lost in flight), goes on with a new consumer
// from the message after the last one handed to the partition: the state
// holds everything before it, in order, so no restore is needed. Other
// failures end it (the caller takes the partition over again).
func (ps *partState) consumeResuming(r *ownerRun, pos position) error {
	for {
		var gone *consumerGone
		err := ps.consume(r, pos)
		if r.ctx.Err() != nil || !errors.As(err, &gone) {
			return err
		}
		if gone.last > 0 {
			pos = position{rec: pos.rec, resume: gone.last + 1}
		}
		ps.st.n.log.Warn("consumer given up; resuming with a new one", append(ps.log(), "err", err, "resume", pos.resume)...)
		ctx, cancel := context.WithTimeout(r.ctx, takeOverWait)
		err = ps.subscribe(ctx, r, pos)
		cancel()
		if err != nil {
			return err
		}
	}
}

// consumerGone is a consumer given up after it handed over the messages
// up to the stream sequence last (0: none) in order.
type consumerGone struct {
	why  string
	last uint64
}

func (e *consumerGone) Error() string { return e.why }

// ended clears the partition's state when run r ended by itself (a newer
// owner refused it) rather than by stop: views of the partition are then
// installed again, and a later lease starts afresh.
func (ps *partState) ended(r *ownerRun) {
	if r.ctx.Err() != nil {
		return // stopped: stop does the rest
	}
	ps.mu.Lock()
	mine := ps.run == r
	if mine {
		ps.run = nil
	}
	ps.mu.Unlock()
	if mine {
		ps.owned.Store(false)
		ps.running.Store(false)
		ps.viewRev.Store(0)
		ps.orphaned.Store(true)
	}
}

// takeOverWait bounds one attempt to take a partition over; callWait
// bounds each JetStream call in it, which is retried while the attempt
// lasts: a request to a leader that died waits for nothing, and the
// take-over goes on within about callWait of the new leader's election.
// setupWait bounds each call that creates or changes streams, consumers
// and buckets, which may take longer than callWait.
const (
	takeOverWait = 15 * time.Second
	callWait     = 1500 * time.Millisecond
	setupWait    = 5 * time.Second
)

// position is where a new owner resumes in the log.
type position struct {
	rec      uint64 // the last event the restored state holds
	resume   uint64 // stream sequence to replay from (0: from the start)
	skip     int    // events of the message at resume the state holds
	from     string // the node that wrote the state
	at       time.Time
	graceful bool
	damaged  string // the latest backup did not decode, and what was restored instead
}

// takeOver fences the partition's state (or delta subject) with this
// run's token, restores the state on the partition's goroutine and
// numbers the events that follow.
func (ps *partState) takeOver(ctx context.Context, r *ownerRun) (position, error) {
	var pos position
	var err error
	if ps.st.share != nil {
		pos, err = ps.st.share.fence(ctx, ps, r.token)
	} else if u := ps.unit(); u != nil {
		pos, err = ps.fenceState(ctx, u, r.token)
	} else {
		pos, err = ps.livePosition(ctx)
	}
	if err != nil {
		return pos, err
	}
	err = ps.st.job.Do(ctx, ps.p, func() {
		// Here, after everything queued before: the ring then maps only
		// what this run delivers.
		ps.ring.reset(pos)
		if ps.st.share != nil {
			ps.st.job.ResetPartition(ps.p, pos.rec)
		}
		ps.st.job.SetNextSeq(ps.p, pos.rec+1)
	})
	return pos, err
}

// fenceState takes the partition's state entry over and restores it. A
// backup that does not decode, or does not apply, never blocks the
// take-over: an older one, or nothing (the partition replays what its
// stream retains), is restored instead, logged and named in the failover
// message.
func (ps *partState) fenceState(ctx context.Context, u *unitFT, token uint64) (position, error) {
	h, state, rev, err := ps.st.n.store().fence(ctx, stateKey(ps.st.id, ps.p), token)
	if err != nil {
		return position{}, err
	}
	u.rev.Store(rev)
	pos := position{rec: h.Rec, resume: h.Resume, skip: h.Skip, from: h.Node, at: h.Created, graceful: h.Released, damaged: h.damaged}
	backedUp := state != nil
	if !backedUp {
		// Nothing backed up yet: start from nothing, whatever this node's
		// copy of the partition holds.
		if u.zero == nil {
			return pos, errors.New("cluster: no empty state to start the partition from")
		}
		state, h.Seqs = u.zero, []uint64{0}
		pos.rec, pos.resume, pos.skip = 0, 0, 0
	}
	rerr, err := ps.install(ctx, u, h, state)
	if err == nil && rerr != nil && backedUp {
		pos.damaged = fmt.Sprintf("the backup %s does not apply: %v; the state is rebuilt by replaying what the stream retains",
			stateKey(ps.st.id, ps.p), rerr)
		pos.rec, pos.resume, pos.skip = 0, 0, 0
		rerr, err = ps.install(ctx, u, stateHeader{Seqs: []uint64{0}}, u.zero)
	}
	if err == nil {
		err = rerr
	}
	if pos.damaged != "" {
		ps.st.n.log.Error("damaged backup at take-over", append(ps.log(), "damage", pos.damaged)...)
	}
	return pos, err
}

// install restores state on the partition's goroutine: err when that
// could not be done, rerr the restore's own error.
func (ps *partState) install(ctx context.Context, u *unitFT, h stateHeader, state []byte) (rerr, err error) {
	err = ps.st.job.Do(ctx, ps.p, func() { rerr = u.install(h, state) })
	return rerr, err
}

// livePosition is where a partition without backups starts: the end of
// the log (mode none keeps nothing of what came before).
func (ps *partState) livePosition(ctx context.Context) (position, error) {
	var info *jetstream.StreamInfo
	err := natsnode.RetryEach(ctx, callWait, func(ctx context.Context) error {
		var err error
		info, err = ps.st.stream(ps.p).Info(ctx)
		return err
	})
	if err != nil {
		return position{}, err
	}
	return position{resume: info.State.LastSeq + 1}, nil
}

// consumerPrefix names this partition's consumers: one per owner token
// and attempt, "p<partition>-t<token>-<attempt>".
func consumerPrefix(p int) string { return "p" + strconv.Itoa(p) + "-t" }

// consumerOf parses the token and attempt of one of the partition's
// consumer names.
func (ps *partState) consumerOf(name string) (token uint64, attempt int, ok bool) {
	rest, found := strings.CutPrefix(name, consumerPrefix(ps.p))
	if !found {
		return 0, 0, false
	}
	t, a, found := strings.Cut(rest, "-")
	if !found {
		return 0, 0, false
	}
	token, err1 := strconv.ParseUint(t, 10, 64)
	attempt, err2 := strconv.Atoi(a)
	return token, attempt, err1 == nil && err2 == nil
}

// subscribe creates this run's durable pull consumer from the position
// and deletes those of earlier owners.
func (ps *partState) subscribe(ctx context.Context, r *ownerRun, pos position) error {
	s := ps.st.stream(ps.p)
	// A name per attempt: a consumer's start cannot be changed, and a run
	// that takes over again starts where its backup says.
	r.attempt++
	r.consName = consumerPrefix(ps.p) + strconv.FormatUint(r.token, 10) + "-" + strconv.Itoa(r.attempt)
	cfg := jetstream.ConsumerConfig{Durable: r.consName, FilterSubject: inputSubject(ps.st.id, ps.p),
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: -1,
		MaxAckPending: ps.maxAckPending(), InactiveThreshold: 2 * time.Minute, DeliverPolicy: jetstream.DeliverAllPolicy,
		// In memory, with the stream's replicas: a consumer is only its
		// owner's cursor (a new owner makes its own from the backup's
		// position), but a single replica may sit on a peer that froze or
		// was cut off, and then never answers.
		MemoryStorage: true}
	if pos.resume > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, pos.resume
	}
	err := natsnode.RetryEach(ctx, callWait, func(ctx context.Context) error {
		var err error
		r.cons, err = s.CreateOrUpdateConsumer(ctx, cfg)
		return err
	})
	if err != nil {
		return err
	}
	// Cleanup, off the take-over's path: listing consumers waits for the
	// stream's leader, which may be the one being elected, and the old
	// consumers go by themselves when inactive.
	go ps.deleteOldConsumers(r.token, r.attempt)
	return nil
}

// maxAckPending is AF-Stream's Γ in messages: how many the owner may have
// fetched and not yet processed.
func (ps *partState) maxAckPending() int { return 64 }

// deleteOldConsumers deletes the partition's consumers made before the
// one of (token, attempt): by earlier owners (smaller tokens) or earlier
// attempts of this run. A later attempt's consumer is left alone.
func (ps *partState) deleteOldConsumers(token uint64, attempt int) {
	ctx, cancel := context.WithTimeout(ps.st.n.ctx, 30*time.Second)
	defer cancel()
	s := ps.st.stream(ps.p)
	var old []string
	for name := range s.ConsumerNames(ctx).Name() {
		if t, a, ok := ps.consumerOf(name); ok && (t < token || t == token && a < attempt) {
			old = append(old, name)
		}
	}
	for _, name := range old {
		_ = natsnode.RetryEach(ctx, callWait, func(ctx context.Context) error {
			err := s.DeleteConsumer(ctx, name)
			if errors.Is(err, jetstream.ErrConsumerNotFound) {
				return nil
			}
			return err
		})
	}
}

// consume feeds the partition from the consumer until the run ends or
// the consumer fails.
func (ps *partState) consume(r *ownerRun, pos position) error {
	// Short pulls with heartbeats: a consumer whose server froze or died
	// is noticed in seconds, and the run makes a new one elsewhere.
	it, err := r.cons.Messages(jetstream.PullMaxBytes(16<<20), jetstream.PullExpiry(4*time.Second), jetstream.PullHeartbeat(time.Second))
	if err != nil {
		return err
	}
	go func() {
		<-r.ctx.Done()
		it.Stop()
	}()
	w := &stallWatch{stalled: make(chan struct{}), done: make(chan struct{})}
	w.touch()
	defer close(w.done)
	go w.watch(r, it)
	skip := pos.skip
	// The stream sequence last handed over, and the consumer's last
	// delivery sequence received (a new consumer's first is 1).
	var last, delivery uint64
	silent := 0
	for {
		msg, err := it.Next()
		if err != nil {
			if r.ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				select {
				case <-w.stalled:
					return &consumerGone{"the consumer has messages pending and delivers none", last}
				default:
					return r.ctx.Err()
				}
			}
			if errors.Is(err, jetstream.ErrNoHeartbeat) {
				if silent++; silent >= maxSilent {
					return &consumerGone{"the consumer's server is silent: " + err.Error(), last}
				}
				continue
			}
			if natsnode.Transient(err) {
				continue // the pull goes on by itself (a leader changed)
			}
			return err
		}
		silent = 0
		md, err := msg.Metadata()
		if err != nil {
			_ = msg.Term()
			continue
		}
		// Deliveries lost in flight (a consumer leader changed) come
		// again only after AckWait, behind later messages: going on
		// would hand events over out of order, and a backup taken
		// meanwhile would resume past the lost ones.
		if md.Sequence.Consumer != delivery+1 {
			return &consumerGone{fmt.Sprintf("deliveries lost in flight (consumer sequence %d after %d)", md.Sequence.Consumer, delivery), last}
		}
		delivery = md.Sequence.Consumer
		if md.Sequence.Stream <= last {
			_ = msg.Ack() // a redelivery of what this run processed
			continue
		}
		last = md.Sequence.Stream
		w.busy.Store(true)
		err = ps.deliver(r, msg, md, &skip)
		w.busy.Store(false)
		w.touch()
		if err != nil {
			return err
		}
	}
}

// stallAfter is how long a consumer may deliver nothing while it says
// messages are pending before the run gives it up (a consumer without a
// quorum after a leader election still sends heartbeats, and delivers
// nothing).
const stallAfter = 6 * time.Second

// stallWatch notices a consumer that stalled.
type stallWatch struct {
	last    atomic.Int64 // unix nanos of the last message handled
	busy    atomic.Bool  // handing a message to the partition (which may wait for room)
	stalled chan struct{}
	done    chan struct{}
}

func (w *stallWatch) touch() { w.last.Store(time.Now().UnixNano()) }

// watch checks every stallAfter/3 whether the consumer stalled, and then
// stops the iterator.
func (w *stallWatch) watch(r *ownerRun, it jetstream.MessagesContext) {
	tick := time.NewTicker(stallAfter / 3)
	defer tick.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-r.ctx.Done():
			return
		case <-tick.C:
		}
		if w.busy.Load() || time.Since(time.Unix(0, w.last.Load())) < stallAfter {
			continue
		}
		ctx, cancel := context.WithTimeout(r.ctx, stallAfter/3)
		info, err := r.cons.Info(ctx)
		cancel()
		// A consumer that cannot say how it is (no leader, no quorum)
		// while nothing comes is as stalled as one with messages pending.
		if err != nil && r.ctx.Err() == nil || err == nil && info.NumPending > 0 {
			close(w.stalled)
			it.Stop()
			return
		}
	}
}

// maxSilent is how many missed heartbeats in a row make a run give its
// consumer up and take the partition over again with a new one.
const maxSilent = 3

// deliver hands one message's events to the partition.
func (ps *partState) deliver(r *ownerRun, msg jetstream.Msg, md *jetstream.MsgMetadata, skip *int) error {
	logged, err := runtime.DecodeLogged(msg.Data())
	if err != nil {
		ps.st.n.log.Error("unreadable message in the log: skipped", append(ps.log(), "seq", md.Sequence.Stream, "err", err)...)
		ps.st.n.stats.poison.Add(1)
		_ = msg.Term()
		return nil
	}
	skipped := 0
	if *skip > 0 {
		skipped = min(*skip, len(logged.Recs))
		logged.Recs = logged.Recs[skipped:]
		*skip = 0
	}
	n := len(logged.Recs)
	ps.unfetched.Store(int64(md.NumPending) * int64(max(n, 1)))
	ps.lag.Store(ps.unfetched.Load() + ps.st.job.Depth(ps.p))
	if n == 0 {
		logged.Release()
		return msg.Ack()
	}
	ps.ring.add(n, md.Sequence.Stream, skipped)
	err = ps.st.job.Deliver(r.ctx, ps.p, logged, func(uint64) { _ = msg.Ack() })
	if err != nil {
		logged.Release()
		return fmt.Errorf("delivering to the partition: %w", err)
	}
	return nil
}

// announce publishes the take-over as a failover message and logs it.
func (ps *partState) announce(r *ownerRun, pos position, took time.Duration) {
	n := ps.st.n
	p := ps.p
	f := runtime.Failover{Partition: &p, From: pos.from, To: n.cfg.Node, Token: r.token, Graceful: pos.graceful,
		TookMs: took.Milliseconds(), ReplayFrom: pos.resume, Damaged: pos.damaged}
	if !pos.at.IsZero() {
		f.SinceLastWriteMs = time.Since(pos.at).Milliseconds()
	}
	if f.From == n.cfg.Node {
		f.From = ""
	}
	n.stats.takeovers.Add(1)
	if !f.Graceful && f.From != "" {
		n.stats.failovers.Add(1)
	}
	n.recordMove(ps.st.name(), f)
	n.log.Info("partition taken over", append(ps.log(), "from", f.From, "graceful", f.Graceful, "token", r.token,
		"rec", pos.rec, "replay_from", pos.resume, "skip", pos.skip, "took", took.String())...)
	if msg, err := runtime.EncodeFailover(ps.st.name(), time.Now().UnixMilli(), f); err == nil {
		n.engine.Hub().Publish(ps.st.name(), runtime.TypeFailover, msg)
	}
}

// posRing maps the partition's event sequence numbers to the log messages
// they came from, for the backups' resume positions.
type posRing struct {
	mu      sync.Mutex
	next    uint64 // sequence number of the next event delivered
	entries []posEntry
	// base is the position of the restored state (or of the last
	// backup): where to resume while nothing newer is in the state.
	base position
}

type posEntry struct {
	first, last uint64 // event sequence numbers
	seq         uint64 // the message's stream sequence
	// skipped is how many events at the start of the message were not
	// delivered (a resume inside it): event first is the message's
	// skipped+1-th.
	skipped int
}

const maxRing = 1 << 16

func (r *posRing) reset(base position) {
	r.mu.Lock()
	r.next, r.entries, r.base = base.rec+1, r.entries[:0], base
	r.mu.Unlock()
}

func (r *posRing) add(n int, seq uint64, skipped int) {
	r.mu.Lock()
	if len(r.entries) == maxRing {
		r.entries = append(r.entries[:0], r.entries[maxRing/2:]...)
	}
	r.entries = append(r.entries, posEntry{r.next, r.next + uint64(n) - 1, seq, skipped})
	r.next += uint64(n)
	r.mu.Unlock()
}

// position says where to resume once the events up to rec are in the
// state, as (resume, skip) of stateHeader; ok false when the ring no
// longer knows rec (the backup is then not written).
func (r *posRing) position(rec uint64) (resume uint64, skip int, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec == r.base.rec {
		return r.base.resume, r.base.skip, true
	}
	for i := len(r.entries) - 1; i >= 0; i-- {
		e := r.entries[i]
		if rec > e.last {
			break
		}
		if rec >= e.first {
			if rec == e.last {
				return e.seq + 1, 0, true
			}
			return e.seq, e.skipped + int(rec-e.first+1), true
		}
	}
	return 0, 0, false
}

func (r *posRing) basePosition() position {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.base
}

// backedUp makes rec's position the base and forgets the messages wholly
// before it.
func (r *posRing) backedUp(rec, resume uint64, skip int) {
	r.mu.Lock()
	r.base = position{rec: rec, resume: resume, skip: skip}
	i := 0
	for i < len(r.entries) && r.entries[i].last < rec {
		i++
	}
	r.entries = append(r.entries[:0], r.entries[i:]...)
	r.mu.Unlock()
}

// loop is a goroutine running a step every period, for the parts that
// must stop before the node's connection closes: stop waits for it.
type loop struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func startLoop(period time.Duration, step func()) *loop {
	ctx, cancel := context.WithCancel(context.Background())
	l := &loop{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		every(ctx, period, step)
	}()
	return l
}

// stop ends the loop and waits for its last step; nil is a loop never
// started.
func (l *loop) stop() {
	if l == nil {
		return
	}
	l.cancel()
	<-l.done
}

// every runs fn every d until ctx ends.
func every(ctx context.Context, d time.Duration, fn func()) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			fn()
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
