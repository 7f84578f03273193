package natsnode

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mlstream/mlstream/internal/testaddr"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// rogueServer starts a stock nats-server in-process that tries to join the cluster through
// route: the cluster name of mlstream, JetStream on, and the TLS of tlsFiles (nil: none).
func rogueServer(t *testing.T, route string, tlsFiles *RouteTLS) *server.Server {
	t.Helper()
	host, port, _ := net.SplitHostPort(testaddr.Free(t))
	text := fmt.Sprintf("server_name: rogue\nport: -1\nhost: \"127.0.0.1\"\njetstream { store_dir: %s }\ncluster {\n  name: %s\n  listen: \"%s:%s\"\n",
		quote(t.TempDir()), quote(ClusterName), host, port)
	if tlsFiles != nil {
		text += fmt.Sprintf("  tls { cert_file: %s, key_file: %s, ca_file: %s, timeout: 2 }\n",
			quote(tlsFiles.Cert), quote(tlsFiles.Key), quote(tlsFiles.CA))
	}
	text += fmt.Sprintf("  routes: [%s]\n}\n", quote("nats-route://"+route))
	opts := &server.Options{}
	if err := opts.ProcessConfigString(text); err != nil {
		t.Fatal(err)
	}
	opts.NoSigs, opts.NoLog = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { stopServer(srv) })
	return srv
}

