package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/ft"
)

// ftKind is what a kind with fault tolerance implements: its units of
// state. A kind with a merged global state (a learner's global model) has
// one, which holds the events of every partition; a kind whose partitions
// keep their own state has one unit per partition (AF-Stream's n operator
// copies, each with Θ/(2n)).
type ftKind interface {
	units() []stateful
	// setFT hands the kind its job's fault-tolerance machinery, before
	// recovery; unit i of units() is f.units[i].
	setFT(f *jobFT)
}

// stateful is one unit of state: ft.Stateful plus what the runtime needs
// to know of its events.
type stateful interface {
	ft.Stateful
	// partitions are the partitions whose events the state holds.
	partitions() []int
	// stateSeqs returns, for each of partitions(), the sequence number of
	// the last event folded into the state that a backup would capture.
	stateSeqs() []uint64
	// alpha is the most one event can move the state divergence.
	alpha() float64
	// recovered is called once the backup chain is applied (or none
	// was): the state holds the events up to seqs, per partitions().
	recovered(seqs []uint64)
	// withState runs fn serialised with the kind's changes to the state,
	// from the goroutine of one of partitions(); it does not run fn when
	// the kind offers no way to.
	withState(fn func())
}

// jobFT is a job's fault-tolerance machinery, after AF-Stream: the state
// backups of the job's units of state, the item logs of its partitions,
// and the thresholds. A unit's backups are snapshotted by the caller of
// merged (the kind, serialised with its own changes to the unit) and
// written, in order, by one goroutine for the job.
type jobFT struct {
	name   string
	spec   FTSpec
	bounds ft.Bounds
	// storage holds everything the job keeps: backups, item logs, marks,
	// the clean marker and the recovery history.
	storage ft.JobStorage
	log     *slog.Logger
	hub     *Hub
	parts   []*partFT
	units   []*stateUnit

	// mu guards the controllers, the units' counters and the fields below.
	mu        sync.Mutex
	partCtl   *ft.Controller // l, γ of each partition (n copies)
	closing   bool           // the last backups, at a graceful shutdown
	windowEnd int64          // processed count at which the thresholds reset

	backups    chan backupReq
	backupDone chan struct{}
	errors     atomic.Int64
	recovery   atomic.Pointer[RecoveryReport]
	// history is the last recoveries of the job, newest last, kept in
	// the storage (ft.RecoveryHistory) across restarts; written once per start.
	history []RecoveryReport

	// abort, when set (by a DeleteJob of the job being created), makes
	// the recovery give up; nil: never.
	abort *atomic.Bool

	// historyMu orders the chart history's writes (history.go) before
	// the job's end: none after close, whose storage may be removed next.
	historyMu   sync.Mutex
	historyDone bool

	// reqs tracks, in mode exact, the requests over several partitions
	// until their parts are all in written backups: see requests.
	reqs requests
}

// stateUnit is one unit of state and its backups.
type stateUnit struct {
	f       *jobFT
	key     ft.Key
	backups ft.UnitBackups
	op      stateful
	parts   []int

	// Guarded by f.mu.
	ctl         *ft.Controller // θ and the event budget l of the unit (one of n units)
	sinceBackup int64          // events folded into the state since its last backup
	atRisk      int64          // of those, the ones not in the item log
	deltas      int            // delta backups since the last full one
	deltaBytes  int64          // their bytes
	fullBytes   int64          // bytes of the last full backup, 0 before the first
	// failed is set when a backup could not be stored (by the writer) or
	// its snapshot failed: a delta builds on the backup before it, so the
	// next one must be full.
	failed atomic.Bool
	// sizeHint is the size of the last delta and full backup and some, to
	// size the next.
	sizeHint [2]atomic.Int64
	// spare holds buffers the writer has stored, for the next snapshots:
	// a unit backs up hundreds of times a minute, and a new buffer each
	// time was most of the mode's garbage.
	spare chan *backupBuf

	theta  atomic.Uint64 // θ as float64 bits, for due
	budget atomic.Int64  // l, for due

	stats struct {
		full, delta, bytes atomic.Int64
		last               atomic.Int64 // unix ms of the last backup written
	}
}

// partFT is a partition's share: its item log and the high-water mark of
// the sequence numbers it has handed out.
type partFT struct {
	index  int
	mode   string
	log    ft.PartitionLog
	mark   ft.Mark
	l      atomic.Int64 // current threshold l
	logged atomic.Int64 // events written to the item log, ever

	// Guarded by the partition queue's mutex: the queue calls its
	// batchLogger methods under it.
	unlogged int      // events pending without an item backup
	pending  []*batch // the batches holding them, oldest first (mode approx)
	buf      []byte
	frame    ft.Frame

	// The partition goroutine's: its processed count when it was last
	// found idle, and since when it has been idle.
	idleSeen uint64
	idleFrom time.Time
}

