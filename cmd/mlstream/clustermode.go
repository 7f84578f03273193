package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mlstream/mlstream/cluster"
	"github.com/mlstream/mlstream/cluster/natsnode"
	"github.com/mlstream/mlstream/runtime"
	"github.com/nats-io/nats.go"
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
	secretFile     string // --cluster-secret: route credentials and NATS users derive from it
	routeTLS       natsnode.RouteTLS
	clientTLS      natsnode.ClientTLS // --nats-listen-tls-*
	natsCreds      string             // --nats-creds: credentials file for --nats
	natsCA         string             // --nats-ca: CA of --nats's TLS certificates
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
	fs.StringVar(&c.secretFile, "cluster-secret", "", "cluster mode: file holding the cluster's shared secret (the same on every node, 16 bytes or more): routes authenticate with credentials derived from it, and so do the users of --nats-listen")
	fs.StringVar(&c.routeTLS.Cert, "cluster-tls-cert", "", "cluster mode: PEM certificate of this node for mutual TLS between routes (with --cluster-tls-key and --cluster-tls-ca)")
	fs.StringVar(&c.routeTLS.Key, "cluster-tls-key", "", "cluster mode: PEM private key of --cluster-tls-cert")
	fs.StringVar(&c.routeTLS.CA, "cluster-tls-ca", "", "cluster mode: PEM CA that signed every node's route certificate; both ends of a route verify the other")
	fs.StringVar(&c.clientTLS.Cert, "nats-listen-tls-cert", "", "cluster mode, --nats-listen: PEM certificate of the NATS client port's TLS (with --nats-listen-tls-key); clients then connect with tls://")
	fs.StringVar(&c.clientTLS.Key, "nats-listen-tls-key", "", "cluster mode, --nats-listen: PEM private key of --nats-listen-tls-cert")
	fs.StringVar(&c.clientTLS.CA, "nats-listen-tls-ca", "", "cluster mode, --nats-listen: PEM CA of client certificates; when set, NATS clients must present one it signed besides their password")
	fs.StringVar(&c.natsCreds, "nats-creds", "", "cluster mode, --nats: NATS credentials file (JWT and nkey) to connect with")
	fs.StringVar(&c.natsCA, "nats-ca", "", "cluster mode, --nats: PEM CA to verify the NATS servers' TLS certificates (tls:// URLs)")
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
// tokens tells whether the service requires tokens: then its routes
// must be authenticated even on loopback.
func startCluster(ctx context.Context, o serverOptions, tokens bool, log *slog.Logger) (*clusterRun, error) {
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
	nn, err := startNATS(sctx, c, o.data, tokens, log)
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

func startNATS(ctx context.Context, c clusterOptions, data string, tokens bool, log *slog.Logger) (*natsnode.Node, error) {
	if c.natsURL != "" {
		return connectNATS(ctx, c, log)
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
	secret, err := readSecret(c.secretFile, log)
	if err != nil {
		return nil, err
	}
	if c.natsListen != "" && secret == nil {
		return nil, fmt.Errorf("--nats-listen needs --cluster-secret: NATS clients connect as user %q (publish to the subjects jobs read as sources, nothing else) or %q, with passwords derived from the secret (mlstream cluster password --cluster-secret FILE --user %s)",
			natsnode.SourceUser, natsnode.AdminUser, natsnode.SourceUser)
	}
	nn, err := natsnode.Start(ctx, natsnode.Config{Name: c.node, Dir: filepath.Join(data, "nats"), ClusterAddr: routeAddr,
		Peers: peers, ClientAddr: c.natsListen, MaxMemory: maxMem, MaxStore: maxStore, Election: c.jsElection,
		Secret: secret, RouteTLS: c.routeTLS, ClientTLS: c.clientTLS, RequireRouteAuth: tokens, Logger: log})
	if errors.Is(err, natsnode.ErrOpenRoutes) {
		why := "anyone who reaches the route port could join the cluster, read every event and change every job"
		if tokens {
			why = "the service requires tokens (--auth-file), so its routes must not be open one port over, even on loopback"
		}
		return nil, fmt.Errorf("--cluster: %w; %s. Add --cluster-secret FILE, the same file on every node (make one with: head -c 32 /dev/urandom | base64 > cluster.secret && chmod 600 cluster.secret), and/or mutual TLS (--cluster-tls-cert, --cluster-tls-key, --cluster-tls-ca)", err, why)
	}
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	return nn, nil
}

// connectNATS connects to the external NATS of --nats, with its
// credentials and CA when given.
func connectNATS(ctx context.Context, c clusterOptions, log *slog.Logger) (*natsnode.Node, error) {
	var opts []nats.Option
	if c.natsCreds != "" {
		if _, err := os.Stat(c.natsCreds); err != nil {
			return nil, fmt.Errorf("--nats-creds: %w", err)
		}
		opts = append(opts, nats.UserCredentials(c.natsCreds))
	}
	if c.natsCA != "" {
		opts = append(opts, nats.RootCAs(c.natsCA))
	}
	nn, err := natsnode.Connect(ctx, c.natsURL, c.node, log, opts...)
	if err != nil {
		return nil, fmt.Errorf("--nats: %w", err)
	}
	return nn, nil
}

// readSecret reads the cluster secret of --cluster-secret (nil without
// one): the file's content without surrounding white space. A file that
// others may read is warned about.
func readSecret(path string, log *slog.Logger) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--cluster-secret: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) < natsnode.MinSecret {
		return nil, fmt.Errorf("--cluster-secret %s: %d bytes, want at least %d (make one with: head -c 32 /dev/urandom | base64 > %s)", path, len(b), natsnode.MinSecret, path)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("the cluster secret file may be read by other users: chmod 600 it", "file", path, "mode", fi.Mode().Perm().String())
	}
	return b, nil
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

// runClusterCmd is "mlstream cluster": tools for an operator of a cluster.
//
//	mlstream cluster password --cluster-secret FILE [--user source|admin|system]
//	mlstream cluster peer-remove NAME --server nats://HOST:PORT --cluster-secret FILE
func runClusterCmd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "password":
			return runClusterPassword(args[1:], stdout, stderr)
		case "peer-remove":
			return runPeerRemove(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintln(stderr, "usage: mlstream cluster password --cluster-secret FILE [--user source|admin|system]\n       mlstream cluster peer-remove NAME --server nats://HOST:PORT --cluster-secret FILE")
	return errUsage
}

func runClusterPassword(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mlstream cluster password", flag.ContinueOnError)
	fs.SetOutput(stderr)
	secretFile := fs.String("cluster-secret", "", "the cluster's secret file (as given to serve)")
	user := fs.String("user", natsnode.SourceUser, "the NATS user of --nats-listen: "+natsnode.SourceUser+" (publishes to the subjects jobs read as sources), "+natsnode.AdminUser+" (everything) or "+natsnode.SystemUser+" (removes JetStream peers)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *user != natsnode.SourceUser && *user != natsnode.AdminUser && *user != natsnode.SystemUser {
		return fmt.Errorf("--user must be %s, %s or %s, got %q", natsnode.SourceUser, natsnode.AdminUser, natsnode.SystemUser, *user)
	}
	secret, err := requiredSecret(*secretFile, stderr)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, natsnode.Password(secret, *user))
	return nil
}

