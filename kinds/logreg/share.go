package logreg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/learners"
	"github.com/mlstream/mlstream/runtime"
)

// Shared deltas (runtime.Sharing), for cluster mode: the partitions of one
// job run on several nodes, each node holding its own instance of the job
// with every partition, of which only those it owns get events. A
// partition's merge then does not fold its learner's updates into the
// global model: it encodes them as a delta and hands it to the cluster's
// send, which puts every delta of the job in one order; every node applies
// every delta, its own partitions' included, in that order (ApplyDelta),
// and that is the only way the model changes. Every node's model is thus
// the same function of the same deltas: equal bit for bit at equal
// versions. The learners are shared (learners.Learner.SetShared): they
// never write the model, not even a feature's adaptive scale.
//
// Between its send and the apply of its delta a partition's learner
// predicts from the global model without the updates it sent: a lag of
// one round trip. The names dictionary stays each node's own (it names
// the features that node saw). Model import is not supported (it would
// replace one node's copy only).
//
// Consistency rounds (bsp, ssp) pace the partitions across nodes: under
// them a delta says which round its partition completed and whether the
// partition is busy (format deltaFormatRound), and a node applying the
// delta of a partition it does not run records that in its clock
// (runtime.SyncClock.Observe), so its own partitions wait for the remote
// ones as for each other. A partition that goes idle says so in a delta
// (with nothing else, if need be); one whose owner died says nothing and
// counts as idle after the clock's silence. Under bsp and ssp a partition
// sends its round's delta only once its previous one was applied on its
// node (at most maxInFlight): a round is announced with its updates.
// Remote partitions count as having merged a round when their delta is
// applied here, local ones when they sent it (their learners see their
// updates in flight).
//
// A delta, little-endian:
//
//	byte     format (deltaFormat, deltaFormatExtra or deltaFormatRound)
//	uvarint  partition
//	uvarint  lastSeq: sequence number of the last event the delta holds
//	uvarint  labelled events learned (the model's update count grows by it)
//	         format deltaFormatRound only:
//	uvarint  round: the consistency rounds the partition completed, this
//	         delta's included (at most maxDeltaRound)
//	uvarint  flags: 1 the partition is busy, 0 it went idle
//	         formats deltaFormatExtra and deltaFormatRound:
//	uvarint  a drift action (drift.go), applied after the delta's slots; 0 none
//	uvarint  length of the changes of the partition's held predictions
//	         (labels_ft.go: counts and changes), 0 if none, then that many bytes
//	uvarint  length of the partition's progressive metrics, 0 if none,
//	         then that many bytes (learners.Progressive.MarshalBinary)
//	the slot section (learners.Learner.AppendDelta)
//
// A partition sends its metrics with a delta when they changed and at
// least metricsEvery passed since it last sent them (and at shutdown), so
// that every node's status shows every partition's metrics.

var (
	_ runtime.Sharing            = (*logregJob)(nil)
	_ runtime.PartitionResetting = (*logregJob)(nil)
)

// deltaFormat is the leading byte of a delta: its format's version.
// deltaFormatExtra is a delta that also carries a drift action or
// changes of the partition's held predictions (delayed labels): every
// node keeps each partition's held set as of its last delta, so that a
// node taking the partition over has it. deltaFormatRound also carries
// the partition's consistency round and activity: sent by jobs under bsp
// or ssp only, so that an async job's deltas stay readable by nodes that
// predate it.
const (
	deltaFormat      = 1
	deltaFormatExtra = 2
	deltaFormatRound = 3
)

// deltaBusy is the flag of a deltaFormatRound delta whose partition is
// busy.
const deltaBusy = 1

// maxDeltaRound bounds a delta's round: far more than any job completes
// (a round a millisecond for 35 years), small enough that a round plus
// any staleness never overflows in the clock.
const maxDeltaRound = 1 << 40

// metricsEvery is how often at most a partition's deltas carry its
// progressive metrics (tens of kilobytes each).
const metricsEvery = time.Second

// maxDeltaEvents bounds a delta's count of labelled events: far more than
// any partition learns between two merges, small enough that sums of them
// never overflow.
const maxDeltaEvents = 1 << 40

// errBadDelta is a delta this job cannot apply.
var errBadDelta = errors.New("logreg: malformed delta")

