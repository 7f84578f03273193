package natsnode

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/mlstream/mlstream/internal/testaddr"
	"github.com/nats-io/nats.go/jetstream"
)

// buildNATSServer builds the nats-server of our go.mod (Debian's is too old for the jetstream
// API), or skips the test when that is impossible here.
func buildNATSServer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "nats-server")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput()
	if err != nil {
		t.Skipf("cannot build nats-server: %v\n%s", err, out)
	}
	return bin
}

// runNATSServer runs bin on addr with args and kills it when the test ends; the returned
// function kills it earlier.
func runNATSServer(t *testing.T, bin, addr string, args ...string) (kill func()) {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, append([]string{"-a", host, "-p", port}, args...)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := false
	kill = func() {
		if !done {
			done = true
			cmd.Process.Kill()
			cmd.Wait()
		}
	}
	t.Cleanup(kill)
	return kill
}

func TestExternalNATS(t *testing.T) {
	bin := buildNATSServer(t)

	t.Run("KV, and a reconnect after the server restarts", func(t *testing.T) {
		ctx := testCtx(t, 20*time.Second)
		addr, dir := testaddr.Free(t), t.TempDir()
		kill := runNATSServer(t, bin, addr, "-js", "-sd", dir)
		n, err := Connect(ctx, "nats://"+addr, "tester", testLogger())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		if n.Name() != "tester" || n.Conn().Opts.Name != "tester" || n.ClusterSize() != 1 {
			t.Errorf("name %q, connection name %q, cluster size %d", n.Name(), n.Conn().Opts.Name, n.ClusterSize())
		}
		kv, err := n.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "ext"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
			t.Fatal(err)
		}
		assertKV(t, ctx, n.JetStream(), "ext", "k", "v")

		kill()
		runNATSServer(t, bin, addr, "-js", "-sd", dir)
		err = RetryEach(ctx, time.Second, func(ctx context.Context) error {
			_, err := kv.Get(ctx, "k")
			return err
		})
		if err != nil {
			t.Fatalf("after the server restarted: %v", err)
		}
		if err := n.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	})

	t.Run("a server without JetStream fails at once", func(t *testing.T) {
		addr := testaddr.Free(t)
		runNATSServer(t, bin, addr)
		start := time.Now()
		n, err := Connect(testCtx(t, 20*time.Second), "nats://"+addr, "tester", testLogger())
		if err == nil {
			n.Close()
			t.Fatal("Connect succeeded without JetStream")
		}
		if !errors.Is(err, jetstream.ErrJetStreamNotEnabled) {
			t.Errorf("err = %v, want JetStream not enabled", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("took %v: retried a permanent error", d)
		}
	})
}

func TestConnectGivesUpWithCtx(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	n, err := Connect(ctx, "nats://"+testaddr.Free(t), "tester", testLogger())
	if err == nil {
		n.Close()
		t.Fatal("Connect succeeded with nothing listening")
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("Connect returned %v after start, its context ended after 1s", d)
	}
}