// waitRefusedOrJoined waits until the node whose log is logs refused the rogue, or a node
// accepted its route (today's open routes: then the test fails at once rather than at its
// deadline).
func waitRefusedOrJoined(t *testing.T, logs *syncBuffer, nodes []*Node) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(logs.String(), "failed authentication") && !routedToRogue(nodes) {
		if time.Now().After(deadline) {
			t.Fatalf("the node never logged the refused rogue; its log:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func routedToRogue(nodes []*Node) bool {
	for _, n := range nodes {
		if slices.Contains(n.Routed(), "rogue") {
			return true
		}
	}
	return false
}

// assertNoRogue checks that no node routes to the rogue and that JetStream's meta group of
// every node still counts want peers. (The rogue's own count of routes may show one for a
// moment: its connection before the node closes it.)
func assertNoRogue(t *testing.T, nodes []*Node, want int) {
	t.Helper()
	if routedToRogue(nodes) {
		t.Errorf("a node accepted the rogue's route")
	}
	for _, n := range nodes {
		if got := n.ClusterSize(); got != want {
			t.Errorf("%s: JetStream meta group of %d peers, want %d", n.Name(), got, want)
		}
	}
}

// A stock nats-server with the cluster's name, routed to a node of a cluster started with a
// secret (as docs/cluster.md shows), is refused, and the node says so.
func TestRogueServerCannotJoinRoutesWithSecret(t *testing.T) {
	ctx := testCtx(t, 40*time.Second)
	logs := &syncBuffer{}
	nodes, cfgs := startClusterWith(t, ctx, 3, func(i int, c *Config) {
		if i == 0 {
			c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
	})
	rogueServer(t, cfgs[0].ClusterAddr, nil)
	waitRefusedOrJoined(t, logs, nodes)
	assertNoRogue(t, nodes, 3)
}

// With mutual TLS and no secret: a rogue without a certificate, and one whose certificate
// another CA signed, are refused; the nodes, whose certificates the cluster's CA signed, route.
func TestRogueServerCannotJoinRoutesWithTLS(t *testing.T) {
	ctx := testCtx(t, 40*time.Second)
	dir := t.TempDir()
	ca := newTestCA(t, dir, "ca")
	nodeTLS := ca.issue(t, dir, "node")
	other := newTestCA(t, dir, "other").issue(t, dir, "rogue")
	logs := &syncBuffer{}
	nodes, cfgs := startClusterWith(t, ctx, 2, func(i int, c *Config) {
		c.Secret, c.RouteTLS = nil, nodeTLS
		if i == 0 {
			c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
	})
	for _, tlsFiles := range []*RouteTLS{nil, &other} {
		rogue := rogueServer(t, cfgs[0].ClusterAddr, tlsFiles)
		waitRefusedOrJoined(t, logs, nodes)
		assertNoRogue(t, nodes, 2)
		stopServer(rogue)
	}
}

// testCA is a throw-away certificate authority for route TLS.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string
}

func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, file: filepath.Join(dir, name+"-ca.pem")}
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

// issue makes a certificate for 127.0.0.1, good for both ends of a route.
func (ca *testCA) issue(t *testing.T, dir, name string) RouteTLS {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	files := RouteTLS{Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem"), CA: ca.file}
	writePEM(t, files.Cert, "CERTIFICATE", der)
	writePEM(t, files.Key, "PRIVATE KEY", kder)
	return files
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// The client port of --nats-listen: no client connects without credentials, and the source user
// publishes to a source subject but reads nothing (mls.>, replies) and reaches no JetStream or KV
// API; the admin user can.
func TestClientPortNeedsCredentialsAndLimitsSources(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	n := startNode(t, ctx, Config{Name: "n", Dir: t.TempDir(), ClientAddr: "127.0.0.1:0", Secret: testSecret,
		SourceSubjects: []string{"shop.>"}})
	url := "nats://" + n.ClientAddr()
	if _, err := n.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "mls_jobs"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.JetStream().CreateStream(ctx, jetstream.StreamConfig{Name: "SHOP", Subjects: []string{"shop.>"}}); err != nil {
		t.Fatal(err)
	}

	for _, opt := range []nats.Option{nil, nats.UserInfo(SourceUser, "wrong"), nats.UserInfo("mlstream-node", "guess")} {
		var opts []nats.Option
		if opt != nil {
			opts = append(opts, opt)
		}
		if nc, err := nats.Connect(url, opts...); err == nil {
			nc.Close()
			t.Errorf("a client connected without valid credentials (%d options)", len(opts))
		}
	}

	var asyncErrs syncBuffer
	src, err := nats.Connect(url, nats.UserInfo(SourceUser, Password(testSecret, SourceUser)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { fmt.Fprintln(&asyncErrs, err) }))
	if err != nil {
		t.Fatalf("source user: %v", err)
	}
	defer src.Close()
	// What a source does: publish to the subject a job reads; the stream stores it.
	if err := src.Publish("shop.clicks", []byte(`{"item":"a"}`)); err != nil {
		t.Fatal(err)
	}
	if err := src.Flush(); err != nil {
		t.Fatal(err)
	}
	assertSoon(t, ctx, func() error {
		st, err := n.JetStream().Stream(ctx, "SHOP")
		if err == nil && st.CachedInfo().State.Msgs != 1 {
			err = fmt.Errorf("SHOP holds %d messages", st.CachedInfo().State.Msgs)
		}
		return err
	})

	// What it may not do: read events, outputs or replies; publish into mlstream's subjects;
	// use the JetStream or KV API.
	for _, subject := range []string{"mls.>", "mls.in.job_1.0", "_INBOX.>", ">", "$JS.API.>"} {
		if _, err := src.SubscribeSync(subject); err != nil {
			t.Fatal(err)
		}
	}
	for _, subject := range []string{"mls.out.job_1", "$KV.mls_jobs.evil", "$JS.API.STREAM.INFO.SHOP", "$JS.API.STREAM.DELETE.SHOP", "_INBOX.x"} {
		if err := src.Publish(subject, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := src.Flush(); err != nil {
		t.Fatal(err)
	}
	assertSoon(t, ctx, func() error {
		if got := strings.Count(asyncErrs.String(), "Permissions Violation"); got < 10 {
			return fmt.Errorf("%d permission violations reported, want 10:\n%s", got, asyncErrs.String())
		}
		return nil
	})
	kv, err := n.JetStream().KeyValue(ctx, "mls_jobs")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "evil"); err == nil {
		t.Error("the source user put a record into mls_jobs")
	}
	js, _ := jetstream.New(src)
	actx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := js.AccountInfo(actx); err == nil {
		t.Error("the source user reached the JetStream API")
	}

	admin, err := nats.Connect(url, nats.UserInfo(AdminUser, Password(testSecret, AdminUser)))
	if err != nil {
		t.Fatalf("admin user: %v", err)
	}
	defer admin.Close()
	ajs, _ := jetstream.New(admin)
	if _, err := ajs.KeyValue(ctx, "mls_jobs"); err != nil {
		t.Errorf("the admin user cannot open a bucket: %v", err)
	}
}

// The source user publishes only to the subjects jobs read as sources: any other subject is a
// permission violation, and a job's new source subject becomes publishable (for a client
// connected already) once SetSourceSubjects names it.
func TestSourceUserPublishesOnlyToSourceSubjects(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	n := startNode(t, ctx, Config{Name: "n", Dir: t.TempDir(), ClientAddr: "127.0.0.1:0", Secret: testSecret,
		SourceSubjects: []string{"shop.clicks"}})
	got, err := n.Conn().SubscribeSync(">")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	violations := make(chan error, 16)
	src, err := nats.Connect("nats://"+n.ClientAddr(), nats.UserInfo(SourceUser, Password(testSecret, SourceUser)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	publish := func(subject string) {
		t.Helper()
		if err := src.Publish(subject, []byte(subject)); err != nil {
			t.Fatal(err)
		}
		if err := src.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	delivered := func(subject string) {
		t.Helper()
		m, err := got.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("a publish to %s: %v", subject, err)
		}
		if m.Subject != subject {
			t.Fatalf("got a message on %s, want %s", m.Subject, subject)
		}
	}
	refused := func(subject string) {
		t.Helper()
		select {
		case err := <-violations:
			if !strings.Contains(err.Error(), "Permissions Violation") || !strings.Contains(err.Error(), subject) {
				t.Fatalf("a publish to %s: %v, want a permission violation", subject, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("a publish to %s was not refused", subject)
		}
		if m, err := got.NextMsg(100 * time.Millisecond); err == nil {
			t.Fatalf("a refused publish was delivered on %s", m.Subject)
		}
	}

	publish("shop.clicks")
	delivered("shop.clicks")
	for _, subject := range []string{"shop.orders", "anything.else", "fresh.a"} {
		publish(subject)
		refused(subject)
	}

	if err := n.SetSourceSubjects([]string{"shop.clicks", "fresh.>"}); err != nil {
		t.Fatal(err)
	}
	publish("fresh.a")
	delivered("fresh.a")
	publish("shop.clicks")
	delivered("shop.clicks")

	// A job's source removed: its subject is refused again; no subject at all refuses everything.
	if err := n.SetSourceSubjects([]string{"fresh.>"}); err != nil {
		t.Fatal(err)
	}
	publish("shop.clicks")
	refused("shop.clicks")
	if err := n.SetSourceSubjects(nil); err != nil {
		t.Fatal(err)
	}
	publish("fresh.a")
	refused("fresh.a")
}

// With client TLS the client port takes only TLS connections, and with its CA only clients that
// present a certificate it signed, besides their password; the node itself connects in process
// without one, and a reload of the source subjects keeps TLS.
func TestClientPortTLS(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	dir := t.TempDir()
	ca := newTestCA(t, dir, "clients")
	srvFiles, cliFiles := ca.issue(t, dir, "server"), ca.issue(t, dir, "client")
	strangerFiles := newTestCA(t, dir, "other").issue(t, dir, "stranger")
	n := startNode(t, ctx, Config{Name: "n", Dir: t.TempDir(), ClientAddr: "127.0.0.1:0", Secret: testSecret,
		SourceSubjects: []string{"x"}, ClientTLS: ClientTLS{Cert: srvFiles.Cert, Key: srvFiles.Key, CA: ca.file}})
	user := nats.UserInfo(SourceUser, Password(testSecret, SourceUser))
	connect := func(scheme string, opts ...nats.Option) (*nats.Conn, error) {
		return nats.Connect(scheme+"://"+n.ClientAddr(), append([]nats.Option{user, nats.Timeout(2 * time.Second)}, opts...)...)
	}
	for name, opts := range map[string][]nats.Option{
		"plain":                    nil,
		"no client certificate":    {nats.RootCAs(ca.file)},
		"a stranger's certificate": {nats.RootCAs(ca.file), nats.ClientCert(strangerFiles.Cert, strangerFiles.Key)},
	} {
		scheme := "tls"
		if opts == nil {
			scheme = "nats"
		}
		if nc, err := connect(scheme, opts...); err == nil {
			nc.Close()
			t.Errorf("%s: connected", name)
		}
	}
	got, err := n.Conn().SubscribeSync("x")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		src, err := connect("tls", nats.RootCAs(ca.file), nats.ClientCert(cliFiles.Cert, cliFiles.Key))
		if err != nil {
			t.Fatalf("round %d: a client with a certificate of the CA: %v", round, err)
		}
		if err := src.Publish("x", []byte("hello")); err != nil {
			t.Fatal(err)
		}
		if err := src.Flush(); err != nil {
			t.Fatal(err)
		}
		src.Close()
		if _, err := got.NextMsg(5 * time.Second); err != nil {
			t.Fatalf("round %d: the TLS client's message: %v", round, err)
		}
		if nc, err := connect("nats"); err == nil {
			nc.Close()
			t.Errorf("round %d: a plain client connected", round)
		}
		if err := n.SetSourceSubjects([]string{"x", "y"}); err != nil {
			t.Fatal(err)
		}
	}
}

// assertSoon waits until check returns nil, or fails with its last error when ctx ends.
func assertSoon(t *testing.T, ctx context.Context, check func() error) {
	t.Helper()
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal(err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A node that left for good stays a JetStream peer, counted in the quorum, until an operator
// removes it as the system user (mlstream cluster peer-remove); the system user may do nothing
// else of the system account.
func TestRemoveDepartedPeer(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	nodes, cfgs := startCluster(t, ctx, 3, true)
	if err := nodes[2].Close(); err != nil {
		t.Fatal(err)
	}
	if got := nodes[0].ClusterSize(); got != 3 {
		t.Fatalf("ClusterSize after n3 left = %d, want 3 (it stays a peer)", got)
	}
	sys, err := nats.Connect("nats://"+cfgs[0].ClientAddr, nats.UserInfo(SystemUser, Password(testSecret, SystemUser)))
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	if _, err := sys.Request("$SYS.REQ.SERVER.PING", nil, 500*time.Millisecond); err == nil {
		t.Error("the system user made another request of the system account")
	}
	err = RetryEach(ctx, 3*time.Second, func(ctx context.Context) error { return RemovePeer(sys, "n3", 2*time.Second) })
	if err != nil {
		t.Fatal(err)
	}
	assertSoon(t, ctx, func() error {
		if got := nodes[0].ClusterSize(); got != 2 {
			return fmt.Errorf("ClusterSize after removing n3 = %d, want 2", got)
		}
		return nil
	})
}
