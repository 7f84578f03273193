package logreg

import (
	"encoding"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/mlstream/mlstream/learners"
	"github.com/mlstream/mlstream/runtime"
)

// The fault-tolerance hooks of logreg (ft.Stateful). The state is the
// global model plus every partition's progressive metrics and drift
// detector, the job's drift counts and its feature names; its divergence
// is the Euclidean distance of the weights from the last backup, kept by a
// learners.Tracker at each merge. The hooks run under j.merge, or before
// the partitions start, or after they stopped.

// Units: the global model is one unit holding every partition's events.
func (j *logregJob) Units() []runtime.Unit { return []runtime.Unit{j} }

func (j *logregJob) SetFT(f runtime.FT) {
	j.ft = f
	j.merge.tracker = learners.NewTracker(j.model)
}

// WithState runs fn serialised with merges (runtime.Serialising): the
// engine backs a job up that has gone idle.
func (j *logregJob) WithState(fn func()) {
	j.merge.Lock()
	defer j.merge.Unlock()
	fn()
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

// The backup format. Version 2 begins with stateMarker (version 1 began
// with a partition count, which is never that) and the version, then:
//
//	uint32  1 for a full backup, 0 for a delta
//	uint32  partitions n, in full and delta backups alike
//	n ×     chunk: the partition's progressive metrics (learners.Progressive)
//	        chunk: its drift detector (learners.PageHinkley)
//	chunk   the job's drift counts (driftState, JSON)
//	chunk   the feature names (namesBackup, JSON): all, or the slots
//	        changed since the last backup
//	        the model snapshot: full, or the slots changed since the
//	        last backup (learners.Model.WriteDelta)
//	        the pending predictions of delayed labels (labels_ft.go)
//
// A chunk is a uint32 length and its bytes. The metrics and drift state are
// those of each partition's last merge, so they hold exactly the events
// the model holds; they are a few hundred kilobytes at most (the recent
// window's events), small next to a model's weights. Version 1 had the
// metrics in full backups only and neither drift state nor names.
const (
	stateMarker  = ^uint32(0)
	stateVersion = 2
	// maxChunk bounds a chunk read back: the largest is a partition's
	// metrics, 12 bytes per event of a window of at most maxLogregWindow.
	maxChunk = 1 << 30
)

// partMetrics is a partition's metrics and drift detector as of its last
// merge.
type partMetrics struct {
	prog  *learners.Progressive
	drift learners.PageHinkley
}

// commitMetrics keeps the partition's metrics and detector as the model
// now holds its events, for backups; under j.merge, from the partition's
// goroutine.
func (p *logregPart) commitMetrics() {
	if p.committed == nil {
		p.committed = &partMetrics{prog: learners.NewProgressive(p.job.window)}
	}
	p.prog.CopyTo(p.committed.prog)
	p.committed.drift = *p.drift
}

// BackupState writes the job's state in the format's version 2.
func (j *logregJob) BackupState(w io.Writer, full bool) error {
	bw := &chunkWriter{w: w}
	bw.word(stateMarker)
	bw.word(stateVersion)
	bw.word(boolWord(full))
	bw.word(uint32(len(j.parts)))
	for _, p := range j.parts {
		prog, drift := p.backupMetrics()
		bw.marshal(prog)
		bw.marshal(drift)
	}
	bw.chunk(j.drifts.marshal())
	bw.chunk(j.names.backup(full))
	if bw.err != nil {
		return bw.err
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

// backupMetrics is what a backup holds of the partition's metrics: those
// of its last merge, or, before any, the published ones (those recovered,
// or another node's in cluster mode).
func (p *logregPart) backupMetrics() (encoding.BinaryMarshaler, encoding.BinaryMarshaler) {
	if c := p.committed; c != nil {
		return c.prog, &c.drift
	}
	p.pub.Lock()
	prog := p.pub.snap.Clone()
	p.pub.Unlock()
	// The live detector is the partition goroutine's: a fresh one is what
	// a partition that merged nothing has.
	return prog, learners.NewPageHinkley()
}

// RecoverState applies one backup written by BackupState, of either
// version.
func (j *logregJob) RecoverState(r io.Reader) error {
	br := &chunkReader{r: r}
	n := br.word()
	if br.err == nil && n == stateMarker {
		if v := br.word(); br.err == nil && v != stateVersion {
			return fmt.Errorf("logreg state: unknown version %d", v)
		}
		return j.recoverV2(br)
	}
	if br.err != nil {
		return br.err
	}
	return j.recoverV1(br, int(n))
}

// recoverV2 reads a version 2 backup after its version.
func (j *logregJob) recoverV2(br *chunkReader) error {
	full := br.word() == 1
	if n := int(br.word()); br.err == nil && n != len(j.parts) {
		return fmt.Errorf("logreg state: %d partitions, the job has %d", n, len(j.parts))
	}
	parts := make([]partMetrics, len(j.parts))
	for i := range parts {
		parts[i].prog = learners.NewProgressive(j.window)
		br.unmarshal(parts[i].prog)
		parts[i].drift = *j.parts[i].drift
		br.unmarshal(&parts[i].drift)
	}
	driftData, namesData := br.chunk(), br.chunk()
	if br.err != nil {
		return br.err
	}
	drifts, err := parseDrifts(driftData, len(j.parts))
	if err != nil {
		return err
	}
	if _, err := j.model.ReadFrom(br.r); err != nil {
		return err
	}
	if err := j.recoverPending(br.r); err != nil {
		return err
	}
	if err := j.names.restore(namesData, j.model.Slots(), full); err != nil {
		return err
	}
	j.drifts.restore(drifts)
	for i, p := range j.parts {
		p.restoreMetrics(parts[i].prog, &parts[i].drift)
	}
	return nil
}

// recoverV1 reads a version 1 backup after its partition count n: its
// metrics (full backups only), model and pending predictions.
func (j *logregJob) recoverV1(br *chunkReader, n int) error {
	if n != 0 && n != len(j.parts) {
		return fmt.Errorf("logreg state: %d partitions, the job has %d", n, len(j.parts))
	}
	progs := make([]*learners.Progressive, n)
	for i := range progs {
		progs[i] = learners.NewProgressive(j.window)
		br.unmarshal(progs[i])
	}
	if br.err != nil {
		return br.err
	}
	if _, err := j.model.ReadFrom(br.r); err != nil {
		return err
	}
	if err := j.recoverPending(br.r); err != nil {
		return err
	}
	for i, p := range j.parts[:n] {
		p.restoreMetrics(progs[i], p.drift)
	}
	return nil
}

// restoreMetrics makes prog and drift the partition's metrics and
// detector, as of the state recovered.
func (p *logregPart) restoreMetrics(prog *learners.Progressive, drift *learners.PageHinkley) {
	p.prog = prog
	*p.drift = *drift
	p.pub.Lock()
	p.pub.snap = prog.Clone()
	p.pub.Unlock()
	p.validated.Store(prog.Count())
	p.committed = &partMetrics{prog: prog.Clone(), drift: *drift}
}

func boolWord(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// chunkWriter writes words and chunks, keeping the first error.
type chunkWriter struct {
	w   io.Writer
	err error
	hdr [4]byte
}

func (c *chunkWriter) word(v uint32) {
	if c.err == nil {
		binary.LittleEndian.PutUint32(c.hdr[:], v)
		_, c.err = c.w.Write(c.hdr[:])
	}
}

func (c *chunkWriter) chunk(data []byte, err error) {
	if c.err == nil {
		c.err = err
	}
	c.word(uint32(len(data)))
	if c.err == nil {
		_, c.err = c.w.Write(data)
	}
}

func (c *chunkWriter) marshal(m encoding.BinaryMarshaler) { c.chunk(m.MarshalBinary()) }

// chunkReader reads what chunkWriter wrote, keeping the first error.
type chunkReader struct {
	r   io.Reader
	err error
	hdr [4]byte
}

func (c *chunkReader) word() uint32 {
	if c.err != nil {
		return 0
	}
	if _, err := io.ReadFull(c.r, c.hdr[:]); err != nil {
		c.err = fmt.Errorf("logreg state: %w", err)
		return 0
	}
	return binary.LittleEndian.Uint32(c.hdr[:])
}

func (c *chunkReader) chunk() []byte {
	n := c.word()
	if c.err != nil {
		return nil
	}
	if n > maxChunk {
		c.err = fmt.Errorf("logreg state: a part of %d bytes", n)
		return nil
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(c.r, data); err != nil {
		c.err = fmt.Errorf("logreg state: %w", err)
	}
	return data
}

func (c *chunkReader) unmarshal(u encoding.BinaryUnmarshaler) {
	data := c.chunk()
	if c.err == nil {
		c.err = u.UnmarshalBinary(data)
	}
}
