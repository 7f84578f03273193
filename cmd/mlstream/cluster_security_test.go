package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlstream/mlstream/cluster/natsnode"
	"github.com/mlstream/mlstream/internal/testaddr"
	"github.com/nats-io/nats.go"
)

// A node refuses to start with routes anyone could join: a route address
// beyond loopback without the secret or mutual TLS, routes of a
// token-protected service even on loopback, NATS clients without the
// secret; the message says how to add one.
func TestClusterRefusesOpenRoutes(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("admin an-admin-token-of-some-length\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	self := testaddr.Free(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster", "10.1.2.3:6222", "--peers", "10.1.2.4:6222"}, "10.1.2.3:6222 is not a loopback address"},
		{[]string{"--cluster", self, "--peers", "10.1.2.4:6222"}, "10.1.2.4:6222 is not a loopback address"},
		{[]string{"--cluster", self, "--peers", testaddr.Free(t), "--auth-file", tokens}, "requires tokens (--auth-file)"},
		{[]string{"--cluster", self, "--peers", testaddr.Free(t), "--nats-listen", testaddr.Free(t)}, "--nats-listen needs --cluster-secret"},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"serve", "--addr", testaddr.Free(t), "--data", t.TempDir(), "--node", "n1"}, tc.args...)
		if code := run(t.Context(), args, &stdout, &stderr); code != 1 {
			t.Errorf("%v: exit %d, want 1; stderr:\n%s", tc.args, code, stderr.String())
			continue
		}
		msg := stderr.String()
		if !strings.Contains(msg, tc.want) {
			t.Errorf("%v: the error does not say %q:\n%s", tc.args, tc.want, msg)
		}
		if !strings.Contains(msg, "--cluster-secret") {
			t.Errorf("%v: the error does not say how to add a secret:\n%s", tc.args, msg)
		}
	}
}

// The TLS flags of --nats-listen reach the embedded server: a key
// without its certificate refuses to start, naming what is missing.
func TestNATSListenTLSNeedsCertAndKey(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("a cluster secret long enough\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	args := []string{"serve", "--addr", testaddr.Free(t), "--data", t.TempDir(), "--node", "n1",
		"--cluster", testaddr.Free(t), "--peers", testaddr.Free(t), "--cluster-secret", secret,
		"--nats-listen", testaddr.Free(t), "--nats-listen-tls-key", filepath.Join(dir, "key.pem")}
	if code := run(t.Context(), args, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "client TLS needs a certificate and its key") {
		t.Fatalf("the error does not say what is missing:\n%s", stderr.String())
	}
}

// The password of a NATS user is the one the nodes derive from the secret.
func TestClusterPasswordCommand(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "s")
	if err := os.WriteFile(secret, []byte("a cluster secret long enough\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"cluster", "password", "--cluster-secret", secret, "--user", "admin"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if got, want := strings.TrimSpace(stdout.String()), natsnode.Password([]byte("a cluster secret long enough"), natsnode.AdminUser); got != want {
		t.Fatalf("password %q, want %q", got, want)
	}
}

// A client of --nats-listen as the source user publishes only to the
// subjects the cluster's jobs read as sources: any other subject is a
// permission violation, and a job PUT with a new source subject opens
// that subject on every node.
func TestClusterSourceUserFollowsJobs(t *testing.T) {
	c := startTestCluster(t, 2)
	u0, u1 := c.url(0), c.url(1)
	violations := make(chan error, 64)
	src, err := nats.Connect("nats://"+c.clients[1], nats.UserInfo(natsnode.SourceUser, natsnode.Password(c.secret, natsnode.SourceUser)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	// publish sends one message and tells whether it was refused: a
	// violation is answered before the flush's PONG, and its handler runs
	// soon after.
	publish := func(subject string, body []byte) (refused bool) {
		t.Helper()
		if err := src.Publish(subject, body); err != nil {
			t.Fatal(err)
		}
		if err := src.Flush(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-violations:
			if !strings.Contains(err.Error(), "Permissions Violation") {
				t.Fatalf("publishing to %s: %v", subject, err)
			}
			return true
		case <-time.After(time.Second):
			return false
		}
	}
	// publishOnceOpen publishes body until the node lets it through (the
	// node applies a job it was told of a moment after the PUT answers).
	publishOnceOpen := func(subject string, body []byte) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for publish(subject, body) {
			if time.Now().After(deadline) {
				t.Fatalf("publishing to %s, a job's source subject, is still refused", subject)
			}
		}
	}

	putJobAt(t, u0, `{"name":"a","kind":"heavy_hitters","input":"a-clicks","partitions":2,"params":{"field":"item"},"source":{"subject":"a.clicks"}}`)
	publishOnceOpen("a.clicks", itemBody(50))
	waitTotal(t, u1, "a", 50, 30*time.Second)
	for _, subject := range []string{"b.clicks", "anything", "mls.in.a.0"} {
		if !publish(subject, itemBody(1)) {
			t.Errorf("the source user published to %s, which no job reads", subject)
		}
	}

	putJobAt(t, u0, `{"name":"b","kind":"heavy_hitters","input":"b-clicks","partitions":2,"params":{"field":"item"},"source":{"subject":"b.clicks"}}`)
	publishOnceOpen("b.clicks", itemBody(30))
	waitTotal(t, u0, "b", 30, 30*time.Second)
}

// itemBody is n events with an item only.
func itemBody(n int) []byte {
	var b []byte
	for k := range n {
		b = fmt.Appendf(b, `{"item":"i%d"}`+"\n", k%7)
	}
	return b
}
