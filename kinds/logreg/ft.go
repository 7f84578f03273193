package logreg

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/mlstream/mlstream/learners"
	"github.com/mlstream/mlstream/runtime"
)

// The fault-tolerance hooks of logreg (ft.Stateful). The state is the
// global model plus every partition's progressive metrics; its divergence
// is the Euclidean distance of the weights from the last backup, kept by a
// learners.Tracker at each merge. The hooks run under j.merge, or before
// the partitions start, or after they stopped.

// Units: the global model is one unit holding every partition's events.
func (j *logregJob) Units() []runtime.Unit { return []runtime.Unit{j} }

func (j *logregJob) SetFT(f runtime.FT) {
	j.ft = f
	j.merge.tracker = learners.NewTracker(j.model)
}

// Unacked is Γ's count: learned by partition i, not yet merged.
func (j *logregJob) Unacked(i int) int64 { return j.parts[i].unacked.Load() }

func (j *logregJob) Partitions() []int {
	out := make([]int, len(j.parts))
	for i := range out {
		out[i] = i
	}
	return out
}

func (j *logregJob) StateDivergence() float64 {
	if j.merge.tracker == nil {
		return 0
	}
	return j.merge.tracker.Divergence() + j.pendingDivergence()
}

// LiveDivergence is StateDivergence for readers outside the merge step.
func (j *logregJob) LiveDivergence() float64 {
	j.merge.Lock()
	defer j.merge.Unlock()
	return j.StateDivergence()
}

func (j *logregJob) StateSeqs() []uint64 {
	return append([]uint64(nil), j.merge.lastSeqs...)
}

// Alpha bounds how far one event moves the weights (learners.StepBound).
func (j *logregJob) Alpha() float64 { return j.model.StepBound(int(j.maxFeats.Load())) }

func (j *logregJob) Recovered(seqs []uint64) {
	copy(j.merge.lastSeqs, seqs)
	for i, p := range j.parts {
		p.lastSeq = seqs[i]
		p.share.sentSeq = seqs[i] // the state holds them: no delta needs to claim them again
	}
	if j.merge.tracker != nil {
		j.merge.tracker.Reset()
	}
	j.restorePending()
}

// BackupState writes: a partition count (uint32), then per partition its
// progressive metrics (uint32 length + bytes), then the model snapshot:
// full, or the slots changed since the last backup, then the pending
// predictions of delayed labels (labels_ft.go). Deltas carry no
// metrics (count 0): they are a few hundred kilobytes that do not bound
// any error, and the next full backup brings them up to date.
func (j *logregJob) BackupState(w io.Writer, full bool) error {
	var hdr [4]byte
	n := len(j.parts)
	if !full {
		n = 0
	}
	binary.LittleEndian.PutUint32(hdr[:], uint32(n))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	for _, p := range j.parts[:n] {
		p.pub.Lock()
		data, err := p.pub.snap.MarshalBinary()
		p.pub.Unlock()
		if err != nil {
			return err
		}
		binary.LittleEndian.PutUint32(hdr[:], uint32(len(data)))
		if _, err := w.Write(hdr[:]); err != nil {
			return err
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
	}
	if full {
		if _, err := j.model.WriteTo(w); err != nil {
			return err
		}
		// Slots not merged into since the last backup still have the
		// weight recorded then: restarting from the dirty ones is enough.
		j.merge.tracker.BackedUp()
		return j.backupPending(w, true)
	}
	if _, err := j.model.WriteDelta(w, j.merge.tracker.BackedUp()); err != nil {
		return err
	}
	return j.backupPending(w, false)
}

// RecoverState applies one backup written by BackupState.
func (j *logregJob) RecoverState(r io.Reader) error {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return fmt.Errorf("logreg state: %w", err)
	}
	n := int(binary.LittleEndian.Uint32(hdr[:]))
	if n != 0 && n != len(j.parts) {
		return fmt.Errorf("logreg state: %d partitions, the job has %d", n, len(j.parts))
	}
	progs := make([]*learners.Progressive, n)
	for i := range progs {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return fmt.Errorf("logreg state: %w", err)
		}
		n := binary.LittleEndian.Uint32(hdr[:])
		if n > 1<<30 {
			return fmt.Errorf("logreg state: metrics of %d bytes", n)
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(r, data); err != nil {
			return fmt.Errorf("logreg state: %w", err)
		}
		progs[i] = learners.NewProgressive(j.window)
		if err := progs[i].UnmarshalBinary(data); err != nil {
			return err
		}
	}
	if _, err := j.model.ReadFrom(r); err != nil {
		return err
	}
	if err := j.recoverPending(r); err != nil {
		return err
	}
	for i, p := range j.parts[:n] {
		p.prog = progs[i]
		p.pub.Lock()
		p.pub.snap = progs[i].Clone()
		p.pub.Unlock()
	}
	return nil
}
