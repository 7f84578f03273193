package cluster

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Views: every node installs the latest state of each partition it does
// not own, as its owner wrote it to the state bucket (at least once a
// second while it changes), into its own copy of that partition. Queries
// and the status then merge all partitions on any node, with the kinds'
// own in-process code, at most about a second behind the owners.

// watchViews follows the state bucket until the node closes.
func (n *Node) watchViews(ctx context.Context) error {
	w, err := n.state.WatchAll(ctx)
	if err != nil {
		return err
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-n.ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e != nil && e.Operation() == jetstream.KeyValuePut {
					n.installView(e)
				}
			}
		}
	}()
	return nil
}

// installView installs one state entry if it is a partition of a job
// this node runs and does not own.
func (n *Node) installView(e jetstream.KeyValueEntry) {
	id, suffix, ok := strings.Cut(e.Key(), ".")
	if !ok || !strings.HasPrefix(suffix, "p") {
		return
	}
	p, err := strconv.Atoi(suffix[1:])
	if err != nil {
		return
	}
	st := n.jobByID(id)
	if st == nil || st.job == nil || st.ft == nil || p >= len(st.parts) || st.parts[p].owned.Load() {
		return
	}
	u := st.ft.unitOf(p)
	if u == nil {
		return
	}
	h, state, err := decodeState(e.Value())
	if err != nil || h.Empty {
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	defer cancel()
	if h.Object != "" {
		if state, err = n.objects.GetBytes(ctx, h.Object); err != nil {
			return
		}
	}
	var ierr error
	if err := st.job.Do(ctx, p, func() {
		if !st.parts[p].owned.Load() {
			ierr = u.install(h, state)
		}
	}); err == nil && ierr != nil {
		n.log.Warn("view not installed", "job", st.name(), "partition", p, "err", ierr)
	}
	n.stats.views.Add(1)
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
