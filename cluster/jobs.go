package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mlstream/mlstream/cluster/natsnode"
	"github.com/mlstream/mlstream/runtime"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// jobRecord is a job as the jobs bucket keeps it: the spec with its
// defaults filled in (so that every node runs the same partition count,
// whatever its CPUs) and the incarnation that names its streams.
type jobRecord struct {
	Spec        runtime.Spec `json:"spec"`
	Incarnation string       `json:"incarnation"`
	Created     time.Time    `json:"created"`
	// Rescale is set while the job is being rescaled (rescale.go).
	Rescale *rescaleMark `json:"rescale,omitempty"`
	// Previous is the incarnation this one follows by a rescale ("" for a
	// new job): nodes swap the job rather than restart it.
	Previous string `json:"previous,omitempty"`
	// Generation counts the job's layouts (rescales), LastRescale the
	// rescale that made this one.
	Generation  uint64                 `json:"generation,omitempty"`
	LastRescale *runtime.RescaleReport `json:"last_rescale,omitempty"`
	// Retire is set from the commit of a rescale until the previous
	// incarnation's streams are retired (retire.go).
	Retire *retirement `json:"retire,omitempty"`
}

// applyWait is how long PutJob and DeleteJob wait for the change to
// reach this node's engine.
const applyWait = 30 * time.Second

// PutJob is api.JobAdmin's: the job is checked here, stored in the jobs
// bucket for every node, and running on this node when it returns.
// created=false when the same spec runs already; ErrJobExists when the
// name is another spec's.
func (n *Node) PutJob(spec runtime.Spec) (bool, error) {
	if n.engine.PartitionsOnly(spec) {
		// A new partition count for a running job: rescale it.
		_, err := n.Rescale(n.ctx, spec.Name, spec.Partitions, "api")
		return false, err
	}
	spec, err := n.engine.CheckSpec(spec)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(n.ctx, applyWait)
	defer cancel()
	rec := jobRecord{Spec: spec, Incarnation: newIncarnation(), Created: time.Now().UTC()}
	data, err := json.Marshal(rec)
	if err != nil {
		return false, err
	}
	for {
		old, err := n.readJob(ctx, spec.Name)
		switch {
		case err == nil && sameSpecJSON(old.Spec, spec):
			return false, n.waitRunning(ctx, spec.Name, old.Incarnation)
		case err == nil:
			return false, fmt.Errorf("%w: %q", runtime.ErrJobExists, spec.Name)
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			return false, err
		}
		if err := newJobState(n, rec).createStreams(ctx); err != nil {
			return false, err
		}
		err = natsnode.RetryEach(ctx, setupWait, func(ctx context.Context) error {
			_, err := n.jobsKV.Create(ctx, spec.Name, data)
			return err
		})
		if errors.Is(err, jetstream.ErrKeyExists) {
			continue // created elsewhere meanwhile: compare again
		}
		if err != nil {
			return false, err
		}
		if err := n.waitRunning(ctx, spec.Name, rec.Incarnation); err != nil {
			return false, err
		}
		n.waitEveryNode(ctx, spec.Name, rec.Incarnation, true)
		return true, nil
	}
}

// The jobs' control subject: a node that changed a job asks every node
// to answer once it applied the change, so that a 201 or 200 means the
// job runs (or is gone) on every live node, not only on this one.
const ctlApplied = "mls.ctl.applied"

// everyNodeWait bounds that wait: a node that does not answer in time
// (overloaded, partitioned) does not hold the request up longer.
const everyNodeWait = 10 * time.Second

type appliedQuestion struct {
	Job         string `json:"job"`
	Incarnation string `json:"incarnation"`
	Running     bool   `json:"running"` // false: asks for the job gone
	// Held asks, besides, for the job's ingest held (a rescale's seal)
	// with the requests admitted before ended.
	Held bool `json:"held,omitempty"`
}

// waitEveryNode waits until every live node answered that it runs (or no
// longer runs) the job's incarnation, or everyNodeWait passed.
func (n *Node) waitEveryNode(ctx context.Context, name, incarnation string, running bool) {
	if got, live := n.askEveryNode(ctx, appliedQuestion{name, incarnation, running, false}); got < live {
		n.log.Warn("not every node confirmed a job change in time", "job", name, "confirmed", got, "live", live)
	}
}

