package cluster

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/cluster/lease"
	"github.com/mlstream/mlstream/runtime"
)

// nodeStats are this node's cluster counters.
type nodeStats struct {
	published   atomic.Uint64 // log messages published by ingest here
	forwarded   atomic.Uint64 // outputs forwarded to other nodes
	views       atomic.Uint64 // partition states installed as views
	takeovers   atomic.Uint64 // partitions this node took over
	failovers   atomic.Uint64 // of which from a node that did not hand over
	backups     atomic.Uint64 // state backups written
	backupBytes atomic.Int64
	poison      atomic.Uint64 // unreadable log messages skipped
	sourced     atomic.Uint64 // events read from jobs' NATS sources here
	staleWrites atomic.Uint64 // backups dropped because their run had ended
	// jetStreamOff is set once the node logged that its JetStream is off.
	jetStreamOff atomic.Bool
	// staleOutputs are partition outputs dropped under an owner token
	// older than the newest known (received, or made here by a fenced
	// owner); unownedOutputs those made here by a partition this node
	// does not own (a view, a take-over under way).
	staleOutputs   atomic.Uint64
	unownedOutputs atomic.Uint64
	// retired counts the previous layouts of rescaled jobs this node
	// retired, lateEvents the events it forwarded from them (retire.go);
	// restarts the runs it started over after a delta was not stored.
	retired, lateEvents, restarts atomic.Uint64

	mu    sync.Mutex
	moves []Move // the latest, oldest first

	// owners is the lease table as Unowned last read it, at ownersAt.
	ownersMu sync.Mutex
	owners   map[string]lease.Owner
	ownersAt time.Time
}

// ownersEvery is how often Unowned reads the lease table again: every
// job's status asks, every second, for each client of the feed.
const ownersEvery = 500 * time.Millisecond

// Move is one change of owner seen by this node (as the new owner).
type Move struct {
	Job string `json:"job"`
	runtime.Failover
	At time.Time `json:"at"`
}

const maxMoves = 50

func (n *Node) recordMove(job string, f runtime.Failover) {
	n.stats.mu.Lock()
	defer n.stats.mu.Unlock()
	n.stats.moves = append(n.stats.moves, Move{Job: job, Failover: f, At: time.Now().UTC()})
	if len(n.stats.moves) > maxMoves {
		n.stats.moves = n.stats.moves[len(n.stats.moves)-maxMoves:]
	}
}

// Status is GET /v1/cluster: the nodes, who owns what, and this node's
// counters.
type Status struct {
	Node   string       `json:"node"`
	Nodes  []NodeStatus `json:"nodes"`
	Jobs   []JobOwners  `json:"jobs"`
	Counts Counts       `json:"counts"`
	Moves  []Move       `json:"moves"`
	Config StatusConfig `json:"config"`
}

// NodeStatus is a live node and its latest rates (nil when none came
// within ratesExpiry).
type NodeStatus struct {
	lease.NodeInfo
	Rates *NodeRates `json:"rates,omitempty"`
}

// JobOwners is who owns each partition of a job (and its global unit).
type JobOwners struct {
	Job        string      `json:"job"`
	Partitions []PartOwner `json:"partitions"`
	Global     *PartOwner  `json:"global,omitempty"`
	// ModelVersion is the delta stream position this node's model holds
	// (jobs that share deltas).
	ModelVersion uint64 `json:"model_version,omitempty"`
	LostDeltas   uint64 `json:"lost_deltas,omitempty"`
}

// PartOwner is one lease.
type PartOwner struct {
	Partition int    `json:"partition"`
	Node      string `json:"node,omitempty"` // "" while nobody holds it
	Token     uint64 `json:"token,omitempty"`
	AgeMs     int64  `json:"lease_age_ms"` // since the holder last renewed
	Since     string `json:"since,omitempty"`
	Lag       *int64 `json:"lag,omitempty"` // events behind, when this node owns it
	// ViewEvents is the events of the partition's state this node
	// installed from its owner (when another node owns it).
	ViewEvents *uint64 `json:"view_events,omitempty"`
}