var _ batchLogger = (*partFT)(nil)

type backupReq struct {
	unit *stateUnit
	meta ft.BackupMeta
	data *backupBuf
	// stored, when set, is closed once the backup is written (or failed).
	stored chan struct{}
}

// maxFrameBytes is the largest item-log record: a request's part in one
// partition is one frame, and its encoding can outgrow the request body
// (--max-body) for tiny events. It bounds nothing a client controls:
// bodies are limited before this, and a damaged length on disk is bounded
// by the file's size when read back.
const maxFrameBytes = 1 << 30

// newJobFT opens the job's item logs. It does not recover: see recover.
// slot is where in the job's storage its data lives (rescale.go).
func newJobFT(spec Spec, storage ft.Storage, k ftKind, hub *Hub, log *slog.Logger, slot int) (*jobFT, error) {
	js, err := storage.Job(spec.Name)
	if err != nil {
		return nil, err
	}
	f := &jobFT{
		name: spec.Name, spec: spec.FT, bounds: spec.FT.bounds(), storage: js, hub: hub, log: log,
		backups: make(chan backupReq, 4), backupDone: make(chan struct{}),
	}
	f.reqs.durable = make([]uint64, spec.Partitions)
	ops := k.units()
	for _, op := range ops {
		u := &stateUnit{f: f, op: op, parts: op.partitions(), key: ft.Key{Job: spec.Name, Partition: slotUnit(slot, -1)},
			spare: make(chan *backupBuf, spareBuffers)}
		if len(ops) > 1 {
			u.key.Partition = slotUnit(slot, u.parts[0])
		}
		u.backups = &watchedBackups{UnitBackups: js.Backups(u.key.Partition)} // durability.go
		f.units = append(f.units, u)
	}
	for i := range spec.Partitions {
		pf := &partFT{index: i, mode: spec.FT.Mode}
		open := func() (ft.PartitionLog, error) {
			return js.OpenItemLog(slotUnit(slot, i), ft.ItemLogConfig{MaxPayload: maxFrameBytes})
		}
		if pf.log, err = openHealingLog(open); err != nil { // durability.go
			f.closeFiles()
			return nil, fmt.Errorf("item log of partition %d: %w", i, err)
		}
		// The high-water mark sits next to the partition's item log.
		if pf.mark, err = js.OpenSeqMark(slotUnit(slot, i)); err != nil {
			f.parts = append(f.parts, pf)
			f.closeFiles()
			return nil, fmt.Errorf("sequence mark of partition %d: %w", i, err)
		}
		f.parts = append(f.parts, pf)
	}
	return f, nil
}

func (f *jobFT) closeFiles() {
	for _, p := range f.parts {
		if p.log != nil {
			_ = p.log.Close()
		}
		if p.mark != nil {
			_ = p.mark.Close()
		}
	}
}

// setThresholds publishes the controllers' thresholds; f.mu held.
func (f *jobFT) setThresholds() {
	l := f.partCtl.Thresholds().L
	for _, p := range f.parts {
		p.l.Store(int64(l))
	}
	for _, u := range f.units {
		th := u.ctl.Thresholds()
		u.theta.Store(math.Float64bits(th.Theta))
		u.budget.Store(int64(th.L))
	}
}

// due says, without a lock, whether the unit should fold what it did into
// a backup decision now: its divergence passed θ or its events at risk
// passed l. Kinds that change their state event by event call it after
// each event, so that θ and l hold to the event.
func (u *stateUnit) due(div float64, atRisk int) bool {
	return div > math.Float64frombits(u.theta.Load()) || int64(atRisk) > u.budget.Load()
}

// gamma is γ of each partition: how many events it may learn before it
// must merge them (0: after every event).
func (f *jobFT) gamma() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.partCtl.Thresholds().Gamma
}

