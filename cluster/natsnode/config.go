package natsnode

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats-server/v2/server"
)

// ClusterName is the NATS cluster name every embedded mlstream node uses; routes only join
// servers with the same cluster name.
const ClusterName = "mlstream"

// Defaults for the zero values of Config's limits.
const (
	DefaultMaxMemory  int64 = 256 << 20 // JetStream memory store
	DefaultMaxStore   int64 = 8 << 30   // JetStream file store
	DefaultMaxPayload int32 = 8 << 20   // largest message
)

// Config describes an embedded node.
type Config struct {
	Name        string   // server_name; unique in the cluster; required
	Dir         string   // JetStream store dir (data under Dir); required for embedded
	ClusterAddr string   // host:port this node's route listener binds; "" = a single embedded server with no cluster
	Peers       []string // host:port of the peers' route listeners (may include our own; ignored)
	ClientAddr  string   // host:port for NATS clients to connect (other tools); "" = in-process only (DontListen)
	MaxMemory   int64    // JetStream memory store limit (default 256 MiB)
	MaxStore    int64    // JetStream file store limit (default 8 GiB)
	MaxPayload  int32    // max message size (default 8 MiB)
	SyncAlways  bool     // fsync every write (default: the server's 2-minute sync interval)
	// Election is the shortest time a Raft follower waits without hearing
	// from its leader before it campaigns; the longest is twice it
	// (default 2 s; nats-server's own is 4 s, to 9 s). Process-wide.
	Election time.Duration
	// Secret is the cluster secret, the same on every node: the routes' credentials are derived
	// from it, and so are the passwords of the client listener's users (SourceUser, AdminUser).
	Secret []byte
	// SourceSubjects are the subjects SourceUser may publish to at start: those the jobs read
	// as sources (Node.SetSourceSubjects changes them).
	SourceSubjects []string
	// ClientTLS is TLS on ClientAddr (needs ClientAddr).
	ClientTLS ClientTLS
	// RouteTLS is mutual TLS between routes, instead of or besides Secret.
	RouteTLS RouteTLS
	// RequireRouteAuth refuses routes without Secret or RouteTLS even on loopback (a
	// token-protected service must not be open one port over).
	RequireRouteAuth bool
	Logger           *slog.Logger
}

// withDefaults validates cfg and fills the zero values.
func (cfg Config) withDefaults() (Config, error) {
	if err := checkName(cfg.Name); err != nil {
		return cfg, err
	}
	if cfg.Dir == "" {
		return cfg, errors.New("natsnode: Dir (the JetStream store directory) is required")
	}
	if err := cfg.checkLimits(); err != nil {
		return cfg, err
	}
	if err := cfg.checkAddrs(); err != nil {
		return cfg, err
	}
	if err := cfg.checkSecurity(); err != nil {
		return cfg, err
	}
	cfg.MaxMemory = orDefault(cfg.MaxMemory, DefaultMaxMemory)
	cfg.MaxStore = orDefault(cfg.MaxStore, DefaultMaxStore)
	cfg.MaxPayload = orDefault(cfg.MaxPayload, DefaultMaxPayload)
	cfg.Election = orDefault(cfg.Election, DefaultElection)
	if cfg.Election < minElection {
		return cfg, fmt.Errorf("natsnode: Election %v is below %v (two Raft heartbeats)", cfg.Election, minElection)
	}
	cfg.Peers = dedupe(cfg.Peers)
	cfg.SourceSubjects = sortedSet(cfg.SourceSubjects)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg, nil
}

func checkName(name string) error {
	if name == "" {
		return errors.New("natsnode: Name is required")
	}
	if strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0 {
		return fmt.Errorf("natsnode: Name %q must not contain spaces or control characters", name)
	}
	return nil
}

func (cfg Config) checkLimits() error {
	if cfg.MaxMemory < 0 || cfg.MaxStore < 0 || cfg.MaxPayload < 0 {
		return fmt.Errorf("natsnode: negative limit (MaxMemory %d, MaxStore %d, MaxPayload %d)",
			cfg.MaxMemory, cfg.MaxStore, cfg.MaxPayload)
	}
	return nil
}

func (cfg Config) checkAddrs() error {
	if err := checkHostPort("ClientAddr", cfg.ClientAddr, 0); err != nil {
		return err
	}
	// Peers route to a known port; to nats-server, cluster port 0 would mean "no cluster".
	if err := checkHostPort("ClusterAddr", cfg.ClusterAddr, 1); err != nil {
		return err
	}
	if cfg.ClusterAddr == "" {
		if len(cfg.Peers) > 0 {
			return errors.New("natsnode: Peers given without ClusterAddr")
		}
		return nil
	}
	others := 0
	for _, p := range cfg.Peers {
		if p == "" {
			return errors.New("natsnode: empty entry in Peers")
		}
		if err := checkHostPort("Peers", p, 1); err != nil {
			return err
		}
		if p != cfg.ClusterAddr {
			others++
		}
	}
	if others == 0 {
		// A clustered JetStream expects at least two members and would wait forever for a
		// meta leader.
		return fmt.Errorf("natsnode: ClusterAddr %s set but Peers names no other node; leave ClusterAddr empty for a single node", cfg.ClusterAddr)
	}
	return nil
}