// jobShare is a job's side of shared deltas; the zero value is off.
type jobShare struct {
	send func(partition int, lastSeq uint64, delta []byte) error
	// Counts for the status.
	sent, sendErrors, applied, refused atomic.Int64
	// dropped counts events dropped after a failed send, waiting for
	// their replay (partShare.gapUpTo).
	dropped atomic.Int64
}

// partShare is a partition's side of shared deltas.
type partShare struct {
	sentSeq      uint64 // lastSeq of the last delta sent, on the partition's goroutine
	metricsCount int64  // prog's count when its metrics were last sent
	metricsAt    time.Time
	sentAt       time.Time
	// sentMark is sentSeq+1 (0: none sent), for the applying goroutine:
	// deltas up to it are this node's own, whose metrics it has fresher.
	sentMark atomic.Uint64
	// appliedMark is 1 + the lastSeq of the partition's latest delta
	// applied on this node.
	appliedMark atomic.Uint64
	// gapUpTo is the lastSeq of a delta whose send failed, until the
	// events it held come again (replayed) or the state holds them; 0:
	// none. Meanwhile the partition drops its events: a delta of later
	// ones would claim, by its lastSeq, the lost ones too.
	gapUpTo uint64
	// action is a drift action (drift.go) for the next delta to carry;
	// 0: none.
	action uint64
	// sentCounts are the held predictions' counts the last delta sent;
	// encCounts those of the delta being sent.
	sentCounts, encCounts labelCounts
	// round and busy are what the partition's next delta announces under
	// bsp and ssp: the rounds it completed, and whether it has work;
	// sentRound and sentBusy what its last one announced.
	round, sentRound uint64
	busy, sentBusy   bool
	// landing gets a token when a delta of the partition is applied here.
	landing chan struct{}
}

// ShareDeltas switches the job to shared deltas (runtime.Sharing); called
// before the partitions start.
func (j *logregJob) ShareDeltas(send func(partition int, lastSeq uint64, delta []byte) error) {
	j.share.send = send
	for _, p := range j.parts {
		p.learner.SetShared()
	}
}

func (j *logregJob) sharing() bool { return j.share.send != nil }

// maxInFlight is how long a partition waits at most for its delta to be
// applied on its own node before it sends the next one anyway.
const maxInFlight = 2 * time.Second

// retryInFlight is how soon an idle partition whose delta is in flight
// tries again to send what it learned since.
const retryInFlight = 2 * time.Millisecond

// sendDelta is a partition's merge in sharing mode: it sends what was
// learned since the last send and keeps nothing of it, sent or not. force
// (at shutdown) sends metrics that changed however recently they were
// sent, and does not wait for a delta in flight.
//
// While its previous delta is in flight (sent, not applied here yet) the
// partition sends nothing and learns on, its learner seeing the updates in
// flight (learners.Learner.AppendDelta): one delta in flight at a time is
// what lets the learner drop them from its view exactly when the model
// gets them, whatever the stream's latency.
func (p *logregPart) sendDelta(now time.Time, force bool) {
	p.landed()
	if !force && p.inFlight(now) {
		return
	}
	metrics := p.metricsDue(now, force)
	if p.learner.Pending() == 0 && p.learner.Touched() == 0 && p.share.sentSeq == p.lastSeq && metrics == nil && p.share.action == 0 && !p.heldChanged() && !p.announceDue() {
		return
	}
	delta := p.encodeDelta(metrics)
	err := p.job.share.send(p.index, p.lastSeq, delta)
	p.unlogged = 0
	p.unacked.Store(0)
	if err != nil {
		p.sendFailed(now, metrics != nil)
	} else {
		p.deltaSent(now, metrics != nil)
	}
}

func (p *logregPart) deltaSent(now time.Time, withMetrics bool) {
	p.job.share.sent.Add(1)
	p.announced()
	p.share.action = 0
	p.share.sentCounts = p.share.encCounts
	p.share.sentSeq, p.share.sentAt = p.lastSeq, now
	p.share.sentMark.Store(p.lastSeq + 1)
	if withMetrics {
		p.share.metricsCount, p.share.metricsAt = p.prog.Count(), now
	}
}

