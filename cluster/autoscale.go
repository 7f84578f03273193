package cluster

import (
	"context"
	"encoding/json"
	goruntime "runtime"
	"slices"
	"sync"
	"time"

	"github.com/mlstream/mlstream/runtime"
	"github.com/nats-io/nats.go"
)

// The autoscaler in cluster mode (runtime.ClusterAutoscaling). Every node
// runs each job's autoscaler loop, but only the owner of the job's
// partition 0 decides: it measures the job across the nodes from the
// owners' reports (every lagEvery: each partition's events offered by
// sequence number, processed, and busy time), caps the count at the
// cores of the live nodes, says when more partitions are needed than the
// cluster has cores (it needs another node), and rescales the job as a
// PATCH would (rescale.go). It announces each decision (core NATS,
// decisionSubject), so that every node's status lists the job's
// decisions, whichever node made them.

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

// decisionSubject carries the autoscaler decisions of the deciding nodes.
const decisionSubject = "mls.autoscale"

// announced is one decision, as a deciding node announces it.
type announced struct {
	ID       string                    `json:"id"` // the job's incarnation's
	Decision runtime.AutoscaleDecision `json:"decision"`
}

// decisionTable keeps the decisions announced for each job incarnation
// (the last keepAnnounced of each).
type decisionTable struct {
	mu  sync.Mutex
	by  map[string][]runtime.AutoscaleDecision
	sub *nats.Subscription
}

const keepAnnounced = 20

func (t *decisionTable) start(n *Node) error {
	t.by = map[string][]runtime.AutoscaleDecision{}
	var err error
	t.sub, err = n.nc.Subscribe(decisionSubject, func(m *nats.Msg) {
		var a announced
		if json.Unmarshal(m.Data, &a) != nil || a.ID == "" {
			return
		}
		t.mu.Lock()
		ds := append(t.by[a.ID], a.Decision)
		t.by[a.ID] = ds[max(0, len(ds)-keepAnnounced):]
		t.mu.Unlock()
	})
	return err
}

func (t *decisionTable) stop() {
	if t.sub != nil {
		_ = t.sub.Unsubscribe()
	}
}

// forget drops the decisions of a job incarnation that stopped here.
func (t *decisionTable) forget(id string) {
	t.mu.Lock()
	delete(t.by, id)
	t.mu.Unlock()
}

// AnnounceDecision is runtime.ClusterAutoscaling's.
func (n *Node) AnnounceDecision(j *runtime.Job, d runtime.AutoscaleDecision) {
	st := n.runningJob(j)
	if st == nil {
		return
	}
	if data, err := json.Marshal(announced{ID: st.id, Decision: d}); err == nil {
		_ = n.nc.Publish(decisionSubject, data)
	}
}

// AnnouncedDecisions is runtime.ClusterAutoscaling's.
func (n *Node) AnnouncedDecisions(j *runtime.Job) []runtime.AutoscaleDecision {
	st := n.runningJob(j)
	if st == nil {
		return nil
	}
	n.decisions.mu.Lock()
	defer n.decisions.mu.Unlock()
	return slices.Clone(n.decisions.by[st.id])
}