// checkHostPort checks that addr (unless empty) is host:port with a numeric port of at least
// minPort.
func checkHostPort(field, addr string, minPort int) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("natsnode: %s %q: want host:port: %w", field, addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < minPort || p > 65535 {
		return fmt.Errorf("natsnode: %s %q: want a port number from %d to 65535", field, addr, minPort)
	}
	return nil
}

func orDefault[T ~int32 | ~int64](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// dedupe drops repeated peers: each route counts towards the size the JetStream meta group
// expects, so a repeated peer would make a quorum unreachable.
func dedupe(peers []string) []string {
	seen := make(map[string]bool, len(peers))
	out := make([]string, 0, len(peers))
	for _, p := range peers {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// serverOptions builds the nats-server options for cfg (already defaulted) from config text,
// then sets what the config language cannot say. token is the client token of the private
// listener a clustered node without ClientAddr needs (see clientListener).
func serverOptions(cfg Config, token string) (*server.Options, error) {
	text := configText(cfg, token)
	opts := &server.Options{}
	if err := opts.ProcessConfigString(text); err != nil {
		return nil, fmt.Errorf("natsnode: server config: %w\n%s", err, text)
	}
	opts.NoSigs = true // the host process owns the signals
	opts.DontListen = cfg.ClientAddr == "" && cfg.ClusterAddr == ""
	return opts, nil
}

// needsPrivateListener tells whether the node must listen for clients although the operator
// asked for none: nats-server 2.15 starts its routes only after its client listener is up, and
// with DontListen that never happens, so a clustered DontListen server never forms a cluster.
func (cfg Config) needsPrivateListener() bool {
	return cfg.ClientAddr == "" && cfg.ClusterAddr != ""
}

// configText renders cfg as nats-server configuration.
func configText(cfg Config, token string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: %s\n", quote(cfg.Name))
	fmt.Fprintf(&b, "max_payload: %d\n", cfg.MaxPayload)
	// A peer that froze (SIGSTOP) or was cut off keeps its TCP connection:
	// pings every 2 s, 3 unanswered, drop it in about 6 s rather than the
	// default 2 minutes, so that it stops counting as a live peer.
	b.WriteString("ping_interval: \"2s\"\nping_max: 3\n")
	writeClientListener(&b, cfg, token)
	b.WriteString("jetstream {\n")
	fmt.Fprintf(&b, "  store_dir: %s\n", quote(cfg.Dir))
	fmt.Fprintf(&b, "  max_memory_store: %d\n", cfg.MaxMemory)
	fmt.Fprintf(&b, "  max_file_store: %d\n", cfg.MaxStore)
	if cfg.SyncAlways {
		b.WriteString("  sync_interval: always\n")
	}
	b.WriteString("}\n")
	if cfg.ClusterAddr != "" {
		b.WriteString("cluster {\n")
		fmt.Fprintf(&b, "  name: %s\n", quote(ClusterName))
		fmt.Fprintf(&b, "  listen: %s\n", quote(cfg.ClusterAddr))
		if cfg.needsPrivateListener() {
			b.WriteString("  no_advertise: true\n") // peers' clients must not learn the private address
		}
		writeRouteSecurity(&b, cfg)
		b.WriteString("  routes: [\n")
		for _, p := range cfg.Peers {
			fmt.Fprintf(&b, "    %s\n", quote(routeURL(cfg, p)))
		}
		b.WriteString("  ]\n}\n")
	}
	return b.String()
}

// writeClientListener configures the client listener: the operator's ClientAddr, or, when a
// clustered node needs one anyway, a private one on a random loopback port. Either way only
// known users connect: the node itself (its password is token, which only this process knows)
// and, on ClientAddr, the users derived from the cluster secret.
func writeClientListener(b *strings.Builder, cfg Config, token string) {
	switch {
	case cfg.ClientAddr != "":
		host, port, _ := net.SplitHostPort(cfg.ClientAddr)
		if port == "0" {
			port = "-1" // nats-server's "any free port"; its port 0 means the default 4222
		}
		fmt.Fprintf(b, "host: %s\nport: %s\n", quote(host), port)
		writeClientTLS(b, cfg.ClientTLS)
	case cfg.needsPrivateListener():
		b.WriteString("host: \"127.0.0.1\"\nport: -1\n")
	default:
		return
	}
	writeClientUsers(b, cfg, token)
}

// quote writes s as a double-quoted string of the nats config language, which knows only the
// escapes \t \n \r \" \\ and \xXX.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