// sendFailed forgets the updates of a delta that was not sent. Its events
// come again: the partition's next owner replays them, or, when this node
// keeps the partition, its run starts over from its last delta (the
// cluster's send does that); no later delta of this run may claim them
// (replayed), and its metrics are retried in metricsEvery.
func (p *logregPart) sendFailed(now time.Time, withMetrics bool) {
	p.job.share.sendErrors.Add(1)
	// Not retried alone: the next delta carries the round, and other
	// nodes count a partition they hear nothing from as idle.
	p.announced()
	if p.lastSeq != p.share.sentSeq {
		p.share.gapUpTo = p.lastSeq
	}
	p.lastSeq = p.share.sentSeq
	p.learner.ClearInFlight()
	// The held predictions go back to the last delta applied: the events
	// that changed them since come again.
	p.job.merge.Lock()
	p.job.restorePart(p.index)
	p.share.sentCounts = p.job.committed[p.index].counts
	p.job.merge.Unlock()
	if withMetrics {
		p.share.metricsAt = now
	}
}

// replayed reports whether the partition, dropping events since a failed
// send, may take the event of sequence number seq: one the failed delta
// held (their replay has begun), or any once this node applied a delta
// that holds them (another node replayed them). It counts those dropped.
func (p *logregPart) replayed(seq uint64) bool {
	s := &p.share
	if seq <= s.gapUpTo || s.appliedMark.Load() > s.gapUpTo {
		s.gapUpTo = 0
		return true
	}
	p.job.share.dropped.Add(1)
	return false
}

// landed drops the partition's delta in flight from its learner's view
// once this node applied it: checked before each event learned, so that
// the learner counts its updates twice (model and view) for one event at
// most.
func (p *logregPart) landed() {
	if p.learner.InFlight() && p.share.appliedMark.Load() >= p.share.sentMark.Load() {
		p.learner.ClearInFlight()
	}
}

// inFlight reports whether the partition's last delta is not yet applied
// on this node, and was sent less than maxInFlight ago.
func (p *logregPart) inFlight(now time.Time) bool {
	return p.share.appliedMark.Load() < p.share.sentMark.Load() && now.Sub(p.share.sentAt) < maxInFlight
}

// idleWait is how soon an idle partition wants to be called again: to
// send what waited for a delta in flight, or metrics that changed.
func (p *logregPart) idleWait(now time.Time) time.Duration {
	if p.inFlight(now) && (p.learner.Pending() > 0 || p.learner.Touched() > 0 || p.lastSeq != p.share.sentSeq || p.announceDue()) {
		return retryInFlight
	}
	return p.metricsWait(now)
}

// metricsDue returns the partition's encoded metrics if they are to go
// with the next delta, else nil.
func (p *logregPart) metricsDue(now time.Time, force bool) []byte {
	if p.prog.Count() == p.share.metricsCount || !force && now.Sub(p.share.metricsAt) < metricsEvery {
		return nil
	}
	b, _ := p.prog.MarshalBinary() // never fails
	return b
}

// metricsWait is how soon an idle partition must send metrics that
// changed since their last send; 0 if none did.
func (p *logregPart) metricsWait(now time.Time) time.Duration {
	if p.prog.Count() == p.share.metricsCount {
		return 0
	}
	return max(metricsEvery-now.Sub(p.share.metricsAt), time.Millisecond)
}

// encodeDelta encodes the learner's pending updates (clearing them) and
// metrics, if any, as a delta.
func (p *logregPart) encodeDelta(metrics []byte) []byte {
	const perSlot = 1 + 3*8 + 2 // flags, at most three floats, a short gap
	b := make([]byte, 0, 5*binary.MaxVarintLen64+len(metrics)+p.learner.Touched()*perSlot)
	b = append(b, deltaFormat)
	b = binary.AppendUvarint(b, uint64(p.index))
	b = binary.AppendUvarint(b, p.lastSeq)
	b = binary.AppendUvarint(b, uint64(p.learner.Pending()))
	held := p.heldChanges()
	if p.job.pacesRemote() {
		b[0] = deltaFormatRound
		b = binary.AppendUvarint(b, p.share.round)
		var flags uint64
		if p.share.busy {
			flags = deltaBusy
		}
		b = binary.AppendUvarint(b, flags)
	} else if p.share.action != 0 || held != nil {
		b[0] = deltaFormatExtra
	}
	if b[0] != deltaFormat {
		b = binary.AppendUvarint(b, p.share.action)
		b = binary.AppendUvarint(b, uint64(len(held)))
		b = append(b, held...)
	}
	b = binary.AppendUvarint(b, uint64(len(metrics)))
	b = append(b, metrics...)
	b, _ = p.learner.AppendDelta(b)
	return b
}

