package natsnode

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	// probeTimeout bounds one readiness probe: a clustered server silently drops API requests
	// during its first seconds without a meta leader.
	probeTimeout = 2 * time.Second
	// drainTimeout bounds Close's drain of the connection.
	drainTimeout = 10 * time.Second
	// readyPoll is how long one wait for the server's listeners lasts before ctx is looked at.
	readyPoll = 100 * time.Millisecond
)

// Node is a NATS connection with JetStream, and the embedded server behind it if there is one.
type Node struct {
	name string
	log  *slog.Logger
	srv  *server.Server // nil when connected to an external NATS
	// publicClients tells whether srv's client listener is meant for other clients (ClientAddr).
	publicClients bool
	// cfg and token rebuild srv's options when the source subjects change (SetSourceSubjects).
	cfg   Config
	token string
	// reloadMu orders the reloads and guards cfg.SourceSubjects.
	reloadMu sync.Mutex
	nc       *nats.Conn
	js       jetstream.JetStream
	closed   chan struct{} // closed when nc is closed

	closeOnce sync.Once
	closeErr  error
}

// Start runs an embedded nats-server with JetStream as cfg says, connects to it in-process and
// returns once JetStream answers API calls (in a cluster: once a meta leader exists), or fails
// when ctx ends first. A clustered node cannot get a meta leader alone: start the peers
// concurrently. On error nothing is left running.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger.With("node", cfg.Name)
	token := rand.Text()
	setElection(cfg.Election)
	srv, err := startServer(ctx, cfg, token, log)
	if err != nil {
		return nil, err
	}
	n := &Node{name: cfg.Name, log: log, srv: srv, publicClients: cfg.ClientAddr != "", cfg: cfg, token: token, closed: make(chan struct{})}
	// In process, TLS is neither needed nor required: a tls:// URL (ClientTLS) would ask for it.
	url := strings.Replace(srv.ClientURL(), "tls://", "nats://", 1)
	n.nc, err = nats.Connect(url, n.connOptions(nats.InProcessServer(srv), nats.UserInfo(nodeUser, token))...)
	if err != nil {
		stopServer(srv)
		return nil, fmt.Errorf("natsnode: in-process connection: %w", err)
	}
	// The embedded server has JetStream configured, so "not enabled" (how AccountInfo reports
	// no responders) only means it is not up yet.
	if err := n.ready(ctx, func(err error) bool { return errors.Is(err, jetstream.ErrJetStreamNotEnabled) }); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// startServer creates and starts the server and waits until its listeners are up.
func startServer(ctx context.Context, cfg Config, token string, log *slog.Logger) (*server.Server, error) {
	opts, err := serverOptions(cfg, token)
	if err != nil {
		return nil, err
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsnode: nats-server: %w", err)
	}
	srvLog := newServerLogger(log.With("component", "nats-server"))
	srv.SetLoggerV2(srvLog, false, false, false)
	srv.Start()
	for !srv.ReadyForConnections(readyPoll) {
		err := ctx.Err()
		select {
		case err = <-srvLog.fatal:
		default:
		}
		if err != nil {
			stopServer(srv)
			return nil, fmt.Errorf("natsnode: nats-server %s not ready: %w", cfg.Name, err)
		}
	}
	select {
	case err := <-srvLog.fatal: // e.g. JetStream could not start: the listeners are up anyway
		stopServer(srv)
		return nil, err
	default:
	}
	return srv, nil
}

func stopServer(srv *server.Server) {
	srv.Shutdown()
	srv.WaitForShutdown()
}

