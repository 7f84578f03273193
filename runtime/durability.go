package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/ft"
)

// When the disk fails (full, read-only, an I/O error), fault tolerance
// refuses what it cannot make durable instead of acknowledging it, and
// takes work again as soon as the disk does:
//   - mode exact: a request whose item-log frames cannot be written and
//     fsynced is refused (ErrDurability), and none of its events is
//     processed: its batches wait at the head of their partitions until
//     the request's commit is known (commitGate).
//   - an item log that failed is sticky (what reached the disk is then
//     unknown): healingLog closes it and opens it again, in a new segment,
//     at the next append, so one failure does not refuse every later
//     request until a restart.
//   - mode approx: a job whose backups fail can no longer keep its loss
//     bound, so its ingest is refused (ErrBackupsFailing, a 429) until a
//     backup is written again; the job's partitions retry one at once
//     (retryBackups).

// ErrBackupsFailing refuses events of an approx job whose state backups
// fail: acknowledging more would lose them past the bound on a crash. It
// wraps ErrBusy (429, retry later).
var ErrBackupsFailing = fmt.Errorf("%w: the job's state backups are failing (is the disk full?)", ErrBusy)

// commitGate holds the batches of a request in mode exact at the head of
// their partitions until the request's item-log commit ends: processed
// if it made them durable, dropped if the request was refused. nil: no
// gate (its methods accept a nil receiver).
type commitGate struct {
	done chan struct{}
	ok   bool // written before done is closed
}

func newCommitGate() *commitGate { return &commitGate{done: make(chan struct{})} }

// resolve opens the gate: the batches are processed if ok, else dropped.
func (g *commitGate) resolve(ok bool) {
	if g == nil {
		return
	}
	g.ok = ok
	close(g.done)
}

// admitted waits for the gate and says whether its batches may be processed.
func (g *commitGate) admitted() bool {
	if g == nil {
		return true
	}
	<-g.done
	return g.ok
}

// healingLog is a partition's item log that reopens itself after a
// failure. An ft.ItemLog refuses every call after a failed write or fsync;
// healingLog closes it and opens the log again (a new segment) at the
// next append, so that appends go on once the disk takes them. A commit
// must then tell the records of the failed log (never durable) from those
// of the new one: commitThrough does, by sequence number.
type healingLog struct {
	open func() (ft.PartitionLog, error)

	mu  sync.RWMutex
	cur ft.PartitionLog // nil after a failed reopen
	// broken is the failure of cur, or of the last reopen; appended is the
	// highest seq handed to cur; lost is the highest seq appended to a
	// failed log: records up to it never become durable.
	broken   error
	appended uint64
	lost     uint64
	reopens  atomic.Int64
}

var _ ft.PartitionLog = (*healingLog)(nil)

func openHealingLog(open func() (ft.PartitionLog, error)) (*healingLog, error) {
	l, err := open()
	if err != nil {
		return nil, err
	}
	return &healingLog{open: open, cur: l}, nil
}

// failed records err of the log l (if l is still the current one).
func (h *healingLog) failed(l ft.PartitionLog, err error) error {
	if err == nil || errors.Is(err, ft.ErrClosed) {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cur == l && h.broken == nil {
		h.broken = err
		h.lost = max(h.lost, h.appended)
	}
	return err
}

// heal reopens a broken log, unless it was closed; mu held for writing.
func (h *healingLog) heal() error {
	if h.broken == nil || errors.Is(h.broken, ft.ErrClosed) {
		return h.broken
	}
	if h.cur != nil {
		_ = h.cur.Close()
		h.cur = nil
	}
	l, err := h.open()
	if err != nil {
		h.broken = err
		return err
	}
	h.cur, h.broken = l, nil
	h.reopens.Add(1)
	return nil
}

func (h *healingLog) AppendFrame(f *ft.Frame) error {
	h.mu.Lock()
	if err := h.heal(); err != nil {
		h.mu.Unlock()
		return err
	}
	l := h.cur
	err := l.AppendFrame(f)
	if err == nil {
		h.appended = max(h.appended, l.LastSeq())
	}
	h.mu.Unlock()
	if err != nil && !errors.Is(err, ft.ErrTooLarge) && !errors.Is(err, ft.ErrSeqOrder) {
		return h.failed(l, err)
	}
	return err
}

// current is the log, or the error that keeps it from working.
func (h *healingLog) current() (ft.PartitionLog, error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.cur == nil {
		return nil, h.broken
	}
	return h.cur, nil
}

func (h *healingLog) Flush() error {
	l, err := h.current()
	if err != nil {
		return err
	}
	return h.failed(l, l.Flush())
}

// Commit makes everything appended to the current log durable.
func (h *healingLog) Commit() error {
	l, err := h.current()
	if err != nil {
		return err
	}
	return h.failed(l, l.Commit())
}

// commitThrough makes the records up to seq durable, or says why they
// cannot be: those appended to a log that failed never are, whatever the
// log after it does.
func (h *healingLog) commitThrough(seq uint64) error {
	h.mu.RLock()
	l, lost, broken := h.cur, h.lost, h.broken
	h.mu.RUnlock()
	if seq <= lost {
		if broken == nil {
			broken = errors.New("the item log failed before these events were durable")
		}
		return broken
	}
	if l == nil {
		return broken
	}
	// l holds seq: every record above lost went to the log current since.
	// Should l have failed and been replaced meanwhile, its Commit says so.
	return h.failed(l, l.Commit())
}

func (h *healingLog) ReplayFrames(after uint64, fn func(f *ft.StoredFrame) error) (int, error) {
	l, err := h.current()
	if err != nil {
		return 0, err
	}
	return l.ReplayFrames(after, fn)
}

// Committed is the current log's commit mark: a log reopened after a
// failure reads the mark the failed one left.
func (h *healingLog) Committed() (uint64, bool) {
	l, err := h.current()
	if err != nil {
		return 0, false
	}
	return l.Committed()
}

func (h *healingLog) TruncateBefore(seq uint64) error {
	l, err := h.current()
	if err != nil {
		return err
	}
	return l.TruncateBefore(seq)
}

func (h *healingLog) LastSeq() uint64 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.cur == nil {
		return h.appended
	}
	return max(h.cur.LastSeq(), h.appended)
}

