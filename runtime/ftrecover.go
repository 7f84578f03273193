package runtime

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/ft"
)

// recover restores the job before its partitions start: for each unit of
// state, the newest intact backup chain; then, per partition, the
// item-logged events the state does not hold yet, in order. It measures
// what is lost (the sequence numbers handed out before the crash that are
// in neither) and takes a full backup at once, so that the new failure
// count is stored and the next crash starts from here.
func (j *Job) recover() (*RecoveryReport, error) {
	f := j.ft
	start := time.Now()
	rep := &RecoveryReport{Job: j.spec.Name, At: start}
	base, failures, restored, err := j.restoreUnits(rep)
	if err != nil {
		return nil, err
	}
	// With a damaged backup passed over, the item log may have been
	// truncated past what the restored state holds.
	backupDamage := len(rep.Skipped) > 0
	clean := f.takeClean(rep)
	marks, damagedMarks := f.readMarks(rep)
	crashed := !clean && (restored || damagedMarks || slices.ContainsFunc(marks, func(m uint64) bool { return m > 0 }))
	if crashed {
		failures++
	}
	f.resetThresholds(len(j.parts), failures, rep)
	rep.Failures = failures

	f.recovered(base)
	covered, err := j.replayLogs(rep, base, marks, backupDamage)
	if err != nil {
		return nil, err
	}
	// What is lost is gone for good: the state now stands for every
	// sequence number handed out, so the next recovery does not count the
	// same loss again.
	f.recovered(covered)
	if crashed {
		f.compensate(rep.LostRanges)
	}
	f.judge(rep, clean)
	f.backupAll()
	rep.DurationMs = float64(time.Since(start).Microseconds()) / 1e3
	return rep, nil
}

// restoreUnits restores each unit of state from its newest intact backup
// chain. It returns, per partition, the last event the restored state
// holds, the failure count the backups stored, and whether any backup was
// restored.
func (j *Job) restoreUnits(rep *RecoveryReport) (base []uint64, failures int, restored bool, err error) {
	base = make([]uint64, len(j.parts))
	for _, u := range j.ft.units {
		meta, n, err := u.restore(rep)
		if err != nil {
			return nil, 0, false, err
		}
		if n > 0 {
			restored = true
			failures = max(failures, meta.Failures)
			for i, p := range u.parts {
				base[p] = meta.LastSeqs[i]
			}
		}
		rep.Backups += n
	}
	return base, failures, restored, nil
}

// resetThresholds starts AF-Stream's thresholds afresh for the failure
// count: halved once per failure, so that a restart never loosens them.
func (f *jobFT) resetThresholds(parts, failures int, rep *RecoveryReport) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.partCtl = ft.NewController(f.bounds, parts, failures)
	for _, u := range f.units {
		u.ctl = ft.NewController(f.bounds, len(f.units), failures)
	}
	f.setThresholds()
	f.windowEnd = f.spec.Window
	rep.Thresholds = f.units[0].ctl.Thresholds()
}

// judge states the bound the recovery promised and whether the loss kept
// it.
func (f *jobFT) judge(rep *RecoveryReport, clean bool) {
	var alpha float64
	for _, u := range f.units {
		alpha = max(alpha, u.op.alpha())
	}
	rep.Bound = f.bounds.Promise(alpha, 1)
	rep.Within = rep.Lost <= rep.Bound.Events
	rep.Clean = clean && rep.Lost == 0
}

// replayLogs replays every partition's item log onto the restored state
// (base: per partition, the last event it holds), measures what is lost
// against the sequence marks, and returns, per partition, the last
// sequence number accounted for: new events are numbered after it.
// backupDamage says that a damaged backup was passed over.
func (j *Job) replayLogs(rep *RecoveryReport, base, marks []uint64, backupDamage bool) (covered []uint64, err error) {
	f := j.ft
	reqs, err := f.findRequests()
	if err != nil {
		return nil, err
	}
	rep.LostRanges = make([][][2]uint64, len(j.parts))
	covered = make([]uint64, len(j.parts))
	for i, part := range j.parts {
		r, err := j.replay(i, base[i], reqs)
		if err != nil {
			return nil, fmt.Errorf("replaying partition %d: %w", i, err)
		}
		// Handed out, and in neither the state nor the item log (or only
		// as part of a cut request). In mode exact such events never had
		// their 202 (it comes after the fsync), unless damage to the log
		// or the backups may have taken acknowledged ones.
		missing := append(r.gaps, r.unacked...)
		if marks[i] > r.last {
			missing = append(missing, [2]uint64{r.last + 1, marks[i]})
		}
		lost := append([][2]uint64{}, r.unreadable...) // [] in JSON when none, not null
		if f.spec.Mode == ft.ModeExact && !r.damaged && !backupDamage {
			rep.Unacknowledged = addRanges(rep.Unacknowledged, missing)
		} else {
			lost = append(lost, missing...)
		}
		rep.Replayed += r.n
		slices.SortFunc(lost, func(a, b [2]uint64) int { return cmp.Compare(a[0], b[0]) })
		rep.Lost = addRanges(rep.Lost, lost)
		rep.LostRanges[i] = lost
		// Never below what the item log holds: its appends must go on
		// above its last record, or every request would fail.
		covered[i] = max(marks[i], r.last, f.parts[i].log.LastSeq())
		part.q.setNextSeq(covered[i] + 1)
	}
	f.reqs.recovered(base, reqs)
	return covered, nil
}

