// Package cluster runs the engine as one node of an mlstream cluster on
// NATS JetStream. It is runtime's Cluster: every node serves the whole
// API for every job, and
//
//   - jobs live in a KV bucket (jobs.go): a PUT or DELETE on any node
//     changes the job on all of them, and a node that starts reads them;
//   - ingest on any node extracts and validates as in single-node mode,
//     then publishes each partition's records as micro-batches to its
//     subject of a JetStream stream, and answers 202 only after
//     JetStream acknowledged them (ingest.go);
//   - each (job, partition) is owned by one live node through a lease
//     (package lease); the owner reads the partition's subject with a
//     durable pull consumer (MaxAckPending is AF-Stream's Γ) and feeds
//     its local partition (owner.go);
//   - state backups, driven by each kind's StateDivergence, go to a KV
//     bucket with the log position they hold and the owner's fencing
//     token; a new owner restores the latest and replays the log from
//     there (state.go), so a failover loses nothing the log retains;
//   - the partitions of a logreg job send model deltas to one delta
//     stream, which every node applies in the same order: every node
//     holds the same model at the same version and predicts locally
//     (share.go);
//   - other nodes install each partition's latest state as a read-only
//     view, so that queries merge all partitions on any node (views.go),
//     and outputs are forwarded to every node's WebSocket clients
//     (outputs.go).
//
// What JetStream does, we do not: no consensus, membership protocol or
// replication of our own.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/mlstream/mlstream/cluster/lease"
	"github.com/mlstream/mlstream/cluster/natsnode"
	"github.com/mlstream/mlstream/runtime"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config configures a node. Zero fields take the defaults noted.
type Config struct {
	Node string // this node's name, unique in the cluster
	Addr string // this node's HTTP address, shown in the cluster view
	NATS *natsnode.Node
	// Replicas of every stream and bucket: 1 or 3 (default 1; 3 keeps
	// working with one node of three down).
	Replicas int
	// Memory stores streams in memory instead of files (default files).
	Memory bool
	// RetentionAge and RetentionBytes bound each input stream (defaults
	// 24h and 1 GiB): a failover replays from the last backup only as far
	// as the stream still holds.
	RetentionAge   time.Duration
	RetentionBytes int64
	// StreamGroups is how many streams a job's partitions are spread
	// over (default 3, at most the partition count), so that stream
	// leadership spreads over the nodes and a node's death stalls only
	// the partitions whose stream leader it was.
	StreamGroups int
	// LeaseTTL is the lifetime of leases and heartbeats (default 3s): a
	// dead node's partitions move after it.
	LeaseTTL time.Duration
	// MaxLag is how many events a partition's owner may be behind before
	// ingest into it answers 429 (default 200,000).
	MaxLag int64
	// PublishWait is how long an ingest request waits for JetStream's
	// acknowledgement (during a stream leader election, for example)
	// before it is refused with 429 (default 3s).
	PublishWait time.Duration
	Logger      *slog.Logger
}

