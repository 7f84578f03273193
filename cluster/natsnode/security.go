package natsnode

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// The users of an embedded server. Routes have their own (routeUser); clients connect as one of
// these. The node's own in-process connection is nodeUser, with a password only the process
// knows; SourceUser and AdminUser have passwords derived from the cluster secret, so that every
// node accepts the same ones.
const (
	routeUser  = "mlstream-route"
	nodeUser   = "mlstream-node"
	SourceUser = "source" // may publish to the subjects jobs read as sources, nothing else
	AdminUser  = "admin"  // everything a node may do: for operators' tools (the nats CLI)
	// SystemUser is in the system account and may only ask JetStream to remove a peer
	// (RemovePeer).
	SystemUser = "system"
)

// MinSecret is the shortest cluster secret accepted, in bytes.
const MinSecret = 16

// sourceDeny is what a source user may never publish to, even when a job names it as its
// source: the cluster's own subjects (mls.>), the JetStream, KV and object-store APIs and their
// internal subjects, and the inboxes on which the nodes receive replies (a forged reply would be
// taken for JetStream's). Besides, it may publish only to the jobs' source subjects, and
// subscribe to nothing, so it reads no event, output or reply of anyone else.
var sourceDeny = []string{"mls.>", "$JS.>", "$JSC.>", "$KV.>", "$O.>", "$SYS.>", "$NRG.>", "$MQTT.>", "_INBOX.>"}

// RouteTLS names the PEM files of mutual TLS between routes: this node's certificate and key,
// and the CA that signed every node's certificate. Both ends of a route verify the other's.
type RouteTLS struct {
	Cert, Key, CA string
}

func (t RouteTLS) set() bool { return t.Cert != "" || t.Key != "" || t.CA != "" }

func (t RouteTLS) check() error {
	if t.set() && (t.Cert == "" || t.Key == "" || t.CA == "") {
		return errors.New("natsnode: route TLS needs a certificate, its key and the CA (all three)")
	}
	return nil
}

// ClientTLS names the PEM files of TLS on the client listener (Config.ClientAddr): its
// certificate and key, and optionally the CA whose certificates clients must then present
// besides their user and password. The node's own in-process connection needs none.
type ClientTLS struct {
	Cert, Key, CA string
}

func (t ClientTLS) set() bool { return t.Cert != "" || t.Key != "" || t.CA != "" }

func (t ClientTLS) check(clientAddr string) error {
	switch {
	case !t.set():
		return nil
	case t.Cert == "" || t.Key == "":
		return errors.New("natsnode: client TLS needs a certificate and its key (the CA is optional)")
	case clientAddr == "":
		return errors.New("natsnode: client TLS without a client listener (ClientAddr)")
	}
	return nil
}

// writeClientTLS writes the client listener's TLS block: verified client certificates when a
// CA is named.
func writeClientTLS(b *strings.Builder, t ClientTLS) {
	if !t.set() {
		return
	}
	fmt.Fprintf(b, "tls { cert_file: %s, key_file: %s, timeout: 2", quote(t.Cert), quote(t.Key))
	if t.CA != "" {
		fmt.Fprintf(b, ", ca_file: %s, verify: true", quote(t.CA))
	}
	b.WriteString(" }\n")
}

// derive is the password of user derived from the cluster secret: every node derives the same,
// and none reveals the secret or another user's password.
func derive(secret []byte, user string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("mlstream nats user " + user))
	return hex.EncodeToString(m.Sum(nil))
}

// Password is the password of user (SourceUser or AdminUser) on the client listener of a node
// whose cluster secret is secret.
func Password(secret []byte, user string) string { return derive(secret, user) }

// ErrOpenRoutes is the error of a cluster whose routes anyone who reaches them could join.
var ErrOpenRoutes = errors.New("routes without authentication")

// checkSecurity refuses routes open to strangers: a route listener or peer that is not on
// loopback (or any route at all when RequireRouteAuth) needs the secret or mutual TLS; and a
// client listener for other tools needs the secret, whose derived users it accepts.
func (cfg Config) checkSecurity() error {
	if err := cfg.RouteTLS.check(); err != nil {
		return err
	}
	if err := cfg.ClientTLS.check(cfg.ClientAddr); err != nil {
		return err
	}
	if len(cfg.Secret) > 0 && len(cfg.Secret) < MinSecret {
		return fmt.Errorf("natsnode: the cluster secret has %d bytes, want at least %d", len(cfg.Secret), MinSecret)
	}
	if cfg.ClientAddr != "" && len(cfg.Secret) == 0 {
		return errors.New("natsnode: a client listener (ClientAddr) needs the cluster secret: its users' passwords are derived from it")
	}
	if cfg.ClusterAddr == "" || cfg.routesAuthenticated() {
		return nil
	}
	if cfg.RequireRouteAuth {
		return fmt.Errorf("natsnode: %w: authentication is required here", ErrOpenRoutes)
	}
	for _, a := range append([]string{cfg.ClusterAddr}, cfg.Peers...) {
		if !Loopback(a) {
			return fmt.Errorf("natsnode: %w: %s is not a loopback address", ErrOpenRoutes, a)
		}
	}
	return nil
}

func (cfg Config) routesAuthenticated() bool { return len(cfg.Secret) > 0 || cfg.RouteTLS.set() }

