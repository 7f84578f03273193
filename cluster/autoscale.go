package cluster

import (
	"context"
	goruntime "runtime"
	"time"

	"github.com/mlstream/mlstream/runtime"
)

// The autoscaler in cluster mode (runtime.ClusterAutoscaling). Every node
// runs each job's autoscaler loop, but only the owner of the job's
// partition 0 decides: it measures the job across the nodes from the
// owners' reports (every lagEvery: each partition's events offered by
// sequence number, processed, and busy time), caps the count at the
// cores of the live nodes, says when more partitions are needed than the
// cluster has cores (it needs another node), and rescales the job as a
// PATCH would (rescale.go).

var _ runtime.ClusterAutoscaling = (*Node)(nil)

// AutoscaleSample is runtime.ClusterAutoscaling's.
func (n *Node) AutoscaleSample(j *runtime.Job, now time.Time) (runtime.LoadSample, bool) {
	st := n.runningJob(j)
	if st == nil || len(st.parts) == 0 || !st.parts[0].owned.Load() {
		return runtime.LoadSample{}, false
	}
	reps, ok := n.lags.latest(st.id, len(st.parts))
	if !ok {
		// A partition not reported (its owner is changing): a layout of
		// its own, so that this measure compares with nothing.
		return runtime.LoadSample{At: now, Layout: st.id + " (incomplete)"}, true
	}
	s := runtime.LoadSample{At: now, Layout: st.id, Parts: make([]runtime.PartLoad, len(reps))}
	for p, r := range reps {
		s.Offered += r.Offered
		s.Parts[p] = runtime.PartLoad{Processed: r.Processed, Busy: time.Duration(r.BusyNs), Source: r.Owner}
	}
	return s, true
}

// Cores is runtime.ClusterAutoscaling's: the cores of the live nodes, as
// their rates say (each node's GOMAXPROCS).
func (n *Node) Cores() int {
	total := 0
	for _, r := range n.out.rates.of(time.Now()) {
		total += r.Cores
	}
	if total == 0 { // no rates yet: this node's, for each live node
		total = goruntime.GOMAXPROCS(0) * max(len(n.leases.Nodes()), 1)
	}
	return total
}

// RescaleDecided is runtime.ClusterAutoscaling's.
func (n *Node) RescaleDecided(ctx context.Context, name string, partitions int, reason string, d *runtime.AutoscaleDecision) (runtime.RescaleReport, error) {
	return n.rescale(ctx, name, partitions, reason, d)
}

var _ runtime.ClusterLoads = (*Node)(nil)

// Routed is runtime.ClusterLoads's: each partition's events offered, as
// its owner last reported them.
func (n *Node) Routed(j *runtime.Job) ([]uint64, bool) {
	st := n.runningJob(j)
	if st == nil {
		return nil, false
	}
	reps, ok := n.lags.latest(st.id, len(st.parts))
	if !ok {
		return nil, false
	}
	out := make([]uint64, len(reps))
	for p, r := range reps {
		out[p] = r.Offered
	}
	return out, true
}