// askEveryNode asks every node q and returns how many answered within
// everyNodeWait, and how many nodes are live.
func (n *Node) askEveryNode(ctx context.Context, q appliedQuestion) (got, live int) {
	live = 1
	if n.leases != nil {
		live = len(n.leases.Nodes())
	}
	ctx, cancel := context.WithTimeout(ctx, everyNodeWait)
	defer cancel()
	inbox := nats.NewInbox()
	sub, err := n.nc.SubscribeSync(inbox)
	if err != nil {
		return 0, live
	}
	defer func() { _ = sub.Unsubscribe() }()
	data, _ := json.Marshal(q)
	if n.nc.PublishRequest(ctlApplied, inbox, data) != nil {
		return 0, live
	}
	for ; got < live; got++ {
		if _, err := sub.NextMsgWithContext(ctx); err != nil {
			return got, live
		}
	}
	return got, live
}

// answerApplied answers a waitEveryNode once this node applied the
// change (or gives up after everyNodeWait).
func (n *Node) answerApplied(m *nats.Msg) {
	var q appliedQuestion
	if json.Unmarshal(m.Data, &q) != nil {
		return
	}
	go func() {
		deadline := time.Now().Add(everyNodeWait)
		for time.Now().Before(deadline) && n.ctx.Err() == nil {
			st := n.job(q.Job)
			has := st != nil && st.inc == q.Incarnation && st.ready.Load() && (!q.Held || st.seal.drained.Load())
			if has == q.Running {
				_ = m.Respond(nil)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
}

// DeleteJob is api.JobAdmin's: the job is removed from the bucket, so
// from every node, and its streams and state are deleted.
func (n *Node) DeleteJob(name string) error {
	ctx, cancel := context.WithTimeout(n.ctx, applyWait)
	defer cancel()
	old, err := n.readJob(ctx, name)
	if err != nil {
		return runtime.ErrUnknownJob
	}
	if err := natsnode.RetryEach(ctx, setupWait, func(ctx context.Context) error { return n.jobsKV.Delete(ctx, name) }); err != nil {
		return err
	}
	for n.engineHas(name, old.Incarnation) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	n.waitEveryNode(ctx, name, old.Incarnation, false)
	n.removeJobData(ctx, old)
	if old.Retire != nil {
		n.removeJobData(ctx, old.previous())
	}
	return nil
}

func (n *Node) readJob(ctx context.Context, name string) (jobRecord, error) {
	rec, _, err := n.readJobEntry(ctx, name)
	return rec, err
}

// waitRunning waits until this node runs the job's incarnation (the
// bucket's watcher starts it), or reports why it could not.
func (n *Node) waitRunning(ctx context.Context, name, incarnation string) error {
	for {
		if st := n.job(name); st != nil && st.inc == incarnation {
			select {
			case <-st.started:
				return st.startErr
			case <-ctx.Done():
				return fmt.Errorf("cluster: job %q stored but not started here: %w", name, ctx.Err())
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: job %q stored but not started here: %w", name, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (n *Node) engineHas(name, incarnation string) bool {
	st := n.job(name)
	return st != nil && st.inc == incarnation
}

func sameSpecJSON(a, b runtime.Spec) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// watchJobs starts the jobs stored in the bucket and follows its changes.
// It returns once the stored jobs run here.
func (n *Node) watchJobs(ctx context.Context) error {
	if sub, err := n.nc.Subscribe(ctlApplied, n.answerApplied); err == nil {
		go func() { <-n.ctx.Done(); _ = sub.Unsubscribe() }()
	}
	initial := make(chan struct{})
	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		every(n.ctx, jobsEvery, n.reconcileJobs)
	}()
	go func() {
		defer n.wg.Done()
		for first := initial; n.ctx.Err() == nil; first = nil {
			if err := n.followJobs(first); err != nil && n.ctx.Err() == nil {
				n.log.Warn("watching the jobs bucket; watching again", "err", err)
				sleep(n.ctx, time.Second)
			}
		}
	}()
	select {
	case <-initial:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// followJobs applies the jobs bucket's entries, then its changes, until
// the watch ends; initial (if not nil) is closed once the entries are
// applied. A new watch replays every entry: applying one that runs
// already changes nothing, and a job gone meanwhile is stopped.
func (n *Node) followJobs(initial chan struct{}) error {
	w, err := n.jobsKV.WatchAll(n.ctx)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	seen := map[string]bool{}
	for {
		select {
		case <-n.ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("the watch ended")
			}
			if e == nil {
				n.stopUnseen(seen)
				seen = nil
				if initial != nil {
					n.waitStarted(jobsStartWait)
					close(initial)
					initial = nil
				}
				continue
			}
			if seen != nil {
				seen[e.Key()] = true
			}
			n.applyJob(e)
		}
	}
}

// jobsEvery is how often a node reads the whole jobs bucket besides
// watching it: a watch can miss changes for a while around a leader change
// of the bucket.
const jobsEvery = 2 * time.Second

// reconcileJobs reads the whole jobs bucket once and applies it (every
// jobsEvery, besides the watch).
func (n *Node) reconcileJobs() {
	ctx, cancel := context.WithTimeout(n.ctx, jobsEvery)
	defer cancel()
	keys, err := n.jobsKV.ListKeys(ctx)
	if err != nil {
		return
	}
	seen := map[string]bool{}
	ok := true
	for k := range keys.Keys() {
		e, err := n.jobsKV.Get(ctx, k)
		if err != nil {
			ok = ok && errors.Is(err, jetstream.ErrKeyNotFound)
			continue
		}
		seen[k] = true
		n.applyJob(e)
		n.clearStaleRescale(e)
		n.retireStale(e)
	}
	if ok && ctx.Err() == nil {
		n.stopUnseen(seen)
	}
}

// jobsStartWait bounds how long a starting node waits for the cluster's
// jobs to run here before it says it is ready.
const jobsStartWait = time.Minute

// waitStarted waits until every job known here has started (or failed
// to), at most d: a node is ready once it runs the cluster's jobs, so
// that a client it answers is never told that a job does not exist.
func (n *Node) waitStarted(d time.Duration) {
	deadline := time.After(d)
	for _, st := range n.jobsList() {
		select {
		case <-st.started:
		case <-deadline:
			return
		case <-n.ctx.Done():
			return
		}
	}
}

// stopUnseen stops the jobs that run here but are not in the bucket.
func (n *Node) stopUnseen(seen map[string]bool) {
	for _, st := range n.jobsList() {
		if !seen[st.name()] {
			n.stopJob(st.name())
		}
	}
}

// applyJob makes this node's engine run what the bucket says.
func (n *Node) applyJob(e jetstream.KeyValueEntry) {
	defer n.allowSources()
	name := e.Key()
	if e.Operation() != jetstream.KeyValuePut {
		n.stopJob(name)
		return
	}
	var rec jobRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		n.log.Error("unreadable job record in the cluster", "job", name, "err", err)
		return
	}
	if st := n.job(name); st != nil {
		if st.inc == rec.Incarnation && !st.failed() {
			st.followSeal(rec.Rescale != nil)
			return
		}
		if rec.Previous == st.inc && !st.failed() {
			n.replaceJob(st, rec)
			return
		}
		// Another incarnation, or this one failed to start here (a
		// stream that did not answer in time): start it (again).
		n.stopJob(name)
	}
	st := newJobState(n, rec)
	st.followSeal(rec.Rescale != nil) // started during a rescale: held once it runs
	n.mu.Lock()
	n.mu.jobs[name] = st
	n.mu.Unlock()
	// Creating a job may take a while (its global state is restored):
	// never hold the watcher up.
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		st.start()
	}()
}

// stopJob stops a job here (it was deleted or replaced in the cluster).
func (n *Node) stopJob(name string) {
	st := n.job(name)
	if st == nil {
		return
	}
	<-st.started
	st.stopSource()
	st.releaseAll(false)
	n.decisions.forget(st.id)
	if st.job != nil {
		if err := n.engine.DeleteJob(name); err != nil && !errors.Is(err, runtime.ErrUnknownJob) {
			n.log.Error("stopping a job deleted in the cluster", "job", name, "err", err)
		}
	}
	n.mu.Lock()
	if n.mu.jobs[name] == st {
		delete(n.mu.jobs, name)
	}
	n.mu.Unlock()
	n.updateKeys()
	n.allowSources()
	n.log.Info("job stopped here: deleted in the cluster", "job", name, "incarnation", st.inc)
}

// removeJobData deletes a deleted job's streams and state (by the node
// that deleted it; another node's deletion of the same is harmless).
func (n *Node) removeJobData(ctx context.Context, rec jobRecord) {
	id := jobID(rec.Spec.Name, rec.Incarnation)
	for g := range groups(rec.Spec.Partitions, n.cfg.StreamGroups) {
		_ = n.js.DeleteStream(ctx, inputStream(id, g))
	}
	_ = n.js.DeleteStream(ctx, deltaStream(id))
	for p := -1; p < rec.Spec.Partitions; p++ {
		_ = n.state.Purge(ctx, stateKey(id, p))
	}
}

func groups(partitions, max int) int { return min(partitions, max) }