// pushed is called by a partition queue, under its lock, when a batch got
// its sequence numbers: in exact mode every record goes to the item log
// (the caller commits before replying), as one frame, tagged with its
// request req when that spans several partitions; in approx mode, once
// more than l events are pending (queued or being processed) without an
// item backup, all of them are logged, a frame per batch. The high-water
// mark of handed-out sequence numbers is written either way.
func (p *partFT) pushed(b *batch, req *ftRequest) error {
	switch p.mode {
	case ft.ModeExact:
		if err := p.logFrame(b.recs, req.tagFor()); err != nil {
			return err
		}
		req.logged(p.index, b.recs[0].Seq, b.recs[len(b.recs)-1].Seq)
		b.logged = true
	case ft.ModeApprox:
		p.unlogged += len(b.recs)
		p.pending = append(p.pending, b)
		if int64(p.unlogged) > p.l.Load() {
			if err := p.logPending(); err != nil {
				p.refused(b)
				return err
			}
		}
	}
	if err := p.mark.Write(b.recs[len(b.recs)-1].Seq); err != nil {
		p.refused(b)
		return err
	}
	return nil
}

// refused takes back a batch the queue will not hold, after pushed
// failed: it must not count as pending.
func (p *partFT) refused(b *batch) {
	if n := len(p.pending); n > 0 && p.pending[n-1] == b {
		p.pending[n-1] = nil
		p.pending = p.pending[:n-1]
		p.unlogged -= len(b.recs)
	}
}

// durablePart is partition i's share of the job's fault tolerance when
// its item log must be committed before a reply (mode exact), else nil.
func (j *Job) durablePart(i int) *partFT {
	if j.ft == nil || j.ft.spec.Mode != ft.ModeExact {
		return nil
	}
	return j.ft.parts[i]
}

// logPending writes every pending batch to the item log, a frame each,
// and hands them to the operating system.
func (p *partFT) logPending() error {
	for i, b := range p.pending {
		if err := p.logFrame(b.recs, nil); err != nil {
			// The ones written stay written: they are not pending any more.
			p.dropPending(i)
			return err
		}
		b.logged = true
		p.unlogged -= len(b.recs)
	}
	p.dropPending(len(p.pending))
	return p.log.Flush()
}

// dropPending forgets the first n pending batches.
func (p *partFT) dropPending(n int) {
	clear(p.pending[:n])
	p.pending = p.pending[n:]
}

// retired is called by the queue, under its lock, when b was processed:
// if it was never logged, it is no longer pending.
func (p *partFT) retired(b *batch) {
	if b.logged {
		return
	}
	p.unlogged -= len(b.recs)
	// Batches retire in the order they were pushed, and a logged batch
	// leaves pending at once: b is the oldest.
	if len(p.pending) > 0 && p.pending[0] == b {
		p.dropPending(1)
	}
}

// holdsBack says whether the partition may hold senders back (mode
// approx); it never changes.
func (p *partFT) holdsBack() bool { return p.mode == ft.ModeApprox }

// mustWait says whether n more events would make more than l pending
// without an item backup, when n alone does not; queue's lock held.
func (p *partFT) mustWait(n int) bool {
	l := p.l.Load()
	return int64(n) <= l && int64(p.unlogged+n) > l
}

// pendingEvents is the count of events pending without an item backup;
// queue's lock held.
func (p *partFT) pendingEvents() int64 { return int64(p.unlogged) }

// logFrame appends recs (consecutive sequence numbers) to the item log as
// one frame: after a crash they are replayed all or none.
func (p *partFT) logFrame(recs []Record, tag []byte) error {
	p.frame.Reset(recs[0].Seq, tag)
	for i := range recs {
		p.buf = appendRecord(p.buf[:0], &recs[i])
		p.frame.Add(p.buf)
	}
	if err := p.log.AppendFrame(&p.frame); err != nil {
		return err
	}
	p.logged.Add(int64(len(recs)))
	return nil
}

// replayBudget caps the events a recovery may have to replay from item
// logs, to keep restarts short: past it the state is backed up even if no
// event is at risk.
const replayBudget = 100_000

// merged is called by the kind after events were folded into unit u,
// unlogged of them not in the item log, serialised with the kind's other
// changes to u. It takes a backup when events not in the item log were
// folded in and the divergence passed θ, or when more than the event
// budget l of them were. Events that are in the item log are not at risk:
// a recovery replays them onto the older backup, so they need no state
// backup (this is what keeps the mode cheap once halving has driven l to
// 0 and every event is logged). The snapshot is taken here, consistently;
// writing it is the backup goroutine's job.
func (u *stateUnit) merged(events, unlogged int, processed int64) {
	f := u.f
	f.mu.Lock()
	u.sinceBackup += int64(events)
	u.atRisk += int64(unlogged)
	if processed >= f.windowEnd {
		// A hopping window ended: errors of earlier windows no longer add up.
		f.windowEnd = processed + f.spec.Window
		if f.partCtl.Failures() > 0 {
			f.resetWindow()
		}
	}
	th := u.ctl.Thresholds()
	div := u.op.StateDivergence()
	due := u.atRisk > 0 && div > th.Theta || u.atRisk > int64(th.L) || u.sinceBackup > replayBudget
	f.mu.Unlock()
	if due {
		u.backup(false, div)
	}
}

