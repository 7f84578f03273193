package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/cluster/natsnode"
	"github.com/mlstream/mlstream/runtime"
	"github.com/nats-io/nats.go/jetstream"
)

// Rescaling a job of the cluster (PATCH /v1/jobs/{job} on any node). The
// node asked coordinates; the jobs bucket's entry of the job is the
// commit point, changed only with its expected revision:
//
//  1. seal: the entry gets a rescale mark; every node holds the job's
//     ingest (requests wait, as in single-node mode) and confirms once
//     the requests it had admitted are published. A node that does not
//     confirm in time makes the rescale fail, the job unchanged;
//  2. drain: the partitions' owners go on until each partition's backup
//     (or, for a kind that shares deltas, its last delta) holds the last
//     message of its subject: a backup is written within a second of a
//     partition's last change;
//  3. move: the coordinator restores those backups into instances that
//     run nothing and has the kind move the state to the new count
//     (runtime.RescaleUnits), as a rescale in one process does;
//  4. store: the new layout's state is written for the job's next
//     incarnation, whose streams are made;
//  5. commit: the entry names the next incarnation (and the one it
//     follows). Every node then swaps its copy of the job for the new one
//     (runtime.Engine.ReplaceJob); the held requests go to it, the new
//     partitions' owners start from the stored state.
//
// Until the commit, any failure, or the coordinator's death (any node
// clears a mark older than the rescale timeout, or left by a node that is
// gone), leaves the old incarnation as it was, its ingest reopened; after
// it, the new one runs. Never a mix: the two incarnations have their own
// streams and state.

// rescaleMark is set on a job's entry while it is being rescaled.
type rescaleMark struct {
	To   int       `json:"to"`
	Next string    `json:"next"` // the incarnation the job gets if it commits
	By   string    `json:"by"`   // the coordinating node
	At   time.Time `json:"at"`
}

// Rescale is api.JobAdmin's in cluster mode. Errors as
// runtime.Engine.Rescale's, and runtime.ErrRescaling while another
// rescale of the job is under way.
func (n *Node) Rescale(ctx context.Context, name string, partitions int, reason string) (runtime.RescaleReport, error) {
	return n.rescale(ctx, name, partitions, reason, nil)
}

