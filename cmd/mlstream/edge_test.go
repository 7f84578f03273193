package main

// Tests of serve's network edge, in process: the refusal to listen beyond
// loopback without tokens, and HTTPS with WSS through a real listener.

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/mlstream/mlstream/api"
	"github.com/mlstream/mlstream/client"
	"github.com/mlstream/mlstream/runtime"
)

// serveOptions are serve's options from a command line, as the binary
// parses them.
func serveOptions(t *testing.T, args ...string) serverOptions {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o := serverOptions{stdout: io.Discard, stderr: io.Discard}
	o.register(fs, true)
	if err := parseFlags(fs, append([]string{"--data", ""}, args...)); err != nil {
		t.Fatal(err)
	}
	return o
}

// serveInProcess runs serve until the test ends and returns what it said
// once listening; an error before that fails the test.
func serveInProcess(t *testing.T, o serverOptions) listening {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	up := make(chan listening, 1)
	o.ready = func(l listening) { up <- l }
	done := make(chan error, 1)
	go func() { done <- serve(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	select {
	case l := <-up:
		return l
	case err := <-done:
		done <- err
		t.Fatalf("serve ended before listening: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start")
	}
	return listening{}
}

// Listening beyond loopback without tokens refuses to start and says how
// to add one; tokens or --insecure-no-auth let it start.
func TestNonLoopbackNeedsTokens(t *testing.T) {
	t.Setenv(api.TokensEnv, "")
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		err := serve(context.Background(), serveOptions(t, "--addr", addr))
		if err == nil || !strings.Contains(err.Error(), "--auth-file") || !strings.Contains(err.Error(), api.TokensEnv+"=") || !strings.Contains(err.Error(), "--insecure-no-auth") {
			t.Fatalf("serve on %s without tokens: %v", addr, err)
		}
	}
	if l := serveInProcess(t, serveOptions(t, "--addr", "0.0.0.0:0", "--insecure-no-auth")); l.auth != nil {
		t.Fatal("tokens out of nowhere")
	}
	t.Setenv(api.TokensEnv, "admin:"+strings.Repeat("t", 32))
	if l := serveInProcess(t, serveOptions(t, "--addr", "0.0.0.0:0")); l.auth.Count() != 1 {
		t.Fatalf("%d tokens", l.auth.Count())
	}
	// A bad token file refuses to start too.
	bad := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(bad, []byte("admin short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := serve(context.Background(), serveOptions(t, "--auth-file", bad)); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("bad auth file: %v", err)
	}
	if err := serve(context.Background(), serveOptions(t, "--tls-cert", bad)); err == nil || !strings.Contains(err.Error(), "--tls-key") {
		t.Fatalf("--tls-cert alone: %v", err)
	}
}

// selfSigned writes an ECDSA certificate for 127.0.0.1 and its key, and
// returns their files and a pool trusting the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mlstream test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// With --tls-cert and --tls-key the service speaks HTTPS and WSS, and its
// tokens work over both.
func TestTLSAndWSS(t *testing.T) {
	const tok = "read-token-for-tls-0123456789"
	t.Setenv(api.TokensEnv, "read:"+tok)
	certFile, keyFile, pool := selfSigned(t)
	o := serveOptions(t, "--addr", "127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile)
	o.extraSpecs = []runtime.Spec{{Name: "spam", Kind: "logreg", Input: "mail", Partitions: 1, Params: map[string]any{"hash_bits": 10}}}
	l := serveInProcess(t, o)
	if !strings.HasPrefix(l.url, "https://") {
		t.Fatalf("url %s", l.url)
	}
	tlsCfg := &tls.Config{RootCAs: pool}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 10 * time.Second}
	job := func(token string) (*client.JobStatus, error) {
		c, err := client.New("https://"+l.addr, client.Config{HTTPClient: hc, Token: token, Retry: client.RetryPolicy{MaxRetries: -1}})
		if err != nil {
			t.Fatal(err)
		}
		return c.Job(t.Context(), "spam")
	}
	if st, err := job(tok); err != nil || st.Name != "spam" {
		t.Fatalf("HTTPS GET: %v %+v", err, st)
	}
	var refused *client.Error
	if _, err := job(""); !errors.As(err, &refused) || refused.Status != 401 {
		t.Fatalf("HTTPS GET without a token: %v", err)
	}
	// Plain HTTP on the TLS port gets nowhere.
	if resp, err := http.Get("http://" + l.addr + "/v1/jobs"); err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Fatalf("plain HTTP answered %s", resp.Status)
		}
	}
	// WSS with the token as a browser sends it.
	d := websocket.Dialer{TLSClientConfig: tlsCfg, Subprotocols: []string{"mlstream", "bearer." + tok}, HandshakeTimeout: 10 * time.Second}
	conn, resp, err := d.Dial("wss://"+l.addr+"/v1/ws?types=stats", nil)
	if err != nil {
		t.Fatalf("WSS dial: %v %+v", err, resp)
	}
	defer conn.Close()
	if conn.Subprotocol() != "mlstream" {
		t.Errorf("subprotocol %q", conn.Subprotocol())
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var m map[string]any
	if err := conn.ReadJSON(&m); err != nil || m["type"] != "stats" || m["job"] != "spam" {
		t.Fatalf("WSS message: %v %v", m, err)
	}
	// The pinned client config of the demo trusts this server only.
	pinned := &http.Client{Transport: &http.Transport{TLSClientConfig: l.clientTLS}}
	if resp, err := pinned.Get("https://" + l.addr + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("pinned client: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}
}

// --max-conns and --idle-timeout reach the listener: idle connections
// past the cap do not lock a client out, and a keep-alive connection left
// idle is closed.
func TestServeConnectionLimits(t *testing.T) {
	l := serveInProcess(t, serveOptions(t, "--addr", "127.0.0.1:0", "--max-conns", "4", "--idle-timeout", "50ms"))
	var idle []net.Conn
	for range 20 {
		c, err := net.Dial("tcp", l.addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + l.addr + "/healthz")
	if err != nil {
		t.Fatalf("a request past 20 idle connections: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("a request past 20 idle connections: %s", resp.Status)
	}
	// The keep-alive connection the client kept is closed by the server.
	c, err := net.Dial("tcp", l.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("keep-alive request: %v", err)
	} else {
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("idle keep-alive connection: read %v, want EOF", err)
	}
}
