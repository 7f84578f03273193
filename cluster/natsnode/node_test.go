package natsnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlstream/mlstream/internal/testaddr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestSingleNodeKVAndStreamSurviveRestart(t *testing.T) {
	ctx := testCtx(t, 15*time.Second)
	dir := t.TempDir()
	n := startNode(t, ctx, Config{Name: "solo", Dir: dir})
	if got := n.ClusterSize(); got != 1 {
		t.Errorf("ClusterSize = %d, want 1", got)
	}
	if got := n.Conn().Opts.Name; got != "solo" {
		t.Errorf("connection name = %q, want solo", got)
	}

	js := n.JetStream()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	assertKV(t, ctx, js, "b", "k", "v1")

	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := js.Publish(ctx, "s.x", fmt.Appendf(nil, "m%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := consume(t, ctx, js, "S", 3); strings.Join(got, ",") != "m0,m1,m2" {
		t.Fatalf("consumed %v", got)
	}

	if err := n.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	again := startNode(t, ctx, Config{Name: "solo", Dir: dir})
	js = again.JetStream()
	s, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatalf("stream after restart: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 3 {
		t.Fatalf("stream has %d messages after restart, want 3", info.State.Msgs)
	}
	assertKV(t, ctx, js, "b", "k", "v1")
}

func assertKV(t *testing.T, ctx context.Context, js jetstream.JetStream, bucket, key, want string) {
	t.Helper()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatalf("bucket %s: %v", bucket, err)
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatalf("get %s/%s: %v", bucket, key, err)
	}
	if string(e.Value()) != want {
		t.Fatalf("%s/%s = %q, want %q", bucket, key, e.Value(), want)
	}
}

// consume reads n messages from stream through a durable pull consumer, acking each.
func consume(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string, n int) []string {
	t.Helper()
	c, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.Fetch(n, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for m := range batch.Messages() {
		got = append(got, string(m.Data()))
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Error(); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestStoreDirWithQuotesAndBackslashes(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	dir := filepath.Join(t.TempDir(), `we"ird\ dir`+"\t$x")
	n := startNode(t, ctx, Config{Name: "odd", Dir: dir})
	if got := n.srv.JetStreamConfig().StoreDir; got != filepath.Join(dir, "jetstream") {
		t.Fatalf("store dir = %q, want under %q", got, dir)
	}
}

func TestClientAddrListensForOtherClients(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	n := startNode(t, ctx, Config{Name: "open", Dir: t.TempDir(), ClientAddr: "127.0.0.1:0", Secret: testSecret})
	addr := n.ClientAddr()
	if _, port, _ := net.SplitHostPort(addr); port == "" || port == "0" || port == "4222" {
		t.Fatalf("ClientAddr() = %q, want the free port picked for 127.0.0.1:0", addr)
	}
	if _, err := n.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "shared"}); err != nil {
		t.Fatal(err)
	}
	other, err := nats.Connect("nats://"+addr, nats.UserInfo(AdminUser, Password(testSecret, AdminUser)))
	if err != nil {
		t.Fatalf("TCP client: %v", err)
	}
	defer other.Close()
	js, err := jetstream.New(other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.KeyValue(ctx, "shared"); err != nil {
		t.Fatalf("bucket through TCP: %v", err)
	}
}

func TestNoClientListenerByDefault(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	n := startNode(t, ctx, Config{Name: "closed", Dir: t.TempDir()})
	if addr := n.srv.Addr(); addr != nil || n.ClientAddr() != "" {
		t.Fatalf("server listens for clients on %v without ClientAddr", addr)
	}
}

// TestStartFailsOnServerFatal covers what a stand-alone nats-server would exit on.
func TestStartFailsOnServerFatal(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Name: "a", Dir: t.TempDir(), ClientAddr: taken.Addr().String(), Secret: testSecret}, "listening on port"},
		{Config{Name: "b", Dir: t.TempDir(), ClusterAddr: taken.Addr().String(), Peers: []string{testaddr.Free(t)}}, "listening on router port"},
		{Config{Name: "c", Dir: notDir}, "start JetStream"},
	} {
		cfg := tc.cfg
		cfg.Logger = slog.New(slog.DiscardHandler)
		start := time.Now()
		n, err := Start(testCtx(t, 20*time.Second), cfg)
		if err == nil {
			n.Close()
			t.Fatalf("%s: Start succeeded", cfg.Name)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error does not say %q: %v", cfg.Name, tc.want, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: Start took %v to fail", cfg.Name, d)
		}
	}
}