// Counts are this node's counters.
type Counts struct {
	Published   uint64 `json:"published_messages"`
	Forwarded   uint64 `json:"forwarded_outputs"`
	Views       uint64 `json:"views_installed"`
	Takeovers   uint64 `json:"takeovers"`
	Failovers   uint64 `json:"failovers"`
	Backups     uint64 `json:"backups"`
	BackupBytes int64  `json:"backup_bytes"`
	Poison      uint64 `json:"unreadable_messages"`
	Sourced     uint64 `json:"sourced_events"`
	StaleWrites uint64 `json:"backups_dropped"`
	// StaleOutputs and UnownedOutputs are partition outputs not delivered
	// (nodeStats).
	StaleOutputs   uint64 `json:"stale_outputs"`
	UnownedOutputs uint64 `json:"unowned_outputs"`
	// Retired and LateEvents are rescaled jobs' previous layouts this
	// node retired and the events it forwarded from them; RunRestarts the
	// partition runs it started over after a delta was not stored.
	Retired     uint64 `json:"layouts_retired"`
	LateEvents  uint64 `json:"late_events_forwarded"`
	RunRestarts uint64 `json:"run_restarts"`
}

// StatusConfig is the cluster configuration this node runs with.
type StatusConfig struct {
	Replicas       int    `json:"replicas"`
	Storage        string `json:"storage"`
	LeaseTTL       string `json:"lease_ttl"`
	StreamGroups   int    `json:"stream_groups"`
	RetentionAge   string `json:"retention_age"`
	RetentionBytes int64  `json:"retention_bytes"`
	MaxLag         int64  `json:"max_lag"`
}

// ClusterStatus is api.ClusterView's.
func (n *Node) ClusterStatus() any { return n.Status() }

// Status is the cluster as this node sees it.
func (n *Node) Status() Status {
	s := Status{Node: n.cfg.Node, Counts: n.counts(), Config: n.statusConfig()}
	owners := map[string]lease.Owner{}
	if n.leases != nil {
		s.Nodes = n.nodeStatuses(n.leases.Nodes())
		owners = n.leases.Owners()
	}
	jobs := n.jobsList()
	sort.Slice(jobs, func(i, k int) bool { return jobs[i].name() < jobs[k].name() })
	for _, st := range jobs {
		s.Jobs = append(s.Jobs, st.owners(owners))
	}
	n.stats.mu.Lock()
	s.Moves = append([]Move(nil), n.stats.moves...)
	n.stats.mu.Unlock()
	return s
}

// nodeStatuses joins the live nodes with their latest rates.
func (n *Node) nodeStatuses(nodes []lease.NodeInfo) []NodeStatus {
	var latest map[string]NodeRates
	if n.out != nil {
		latest = n.out.rates.of(time.Now())
	}
	out := make([]NodeStatus, len(nodes))
	for i, ni := range nodes {
		out[i].NodeInfo = ni
		if r, ok := latest[ni.Name]; ok {
			out[i].Rates = &r
		}
	}
	return out
}

func (n *Node) counts() Counts {
	st := &n.stats
	return Counts{Published: st.published.Load(), Forwarded: st.forwarded.Load(), Views: st.views.Load(),
		Takeovers: st.takeovers.Load(), Failovers: st.failovers.Load(), Backups: st.backups.Load(),
		BackupBytes: st.backupBytes.Load(), Poison: st.poison.Load(), Sourced: st.sourced.Load(),
		StaleWrites: st.staleWrites.Load(), StaleOutputs: st.staleOutputs.Load(), UnownedOutputs: st.unownedOutputs.Load(),
		Retired: st.retired.Load(), LateEvents: st.lateEvents.Load(), RunRestarts: st.restarts.Load()}
}