// deltaHeader is what a delta carries besides its slots.
type deltaHeader struct {
	partition int
	lastSeq   uint64
	labelled  uint64
	action    uint64                // a drift action, 0 if none
	held      *heldChanges          // nil if none
	metrics   *learners.Progressive // nil if none
	slots     []byte
	// round and busy are there if rounds (deltaFormatRound).
	rounds bool
	round  uint64
	busy   bool
}

// readDeltaHeader decodes and checks a delta's header, held predictions
// and metrics.
func (j *logregJob) readDeltaHeader(delta []byte) (h deltaHeader, err error) {
	if len(delta) == 0 || delta[0] < deltaFormat || delta[0] > deltaFormatRound {
		return h, fmt.Errorf("%w: not format %d, %d or %d", errBadDelta, deltaFormat, deltaFormatExtra, deltaFormatRound)
	}
	r := deltaReader{rest: delta[1:]}
	part, lastSeq, labelled := r.uvarint(), r.uvarint(), r.uvarint()
	var held []byte
	var flags uint64
	if delta[0] == deltaFormatRound {
		h.rounds, h.round, flags = true, r.uvarint(), r.uvarint()
		h.busy = flags == deltaBusy
	}
	if delta[0] != deltaFormat {
		h.action = r.uvarint()
		held = r.bytes(r.uvarint())
	}
	metrics := r.bytes(r.uvarint())
	switch {
	case r.err != nil:
		return h, r.err
	case h.action > actionReset:
		return h, fmt.Errorf("%w: drift action %d", errBadDelta, h.action)
	case flags > deltaBusy:
		return h, fmt.Errorf("%w: flags %#x", errBadDelta, flags)
	case h.round > maxDeltaRound:
		return h, fmt.Errorf("%w: round %d", errBadDelta, h.round)
	case part >= uint64(len(j.parts)):
		return h, fmt.Errorf("%w: partition %d of a job of %d", errBadDelta, part, len(j.parts))
	case labelled > maxDeltaEvents:
		return h, fmt.Errorf("%w: %d events", errBadDelta, labelled)
	}
	h.partition, h.lastSeq, h.labelled, h.slots = int(part), lastSeq, labelled, r.rest
	if len(held) > 0 {
		if h.held, err = readHeldChanges(held); err != nil {
			return h, fmt.Errorf("%w: %w", errBadDelta, err)
		}
	}
	if len(metrics) > 0 {
		h.metrics = learners.NewProgressive(j.window)
		if err := h.metrics.UnmarshalBinary(metrics); err != nil {
			return h, fmt.Errorf("%w: %w", errBadDelta, err)
		}
	}
	return h, nil
}

// deltaReader reads a delta's header fields; the first error sticks.
type deltaReader struct {
	rest []byte
	err  error
}

func (r *deltaReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, k := binary.Uvarint(r.rest)
	if k <= 0 {
		r.err = fmt.Errorf("%w: truncated header", errBadDelta)
		return 0
	}
	r.rest = r.rest[k:]
	return v
}

// bytes takes the next n bytes.
func (r *deltaReader) bytes(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.rest)) {
		r.err = fmt.Errorf("%w: a section of %d bytes in %d", errBadDelta, n, len(r.rest))
		return nil
	}
	b := r.rest[:n]
	r.rest = r.rest[n:]
	return b
}

// ApplyDelta folds one delta into the global model (runtime.Sharing):
// its slots exactly as a merge would (through the fault-tolerance tracker
// when there is one), the model's version becomes version, the state
// holds the partition's events up to the delta's lastSeq, and the
// partition's metrics, if the delta carries them, become the ones every
// node reports for it. A malformed delta changes nothing.
func (j *logregJob) ApplyDelta(delta []byte, version uint64) error {
	if !j.sharing() {
		return fmt.Errorf("%w: job %q does not share deltas", runtime.ErrNotSupported, j.name)
	}
	h, err := j.readDeltaHeader(delta)
	if err == nil {
		err = j.applyDelta(h, version)
	}
	if err != nil {
		j.share.refused.Add(1)
		return err
	}
	j.share.applied.Add(1)
	return nil
}