// idleBackupAfter is how long a partition stays idle before the state
// holding its events is backed up, whatever θ and l say: a job that went
// quiet has then nothing at risk, and a restart replays nothing of it.
const idleBackupAfter = time.Second

// idle is the operator's idle and, with fault tolerance, the backup of
// state gone idle; it returns when to be called again.
func (p *partition) idle(final bool) time.Duration {
	again := p.op.idle(final)
	if f := p.job.ft; f != nil && !final && !p.retired.Load() {
		if wait := f.idled(p.index, p.processed.Load(), time.Now()); wait > 0 && (again == 0 || wait < again) {
			again = wait
		}
	}
	return again
}

// idled is called by partition part's goroutine when its queue ran dry,
// after processed events: once it has been idle for idleBackupAfter, the
// units holding its events are backed up if anything was folded into them
// since their last backup. It returns how long to wait before calling
// again, 0 for no need.
func (f *jobFT) idled(part int, processed uint64, now time.Time) time.Duration {
	pf := f.parts[part]
	if processed != pf.idleSeen || pf.idleFrom.IsZero() {
		pf.idleSeen, pf.idleFrom = processed, now
	}
	var due []*stateUnit
	for _, u := range f.units {
		if slices.Contains(u.parts, part) && u.changedSinceBackup() {
			due = append(due, u)
		}
	}
	if len(due) == 0 {
		return 0
	}
	if wait := idleBackupAfter - now.Sub(pf.idleFrom); wait > 0 {
		return wait
	}
	for _, u := range due {
		u.op.withState(func() {
			if u.changedSinceBackup() {
				u.backup(false, u.op.StateDivergence())
			}
		})
	}
	return 0
}

// changedSinceBackup says whether events were folded into the unit since
// its last backup. (Not its divergence: a kind's may take the lock its
// merges take, and a partition goes idle often.)
func (u *stateUnit) changedSinceBackup() bool {
	u.f.mu.Lock()
	defer u.f.mu.Unlock()
	return u.sinceBackup > 0 || u.atRisk > 0
}

// windowEnded takes a backup of the unit at the end of one of its
// event-time windows and resets its thresholds (a hopping window).
func (u *stateUnit) windowEnded() {
	f := u.f
	f.mu.Lock()
	if u.ctl.Failures() > 0 {
		u.ctl.ResetWindow()
		f.setThresholds()
	}
	f.mu.Unlock()
	u.backup(false, u.op.StateDivergence())
}

// resetWindow restores the initial thresholds; f.mu held.
func (f *jobFT) resetWindow() {
	f.partCtl.ResetWindow()
	for _, u := range f.units {
		u.ctl.ResetWindow()
	}
	f.setThresholds()
	f.log.Info("fault tolerance: window ended, thresholds reset", "job", f.name, "thresholds", f.units[0].ctl.Thresholds())
}

// partition is the unit's one partition, or -1 for a unit of several.
func (u *stateUnit) partition() int {
	if len(u.parts) == 1 {
		return u.parts[0]
	}
	return -1
}

// backup snapshots the unit and queues it for writing; full forces a full
// snapshot, else compaction decides (see compactNow).
func (u *stateUnit) backup(full bool, div float64) { u.backupThen(full, false, div, nil) }

// backupThen takes a backup as backup does; durable asks for an fsync,
// and stored, when not nil, is closed once the writer has stored it.
func (u *stateUnit) backupThen(full, durable bool, div float64, stored chan struct{}) {
	f := u.f
	f.mu.Lock()
	if u.compactNow() || u.failed.Swap(false) {
		full = true
	}
	if math.IsNaN(div) || math.IsInf(div, 0) {
		div = 0 // metadata only; JSON has no NaN
	}
	meta := ft.BackupMeta{Full: full, Failures: u.ctl.Failures(), LastSeqs: u.op.stateSeqs(), Divergence: div, Created: time.Now(),
		// Approx survives process crashes without fsync (the operating
		// system keeps what was written); exact promises more.
		Durable: durable || f.spec.Mode == ft.ModeExact || f.closing}
	u.sinceBackup, u.atRisk = 0, 0
	f.mu.Unlock()
	buf := u.buffer(full)
	if err := u.op.BackupState(buf, full); err != nil {
		f.errors.Add(1)
		f.log.Error("fault tolerance: snapshot failed", "job", f.name, "unit", u.key, "err", err)
		// The state may count it as taken: the next one must not build on it.
		u.failed.Store(true)
		if stored != nil {
			close(stored)
		}
		return
	}
	u.snapshotTaken(full, int64(len(buf.b)))
	f.backups <- backupReq{unit: u, meta: meta, data: buf, stored: stored}
}

