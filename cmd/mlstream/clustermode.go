package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mlstream/mlstream/cluster"
	"github.com/mlstream/mlstream/cluster/natsnode"
	"github.com/mlstream/mlstream/runtime"
)

// clusterOptions are the flags of cluster mode. Without --cluster or
// --nats the service runs single-node, and none of this runs.
type clusterOptions struct {
	node           string
	routeAddr      string // --cluster: this node's route listener
	peers          string // --peers: the other nodes' route addresses
	natsURL        string // --nats: an existing NATS cluster instead
	natsListen     string // --nats-listen: let NATS clients connect to the embedded server
	replicas       int
	storage        string
	retentionAge   time.Duration
	retentionBytes string
	leaseTTL       time.Duration
	streamGroups   int
	maxLag         int64
	publishWait    time.Duration
	jsMaxStore     string
	jsMaxMemory    string
	jsElection     time.Duration
}

func (c *clusterOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&c.node, "node", "", "cluster mode: this node's name, unique in the cluster (default: the host name)")
	fs.StringVar(&c.routeAddr, "cluster", "", "cluster mode: host:port of this node's route listener; runs an embedded NATS JetStream server clustered with --peers")
	fs.StringVar(&c.peers, "peers", "", "cluster mode: comma-separated host:port route addresses of the other nodes (with --cluster)")
	fs.StringVar(&c.natsURL, "nats", "", "cluster mode: comma-separated URLs of an existing NATS cluster with JetStream, instead of the embedded server")
	fs.StringVar(&c.natsListen, "nats-listen", "", "cluster mode: host:port where the embedded NATS server accepts clients (e.g. for a job's external source); default: in-process only")
	fs.IntVar(&c.replicas, "replicas", 0, "cluster mode: replicas of every stream and bucket, 1 or 3 (3 survives one node of three); 0 = 3 when the cluster has 3 nodes or more, else 1")
	fs.StringVar(&c.storage, "js-storage", "file", "cluster mode: JetStream storage of streams and state, file or memory")
	fs.DurationVar(&c.retentionAge, "retention-age", 24*time.Hour, "cluster mode: how long input streams keep events (a failover replays only what they hold)")
	fs.StringVar(&c.retentionBytes, "retention-bytes", "1GiB", "cluster mode: most bytes each job's input streams keep")
	fs.DurationVar(&c.leaseTTL, "lease-ttl", 3*time.Second, "cluster mode: lifetime of a partition lease and of a node's heartbeat: a dead node's partitions move after it")
	fs.IntVar(&c.streamGroups, "stream-groups", 3, "cluster mode: input streams per job (partitions spread over them, and their leaders over the nodes)")
	fs.Int64Var(&c.maxLag, "cluster-max-lag", 200_000, "cluster mode: events a partition's owner may be behind before ingest into it answers 429")
	fs.DurationVar(&c.publishWait, "publish-wait", 3*time.Second, "cluster mode: how long ingest waits for JetStream's acknowledgement before answering 429")
	fs.StringVar(&c.jsMaxStore, "js-max-store", "8GiB", "cluster mode: most disk the embedded JetStream server uses")
	fs.StringVar(&c.jsMaxMemory, "js-max-memory", "256MiB", "cluster mode: most memory the embedded JetStream server's memory streams use")
	fs.DurationVar(&c.jsElection, "js-election", natsnode.DefaultElection, "cluster mode, embedded NATS: a JetStream Raft follower that hears nothing from its leader for this long (up to twice it) elects a new one; at least 2s (nats-server's own default: 4s, up to 9s)")
}

func (c *clusterOptions) enabled() bool { return c.routeAddr != "" || c.natsURL != "" }

// clusterRun is a running cluster node: its NATS and its cluster.Node.
type clusterRun struct {
	name string
	nats *natsnode.Node
	node *cluster.Node
}

