package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Views: every node installs the latest state of each partition it does
// not own, as its owner wrote it to the state bucket (at least once a
// second while it changes), into its own copy of that partition. Queries
// and the status then merge all partitions on any node, with the kinds'
// own in-process code, at most about a second behind the owners.

// pollViews reads the state entry of each partition
// this node runs and does not own, and installs those that changed. A
// poll rather than a KV watch: a watch stalls for a while when the
// bucket's leader dies (with the node it was on), a Get is retried next
// tick.
func (n *Node) pollViews() {
	for _, st := range n.jobsList() {
		if !st.ready.Load() || st.ft == nil {
			continue
		}
		for _, ps := range st.parts {
			if !ps.running.Load() && st.ft.unitOf(ps.p) != nil {
				n.refreshView(st, ps)
			}
		}
	}
}

// refreshView installs partition ps's latest state if it changed since
// the last one installed.
func (n *Node) refreshView(st *jobState, ps *partState) {
	ctx, cancel := context.WithTimeout(n.ctx, 2*time.Second)
	defer cancel()
	e, err := n.leaderGet(ctx, stateKey(st.id, ps.p))
	if err != nil || e.rev == ps.viewRev.Load() {
		return
	}
	h, state, err := n.stateOf(ctx, e.value)
	if err != nil || state == nil {
		return
	}
	u := st.ft.unitOf(ps.p)
	var ierr error
	if err := st.job.Do(ctx, ps.p, func() {
		if !ps.running.Load() {
			ierr = u.install(h, state)
		}
	}); err != nil {
		return
	}
	if ierr != nil {
		n.log.Warn("view not installed", "job", st.name(), "partition", ps.p, "err", ierr)
		return
	}
	ps.viewRev.Store(e.rev)
	ps.viewRec.Store(h.Rec)
	n.stats.views.Add(1)
}

// installViews installs every partition's stored state into the job
// before its partitions start (Attach of a rescale's new layout).
func (st *jobState) installViews(ctx context.Context) error {
	for _, ps := range st.parts {
		u := st.ft.unitOf(ps.p)
		if u == nil {
			continue
		}
		e, err := st.n.store().latest(ctx, stateKey(st.id, ps.p))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("cluster: the new layout's state of partition %d: %w", ps.p, err)
		}
		h, state, err := st.n.stateOf(ctx, e.value)
		if err != nil {
			return err
		}
		if state == nil {
			continue
		}
		if err := u.install(h, state); err != nil {
			return err
		}
		ps.viewRev.Store(e.rev)
		ps.viewRec.Store(h.Rec)
	}
	return nil
}

func (n *Node) jobByID(id string) *jobState {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, st := range n.mu.jobs {
		if st.id == id {
			return st
		}
	}
	return nil
}