func (h *healingLog) Bytes() int64 {
	l, err := h.current()
	if err != nil {
		return 0
	}
	return l.Bytes()
}

func (h *healingLog) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cur == nil {
		return nil
	}
	err := h.cur.Close()
	if h.broken != nil {
		err = nil // reported when it happened
	}
	h.cur = nil
	h.broken = ft.ErrClosed
	return err
}

// watchedBackups is a unit's backup store that remembers whether its last
// backup failed: an approx job then refuses ingest (unprotected).
type watchedBackups struct {
	ft.UnitBackups
	failing atomic.Bool
	retried atomic.Int64 // unix ns of the last retry (Job.unprotected)
}

func (w *watchedBackups) Put(meta ft.BackupMeta, data []byte) (ft.BackupMeta, error) {
	m, err := w.UnitBackups.Put(meta, data)
	w.failing.Store(err != nil)
	return m, err
}

// failingBackups is the store of a unit of the job whose last backup
// failed, or nil.
func (f *jobFT) failingBackups() *watchedBackups {
	for _, u := range f.units {
		if w, ok := u.backups.(*watchedBackups); ok && w.failing.Load() {
			return w
		}
	}
	return nil
}

// retryInterval spaces the retries of failed backups of a job.
const retryInterval = time.Second

// unprotected says whether the job must refuse events because its
// backups fail (mode approx), and has them retried, at most once per
// retryInterval, so that ingest resumes once a backup is written again.
func (j *Job) unprotected() bool {
	f := j.ft
	if f == nil || f.spec.Mode != ft.ModeApprox {
		return false
	}
	w := f.failingBackups()
	if w == nil {
		return false
	}
	now := time.Now().UnixNano()
	if last := w.retried.Load(); now-last >= int64(retryInterval) && w.retried.CompareAndSwap(last, now) {
		go j.retryBackups()
	}
	return true
}

// retryBackups takes a full backup of every unit while every partition is
// parked (so that no partition changes a state shared by several while it
// is snapshotted). Partitions that do not all arrive within retryInterval
// (one waits in a consistency round for another one parked) make the
// attempt give up; the next refusal tries again.
func (j *Job) retryBackups() {
	n := len(j.parts)
	arrive := make(chan struct{}, n)
	release := make(chan struct{})
	for p := range n {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), retryInterval)
			defer cancel()
			_ = j.Do(ctx, p, func() {
				arrive <- struct{}{}
				<-release
			})
		}()
	}
	defer close(release)
	timeout := time.NewTimer(retryInterval)
	defer timeout.Stop()
	for range n {
		select {
		case <-arrive:
		case <-timeout.C:
			return
		}
	}
	j.ft.backupUnitsNow()
}

// backupUnitsNow takes a full backup of every unit and waits until they
// are written (or failed). Only with every partition parked.
func (f *jobFT) backupUnitsNow() {
	for _, u := range f.units {
		stored := make(chan struct{})
		u.backupThen(true, false, u.op.StateDivergence(), stored)
		<-stored
	}
}