// rescale is Rescale, which the autoscaler's decision d (nil: none) asked
// for.
func (n *Node) rescale(ctx context.Context, name string, partitions int, reason string, d *runtime.AutoscaleDecision) (runtime.RescaleReport, error) {
	spec, err := n.engine.CheckRescale(name, partitions)
	if err != nil {
		return runtime.RescaleReport{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, n.engine.RescaleTimeout())
	defer cancel()
	rec, rev, err := n.readJobEntry(ctx, name)
	if err != nil {
		return runtime.RescaleReport{}, runtime.ErrUnknownJob
	}
	switch {
	case rec.Spec.Partitions == partitions:
		return runtime.RescaleReport{From: partitions, To: partitions, At: time.Now(), Reason: reason}, nil
	case rec.Spec.FT.Mode == "none":
		return runtime.RescaleReport{}, fmt.Errorf("%w: job %q has ft mode none: in cluster mode a rescale moves the partitions' backed-up state, and mode none backs up nothing", runtime.ErrNotSupported, name)
	case rec.Rescale != nil:
		return runtime.RescaleReport{}, fmt.Errorf("%w: job %q (to %d partitions, by node %s)", runtime.ErrRescaling, name, rec.Rescale.To, rec.Rescale.By)
	}
	st := n.job(name)
	if st == nil || st.inc != rec.Incarnation || !st.ready.Load() {
		return runtime.RescaleReport{}, fmt.Errorf("%w: job %q does not run on this node yet", runtime.ErrRescaleFailed, name)
	}
	if rec.Retire != nil {
		// The layout before this one is not retired yet: first that, so
		// that its late events are not left behind in two layouts.
		if rec, rev, err = n.retirePrevious(ctx, name); err != nil {
			return runtime.RescaleReport{}, fmt.Errorf("%w: job %q: retiring its layout before: %v", runtime.ErrRescaling, name, err)
		}
	}
	r := &clusterRescale{n: n, st: st, old: rec, rev: rev, spec: spec, rep: runtime.RescaleReport{From: rec.Spec.Partitions, To: partitions,
		At: time.Now(), Reason: reason, Generation: rec.Generation + 1, Decision: d}}
	if err := r.run(ctx); err != nil {
		n.log.Warn("rescale failed: the job goes on with its partitions", "job", name, "from", r.rep.From, "to", partitions, "err", err)
		var se *runtime.SpecError
		if errors.As(err, &se) {
			return runtime.RescaleReport{}, err
		}
		return runtime.RescaleReport{}, fmt.Errorf("%w: job %q stays at %d partitions: %v", runtime.ErrRescaleFailed, name, r.rep.From, err)
	}
	return r.rep, nil
}

// readJobEntry is the job's entry and its revision.
func (n *Node) readJobEntry(ctx context.Context, name string) (jobRecord, uint64, error) {
	var rec jobRecord
	var e jetstream.KeyValueEntry
	err := natsnode.RetryEach(ctx, setupWait, func(ctx context.Context) error {
		var err error
		e, err = n.jobsKV.Get(ctx, name)
		return err
	})
	if err != nil {
		return rec, 0, err
	}
	err = json.Unmarshal(e.Value(), &rec)
	return rec, e.Revision(), err
}

// clusterRescale is one rescale, coordinated by this node.
type clusterRescale struct {
	n    *Node
	st   *jobState // the old incarnation, as this node runs it
	old  jobRecord
	rev  uint64 // of the job's entry, updated as the rescale writes it
	spec runtime.Spec
	next jobRecord
	rep  runtime.RescaleReport
	// ends[p] is the stream sequence of old partition p's last message at
	// the drain; drained[p] the log position after what its backup (or
	// last delta) held then; held[p] what the moved state holds of it.
	ends    []uint64
	drained []position
	held    []heldPosition
}

func (r *clusterRescale) run(ctx context.Context) error {
	start := time.Now()
	r.next = jobRecord{Spec: r.spec, Incarnation: newIncarnation(), Created: r.old.Created, Previous: r.old.Incarnation,
		Generation: r.rep.Generation}
	log := r.n.log.With("job", r.spec.Name, "from", r.rep.From, "to", r.rep.To)
	// The new streams first: making them takes a while, and ingest goes
	// on meanwhile.
	if err := r.prepare(ctx); err != nil {
		r.n.removeJobData(r.n.ctx, r.next)
		return err
	}
	log.Info("rescaling job in the cluster: sealing", "next_incarnation", r.next.Incarnation, "took", time.Since(start).String())
	sealing := time.Now()
	if err := r.mark(ctx); err != nil {
		r.n.removeJobData(r.n.ctx, r.next)
		return err
	}
	err := r.seal(ctx)
	if err == nil {
		log.Info("rescale: every node holds the job's ingest; draining", "took", time.Since(sealing).String())
		err = r.drain(ctx)
	}
	r.rep.DrainMs = ms(time.Since(sealing))
	var states map[int]newState
	if err == nil {
		log.Info("rescale: drained; moving the state", "drain_ms", r.rep.DrainMs)
		moving := time.Now()
		states, err = r.move(ctx)
		r.rep.MoveMs = ms(time.Since(moving))
	}
	if err == nil {
		storing := time.Now()
		err = r.store(ctx, states)
		r.rep.BackupMs = ms(time.Since(storing))
	}
	if err == nil {
		log.Info("rescale: new layout stored; committing", "move_ms", r.rep.MoveMs, "backup_ms", r.rep.BackupMs)
		r.rep.PauseMs = ms(time.Since(sealing))
		err = r.commit(ctx)
	}
	if err != nil {
		r.n.abandonRescale(r.n.ctx, r.old.Spec.Name, r.sealed(), r.rev)
		return err
	}
	r.finish(ctx)
	return nil
}

// codeNoPeers is JetStream's "no suitable peers for placement": a stream
// of 3 replicas cannot be placed while a node is down or, for some
// seconds after it restarted, not yet seen online again.
const codeNoPeers = 10005

// prepare makes the next incarnation's streams, waiting (until ctx)
// while JetStream cannot place them.
func (r *clusterRescale) prepare(ctx context.Context) error {
	for {
		err := newJobState(r.n, r.next).createStreams(ctx)
		var apiErr *jetstream.APIError
		if err == nil || !errors.As(err, &apiErr) || apiErr.ErrorCode != codeNoPeers {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// sealed is the job's entry with the rescale mark.
func (r *clusterRescale) sealed() jobRecord {
	rec := r.old
	rec.Rescale = &rescaleMark{To: r.spec.Partitions, Next: r.next.Incarnation, By: r.n.cfg.Node, At: r.rep.At}
	return rec
}

// mark puts the rescale mark on the job's entry. The entry read before
// may have been a replica's, a write behind: on a wrong revision, an entry
// that still names the incarnation the rescale started from, unmarked, is
// marked at its revision.
func (r *clusterRescale) mark(ctx context.Context) error {
	data, err := json.Marshal(r.sealed())
	if err != nil {
		return err
	}
	for range 5 {
		rev, err := r.n.jobsKV.Update(ctx, r.old.Spec.Name, data, r.rev)
		if err == nil {
			r.rev = rev
			return nil
		}
		if !isWrongRevision(err) {
			return err
		}
		sleep(ctx, 20*time.Millisecond)
		now, rev, err := r.n.readJobEntry(ctx, r.old.Spec.Name)
		if err != nil {
			return err
		}
		if now.Incarnation != r.old.Incarnation || now.Rescale != nil {
			break
		}
		r.rev = rev
	}
	return fmt.Errorf("%w: job %q changed meanwhile", runtime.ErrRescaling, r.old.Spec.Name)
}

// seal waits until every live node holds the job's ingest.
func (r *clusterRescale) seal(ctx context.Context) error {
	got, live := r.n.askEveryNode(ctx, appliedQuestion{Job: r.old.Spec.Name, Incarnation: r.old.Incarnation, Running: true, Held: true})
	if got < live {
		return fmt.Errorf("%d of %d live nodes confirmed that they hold the job's ingest", got, live)
	}
	return nil
}

// drain waits until every partition's backup holds the last message of
// its subject.
func (r *clusterRescale) drain(ctx context.Context) error {
	old := r.st
	r.ends = make([]uint64, r.old.Spec.Partitions)
	for p := range r.ends {
		end, err := lastOfSubject(ctx, old.stream(p), inputSubject(old.id, p))
		if err != nil {
			return err
		}
		r.ends[p] = end
	}
	r.drained = make([]position, len(r.ends))
	for p, end := range r.ends {
		for end > 0 {
			held, err := r.heldUpTo(ctx, p)
			if err != nil {
				return err
			}
			r.drained[p] = held
			if held.resume > end {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("partition %d did not back up its last events (log position %d, backed up to %d): %w", p, end, held.resume, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// lastOfSubject is the stream sequence of subj's last message (0: none).
func lastOfSubject(ctx context.Context, s jetstream.Stream, subj string) (uint64, error) {
	var seq uint64
	err := natsnode.RetryEach(ctx, callWait, func(ctx context.Context) error {
		m, err := s.GetLastMsgForSubject(ctx, subj)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			seq = 0
			return nil
		case err != nil:
			return err
		}
		seq = m.Sequence
		return nil
	})
	return seq, err
}

// heldUpTo is the log position partition p resumes from after its latest
// backup (or delta): every message before its resume is in the state,
// and skip events of that one.
func (r *clusterRescale) heldUpTo(ctx context.Context, p int) (position, error) {
	old := r.st
	if old.share != nil {
		s, err := r.n.js.Stream(ctx, deltaStream(old.id))
		if err != nil {
			return position{}, err
		}
		m, err := s.GetLastMsgForSubject(ctx, deltaSubject(old.id, p))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return position{}, nil // nothing learned yet
		}
		if err != nil {
			return position{}, err
		}
		return positionOf(m.Header, m.Time), nil
	}
	h, _, ok, err := r.n.store().read(ctx, stateKey(old.id, p))
	if err != nil || !ok {
		return position{}, err
	}
	return position{resume: h.Resume, skip: h.Skip}, nil
}

// newState is a unit's state in the new layout.
type newState struct {
	state []byte
	seqs  []uint64
}

// move restores the old partitions' backups and moves their state to the
// new count: the new units' states by partition (-1: the global unit).
func (r *clusterRescale) move(ctx context.Context) (map[int]newState, error) {
	olds, err := r.oldStates(ctx)
	if err != nil {
		return nil, err
	}
	global := r.st.share != nil
	out := map[int]newState{}
	err = runtime.RescaleUnits(r.old.Spec, r.spec.Partitions,
		func(u runtime.Unit) error {
			state, ok := olds[unitKey(u, global)]
			if !ok {
				return nil // never backed up: nothing to restore
			}
			return u.RecoverState(bytes.NewReader(state))
		},
		func(u runtime.Unit) error {
			var buf bytes.Buffer
			if err := u.BackupState(&buf, true); err != nil {
				return err
			}
			out[unitKey(u, global)] = newState{buf.Bytes(), u.StateSeqs()}
			return nil
		})
	return out, err
}

// unitKey is the partition whose state key holds unit u's state: -1 for
// the global unit of a kind that shares deltas.
func unitKey(u runtime.Unit, global bool) int {
	if ps := u.Partitions(); !global && len(ps) == 1 {
		return ps[0]
	}
	return -1
}

// oldStates are the old incarnation's latest states by partition: for a
// kind that shares deltas, the global unit's as this node holds it once
// it applied every delta. It sets r.held, what they hold of each
// partition's log (a stalled node's late events may be in a backup taken
// after the drain: its retirement must not forward those again).
func (r *clusterRescale) oldStates(ctx context.Context) (map[int][]byte, error) {
	st := r.st
	r.held = make([]heldPosition, r.old.Spec.Partitions)
	if st.share != nil {
		state, held, err := st.share.snapshotAll(ctx)
		if err != nil {
			return nil, err
		}
		for p := range r.held {
			pos, ok := held[p]
			if !ok {
				// No delta of p applied since this node restored the
				// model: it holds p's last delta of the drain.
				pos = r.drained[p]
			}
			r.held[p] = pos.held()
		}
		return map[int][]byte{-1: state}, nil
	}
	out := map[int][]byte{}
	for p := range r.old.Spec.Partitions {
		h, state, ok, err := r.n.store().read(ctx, stateKey(st.id, p))
		if err != nil {
			return nil, err
		}
		if ok {
			out[p] = state
			r.held[p] = heldPosition{Resume: h.Resume, Skip: h.Skip}
		}
	}
	return out, nil
}

// store writes the next incarnation's state.
func (r *clusterRescale) store(ctx context.Context, states map[int]newState) error {
	id := jobID(r.next.Spec.Name, r.next.Incarnation)
	for p, ns := range states {
		h := stateHeader{Node: r.n.cfg.Node, Created: time.Now().UTC(), Seqs: ns.seqs}
		if _, err := r.n.store().write(ctx, stateKey(id, p), 0, h, ns.state); err != nil {
			return fmt.Errorf("writing the new layout's state: %w", err)
		}
	}
	return nil
}

// commit makes the next incarnation the job's.
func (r *clusterRescale) commit(ctx context.Context) error {
	r.next.LastRescale = &r.rep
	r.next.Retire = &retirement{Partitions: r.old.Spec.Partitions, Held: r.held, At: time.Now()}
	data, err := json.Marshal(r.next)
	if err != nil {
		return err
	}
	rev, err := r.n.jobsKV.Update(ctx, r.old.Spec.Name, data, r.rev)
	if err != nil {
		return fmt.Errorf("committing the new layout: %w", err)
	}
	r.rev = rev
	return nil
}

// finish waits for the new layout to run on every node, then retires the
// old incarnation (retire.go).
func (r *clusterRescale) finish(ctx context.Context) {
	ctx, cancel := context.WithTimeout(r.n.ctx, applyWait)
	defer cancel()
	if err := r.n.waitRunning(ctx, r.spec.Name, r.next.Incarnation); err != nil {
		r.n.log.Warn("rescaled job not running here yet", "job", r.spec.Name, "err", err)
	}
	r.n.waitEveryNode(ctx, r.spec.Name, r.next.Incarnation, true)
	if _, _, err := r.n.retirePrevious(ctx, r.spec.Name); err != nil {
		r.n.log.Warn("retiring the previous layout (another node will)", "job", r.spec.Name, "err", err)
	}
	r.n.log.Info("job rescaled in the cluster", "job", r.spec.Name, "from", r.rep.From, "to", r.rep.To,
		"pause_ms", r.rep.PauseMs, "drain_ms", r.rep.DrainMs, "incarnation", r.next.Incarnation)
}

// abandonRescale clears the rescale mark of the job's entry at revision
// rev (rec is the entry), so that every node reopens the job's ingest,
// and removes what the rescale made for the next incarnation. When the
// entry changed meanwhile (the rescale committed, or another node
// abandoned it first) nothing is done.
func (n *Node) abandonRescale(ctx context.Context, name string, rec jobRecord, rev uint64) {
	mark := rec.Rescale
	if mark == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, applyWait)
	defer cancel()
	rec.Rescale = nil
	data, err := json.Marshal(rec)
	if err != nil {
		return
	}
	if _, err := n.jobsKV.Update(ctx, name, data, rev); err != nil {
		return
	}
	next := rec
	next.Spec.Partitions, next.Incarnation = mark.To, mark.Next
	n.removeJobData(ctx, next)
	n.log.Info("rescale abandoned: the job goes on with its partitions", "job", name, "to", mark.To, "by", mark.By)
}

// clearStaleRescale abandons the rescale of the job's entry e if its
// coordinator is gone or overran (rescaleStale).
func (n *Node) clearStaleRescale(e jetstream.KeyValueEntry) {
	var rec jobRecord
	if e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &rec) != nil || rec.Rescale == nil || !n.rescaleStale(rec.Rescale) {
		return
	}
	n.log.Warn("a rescale's coordinator is gone or overran: abandoning the rescale", "job", e.Key(), "by", rec.Rescale.By, "since", rec.Rescale.At)
	n.abandonRescale(n.ctx, e.Key(), rec, e.Revision())
}

// rescaleStale says whether a rescale mark was left by a coordinator that
// is gone or took longer than any rescale may. A coordinator whose node
// started after the mark is gone too: its rescale died with the process
// (a node restarted within a lease TTL or two of a kill -9 is live again
// under its name, and would otherwise hold the job's rescales off until
// the timeout).
func (n *Node) rescaleStale(mark *rescaleMark) bool {
	age := time.Since(mark.At)
	if age > n.engine.RescaleTimeout()+everyNodeWait {
		return true
	}
	if age < 2*n.cfg.LeaseTTL || n.leases == nil {
		return false
	}
	for _, ni := range n.leases.Nodes() {
		if ni.Name == mark.By {
			return ni.Started.After(mark.At)
		}
	}
	return true
}

// sealState is a node's side of a rescale's seal of one job: wanted
// follows the job's entry, held says that the engine holds the job's
// ingest, drained that the requests admitted before ended (what the
// coordinator waits for).
type sealState struct {
	mu      sync.Mutex // serialises applySeal
	wanted  atomic.Bool
	held    atomic.Bool
	drained atomic.Bool
}

// followSeal makes this node hold the job's ingest while its entry has a
// rescale mark, and admit requests again once the mark is gone without
// a new incarnation (the rescale was abandoned).
func (st *jobState) followSeal(sealed bool) {
	if st.seal.wanted.Swap(sealed) != sealed {
		go st.applySeal()
	}
}

func (st *jobState) applySeal() {
	<-st.started
	st.seal.mu.Lock()
	defer st.seal.mu.Unlock()
	if st.job == nil {
		return
	}
	for {
		want := st.seal.wanted.Load()
		if want == st.seal.held.Load() {
			return
		}
		if !want {
			st.job.OpenIngest()
			st.seal.held.Store(false)
			st.seal.drained.Store(false)
			st.n.log.Info("job's ingest admitted again: its rescale was abandoned", "job", st.name())
			continue
		}
		ctx, cancel := context.WithTimeout(st.n.ctx, everyNodeWait)
		err := st.job.HoldIngest(ctx)
		cancel()
		// Held either way: new requests wait until the mark goes.
		st.seal.held.Store(true)
		if err != nil {
			// Not confirmed: the coordinator gives up, and the mark goes.
			st.n.log.Warn("holding the job's ingest for a rescale", "job", st.name(), "err", err)
			continue
		}
		st.seal.drained.Store(true)
	}
}

// replaceJob swaps the job's incarnation old for rec's, which follows it
// by a rescale: the engine swaps its job, so requests that wait at the
// old one's held ingest go to the new one.
func (n *Node) replaceJob(old *jobState, rec jobRecord) {
	st := newJobState(n, rec)
	n.mu.Lock()
	n.mu.jobs[rec.Spec.Name] = st
	n.mu.Unlock()
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		st.replace(old)
	}()
}

// replace starts the job's new incarnation in place of old.
func (st *jobState) replace(old *jobState) {
	defer close(st.started)
	<-old.started
	old.stopSource()
	old.releaseAll(false)
	st.n.decisions.forget(old.id)
	var rep runtime.RescaleReport
	if st.rescaled != nil {
		rep = *st.rescaled
	}
	ctx, cancel := context.WithTimeout(st.n.ctx, applyWait)
	defer cancel()
	err := st.n.engine.ReplaceJob(ctx, st.spec, rep)
	old.stopSharing() // the engine's Detach of the old job finds this state
	if err != nil {
		st.n.log.Warn("swapping a rescaled job failed here: starting it anew", "job", st.name(), "err", err)
		if err := st.n.engine.DeleteJob(st.name()); err != nil && !errors.Is(err, runtime.ErrUnknownJob) {
			st.startErr = err
			return
		}
		if _, err := st.n.engine.PutJob(st.spec); err != nil {
			st.startErr = err
			st.n.log.Error("a job of the cluster could not start here", "job", st.name(), "err", err)
			return
		}
	}
	st.takePartitions()
}
