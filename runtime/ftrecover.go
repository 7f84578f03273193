package runtime

import (
	"bytes"
	"cmp"
	"encoding/json"
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
	rep := &RecoveryReport{Job: j.spec.Name, At: start, Mode: f.spec.Mode}
	j.reportClaim(rep)
	f.findDamagedMeta(rep)
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
	// Before the first backups, which may reuse a damaged chain's file.
	f.quarantine(rep)
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
// it: in mode exact, that nothing acknowledged is lost.
func (f *jobFT) judge(rep *RecoveryReport, clean bool) {
	var alpha float64
	for _, u := range f.units {
		alpha = max(alpha, u.op.alpha())
	}
	if f.spec.Mode != ft.ModeExact {
		rep.Bound = f.bounds.Promise(alpha, 1)
	}
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
	reqs, damaged, err := f.findRequests()
	if err != nil {
		return nil, err
	}
	rep.LostRanges = make([][][2]uint64, len(j.parts))
	covered = make([]uint64, len(j.parts))
	for i, part := range j.parts {
		r, err := j.replay(i, base[i], reqs, damaged)
		if err != nil {
			return nil, fmt.Errorf("replaying partition %d: %w", i, err)
		}
		lost, unacked, toDamage := f.classify(i, r, marks[i], backupDamage)
		if committed, known := f.parts[i].log.Committed(); known && committed > r.last && f.spec.Mode == ft.ModeExact {
			short := fmt.Sprintf("item log of partition %d: its records end at seq %d, its commits reached seq %d: the acknowledged events after it are gone",
				i, r.last, committed)
			rep.Skipped = append(rep.Skipped, short)
			f.log.Warn("fault tolerance: item log cut short", "job", f.name, "partition", i, "last", r.last, "committed", committed)
		}
		rep.Unacknowledged = addRanges(rep.Unacknowledged, unacked)
		rep.LostToDamage = addRanges(rep.LostToDamage, toDamage)
		rep.Replayed += r.n
		for _, d := range r.damage {
			rep.noteDamage(d)
		}
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

// classify sorts the events partition i handed out (up to its mark) that
// are in neither the state nor the item log (or only as part of a cut
// request) into lost and unacknowledged, and says which of the lost ones
// damage to the log took. In mode exact an event is acknowledged once the
// item log's commit covered it (the 202 comes after the fsync): missing
// events at or below the log's commit mark, and those of damaged records,
// are lost; the others (requests refused or cut by the crash) never had
// their 202. Without a commit mark (an earlier version's log, or a
// damaged mark), damage beyond a torn tail counts everything missing as
// lost; and so does a damaged backup passed over (the log may have been
// truncated past what the restored state holds). In mode approx, every
// missing event is lost.
func (f *jobFT) classify(i int, r replayed, mark uint64, backupDamage bool) (lost, unacked, toDamage [][2]uint64) {
	lost = slices.Concat(r.unreadable, r.damageGaps)
	toDamage = r.damageGaps
	var tail [][2]uint64
	if mark > r.last {
		tail = [][2]uint64{{r.last + 1, mark}}
	}
	others := slices.Concat(r.gaps, r.unacked)
	committed, known := f.parts[i].log.Committed()
	switch {
	case f.spec.Mode != ft.ModeExact || backupDamage || !known && r.damaged:
		lost = slices.Concat(lost, others, tail)
	case known:
		acked, rest := splitRanges(tail, committed)
		lost = append(lost, acked...)
		toDamage = slices.Concat(toDamage, acked)
		unacked = slices.Concat(others, rest)
	default:
		unacked = slices.Concat(others, tail)
	}
	if lost == nil {
		lost = [][2]uint64{} // [] in JSON when none, not null
	}
	return lost, unacked, toDamage
}

// splitRanges splits inclusive ranges at seq: the parts at or below it,
// and those above.
func splitRanges(rs [][2]uint64, seq uint64) (below, above [][2]uint64) {
	for _, r := range rs {
		switch {
		case r[1] <= seq:
			below = append(below, r)
		case r[0] > seq:
			above = append(above, r)
		default:
			below = append(below, [2]uint64{r[0], seq})
			above = append(above, [2]uint64{seq + 1, r[1]})
		}
	}
	return below, above
}

// overlapping splits ranges into those that overlap one of damage and the
// others.
func overlapping(rs, damage [][2]uint64) (others, hit [][2]uint64) {
	for _, r := range rs {
		if slices.ContainsFunc(damage, func(d [2]uint64) bool { return d[0] <= r[1] && r[0] <= d[1] }) {
			hit = append(hit, r)
		} else {
			others = append(others, r)
		}
	}
	return others, hit
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
			rep.noteDamage(err)
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
		rep.noteDamage(s)
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
	damageGaps [][2]uint64 // those that damaged records of the log held
	unreadable [][2]uint64 // in intact records that cannot be decoded
	unacked    [][2]uint64 // events of requests logged only in part: dropped
	damaged    bool        // damage beyond a torn tail: the log may have lost acknowledged events
	damage     []*ft.CorruptError
}

// replay feeds partition i the item-logged events after seq `after`, in
// order, through its operator, and reports how many, the last sequence
// number the partition has now seen, and the gaps (inclusive ranges) in
// between: events that were never logged, or unreadable. The parts of
// requests that reqs says are not whole are skipped, gaps neither.
func (j *Job) replay(i int, after uint64, reqs foundRequests, damaged []bool) (r replayed, err error) {
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
		if len(fr.Tag) > 0 && !reqs.replayable(fr.Tag, damaged) {
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
		committed, known := j.ft.parts[i].log.Committed()
		if !damage.TornTail || known && committed >= damage.TailFrom {
			// Not only what a crash tore before its commit returned.
			r.damage = damage.Files
		}
		r.gaps, r.damageGaps = overlapping(r.gaps, damage.Skipped)
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
// tells a whole request from a cut one). damaged says, per partition,
// that damage to its log took acknowledged records: a request whose
// missing parts were there is not a cut one.
func (f *jobFT) findRequests() (reqs foundRequests, damaged []bool, err error) {
	reqs = foundRequests{}
	damaged = make([]bool, len(f.parts))
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
		var damage *ft.ReplayDamage
		switch {
		case errors.As(err, &damage):
			committed, known := p.log.Committed()
			damaged[i] = len(damage.Skipped) > 0 || damage.TailFrom != 0 && (!damage.TornTail || known && committed >= damage.TailFrom)
		case err != nil:
			return nil, nil, fmt.Errorf("reading the item log of partition %d: %w", i, err)
		}
		if committed, known := p.log.Committed(); known && committed > p.log.LastSeq() {
			damaged[i] = true // cut short at a record's end
		}
	}
	return reqs, damaged, nil
}

// replayable says whether the request tagged tag is replayed: when every
// part of it is in the logs, or the missing ones were in damaged logs
// (damaged records of an acknowledged request, counted as lost there).
func (reqs foundRequests) replayable(tag []byte, damaged []bool) bool {
	id, _, err := decodeTag(tag, len(damaged))
	if err != nil {
		return false
	}
	r := reqs[id]
	if r == nil {
		return false
	}
	for _, p := range r.parts {
		if _, ok := r.found[p]; !ok && !damaged[p] {
			return false
		}
	}
	return true
}

// wholeID says whether every part of request id is in the logs.
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

// reportClaim puts what claiming the job's data did in the report.
func (j *Job) reportClaim(rep *RecoveryReport) {
	c := j.claimed
	if c.Repaired != "" {
		rep.Repaired = append(rep.Repaired, c.Repaired)
	}
	if c.Quarantined != "" {
		rep.Quarantined = append(rep.Quarantined, c.Quarantined+": the data found under the job's name, moved aside: "+c.Why)
	}
}

// damagedFiles are the damaged files a recovery found, to be copied to
// the quarantine (folder, once it is made, named by the report's
// Quarantined[line]): those up to copied are.
type damagedFiles struct {
	paths  []string
	copied int
	folder string
	line   int
}

// noteDamage keeps the file a *ft.CorruptError names, to be copied to the
// quarantine.
func (rep *RecoveryReport) noteDamage(err error) {
	var ce *ft.CorruptError
	if errors.As(err, &ce) {
		rep.noteDamaged(ce.Path)
	}
}

func (rep *RecoveryReport) noteDamaged(path string) {
	if !slices.Contains(rep.damaged.paths, path) {
		rep.damaged.paths = append(rep.damaged.paths, path)
	}
}

// findDamagedMeta notes the job's damaged metadata files, and copies them
// to the quarantine before the recovery replaces them: the clean marker,
// which must be empty, and the recovery history, which must be JSON.
func (f *jobFT) findDamagedMeta(rep *RecoveryReport) {
	for _, name := range []string{ft.CleanMarker, ft.RecoveryHistory} {
		data, legacy, err := f.storage.ReadMeta(name)
		switch {
		case err != nil:
			rep.noteDamage(err)
		case legacy && (name == ft.CleanMarker && len(data) > 0 || name == ft.RecoveryHistory && !json.Valid(data)):
			rep.noteDamaged(name)
		}
	}
	f.quarantine(rep)
}

// quarantine copies the damaged files the recovery found since its last
// call into the recovery's quarantine folder: the service replaces or
// passes over them, and the operator keeps what they held.
func (f *jobFT) quarantine(rep *RecoveryReport) {
	d := &rep.damaged
	todo := d.paths[d.copied:]
	if len(todo) == 0 {
		return
	}
	d.copied = len(d.paths)
	dir, err := f.storage.Quarantine(d.folder, todo)
	if err != nil {
		f.log.Warn("fault tolerance: copying damaged files to the quarantine", "job", f.name, "err", err)
	}
	if dir == "" {
		return
	}
	f.log.Warn("fault tolerance: damaged files copied to the quarantine", "job", f.name, "quarantine", dir, "files", todo)
	if d.folder == "" {
		d.folder, d.line = dir, len(rep.Quarantined)
		rep.Quarantined = append(rep.Quarantined, "")
	}
	rep.Quarantined[d.line] = fmt.Sprintf("%s: copies of %d damaged file(s)", dir, d.copied)
}