// chainFactor bounds a chain's deltas to chainFactor·compact_every,
// however small they are: each is a step of a recovery.
const chainFactor = 8

// compactNow says whether the next backup must be full; f.mu held. A
// chain (a full backup and its deltas) is compacted after compact_every
// deltas, as it always was, but only once they also add up to
// compact_every times the full backup: small deltas make long chains and
// few full backups, while what a recovery reads stays under about
// compact_every + 1 full backups or compact_every deltas, whichever is
// more (the old rule's bound). Heavy hitters at the default bounds: ~7 KB
// deltas on a 22 KB full one, a full backup every ~50 backups instead of
// 17 (each costs a new chain file and the unlinking of an old one,
// ~150-300 µs of CPU). Deltas larger than their full backup (a join whose
// windows emptied) compact as before. Also after chainFactor times
// compact_every deltas, and before the first full backup.
func (u *stateUnit) compactNow() bool {
	every := int64(u.f.spec.CompactEvery)
	n := int64(u.deltas)
	return u.fullBytes == 0 || n >= every && u.deltaBytes >= every*u.fullBytes || n >= chainFactor*every
}

// snapshotTaken counts a snapshot of n bytes into its chain, for
// compactNow, and keeps its size, for the next buffer.
func (u *stateUnit) snapshotTaken(full bool, n int64) {
	u.f.mu.Lock()
	if full {
		u.deltas, u.deltaBytes, u.fullBytes = 0, 0, max(n, 1)
	} else {
		u.deltas++
		u.deltaBytes += n
	}
	u.f.mu.Unlock()
	u.hintOf(full).Store(n + n/8)
}

// hintOf is the size hint of full or delta snapshots.
func (u *stateUnit) hintOf(full bool) *atomic.Int64 {
	if full {
		return &u.sizeHint[1]
	}
	return &u.sizeHint[0]
}

// backupBuf is a snapshot's bytes: an io.Writer without bytes.Buffer's
// allocation per snapshot.
type backupBuf struct{ b []byte }

func (w *backupBuf) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// spareBuffers is how many stored buffers a unit keeps for its next
// snapshots: one being written while the next is taken is the usual case.
// maxSpareBuffer is the largest kept (memory a unit holds between its
// backups): a larger snapshot's buffer is left to the garbage collector.
const (
	spareBuffers   = 2
	maxSpareBuffer = 256 << 10
)

// buffer returns an empty buffer for a snapshot, a spare one if any,
// with room for about the last snapshot of its kind (one allocation, not
// a doubling series).
func (u *stateUnit) buffer(full bool) *backupBuf {
	var buf *backupBuf
	select {
	case buf = <-u.spare:
	default:
		buf = new(backupBuf)
	}
	if hint := int(u.hintOf(full).Load()); cap(buf.b) < hint {
		buf.b = make([]byte, 0, hint)
	}
	buf.b = buf.b[:0]
	return buf
}

// release keeps a stored snapshot's buffer for the next one (Store.Put
// keeps no reference to it), unless it is large or the unit has enough.
func (u *stateUnit) release(buf *backupBuf) {
	if cap(buf.b) > maxSpareBuffer {
		return
	}
	select {
	case u.spare <- buf:
	default:
	}
}

// writeLoop writes backups in order, then drops what they made obsolete:
// item-log segments whose events are all in the state.
func (f *jobFT) writeLoop() {
	defer close(f.backupDone)
	for req := range f.backups {
		f.write(req)
	}
}

func (f *jobFT) write(req backupReq) {
	if req.stored != nil {
		defer close(req.stored)
	}
	u := req.unit
	size := len(req.data.b)
	meta, err := u.backups.Put(req.meta, req.data.b)
	u.release(req.data)
	if err != nil {
		u.failed.Store(true)
		f.errors.Add(1)
		f.log.Error("fault tolerance: backup failed", "job", f.name, "unit", u.key, "err", err)
		return
	}
	if meta.Full {
		u.stats.full.Add(1)
	} else {
		u.stats.delta.Add(1)
	}
	u.stats.bytes.Add(int64(size))
	u.stats.last.Store(meta.Created.UnixMilli())
	upTo := f.reqs.backedUp(u.parts, meta.LastSeqs)
	for i, p := range u.parts {
		if err := f.parts[p].log.TruncateBefore(upTo[i]); err != nil {
			f.log.Warn("fault tolerance: item log truncation", "job", f.name, "partition", p, "err", err)
		}
	}
	if f.hub.Wants(f.name, TypeBackup) {
		msg, _ := encodeBackup(f.name, u, meta, size)
		f.hub.Publish(f.name, TypeBackup, msg)
	}
}