// startCluster starts (or connects to) NATS and prepares the node; the
// engine comes next (cluster.Node.Start).
func startCluster(ctx context.Context, o serverOptions, log *slog.Logger) (*clusterRun, error) {
	c := o.cl
	if c.routeAddr != "" && c.natsURL != "" {
		return nil, errors.New("--cluster (embedded NATS) and --nats (an existing one) exclude each other")
	}
	if c.node == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("--node: %w", err)
		}
		c.node = h
	}
	if err := runtime.CheckName(c.node); err != nil {
		return nil, fmt.Errorf("--node: %w", err)
	}
	retention, err := runtime.ParseBytes(c.retentionBytes)
	if err != nil {
		return nil, fmt.Errorf("--retention-bytes: %w", err)
	}
	var storage bool
	switch c.storage {
	case "file":
	case "memory":
		storage = true
	default:
		return nil, fmt.Errorf("--js-storage must be file or memory, got %q", c.storage)
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	nn, err := startNATS(sctx, c, o.data, log)
	if err != nil {
		return nil, err
	}
	replicas := c.replicas
	if replicas == 0 {
		replicas = 1
		if max(nn.ClusterSize(), len(c.peerList(c.routeAddr))) >= 3 {
			replicas = 3
		}
	}
	node, err := cluster.New(cluster.Config{Node: c.node, Addr: o.addr, NATS: nn, Replicas: replicas, Memory: storage,
		RetentionAge: c.retentionAge, RetentionBytes: retention, StreamGroups: c.streamGroups, LeaseTTL: c.leaseTTL,
		MaxLag: c.maxLag, PublishWait: c.publishWait, Logger: log})
	if err != nil {
		_ = nn.Close()
		return nil, err
	}
	return &clusterRun{name: c.node, nats: nn, node: node}, nil
}

func startNATS(ctx context.Context, c clusterOptions, data string, log *slog.Logger) (*natsnode.Node, error) {
	if c.natsURL != "" {
		nn, err := natsnode.Connect(ctx, c.natsURL, c.node, log)
		if err != nil {
			return nil, fmt.Errorf("--nats: %w", err)
		}
		return nn, nil
	}
	if data == "" {
		return nil, errors.New("--cluster needs --data: the embedded NATS server keeps its streams there")
	}
	maxStore, err := runtime.ParseBytes(c.jsMaxStore)
	if err != nil {
		return nil, fmt.Errorf("--js-max-store: %w", err)
	}
	maxMem, err := runtime.ParseBytes(c.jsMaxMemory)
	if err != nil {
		return nil, fmt.Errorf("--js-max-memory: %w", err)
	}
	// A cluster of one (no other peer) runs a lone JetStream server: a
	// clustered server never elects a leader without a majority of peers.
	routeAddr, peers := c.routeAddr, c.peerList("")
	if len(c.peerList(c.routeAddr)) <= 1 {
		routeAddr, peers = "", nil
	}
	nn, err := natsnode.Start(ctx, natsnode.Config{Name: c.node, Dir: filepath.Join(data, "nats"), ClusterAddr: routeAddr,
		Peers: peers, ClientAddr: c.natsListen, MaxMemory: maxMem, MaxStore: maxStore, Election: c.jsElection, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	return nn, nil
}

// peerList is --peers as a list, with self added when not empty and
// missing: the nodes of the cluster as this node knows them.
func (c clusterOptions) peerList(self string) []string {
	var peers []string
	for _, p := range strings.Split(c.peers, ",") {
		if p = strings.TrimSpace(p); p != "" && p != self {
			peers = append(peers, p)
		}
	}
	if self != "" {
		peers = append(peers, self)
	}
	return peers
}

// start joins the cluster with engine and stores the config file's jobs
// in it (a job stored already with the same spec is left as it is).
func (cr *clusterRun) start(ctx context.Context, engine *runtime.Engine, specs []runtime.Spec) error {
	if err := cr.node.Start(ctx, engine); err != nil {
		return err
	}
	for i, s := range specs {
		if _, err := cr.node.PutJob(s); err != nil {
			return &runtime.FileJobError{Index: i, Name: s.Name, Err: err}
		}
	}
	return nil
}

// leave hands this node's partitions over, then stops NATS after the
// engine closed (close).
func (cr *clusterRun) leave(ctx context.Context) error { return cr.node.Close(ctx) }

func (cr *clusterRun) close() { _ = cr.nats.Close() }