func (j *logregJob) applyDelta(h deltaHeader, version uint64) error {
	j.swap.RLock()
	defer j.swap.RUnlock()
	j.merge.Lock()
	defer j.merge.Unlock()
	if err := j.model.ApplyDelta(h.slots, h.labelled, version, j.merge.tracker); err != nil {
		return fmt.Errorf("%w: %w", errBadDelta, err)
	}
	j.merge.lastSeqs[h.partition] = h.lastSeq
	j.merge.learned += int64(h.labelled)
	if h.held != nil {
		j.committed[h.partition].apply(h.held.counts, h.held.ops, false, j.ft != nil)
	}
	j.act(h.action)
	p := j.parts[h.partition]
	own := p.share.sentMark.Load() > h.lastSeq
	p.share.appliedMark.Store(h.lastSeq + 1)
	select {
	case p.share.landing <- struct{}{}:
	default:
	}
	if h.rounds && !own {
		j.clock.Observe(h.partition, h.round, h.busy)
	}
	if h.metrics != nil {
		p.installMetrics(h.metrics, h.lastSeq)
	}
	if j.ft != nil {
		// The events are in the cluster's input streams: none is unlogged.
		j.ft.Unit(0).Merged(int(h.labelled), 0, j.merge.learned)
	}
	return nil
}

// pacesRemote says whether the job's partitions wait for those of other
// nodes: its deltas then carry their rounds.
func (j *logregJob) pacesRemote() bool {
	return j.sharing() && j.consistency != runtime.ConsistencyAsync
}

// announceDue says whether the partition's round or activity changed
// since its last delta: the next one must say so, even with nothing
// else, or other nodes would wait for it.
func (p *logregPart) announceDue() bool {
	return p.job.pacesRemote() && (p.share.round != p.share.sentRound || p.share.busy != p.share.sentBusy)
}

func (p *logregPart) announced() {
	p.share.sentRound, p.share.sentBusy = p.share.round, p.share.busy
}

// awaitLanded waits until the partition's delta in flight, if any, was
// applied here (at most maxInFlight after its send), so that the next
// one, announcing a round, carries the round's updates.
func (p *logregPart) awaitLanded() {
	for now := time.Now(); p.inFlight(now); now = time.Now() {
		t := time.NewTimer(maxInFlight - now.Sub(p.share.sentAt))
		select {
		case <-p.share.landing:
		case <-t.C:
		}
		t.Stop()
	}
}

// installMetrics makes m, sent by the partition's owner with events up to
// lastSeq, the metrics this node reports for the partition, unless this
// node sent them itself (its own are fresher).
func (p *logregPart) installMetrics(m *learners.Progressive, lastSeq uint64) {
	if p.share.sentMark.Load() > lastSeq {
		return
	}
	p.pub.Lock()
	p.pub.snap, p.pub.remote = m, true
	p.pub.Unlock()
}

// adoptMetrics starts the partition's metrics from those its previous
// owner sent, when it gets events after another node had them.
func (p *logregPart) adoptMetrics() {
	p.pub.Lock()
	defer p.pub.Unlock()
	if !p.pub.remote {
		return
	}
	p.prog = p.pub.snap.Clone()
	p.pub.remote = false
	p.share.metricsCount = p.prog.Count()
}

// DeltaStatus counts a sharing job's deltas on this node.
type DeltaStatus struct {
	Sent       int64 `json:"sent"`
	SendErrors int64 `json:"send_errors"`
	Applied    int64 `json:"applied"`
	Refused    int64 `json:"refused"`
	// Dropped are events dropped after a failed send until the events
	// of the failed delta are replayed.
	Dropped int64 `json:"dropped_events"`
}

func (j *logregJob) deltaStatus() *DeltaStatus {
	if !j.sharing() {
		return nil
	}
	return &DeltaStatus{Sent: j.share.sent.Load(), SendErrors: j.share.sendErrors.Load(),
		Applied: j.share.applied.Load(), Refused: j.share.refused.Load(), Dropped: j.share.dropped.Load()}
}

// ResetPartition forgets what partition i learned after event lastSeq
// (runtime.PartitionResetting): its owner resumes there, replaying what
// came after from the log. Its unsent updates and those in flight go, and
// it no longer drops events after a failed send.
func (j *logregJob) ResetPartition(i int, lastSeq uint64) {
	p := j.parts[i]
	p.learner.AppendDelta(nil) // clears the pending updates
	p.learner.ClearInFlight()
	p.lastSeq = lastSeq
	p.share.sentSeq, p.share.gapUpTo = lastSeq, 0
	// The held predictions as of lastSeq: those the deltas applied here
	// carried.
	j.merge.Lock()
	j.restorePart(i)
	p.share.sentCounts = j.committed[i].counts
	j.merge.Unlock()
	p.share.sentMark.Store(0)
	p.unlogged = 0
	p.unacked.Store(0)
}