// writeHistory replaces the job's chart history file, unless the job
// has ended.
func (f *jobFT) writeHistory(data []byte) error {
	f.historyMu.Lock()
	defer f.historyMu.Unlock()
	if f.historyDone {
		return nil
	}
	return f.storage.WriteMeta(historyFile, data, false)
}

// close takes a last full backup of the drained state, waits for the
// writer, and marks the shutdown clean.
func (f *jobFT) close() {
	f.historyMu.Lock()
	f.historyDone = true
	f.historyMu.Unlock()
	f.mu.Lock()
	f.closing = true
	f.mu.Unlock()
	for _, u := range f.units {
		u.backup(true, u.op.StateDivergence())
	}
	close(f.backups)
	<-f.backupDone
	for _, p := range f.parts {
		_ = p.log.Commit()
	}
	if f.errors.Load() == 0 {
		f.markClean()
	}
	f.closeFiles()
}

// RecoveryReport says what a restart restored and what it lost.
type RecoveryReport struct {
	Job string `json:"job"`
	// Clean is true after a graceful shutdown: nothing was lost.
	Clean    bool      `json:"clean"`
	At       time.Time `json:"at"`
	Failures int       `json:"failures"`
	// Backups applied: a full one and its deltas.
	Backups int      `json:"backups"`
	Skipped []string `json:"skipped,omitempty"` // damaged files passed over
	// Mode is the job's ft mode: what Bound promises.
	Mode string `json:"mode"`
	// Repaired lists damaged metadata rebuilt from the intact files beside
	// it; Quarantined the folders under <data>/.quarantine that data the
	// job does not use (moved aside) or copies of damaged files went to,
	// each with why. Nothing damaged is deleted.
	Repaired    []string `json:"repaired,omitempty"`
	Quarantined []string `json:"quarantined,omitempty"`
	Replayed    int      `json:"replayed"` // events replayed from item logs
	// Lost counts the events that were accepted before the crash and are
	// in neither the restored state nor the item logs; LostRanges lists
	// them per partition as inclusive sequence-number ranges.
	Lost       int64         `json:"lost"`
	LostRanges [][][2]uint64 `json:"lost_ranges"`
	// LostToDamage is the part of Lost that damaged item-log records held:
	// acknowledged events (replay resumes at the next intact record).
	LostToDamage int64 `json:"lost_to_damage"`
	// Unacknowledged counts, in mode exact, the events of requests that a
	// crash cut short before their 202: not in the item log, or in it only
	// in part (then dropped whole, so that a request is replayed all or
	// none). They were never accepted, so they are not lost. When the item
	// log is damaged beyond a torn tail, or a damaged backup was passed
	// over, acknowledged events may be among them: they count as lost then.
	Unacknowledged int64 `json:"unacknowledged"`
	// Bound is the bound that held (the job's promise over any number of
	// crashes: in mode exact, nothing); Within says whether the measured
	// loss stayed inside it.
	Bound      ft.Bound      `json:"bound"`
	Within     bool          `json:"within"`
	Thresholds ft.Thresholds `json:"thresholds"`
	DurationMs float64       `json:"duration_ms"`
	// damaged are the damaged files found, copied to the quarantine.
	damaged damagedFiles
}

// errPartitionsChanged refuses to restore state taken with another
// partition count: sequence numbers are per partition.
var errPartitionsChanged = errors.New("runtime: backups were taken with a different partition count")