// backupAll takes a full backup of every unit and waits until the writer
// has stored them: deltas build on them, they store the failure count, and
// the job takes no event before. (A key's first chain creates its files,
// ~1 ms of CPU on some file systems: a job's start, not its ingest, pays
// for it.)
func (f *jobFT) backupAll() {
	stored := make([]chan struct{}, len(f.units))
	for i, u := range f.units {
		stored[i] = make(chan struct{})
		u.backupThen(true, false, u.op.StateDivergence(), stored[i])
	}
	for _, c := range stored {
		<-c
	}
}

// readMarks reads the partitions' sequence marks. A damaged one reads as
// 0: the events accepted after the last one the state and the item log
// hold cannot be counted then, which the report says.
func (f *jobFT) readMarks(rep *RecoveryReport) (marks []uint64, damaged bool) {
	marks = make([]uint64, len(f.parts))
	for i, p := range f.parts {
		m, err := p.mark.Read()
		if err != nil {
			damaged = true
			rep.Skipped = append(rep.Skipped, err.Error()+" (events accepted after the last one in the backups and the item log are not counted as lost)")
			f.log.Warn("fault tolerance: damaged sequence mark", "job", f.name, "partition", i, "err", err)
		}
		marks[i] = m
	}
	return marks, damaged
}

// addRanges adds the sizes of inclusive ranges to a count, saturating at
// the largest int64 rather than wrapping to a negative count.
func addRanges(lost int64, ranges [][2]uint64) int64 {
	for _, r := range ranges {
		if r[1] < r[0] {
			continue
		}
		n := r[1] - r[0] + 1
		if n == 0 || n > uint64(math.MaxInt64-lost) {
			return math.MaxInt64
		}
		lost += int64(n)
	}
	return lost
}

// compensator is implemented by units whose reported bounds widen after a
// recovery (one-sided sketches): theta is the divergence the unit may have
// lost from its state, lost the events of its partitions that are gone.
type compensator interface {
	compensate(theta float64, lost int64)
}

// compensate widens the bounds of the units that report them. The state
// may have diverged by up to θ before the crash, θ being the threshold in
// force then: twice the one now, after this recovery's halving.
func (f *jobFT) compensate(lostRanges [][][2]uint64) {
	for _, u := range f.units {
		c, ok := u.op.(compensator)
		if !ok {
			continue
		}
		var lost int64
		for _, p := range u.parts {
			for _, r := range lostRanges[p] {
				lost += int64(r[1] - r[0] + 1)
			}
		}
		c.compensate(2*u.ctl.Thresholds().Theta, lost)
	}
}

// recovered tells every unit which events it holds, from per-partition
// sequence numbers.
func (f *jobFT) recovered(seqs []uint64) {
	for _, u := range f.units {
		mine := make([]uint64, len(u.parts))
		for i, p := range u.parts {
			mine[i] = seqs[p]
		}
		u.op.recovered(mine)
	}
}

// restore applies the unit's newest intact backup chain and returns the
// last applied backup's metadata and how many were applied.
func (u *stateUnit) restore(rep *RecoveryReport) (ft.BackupMeta, int, error) {
	f := u.f
	chain, skipped, err := u.backups.Chain()
	if err != nil {
		return ft.BackupMeta{}, 0, fmt.Errorf("reading backups of %s: %w", u.key, err)
	}
	for _, s := range skipped {
		rep.Skipped = append(rep.Skipped, s.Error())
		f.log.Warn("fault tolerance: damaged backup passed over", "job", f.name, "err", s)
	}
	var meta ft.BackupMeta
	n := 0
	for _, b := range chain {
		if len(b.Meta.LastSeqs) != len(u.parts) {
			return meta, 0, fmt.Errorf("%w: %s holds %d partitions, the spec gives it %d; delete the job's data or keep its partitions",
				errPartitionsChanged, u.key, len(b.Meta.LastSeqs), len(u.parts))
		}
		if err := u.op.RecoverState(bytes.NewReader(b.Data)); err != nil {
			// Intact on disk but not applicable: what follows builds on it,
			// so the chain ends here.
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s backup %d: %v", u.key, b.Meta.Index, err))
			f.log.Warn("fault tolerance: backup not applicable", "job", f.name, "unit", u.key, "index", b.Meta.Index, "err", err)
			break
		}
		meta = b.Meta
		n++
	}
	return meta, n, nil
}