func (c *Config) defaults() {
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.RetentionAge <= 0 {
		c.RetentionAge = 24 * time.Hour
	}
	if c.RetentionBytes <= 0 {
		c.RetentionBytes = 1 << 30
	}
	if c.StreamGroups <= 0 {
		c.StreamGroups = 3
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 3 * time.Second
	}
	if c.MaxLag <= 0 {
		c.MaxLag = 200_000
	}
	if c.PublishWait <= 0 {
		c.PublishWait = 3 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *Config) storage() jetstream.StorageType {
	if c.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// Node is one node of the cluster: runtime.Cluster for its engine, the
// handler of its leases, and api's JobAdmin and ClusterView.
type Node struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	log    *slog.Logger
	engine *runtime.Engine
	leases *lease.Manager
	jobsKV jetstream.KeyValue
	state  jetstream.KeyValue
	// objects holds the states too large for a KV entry.
	objects jetstream.ObjectStore
	writer  *stateWriter
	lags    lagTable
	stats   nodeStats
	// decisions are the autoscaler decisions the deciding nodes announced.
	decisions decisionTable
	// retiring holds the jobs whose previous layout this node is
	// retiring (retire.go).
	retiring sync.Map
	out      *outputs
	// sourcesMu orders allowSources.
	sourcesMu sync.Mutex

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu struct {
		sync.Mutex
		jobs map[string]*jobState
	}
}

var _ runtime.Cluster = (*Node)(nil)

// New prepares a node; Start runs it once its engine exists (the engine
// is made with this node as its Config.Cluster).
func New(cfg Config) (*Node, error) {
	cfg.defaults()
	if cfg.Node == "" || cfg.NATS == nil {
		return nil, errors.New("cluster: a node needs a name and NATS")
	}
	if cfg.Replicas != 1 && cfg.Replicas != 3 {
		return nil, fmt.Errorf("cluster: replicas must be 1 or 3, got %d", cfg.Replicas)
	}
	n := &Node{cfg: cfg, nc: cfg.NATS.Conn(), js: cfg.NATS.JetStream(), log: cfg.Logger.With("node", cfg.Node)}
	n.mu.jobs = map[string]*jobState{}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	return n, nil
}

// Start opens the buckets, joins the cluster (heartbeats, leases) and
// starts the jobs stored in the cluster. It returns once they all run
// here.
func (n *Node) Start(ctx context.Context, engine *runtime.Engine) error {
	n.engine = engine
	if err := n.openBuckets(ctx); err != nil {
		return err
	}
	n.writer = newStateWriter(n)
	n.out = newOutputs(n)
	if err := n.out.start(); err != nil {
		return err
	}
	if err := n.lags.start(n); err != nil {
		return err
	}
	if err := n.decisions.start(n); err != nil {
		return err
	}
	leases, err := lease.New(ctx, lease.Config{Node: n.cfg.Node, Addr: n.cfg.Addr, JS: n.js, Replicas: n.cfg.Replicas,
		TTL: n.cfg.LeaseTTL, Logger: n.cfg.Logger, Ready: n.cfg.NATS.Current}, n)
	if err != nil {
		return fmt.Errorf("cluster: leases: %w", err)
	}
	n.leases = leases
	n.out.leases.Store(leases)
	n.wg.Add(4)
	go func() {
		defer n.wg.Done()
		every(n.ctx, viewEvery/2, n.flushViews)
	}()
	go func() {
		defer n.wg.Done()
		n.watchStrangers()
	}()
	go func() {
		defer n.wg.Done()
		every(n.ctx, time.Second, n.resumeOwned)
	}()
	go func() {
		defer n.wg.Done()
		every(n.ctx, viewEvery/2, n.pollViews)
	}()
	if err := n.watchJobs(ctx); err != nil {
		return err
	}
	n.log.Info("cluster node started", "replicas", n.cfg.Replicas, "lease_ttl", n.cfg.LeaseTTL.String(),
		"stream_groups", n.cfg.StreamGroups, "storage", n.cfg.storage().String())
	return nil
}

func (n *Node) openBuckets(ctx context.Context) error {
	storage := n.cfg.storage()
	var err error
	n.jobsKV, err = openKV(ctx, n.js, jetstream.KeyValueConfig{Bucket: bucketJobs, History: 1,
		Replicas: n.cfg.Replicas, Storage: jetstream.FileStorage, Description: "mlstream jobs: name → spec"})
	if err != nil {
		return err
	}
	n.state, err = openKV(ctx, n.js, jetstream.KeyValueConfig{Bucket: bucketState, History: 1,
		Replicas: n.cfg.Replicas, Storage: storage, Description: "mlstream state backups"})
	if err != nil {
		return err
	}
	return natsnode.RetryEach(ctx, setupWait, func(ctx context.Context) error {
		n.objects, err = n.js.ObjectStore(ctx, bucketObjects)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			n.objects, err = n.js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: bucketObjects,
				Replicas: n.cfg.Replicas, Storage: storage, Description: "mlstream state backups too large for a KV entry"})
		}
		return err
	})
}