// FTStatus is the live fault-tolerance view of a job.
type FTStatus struct {
	Mode   string    `json:"mode"`
	Bounds ft.Bounds `json:"bounds"`
	// State holds θ and l of the job's state (one copy); Partition holds
	// l and γ of each partition (n copies).
	State      ft.Thresholds `json:"state_thresholds"`
	Partition  ft.Thresholds `json:"partition_thresholds"`
	Failures   int           `json:"failures"`
	Divergence float64       `json:"divergence"`
	// SinceBackup is how many events were folded into the state since its
	// last backup, AtRisk how many of them are not in the item log.
	SinceBackup int64         `json:"since_backup"`
	AtRisk      int64         `json:"at_risk"`
	Backups     BackupStats   `json:"backups"`
	Partitions  []PartitionFT `json:"partitions"`
	// Units are the job's units of state: one for a kind with a global
	// state (all partitions), else one per partition.
	Units     []UnitFT        `json:"units"`
	Alpha     float64         `json:"alpha"`
	WorstCase ft.Bound        `json:"worst_case"` // what a crash now would cost
	Promise   ft.Bound        `json:"promise"`    // the bound over any number of crashes
	Recovery  *RecoveryReport `json:"recovery,omitempty"`
	// Recoveries are the job's last recoveries (up to keepRecoveries),
	// newest last, across restarts.
	Recoveries []RecoveryReport `json:"recoveries,omitempty"`
}

// UnitFT is one unit of state in FTStatus: its divergence against its θ,
// the events folded in since its last backup (and of those at risk), its
// backups.
type UnitFT struct {
	// Partition is the unit's partition, -1 for a unit of all of them.
	Partition   int     `json:"partition"`
	Partitions  []int   `json:"partitions"`
	Divergence  float64 `json:"divergence"`
	Theta       float64 `json:"theta"`
	SinceBackup int64   `json:"since_backup"`
	AtRisk      int64   `json:"at_risk"`
	Full        int64   `json:"full"`
	Delta       int64   `json:"delta"`
	Bytes       int64   `json:"bytes"`
}

// BackupStats counts the state backups written.
type BackupStats struct {
	Full   int64     `json:"full"`
	Delta  int64     `json:"delta"`
	Bytes  int64     `json:"bytes"`
	Last   time.Time `json:"last,omitzero"`
	Errors int64     `json:"errors"`
	// Stored is what the store holds now (older chains are removed).
	StoredCount int   `json:"stored_count"`
	StoredBytes int64 `json:"stored_bytes"`
}

// PartitionFT is one partition's share of FTStatus.
type PartitionFT struct {
	Partition int `json:"partition"`
	// Pending events are queued without an item backup.
	Pending int64 `json:"pending"`
	// Unacked events are learned and not yet merged downstream.
	Unacked      int64 `json:"unacked"`
	ItemLogBytes int64 `json:"item_log_bytes"`
	// Logged counts the events written to the item log since start.
	Logged int64 `json:"logged"`
}

// unackedCounter is implemented by kinds that report γ's count.
type unackedCounter interface{ unacked(partition int) int64 }

// liveDivergence is the unit's divergence as of its last event, 0 for a
// state that does not say.
func (u *stateUnit) liveDivergence() float64 {
	if lv, ok := u.op.(interface{ liveDivergence() float64 }); ok {
		return lv.liveDivergence()
	}
	return 0
}

// historyPoint is the fault tolerance in a history point: what the
// status says of divergence, θ and backups, without its per-partition
// and disk parts.
func (f *jobFT) historyPoint() *HistoryFT {
	h := &HistoryFT{}
	f.mu.Lock()
	for _, u := range f.units {
		h.Theta += u.ctl.Thresholds().Theta
	}
	f.mu.Unlock()
	for _, u := range f.units {
		h.Divergence += u.liveDivergence()
		h.Backups += u.stats.full.Load() + u.stats.delta.Load()
		h.BackupBytes += u.stats.bytes.Load()
	}
	return h
}

