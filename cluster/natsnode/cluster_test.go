package natsnode

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlstream/mlstream/internal/testaddr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startCluster starts n embedded nodes clustered on loopback with a secret, concurrently: a
// clustered node cannot get a meta leader alone. With clientPorts, every node also listens for
// other clients.
func startCluster(t *testing.T, ctx context.Context, n int, clientPorts bool) ([]*Node, []Config) {
	t.Helper()
	return startClusterWith(t, ctx, n, func(_ int, c *Config) {
		if clientPorts {
			c.ClientAddr = testaddr.Free(t)
		}
	})
}

// startClusterWith is startCluster with node i's config changed by change.
func startClusterWith(t *testing.T, ctx context.Context, n int, change func(i int, c *Config)) ([]*Node, []Config) {
	t.Helper()
	peers := make([]string, n)
	for i := range peers {
		peers[i] = testaddr.Free(t)
	}
	cfgs := make([]Config, n)
	for i := range cfgs {
		cfgs[i] = Config{Name: fmt.Sprintf("n%d", i+1), Dir: t.TempDir(), ClusterAddr: peers[i], Peers: peers, Secret: testSecret, Logger: testLogger()}
		change(i, &cfgs[i])
	}
	nodes := make([]*Node, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() { nodes[i], errs[i] = Start(ctx, cfgs[i]) })
	}
	wg.Wait()
	for _, node := range nodes {
		if node != nil {
			t.Cleanup(func() { node.Close() })
		}
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Start n%d: %v", i+1, err)
		}
	}
	return nodes, cfgs
}

func TestThreeNodeCluster(t *testing.T) {
	ctx := testCtx(t, 40*time.Second)
	nodes, cfgs := startCluster(t, ctx, 3, false)
	for _, n := range nodes {
		if got := n.ClusterSize(); got != 3 {
			t.Errorf("%s: ClusterSize = %d, want 3", n.Name(), got)
		}
	}
	// The servers elect a new leader after [2 s, 4 s) of silence, not
	// nats-server's [4 s, 9 s).
	if lo, hi := Election(); lo != DefaultElection || hi != 2*DefaultElection {
		t.Errorf("Raft election timeouts [%v, %v), want [%v, %v)", lo, hi, DefaultElection, 2*DefaultElection)
	}

	var kv jetstream.KeyValue
	err := RetryEach(ctx, 2*time.Second, func(ctx context.Context) (err error) {
		kv, err = nodes[0].JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "r3", Replicas: 3})
		return err
	})
	if err != nil {
		t.Fatalf("create R3 bucket: %v", err)
	}
	if _, err := kv.Put(ctx, "k", []byte("from n1")); err != nil {
		t.Fatal(err)
	}
	assertKVSoon(t, ctx, nodes[2], "r3", "k", "from n1")

	assertSoon(t, ctx, func() error {
		for _, n := range nodes {
			if r, size := n.Reach(); r != 3 || size != 3 {
				return fmt.Errorf("%s reaches %d of %d servers, want 3 of 3", n.Name(), r, size)
			}
			if routed := n.Routed(); len(routed) != 2 || slices.Contains(routed, n.Name()) {
				return fmt.Errorf("%s is routed to %v, want the 2 others", n.Name(), routed)
			}
		}
		return nil
	})

	// Whoever led the bucket or the meta group, two of three still make a quorum.
	if err := nodes[0].Close(); err != nil {
		t.Fatalf("Close n1: %v", err)
	}
	assertSoon(t, ctx, func() error {
		if r, size := nodes[1].Reach(); r != 2 || size != 3 {
			return fmt.Errorf("n2 reaches %d of %d servers after n1 left, want 2 of 3", r, size)
		}
		return nil
	})
	err = RetryEach(ctx, 2*time.Second, func(ctx context.Context) error {
		kv, err := nodes[1].JetStream().KeyValue(ctx, "r3")
		if err != nil {
			return err
		}
		_, err = kv.Put(ctx, "k", []byte("after n1 left"))
		return err
	})
	if err != nil {
		t.Fatalf("R3 put with one node gone: %v", err)
	}
	assertKVSoon(t, ctx, nodes[2], "r3", "k", "after n1 left")

	// n1 comes back on its old store and catches up (options built by hand lost a stream
	// leader on restart: nats-server issue #6890).
	back := startNode(t, ctx, cfgs[0])
	if got := back.ClusterSize(); got != 3 {
		t.Errorf("restarted n1: ClusterSize = %d, want 3", got)
	}
	assertKVSoon(t, ctx, back, "r3", "k", "after n1 left")
}