// Loopback tells whether host:port addr can only be reached from this machine: a loopback IP
// or "localhost". An empty host (every interface) is not.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// writeRouteSecurity writes the cluster block's authorization and TLS.
func writeRouteSecurity(b *strings.Builder, cfg Config) {
	if len(cfg.Secret) > 0 {
		fmt.Fprintf(b, "  authorization { user: %s, password: %s, timeout: 2 }\n",
			quote(routeUser), quote(derive(cfg.Secret, routeUser)))
	}
	if cfg.RouteTLS.set() {
		fmt.Fprintf(b, "  tls { cert_file: %s, key_file: %s, ca_file: %s, verify: true, timeout: 2 }\n",
			quote(cfg.RouteTLS.Cert), quote(cfg.RouteTLS.Key), quote(cfg.RouteTLS.CA))
	}
}

// routeURL is the URL of the route to peer, with the route credentials when there are some.
func routeURL(cfg Config, peer string) string {
	if len(cfg.Secret) == 0 {
		return "nats-route://" + peer
	}
	return "nats-route://" + routeUser + ":" + derive(cfg.Secret, routeUser) + "@" + peer
}

// writeClientUsers writes the client listener's users: the node's own, and with a secret the
// source and admin users.
func writeClientUsers(b *strings.Builder, cfg Config, token string) {
	b.WriteString("authorization {\n  users: [\n")
	fmt.Fprintf(b, "    {user: %s, password: %s}\n", quote(nodeUser), quote(token))
	if len(cfg.Secret) > 0 {
		fmt.Fprintf(b, "    {user: %s, password: %s}\n", quote(AdminUser), quote(derive(cfg.Secret, AdminUser)))
		fmt.Fprintf(b, "    {user: %s, password: %s, permissions: {publish: %s, subscribe: {deny: [\">\"]}}}\n",
			quote(SourceUser), quote(derive(cfg.Secret, SourceUser)), sourcePublish(cfg.SourceSubjects))
	}
	b.WriteString("  ]\n}\n")
	if len(cfg.Secret) > 0 {
		// The system account ($SYS, nats-server's default name, so that every node agrees)
		// gets one user, for removing departed JetStream peers; JetStream stays in the global
		// account, where the users above are.
		fmt.Fprintf(b, "accounts { $SYS { users: [ {user: %s, password: %s, permissions: {publish: {allow: [%s]}, subscribe: {allow: [\"_INBOX.>\"]}}} ] } }\n",
			quote(SystemUser), quote(derive(cfg.Secret, SystemUser)), quote(removePeerSubject))
	}
}

// sourcePublish is the source user's publish permission: the jobs' source subjects minus
// sourceDeny, or nothing at all while no job names one (an empty allow list would allow all).
func sourcePublish(subjects []string) string {
	if len(subjects) == 0 {
		return `{deny: [">"]}`
	}
	return fmt.Sprintf("{allow: [%s], deny: [%s]}", quoteList(subjects), quoteList(sourceDeny))
}

// SetSourceSubjects makes subjects (wildcards allowed) the ones SourceUser may publish to, on
// this node's client listener, connected source clients included: a job added or removed in
// the cluster changes what its publishers may do. It reloads the embedded server's
// authorization when the set changed, and does nothing for a node without a client listener
// for others or with an external NATS (whose own permissions rule).
func (n *Node) SetSourceSubjects(subjects []string) error {
	if n.srv == nil || !n.publicClients {
		return nil
	}
	subjects = sortedSet(subjects)
	n.reloadMu.Lock()
	defer n.reloadMu.Unlock()
	if slices.Equal(subjects, n.cfg.SourceSubjects) {
		return nil
	}
	cfg := n.cfg
	cfg.SourceSubjects = subjects
	opts, err := serverOptions(cfg, n.token)
	if err != nil {
		return err
	}
	if err := n.srv.ReloadOptions(opts); err != nil {
		return fmt.Errorf("natsnode: the source user's subjects: %w", err)
	}
	n.cfg = cfg
	n.log.Info("source clients may publish to the jobs' source subjects", "subjects", subjects)
	return nil
}

// sortedSet is ss sorted without repeats or empty strings (nil when empty).
func sortedSet(ss []string) []string {
	out := slices.DeleteFunc(slices.Clone(ss), func(s string) bool { return s == "" })
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) == 0 {
		return nil
	}
	return out
}

// removePeerSubject is JetStream's API for removing a peer from the meta group; only the system
// account may use it.
const removePeerSubject = "$JS.API.SERVER.REMOVE"

// RemovePeer asks the JetStream meta leader, through nc (connected as SystemUser), to remove
// the server name from the cluster's peers: a node that left for good (or a stranger that
// joined) otherwise stays counted in the quorum.
func RemovePeer(nc *nats.Conn, name string, timeout time.Duration) error {
	req, _ := json.Marshal(map[string]string{"peer": name})
	m, err := nc.Request(removePeerSubject, req, timeout)
	if err != nil {
		return fmt.Errorf("natsnode: removing peer %s: %w", name, err)
	}
	var resp struct {
		Success bool `json:"success"`
		Error   *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return fmt.Errorf("natsnode: removing peer %s: %w", name, err)
	}
	if resp.Error != nil || !resp.Success {
		desc := "not removed"
		if resp.Error != nil {
			desc = resp.Error.Description
		}
		return fmt.Errorf("natsnode: removing peer %s: %s", name, desc)
	}
	return nil
}

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = quote(s)
	}
	return strings.Join(q, ", ")
}