func (f *jobFT) status(j *Job) *FTStatus {
	f.mu.Lock()
	st := &FTStatus{
		Mode: f.spec.Mode, Bounds: f.bounds, State: f.units[0].ctl.Thresholds(), Partition: f.partCtl.Thresholds(),
		Failures: f.partCtl.Failures(),
	}
	for _, u := range f.units {
		st.SinceBackup += u.sinceBackup
		st.AtRisk += u.atRisk
		st.Units = append(st.Units, UnitFT{Partition: u.partition(), Partitions: u.parts, Theta: u.ctl.Thresholds().Theta,
			SinceBackup: u.sinceBackup, AtRisk: u.atRisk})
	}
	f.mu.Unlock()
	st.Backups.Errors = f.errors.Load()
	var last int64
	for i, u := range f.units {
		st.Units[i].Divergence = u.liveDivergence()
		st.Divergence += st.Units[i].Divergence
		st.Units[i].Full, st.Units[i].Delta, st.Units[i].Bytes = u.stats.full.Load(), u.stats.delta.Load(), u.stats.bytes.Load()
		st.Backups.Full += u.stats.full.Load()
		st.Backups.Delta += u.stats.delta.Load()
		st.Backups.Bytes += u.stats.bytes.Load()
		last = max(last, u.stats.last.Load())
		n, b := u.backups.Usage()
		st.Backups.StoredCount += n
		st.Backups.StoredBytes += b
		st.Alpha = max(st.Alpha, u.op.alpha())
	}
	if last > 0 {
		st.Backups.Last = time.UnixMilli(last)
	}
	uc, _ := j.kind.(unackedCounter)
	var pending, unacked int64
	for i, p := range f.parts {
		pf := PartitionFT{Partition: i, Pending: j.parts[i].q.unlogged(), ItemLogBytes: p.log.Bytes(), Logged: p.logged.Load()}
		if uc != nil {
			pf.Unacked = uc.unacked(i)
		}
		pending += pf.Pending
		unacked += pf.Unacked
		st.Partitions = append(st.Partitions, pf)
	}
	st.WorstCase = ft.Bound{
		State:   st.Divergence + float64(pending)*st.Alpha,
		Events:  pending + st.AtRisk + unacked,
		Outputs: pending,
	}
	st.Promise = f.bounds.Promise(st.Alpha, 1)
	st.Recovery = f.recovery.Load()
	st.Recoveries = f.history
	return st
}

// keepRecoveries is how many recovery reports a job keeps.
const keepRecoveries = 20

// recordRecovery appends rep to the job's recovery history on disk
// (ft.RecoveryHistory). The history is for people: a damaged one is
// started afresh, and failing to write it only logs; both are in rep.
func (f *jobFT) recordRecovery(rep *RecoveryReport) {
	hist := f.readHistory(rep)
	hist = append(hist, *rep)
	if len(hist) > keepRecoveries {
		hist = hist[len(hist)-keepRecoveries:]
	}
	f.history = hist
	data, err := json.Marshal(hist)
	if err == nil {
		err = f.storage.WriteMeta(ft.RecoveryHistory, data, false)
	}
	if err != nil {
		f.log.Warn("fault tolerance: writing the recovery history", "job", f.name, "err", err)
	}
}

// readHistory reads the recovery history: checksummed, or of the earlier
// version (plain JSON, read once). A damaged history is reported in rep
// and replaced by a new one.
func (f *jobFT) readHistory(rep *RecoveryReport) []RecoveryReport {
	data, legacy, err := f.storage.ReadMeta(ft.RecoveryHistory)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var hist []RecoveryReport
	if err == nil {
		if err = json.Unmarshal(data, &hist); err != nil && legacy {
			err = fmt.Errorf("%d bytes without a checksum: %w", len(data), err)
		}
	}
	if err != nil {
		err = fmt.Errorf("recovery history: %w", err)
		rep.Skipped = append(rep.Skipped, err.Error())
		f.log.Warn("fault tolerance: damaged recovery history, starting a new one", "job", f.name, "err", err)
		return nil
	}
	return hist
}

// markClean leaves the clean-shutdown marker (ft.CleanMarker), durably: the
// next start knows nothing was lost and counts no failure.
func (f *jobFT) markClean() {
	data, _ := json.Marshal(map[string]any{"at": time.Now().UTC()})
	if err := f.storage.WriteMeta(ft.CleanMarker, data, true); err != nil {
		f.log.Warn("fault tolerance: clean marker", "job", f.name, "err", err)
	}
}

// takeClean reports whether the last shutdown left the clean marker, and
// removes it: the next start must find it written anew. A damaged marker
// counts as a crash (nothing it says can be believed) and is reported in
// rep; the earlier version's marker, an empty file, counts as clean.
func (f *jobFT) takeClean(rep *RecoveryReport) bool {
	data, legacy, err := f.storage.ReadMeta(ft.CleanMarker)
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	clean := err == nil && (!legacy || len(data) == 0)
	if !clean {
		if err == nil {
			err = fmt.Errorf("clean marker of %d bytes without a checksum", len(data))
		}
		rep.Skipped = append(rep.Skipped, err.Error())
		f.log.Warn("fault tolerance: damaged clean-shutdown marker: counted as a crash", "job", f.name, "err", err)
	}
	if err := f.storage.RemoveMeta(ft.CleanMarker); err != nil {
		f.log.Warn("fault tolerance: removing the clean marker", "job", f.name, "err", err)
	}
	return clean
}

// Recovery is the report of the job's last recovery from backups, or nil.
func (j *Job) Recovery() *RecoveryReport {
	if j.ft == nil {
		return nil
	}
	return j.ft.recovery.Load()
}