// runPeerRemove removes a departed node (or a stranger) from JetStream's
// peers, through a node's --nats-listen as the system user.
func runPeerRemove(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mlstream cluster peer-remove", flag.ContinueOnError)
	fs.SetOutput(stderr)
	secretFile := fs.String("cluster-secret", "", "the cluster's secret file (as given to serve)")
	server := fs.String("server", "", "nats://HOST:PORT of a running node's --nats-listen")
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(stderr, "usage: mlstream cluster peer-remove NAME --server nats://HOST:PORT --cluster-secret FILE")
		return errUsage
	}
	name := args[0]
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if *server == "" {
		return errors.New("--server is required: the NATS client address (--nats-listen) of a running node")
	}
	secret, err := requiredSecret(*secretFile, stderr)
	if err != nil {
		return err
	}
	nc, err := nats.Connect(*server, nats.UserInfo(natsnode.SystemUser, natsnode.Password(secret, natsnode.SystemUser)))
	if err != nil {
		return fmt.Errorf("--server %s: %w", *server, err)
	}
	defer nc.Close()
	if err := natsnode.RemovePeer(nc, name, 10*time.Second); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "removed %s from the cluster's JetStream peers\n", name)
	return nil
}

func requiredSecret(path string, stderr io.Writer) ([]byte, error) {
	if path == "" {
		return nil, errors.New("--cluster-secret is required")
	}
	return readSecret(path, slog.New(slog.NewTextHandler(stderr, nil)))
}
