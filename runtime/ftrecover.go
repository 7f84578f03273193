package runtime

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/mlstream/mlstream/ft"
)

// recover restores the job before its partitions start: the newest intact
// backup chain of its state, then, per partition, the item-logged events
// the state does not contain yet, in order. It measures what is lost (the
// sequence numbers handed out before the crash that are in neither) and
// takes a full backup at once, so that the new failure count is stored and
// the next crash starts from here.
func (j *Job) recover() (*RecoveryReport, error) {
	f := j.ft
	start := time.Now()
	rep := &RecoveryReport{Job: j.spec.Name, At: start}
	chain, skipped, err := f.store.Chain(ft.Key{Job: j.spec.Name, Partition: ft.GlobalPartition})
	if err != nil {
		return nil, fmt.Errorf("reading backups: %w", err)
	}
	for _, s := range skipped {
		rep.Skipped = append(rep.Skipped, s.Error())
		f.log.Warn("fault tolerance: damaged backup passed over", "job", j.spec.Name, "err", s)
	}
	var meta ft.BackupMeta
	for _, b := range chain {
		if len(b.Meta.LastSeqs) != len(j.parts) {
			return nil, fmt.Errorf("%w: %d partitions in the backup, %d in the spec; delete the job's data or keep its partitions",
				errPartitionsChanged, len(b.Meta.LastSeqs), len(j.parts))
		}
		if err := f.op.RecoverState(bytes.NewReader(b.Data)); err != nil {
			// Intact on disk but not applicable: what follows builds on it,
			// so the chain ends here.
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("backup %d: %v", b.Meta.Index, err))
			f.log.Warn("fault tolerance: backup not applicable", "job", j.spec.Name, "index", b.Meta.Index, "err", err)
			break
		}
		meta = b.Meta
		rep.Backups++
	}
	_, statErr := os.Stat(f.cleanMarker())
	clean := statErr == nil
	if clean {
		_ = os.Remove(f.cleanMarker())
	}
	marks := make([]uint64, len(j.parts))
	hadData := rep.Backups > 0
	for i, p := range f.parts {
		marks[i] = p.readMark()
		hadData = hadData || marks[i] > 0
	}
	failures := meta.Failures
	if hadData && !clean {
		failures++
	}
	f.mu.Lock()
	f.partCtl = ft.NewController(f.bounds, len(j.parts), failures)
	f.stateCtl = ft.NewController(f.bounds, 1, failures)
	f.setThresholds()
	f.windowEnd = f.spec.Window
	rep.Thresholds = f.stateCtl.Thresholds()
	f.mu.Unlock()
	rep.Failures = failures

	base := meta.LastSeqs
	if base == nil {
		base = make([]uint64, len(j.parts))
	}
	f.op.recovered(base)
	rep.LostRanges = make([][][2]uint64, len(j.parts))
	covered := make([]uint64, len(j.parts))
	for i, part := range j.parts {
		n, last, lost, err := j.replay(i, base[i])
		if err != nil {
			return nil, fmt.Errorf("replaying partition %d: %w", i, err)
		}
		if marks[i] > last {
			lost = append(lost, [2]uint64{last + 1, marks[i]})
		}
		rep.Replayed += n
		for _, r := range lost {
			rep.Lost += int64(r[1] - r[0] + 1)
		}
		rep.LostRanges[i] = lost
		covered[i] = max(marks[i], last)
		part.q.mu.nextSeq = covered[i] + 1
	}
	// What is lost is gone for good: the state now stands for every
	// sequence number handed out, so the next recovery does not count the
	// same loss again.
	f.op.recovered(covered)
	rep.Bound = f.bounds.Promise(f.op.alpha(), 1)
	rep.Within = rep.Lost <= rep.Bound.Events
	rep.Clean = clean && rep.Lost == 0
	// Always a full backup now: deltas build on it, and it stores the
	// failure count.
	f.backup(true, f.op.StateDivergence())
	rep.DurationMs = float64(time.Since(start).Microseconds()) / 1e3
	return rep, nil
}

// replay feeds partition i the item-logged events after seq `after`, in
// order, through its operator, and returns how many, the last sequence
// number the partition has now seen, and the gaps (inclusive ranges) in
// between: events that were never logged.
func (j *Job) replay(i int, after uint64) (n int, last uint64, gaps [][2]uint64, err error) {
	part := j.parts[i]
	last = after
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
	n, err = j.ft.parts[i].log.Replay(after, func(seq uint64, payload []byte) error {
		var r Record
		if err := decodeRecord(payload, &r, &a); err != nil {
			return nil // intact frame, unreadable record: counted as lost below
		}
		r.Seq = seq
		if seq > last+1 {
			gaps = append(gaps, [2]uint64{last + 1, seq - 1})
		}
		last = seq
		recs = append(recs, r)
		if len(recs) == 1024 {
			flush()
		}
		return nil
	})
	var damage *ft.ReplayDamage
	if errors.As(err, &damage) {
		j.ft.log.Warn("fault tolerance: damaged item log", "job", j.spec.Name, "partition", i, "err", err)
		err = nil
	}
	flush()
	part.op.idle()
	return n, last, gaps, err
}