// openKV opens a bucket, creating it when missing. Every node does this
// at start: opening first keeps the nodes from racing to update the
// same bucket's config, which a cluster answers slowly or with errors.
func openKV(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	err := natsnode.RetryEach(ctx, setupWait, func(ctx context.Context) error {
		var err error
		kv, err = js.KeyValue(ctx, cfg.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = js.CreateKeyValue(ctx, cfg)
			if errors.Is(err, jetstream.ErrBucketExists) {
				kv, err = js.KeyValue(ctx, cfg.Bucket)
			}
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}

// Close leaves the cluster gracefully: every partition this node owns is
// backed up and handed over, then the engine may be closed.
func (n *Node) Close(ctx context.Context) error {
	var err error
	if n.leases != nil {
		err = n.leases.Close(ctx)
	}
	n.cancel()
	n.stopAllOwners()
	if n.out != nil {
		n.out.stop()
	}
	n.lags.stop()
	n.decisions.stop()
	n.wg.Wait()
	if n.writer != nil {
		n.writer.close()
	}
	return err
}

// Abort stops the node without handing anything over, as a crash would
// (tests).
func (n *Node) Abort() {
	if n.leases != nil {
		n.leases.Abort()
	}
	n.cancel()
	n.stopAllOwners()
	n.wg.Wait()
}

// job is the cluster's state of a job by name (nil when none).
func (n *Node) job(name string) *jobState {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.jobs[name]
}

// runningJob is the cluster's state of the engine's job j once it is
// ready here (attached: its fault tolerance and job may be read), nil
// otherwise or when j is not the job's current one.
func (n *Node) runningJob(j *runtime.Job) *jobState {
	st := n.job(j.Name())
	if st == nil || !st.ready.Load() || st.job != j {
		return nil
	}
	return st
}

func (n *Node) jobsList() []*jobState {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*jobState, 0, len(n.mu.jobs))
	for _, st := range n.mu.jobs {
		out = append(out, st)
	}
	return out
}

// Attach is runtime.Cluster's: the job's streams exist, its kind gets the
// cluster's fault tolerance and, if it shares deltas, its delta stream,
// the global state restored and the applier started.
func (n *Node) Attach(j *runtime.Job) error {
	st := n.job(j.Name())
	if st == nil {
		return fmt.Errorf("cluster: job %q is not in the cluster's job list", j.Name())
	}
	st.attach(j)
	ctx, cancel := context.WithTimeout(n.ctx, 30*time.Second)
	defer cancel()
	if err := st.ensureStreams(ctx); err != nil {
		return err
	}
	if st.spec.FT.Mode != "none" && j.Units() != nil {
		j.SetFT(newClusterFT(st))
		if st.rescaled != nil {
			// A rescale's new layout: its state is stored already, and
			// queries answer from it at once, not a view poll later.
			if err := st.installViews(ctx); err != nil {
				return err
			}
		}
	}
	if sh, ok := j.Sharing(); ok {
		if err := st.startSharing(ctx, sh); err != nil {
			return err
		}
	}
	st.ready.Store(true)
	return nil
}

// Detach is runtime.Cluster's: the job stopped here.
func (n *Node) Detach(j *runtime.Job) {
	if st := n.job(j.Name()); st != nil && st.job == j {
		st.stopSharing()
	}
}

// Acquired is lease.Handler's: this node owns key now.
func (n *Node) Acquired(key string, token uint64) {
	name, p, err := parseLeaseKey(key)
	if err != nil {
		n.log.Error("lease", "err", err)
		return
	}
	st := n.job(name)
	if st == nil || !st.ready.Load() {
		// The job is not running here yet: its start takes the partition.
		return
	}
	st.acquire(p, token)
}

// resumeOwned starts again the partitions whose lease this node holds and
// that run nothing: a run that stopped by itself (a write it took for
// fenced, a take-over refused) while no other node took the lease. A
// partition truly fenced off stops again at its take-over, until its
// lease is lost.
func (n *Node) resumeOwned() {
	for key, token := range n.leases.Owned() {
		name, p, err := parseLeaseKey(key)
		if err != nil {
			continue
		}
		st := n.job(name)
		if st == nil || !st.ready.Load() || p < 0 || p >= len(st.parts) {
			continue
		}
		if ps := st.parts[p]; ps.orphaned.Load() {
			n.log.Warn("a partition whose lease this node holds ran nothing: starting it again", "job", name, "partition", p)
			st.acquire(p, token)
		}
	}
}

// Release is lease.Handler's: hand key over gracefully.
func (n *Node) Release(key string) {
	name, p, err := parseLeaseKey(key)
	if err != nil {
		return
	}
	if st := n.job(name); st != nil {
		st.release(p, true)
	}
}

// Lost is lease.Handler's: key is no longer ours; stop at once.
func (n *Node) Lost(key string) {
	name, p, err := parseLeaseKey(key)
	if err != nil {
		return
	}
	if st := n.job(name); st != nil {
		n.log.Warn("lease lost: stopping the partition without a backup", "job", name, "partition", p)
		st.release(p, false)
	}
}

func (n *Node) stopAllOwners() {
	for _, st := range n.jobsList() {
		st.stopSource()
		st.releaseAll(false)
	}
}

// updateKeys tells the lease manager every key that should be owned.
func (n *Node) updateKeys() {
	if n.leases == nil {
		return
	}
	var keys []string
	for _, st := range n.jobsList() {
		keys = append(keys, st.leaseKeys()...)
	}
	n.leases.SetKeys(keys)
}