// replayed is what replaying one partition's item log found.
type replayed struct {
	n          int         // events replayed
	last       uint64      // the last sequence number the partition has now seen
	gaps       [][2]uint64 // sequence numbers in no record of the log (inclusive ranges)
	unreadable [][2]uint64 // in intact records that cannot be decoded
	unacked    [][2]uint64 // events of requests logged only in part: dropped
	damaged    bool        // damage beyond a torn tail: the log may have lost acknowledged events
}

// replay feeds partition i the item-logged events after seq `after`, in
// order, through its operator, and reports how many, the last sequence
// number the partition has now seen, and the gaps (inclusive ranges) in
// between: events that were never logged, or unreadable. The parts of
// requests that reqs says are not whole are skipped, gaps neither.
func (j *Job) replay(i int, after uint64, reqs foundRequests) (r replayed, err error) {
	part := j.parts[i]
	r.last = after
	var recs []Record
	var a arena
	flush := func() {
		if len(recs) > 0 {
			part.op.process(recs, true)
			part.processed.Add(uint64(len(recs)))
			recs = nil
			a = arena{}
		}
	}
	skipTo := func(first, last uint64) {
		if first > r.last+1 {
			r.gaps = append(r.gaps, [2]uint64{r.last + 1, first - 1})
		}
		r.last = last
	}
	event := func(seq uint64, payload []byte) error {
		skipTo(seq, seq)
		var rec Record
		if err := decodeRecord(payload, &rec, &a); err != nil {
			// Intact, so accepted, but unreadable: lost.
			r.unreadable = append(r.unreadable, [2]uint64{seq, seq})
			return nil
		}
		rec.Seq = seq
		recs = append(recs, rec)
		r.n++
		if len(recs) == 1024 {
			flush()
		}
		return nil
	}
	if h := replayHook.Load(); h != nil {
		(*h)(j.spec.Name, i)
	}
	_, err = j.ft.parts[i].log.ReplayFrames(after, func(fr *ft.StoredFrame) error {
		if j.ft.aborted() {
			return errRecoveryAborted
		}
		if len(fr.Tag) > 0 && !reqs.whole(fr.Tag, len(j.parts)) {
			// Not acknowledged, and not whole: none of it.
			first := max(fr.First, fr.After+1)
			skipTo(first, fr.Last)
			r.unacked = append(r.unacked, [2]uint64{first, fr.Last})
			return nil
		}
		return fr.Each(event)
	})
	var damage *ft.ReplayDamage
	if errors.As(err, &damage) {
		j.ft.log.Warn("fault tolerance: damaged item log", "job", j.spec.Name, "partition", i, "err", err)
		r.damaged = !damage.TornTail
		err = nil
	}
	flush()
	part.op.idle(true)
	return r, err
}

// errRecoveryAborted ends the recovery of a job deleted meanwhile.
var errRecoveryAborted = errors.New("runtime: recovery aborted: the job was deleted")

// aborted says whether the job was deleted while it recovered.
func (f *jobFT) aborted() bool { return f.abort != nil && f.abort.Load() }

// replayHook, set by tests, is called before a partition's item log is
// replayed: a test holds a recovery there for as long as it likes.
var replayHook atomic.Pointer[func(job string, partition int)]

// foundRequests are the multi-partition requests (mode exact) whose parts
// the item logs hold: id -> the parts found, per partition.
type foundRequests map[uint64]*foundRequest

type foundRequest struct {
	parts []int             // the partitions the request spans, from its tag
	found map[int][2]uint64 // the parts in the logs: first and last seq
}

// findRequests reads the tags of every frame in every partition's item
// log (all of them, those the state holds too: a part's presence is what
// tells a whole request from a cut one).
func (f *jobFT) findRequests() (foundRequests, error) {
	reqs := foundRequests{}
	for i, p := range f.parts {
		_, err := p.log.ReplayFrames(0, func(fr *ft.StoredFrame) error {
			if len(fr.Tag) == 0 {
				return nil
			}
			id, parts, err := decodeTag(fr.Tag, len(f.parts))
			if err != nil {
				return nil // replay counts its events as unreadable
			}
			r := reqs[id]
			if r == nil {
				r = &foundRequest{parts: parts, found: map[int][2]uint64{}}
				reqs[id] = r
			}
			r.found[i] = [2]uint64{fr.First, fr.Last}
			return nil
		})
		if err != nil && !errors.Is(err, ft.ErrCorrupt) {
			return nil, fmt.Errorf("reading the item log of partition %d: %w", i, err)
		}
	}
	return reqs, nil
}

// whole says whether every part of the request tagged tag is in the logs.
func (reqs foundRequests) whole(tag []byte, n int) bool {
	id, _, err := decodeTag(tag, n)
	return err == nil && reqs.wholeID(id)
}

func (reqs foundRequests) wholeID(id uint64) bool {
	r := reqs[id]
	if r == nil {
		return false
	}
	for _, p := range r.parts {
		if _, ok := r.found[p]; !ok {
			return false
		}
	}
	return true
}