func (n *Node) statusConfig() StatusConfig {
	c := n.cfg
	return StatusConfig{Replicas: c.Replicas, Storage: c.storage().String(), LeaseTTL: c.LeaseTTL.String(),
		StreamGroups: c.StreamGroups, RetentionAge: c.RetentionAge.String(), RetentionBytes: c.RetentionBytes, MaxLag: c.MaxLag}
}

func (st *jobState) owners(all map[string]lease.Owner) JobOwners {
	jo := JobOwners{Job: st.name()}
	for p, ps := range st.parts {
		po := partOwner(p, all[leaseKey(st.name(), p)])
		if ps.owned.Load() {
			lag := ps.lag.Load()
			po.Lag = &lag
		} else if ps.viewRev.Load() != 0 {
			rec := ps.viewRec.Load()
			po.ViewEvents = &rec
		}
		jo.Partitions = append(jo.Partitions, po)
	}
	if st.share != nil {
		g := partOwner(-1, all[leaseKey(st.name(), -1)])
		jo.Global = &g
		jo.ModelVersion = st.share.applied.Load()
		jo.LostDeltas = st.share.lost.Load()
	}
	return jo
}

func partOwner(p int, o lease.Owner) PartOwner {
	po := PartOwner{Partition: p, Node: o.Node, Token: o.Token, AgeMs: o.Age.Milliseconds()}
	if !o.Since.IsZero() {
		po.Since = o.Since.UTC().Format(time.RFC3339)
	}
	return po
}

var _ runtime.Owning = (*Node)(nil)

// Unowned is runtime.Owning's: the partitions of job (-1: its global
// unit) whose lease no node holds, for the job's health.
func (n *Node) Unowned(job string) []int {
	st := n.job(job)
	if n.leases == nil || st == nil {
		return nil
	}
	owners := n.recentOwners()
	var out []int
	for p := range st.parts {
		if owners[leaseKey(job, p)].Node == "" {
			out = append(out, p)
		}
	}
	if st.share != nil && owners[leaseKey(job, -1)].Node == "" {
		out = append(out, -1)
	}
	return out
}

// recentOwners is the lease table, at most ownersEvery old.
func (n *Node) recentOwners() map[string]lease.Owner {
	c := &n.stats
	c.ownersMu.Lock()
	defer c.ownersMu.Unlock()
	if now := time.Now(); c.owners == nil || now.Sub(c.ownersAt) >= ownersEvery {
		c.owners, c.ownersAt = n.leases.Owners(), now
	}
	return c.owners
}

// Stale reports whether this node is cut off from the cluster, why, and
// for how long its heartbeats have not been stored: its NATS server's
// JetStream turned itself off (for good, until a restart: a full or
// failing store), it reaches no majority of the cluster's servers, or its
// heartbeats have failed for staleAfter lease TTLs (longer than a leader election). Its views and shared models
// are frozen meanwhile, so it is not ready (/readyz), though it keeps
// answering.
func (n *Node) Stale() (reason string, behind time.Duration, stale bool) {
	if n.leases == nil {
		return "", 0, false
	}
	age := n.leases.HeartbeatAge()
	if off := n.cfg.NATS.JetStreamOff(); off != "" {
		if n.stats.jetStreamOff.CompareAndSwap(false, true) {
			n.log.Error("this node's JetStream is off: /readyz says not ready until a restart", "reason", off)
		}
		return off + "; this node stores nothing, its views and models are frozen", age, true
	}
	if reached, size := n.cfg.NATS.Reach(); reached <= size/2 {
		return fmt.Sprintf("cut off from the cluster: reaches %d of its %d NATS servers, no majority; its views and models are frozen", reached, size), age, true
	}
	if limit := staleAfter * n.leases.TTL(); age > limit {
		return fmt.Sprintf("its heartbeats have not been stored for %v (more than %v); its views and models are frozen", age.Round(time.Millisecond), limit), age, true
	}
	return "", 0, false
}

// staleAfter is how many lease TTLs of failed heartbeats make a node
// stale although it reaches a majority: longer than a leader election of
// the nodes bucket, which fails every node's heartbeats for a while.
const staleAfter = 3