func TestLoneClusteredNodeGivesUpWithCtx(t *testing.T) {
	self := testaddr.Free(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	n, err := Start(ctx, Config{Name: "lone", Dir: dir, ClusterAddr: self, Peers: []string{self, testaddr.Free(t)}, Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		n.Close()
		t.Fatal("a lone clustered node got a meta leader")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the context's deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Start returned %v after its context ended", d-1500*time.Millisecond)
	}
	// Everything was shut down: the store and the route port can be taken again.
	n = startNode(t, testCtx(t, 10*time.Second), Config{Name: "lone", Dir: dir, ClientAddr: self, Secret: testSecret})
	n.Close()
}

func TestConfigRejected(t *testing.T) {
	self := "127.0.0.1:7001"
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Dir: "d"}, "Name is required"},
		{Config{Name: "a b", Dir: "d"}, "spaces"},
		{Config{Name: "a"}, "Dir"},
		{Config{Name: "a", Dir: "d", MaxStore: -1}, "negative"},
		{Config{Name: "a", Dir: "d", ClientAddr: "4222"}, "ClientAddr"},
		{Config{Name: "a", Dir: "d", ClientAddr: "localhost:nats"}, "port number"},
		{Config{Name: "a", Dir: "d", ClusterAddr: "127.0.0.1:0", Peers: []string{self}}, "ClusterAddr"},
		{Config{Name: "a", Dir: "d", Peers: []string{self}}, "without ClusterAddr"},
		{Config{Name: "a", Dir: "d", ClusterAddr: self}, "no other node"},
		{Config{Name: "a", Dir: "d", ClusterAddr: self, Peers: []string{self, self}}, "no other node"},
		{Config{Name: "a", Dir: "d", ClusterAddr: self, Peers: []string{self, "nohost"}}, "Peers"},
		{Config{Name: "a", Dir: "d", Election: time.Second}, "two Raft heartbeats"},
		// Routes and client ports open to strangers.
		{Config{Name: "a", Dir: "d", ClusterAddr: "10.0.0.1:6222", Peers: []string{"10.0.0.2:6222"}}, "10.0.0.1:6222 is not a loopback"},
		{Config{Name: "a", Dir: "d", ClusterAddr: ":6222", Peers: []string{"127.0.0.1:6223"}}, "not a loopback"},
		{Config{Name: "a", Dir: "d", ClusterAddr: self, Peers: []string{"10.0.0.2:6222"}}, "10.0.0.2:6222 is not a loopback"},
		{Config{Name: "a", Dir: "d", ClusterAddr: self, Peers: []string{"127.0.0.1:7002"}, RequireRouteAuth: true}, "authentication is required"},
		{Config{Name: "a", Dir: "d", ClientAddr: "127.0.0.1:0"}, "needs the cluster secret"},
		{Config{Name: "a", Dir: "d", Secret: []byte("short")}, "at least 16"},
		{Config{Name: "a", Dir: "d", RouteTLS: RouteTLS{Cert: "c", Key: "k"}}, "all three"},
		{Config{Name: "a", Dir: "d", ClientAddr: "127.0.0.1:0", Secret: testSecret, ClientTLS: ClientTLS{Cert: "c", CA: "ca"}}, "certificate and its key"},
		{Config{Name: "a", Dir: "d", ClientTLS: ClientTLS{Cert: "c", Key: "k"}}, "without a client listener"},
	} {
		_, err := Start(context.Background(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want it to mention %q", tc.cfg, err, tc.want)
		}
	}
}

func TestConfigTextRoutesOncePerPeer(t *testing.T) {
	cfg, err := Config{Name: "n1", Dir: "/d", ClusterAddr: "127.0.0.1:1", Peers: []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:2", "127.0.0.1:3"}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	opts, err := serverOptions(cfg, "secret")
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Routes) != 3 {
		t.Errorf("routes = %v, want the 3 distinct peers", opts.Routes)
	}
	if opts.Cluster.Name != ClusterName || opts.ServerName != "n1" || !opts.NoSigs {
		t.Errorf("cluster %q, server %q, NoSigs %v", opts.Cluster.Name, opts.ServerName, opts.NoSigs)
	}
	// Routes need a client listener: a private one, locked, and not advertised to peers.
	if opts.DontListen || opts.Host != "127.0.0.1" || opts.Port != -1 || !opts.Cluster.NoAdvertise {
		t.Errorf("client listener: DontListen %v, %s:%d, NoAdvertise %v", opts.DontListen, opts.Host, opts.Port, opts.Cluster.NoAdvertise)
	}
	if len(opts.Users) != 1 || opts.Users[0].Username != nodeUser || opts.Users[0].Password != "secret" {
		t.Errorf("private listener's users %+v, want only the node's own", opts.Users)
	}
	if opts.JetStreamMaxMemory != DefaultMaxMemory || opts.JetStreamMaxStore != DefaultMaxStore || opts.MaxPayload != DefaultMaxPayload {
		t.Errorf("limits %d %d %d", opts.JetStreamMaxMemory, opts.JetStreamMaxStore, opts.MaxPayload)
	}
	if opts.SyncAlways {
		t.Error("SyncAlways set without being asked")
	}
	cfg.SyncAlways = true
	if opts, _ = serverOptions(cfg, "secret"); !opts.SyncAlways {
		t.Error("SyncAlways not passed on")
	}
}

func TestServerNoticesGoToDebug(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	startNode(t, testCtx(t, 10*time.Second), Config{Name: "chatty", Dir: t.TempDir(), Logger: log}).Close()
	out := buf.String()
	if !strings.Contains(out, `level=DEBUG msg="Server is ready"`) {
		t.Errorf("the server's notice is not logged at Debug:\n%s", out)
	}
	if strings.Contains(out, "level=INFO") {
		t.Errorf("server noise logged at Info:\n%s", out)
	}
}

// JetStreamOff says so once the server's JetStream is off. The test turns it off as
// nats-server's own handler of a full or unwritable store does (ShutdownJetStream): making a
// clustered store run out of space in a test is slow and needs a mount.
func TestJetStreamOffIsReported(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	n := startNode(t, ctx, Config{Name: "n", Dir: t.TempDir()})
	if off := n.JetStreamOff(); off != "" {
		t.Fatalf("JetStreamOff of a running JetStream = %q", off)
	}
	if err := n.srv.ShutdownJetStream(); err != nil {
		t.Fatal(err)
	}
	if off := n.JetStreamOff(); !strings.Contains(off, "JetStream is disabled") {
		t.Fatalf("JetStreamOff after JetStream turned off = %q", off)
	}
}
