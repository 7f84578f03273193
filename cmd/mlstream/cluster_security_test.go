package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlstream/mlstream/cluster/natsnode"
	"github.com/mlstream/mlstream/internal/testaddr"
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