// errStale marks a read that does not show the latest write yet.
var errStale = errors.New("stale read")

// assertKVSoon asserts that bucket/key reads want on node before ctx ends. KV reads of a
// replicated bucket are direct gets that any replica answers, so a follower may still show an
// older value for a moment.
func assertKVSoon(t *testing.T, ctx context.Context, node *Node, bucket, key, want string) {
	t.Helper()
	retryable := func(err error) bool { return Transient(err) || errors.Is(err, errStale) }
	err := retryWhile(ctx, 2*time.Second, retryable, func(ctx context.Context) error {
		kv, err := node.JetStream().KeyValue(ctx, bucket)
		if err != nil {
			return err
		}
		e, err := kv.Get(ctx, key)
		if err == nil && string(e.Value()) != want {
			return fmt.Errorf("%w: %q", errStale, e.Value())
		}
		return err
	})
	if err != nil {
		t.Fatalf("%s: %s/%s, want %q: %v", node.Name(), bucket, key, want, err)
	}
}

// TestConnectToEmbeddedCluster connects the way other tools would, through one node's client
// port, and follows the cluster when that node leaves.
func TestConnectToEmbeddedCluster(t *testing.T) {
	ctx := testCtx(t, 40*time.Second)
	nodes, cfgs := startCluster(t, ctx, 3, true)
	ext, err := Connect(ctx, "nats://"+cfgs[0].ClientAddr, "tool", testLogger(), nats.UserInfo(AdminUser, Password(testSecret, AdminUser)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ext.Close() })
	if got := ext.ClusterSize(); got != 3 {
		t.Errorf("ClusterSize through the client port = %d, want 3 (servers %v)", got, ext.Conn().Servers())
	}
	err = RetryEach(ctx, 2*time.Second, func(ctx context.Context) error {
		kv, err := ext.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "tool", Replicas: 3})
		if err == nil {
			_, err = kv.Put(ctx, "k", []byte("v"))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	assertKVSoon(t, ctx, nodes[2], "tool", "k", "v")

	nodes[0].Close()
	err = RetryEach(ctx, 2*time.Second, func(ctx context.Context) error {
		kv, err := ext.JetStream().KeyValue(ctx, "tool")
		if err == nil {
			_, err = kv.Put(ctx, "k", []byte("after n1 left"))
		}
		return err
	})
	if err != nil {
		t.Fatalf("put through the client after its server left: %v", err)
	}
	assertKVSoon(t, ctx, nodes[1], "tool", "k", "after n1 left")
}

// A node whose store fills up has its JetStream turned off by nats-server, for good until a
// restart; JetStreamOff says so. Its store is a small tmpfs (skipped where mounting is refused:
// it needs root).
func TestJetStreamOffWhenStoreIsFull(t *testing.T) {
	full := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", full).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small tmpfs (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", full).Run() })
	ctx := testCtx(t, 60*time.Second)
	nodes, _ := startClusterWith(t, ctx, 3, func(i int, c *Config) {
		if i == 0 {
			c.Dir = full
		}
	})
	if off := nodes[0].JetStreamOff(); off != "" {
		t.Fatalf("JetStreamOff before the store filled = %q", off)
	}
	js := nodes[1].JetStream()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILL", Subjects: []string{"fill"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 256<<10)
	for i := 0; nodes[0].JetStreamOff() == ""; i++ {
		if ctx.Err() != nil || i > 200 {
			t.Fatalf("JetStream still on after %d messages of %d bytes into a 4 MiB store", i, len(payload))
		}
		// Messages fill the store (its stream replica then stops with a write error, JetStream
		// stays on); a change of the meta group, such as a new stream, then fails to be written
		// to its log, and that turns JetStream off.
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if i < 20 {
			_, _ = js.Publish(pctx, "fill", payload) // the others keep a quorum; a failure here is not the point
		} else {
			_, _ = js.CreateStream(pctx, jetstream.StreamConfig{Name: fmt.Sprintf("META%d", i), Subjects: []string{fmt.Sprintf("meta.%d", i)}, Replicas: 3})
		}
		cancel()
	}
	if off := nodes[0].JetStreamOff(); !strings.Contains(off, "JetStream is disabled") {
		t.Fatalf("JetStreamOff = %q", off)
	}
	if off := nodes[1].JetStreamOff(); off != "" {
		t.Errorf("a node with room says %q", off)
	}
}