// Connect connects to an external NATS (urls: comma-separated server URLs) under the
// connection name name, and returns once its JetStream answers API calls, or fails when ctx
// ends first. An unreachable server is retried until then. opts add to the connection's options:
// credentials and TLS (nats.UserCredentials, nats.RootCAs).
func Connect(ctx context.Context, urls string, name string, logger *slog.Logger, opts ...nats.Option) (*Node, error) {
	if logger == nil {
		logger = slog.Default()
	}
	n := &Node{name: name, log: logger.With("node", name), closed: make(chan struct{})}
	var err error
	n.nc, err = nats.Connect(urls, n.connOptions(append([]nats.Option{nats.RetryOnFailedConnect(true)}, opts...)...)...)
	if err != nil {
		return nil, fmt.Errorf("natsnode: connect to %s: %w", urls, err)
	}
	if err := n.ready(ctx, nil); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// connOptions are the options of both kinds of connection: named after the node, reconnecting
// forever, with connection events logged.
func (n *Node) connOptions(extra ...nats.Option) []nats.Option {
	return append([]nats.Option{
		nats.Name(n.name),
		nats.MaxReconnects(-1),
		nats.DrainTimeout(drainTimeout),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				n.log.Warn("NATS connection lost", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			n.log.Info("NATS connection restored", "server", nc.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			n.log.Warn("NATS asynchronous error", "subject", subject, "err", err)
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(n.closed) }),
	}, extra...)
}

// ready creates the JetStream context and waits until JetStream answers an account-info
// request, which in a cluster only the meta leader serves. alsoTransient names errors that are
// worth retrying here besides the Transient ones.
func (n *Node) ready(ctx context.Context, alsoTransient func(error) bool) error {
	js, err := jetstream.New(n.nc)
	if err != nil {
		return fmt.Errorf("natsnode: jetstream: %w", err)
	}
	n.js = js
	retryable := Transient
	if alsoTransient != nil {
		retryable = func(err error) bool { return Transient(err) || alsoTransient(err) }
	}
	err = retryWhile(ctx, probeTimeout, retryable, func(ctx context.Context) error {
		_, err := js.AccountInfo(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("natsnode: JetStream of %s not ready: %w", n.name, err)
	}
	n.log.Debug("JetStream ready", "cluster_size", n.ClusterSize())
	return nil
}

// Current reports whether the embedded server's JetStream is caught up
// with its cluster (true for an external NATS, which this node does not
// run): a node back from a network partition is not, for a while.
func (n *Node) Current() bool {
	if n.srv == nil {
		return true
	}
	return n.srv.JetStreamIsCurrent()
}

// JetStreamOff says why the embedded server's JetStream no longer runs, or "" while it does
// (and always for an external NATS, whose JetStream this node does not run). nats-server turns
// JetStream off for good when its store runs out of space or a write to it is refused; it
// stays off until the process restarts, so the node can store nothing meanwhile.
func (n *Node) JetStreamOff() string {
	if n.srv == nil {
		return ""
	}
	if !n.srv.JetStreamEnabled() {
		return "JetStream is disabled on this node's NATS server (it turns itself off when its store runs out of space or a write to it fails): free or fix the store, then restart the node"
	}
	if acc := n.srv.GlobalAccount(); acc != nil && !acc.JetStreamEnabled() {
		return "JetStream is disabled for this node's NATS account: restart the node"
	}
	return ""
}

// Reach is how many servers of the cluster this node reaches, itself
// included, out of how many JetStream's meta group counts: a node that
// reaches no majority is cut off (its routes to the others timed out). For
// an external NATS it is 1 of 1 while the connection is up, 0 of 1 while
// it is down.
func (n *Node) Reach() (reached, size int) {
	if n.srv == nil {
		if n.nc.IsConnected() {
			return 1, 1
		}
		return 0, 1
	}
	size = n.ClusterSize()
	rz, err := n.srv.Routez(nil)
	if err != nil {
		return 1, size
	}
	peers := make(map[string]bool, len(rz.Routes))
	for _, r := range rz.Routes {
		peers[r.RemoteName] = true
	}
	return 1 + len(peers), size
}

// Routed is the names of the servers the embedded server has routes to
// (nil for an external NATS, whose servers are not mlstream nodes).
func (n *Node) Routed() []string {
	if n.srv == nil {
		return nil
	}
	rz, err := n.srv.Routez(nil)
	if err != nil {
		return nil
	}
	var names []string
	for _, r := range rz.Routes {
		if !slices.Contains(names, r.RemoteName) {
			names = append(names, r.RemoteName)
		}
	}
	return names
}

// Conn is the node's NATS connection.
func (n *Node) Conn() *nats.Conn { return n.nc }

// JetStream is the node's JetStream context.
func (n *Node) JetStream() jetstream.JetStream { return n.js }

// ClientAddr is the address of the embedded server's client listener for other tools (useful
// when Config.ClientAddr asked for port 0), or "" when it has none or the NATS is external.
func (n *Node) ClientAddr() string {
	if n.srv == nil || !n.publicClients {
		return ""
	}
	if addr := n.srv.Addr(); addr != nil {
		return addr.String()
	}
	return ""
}

// Name is the node's name (server name and connection name).
func (n *Node) Name() string { return n.name }

// ClusterSize is the number of peers JetStream's meta group knows (1 when not clustered),
// best effort: peers that left stay counted until they are removed from the meta group. For
// an external NATS, where the meta group cannot be asked without system-account rights, it is
// the number of servers the connection knows (configured and discovered) when the server is
// clustered, else 1.
func (n *Node) ClusterSize() int {
	if n.srv == nil {
		if n.nc.ConnectedClusterName() == "" {
			return 1
		}
		return max(1, len(n.nc.Servers()))
	}
	info, err := n.srv.Jsz(nil)
	if err != nil || info.Meta == nil || info.Meta.Size < 1 {
		return 1
	}
	return info.Meta.Size
}

// Close drains the connection (pending publishes are flushed, subscriptions finish what they
// hold), then shuts the embedded server down and waits until it has stopped. For an external
// NATS only the connection is closed. Close is idempotent; it returns the drain's error.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.closeErr = n.drain()
		if n.srv != nil {
			stopServer(n.srv)
		}
	})
	return n.closeErr
}

// drain drains the connection and waits until it is closed.
func (n *Node) drain() error {
	if n.nc.IsClosed() {
		return nil
	}
	if err := n.nc.Drain(); err != nil {
		n.nc.Close()
		if errors.Is(err, nats.ErrConnectionClosed) {
			return nil
		}
		return fmt.Errorf("natsnode: drain: %w", err)
	}
	select {
	case <-n.closed:
		return nil
	case <-time.After(drainTimeout + time.Second):
		n.nc.Close()
		return errors.New("natsnode: drain did not finish")
	}
}
