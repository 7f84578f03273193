package api

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// limitedServer serves h behind a ConnLimiter of max connections, with
// idle connections closed after idle.
func limitedServer(t *testing.T, max int, idle time.Duration, h http.Handler) (*httptest.Server, *ConnLimiter) {
	t.Helper()
	lim := NewConnLimiter(max, prometheus.NewRegistry(), nil)
	hs := httptest.NewUnstartedServer(h)
	hs.Listener = lim.Listener(hs.Listener, false)
	hs.Config.ConnState = lim.ConnState
	hs.Config.IdleTimeout = idle
	hs.Start()
	t.Cleanup(hs.Close)
	return hs, lim
}

// Connections opened past the cap and left idle do not lock a real client
// out: the idle ones are closed to make room, and counted.
func TestIdleConnectionsPastTheCap(t *testing.T) {
	ts := newTestServer(t)
	const max = 8
	hs, lim := limitedServer(t, max, time.Minute, ts.api)
	addr := hs.Listener.Addr().String()
	var idle []net.Conn
	for range 5 * max {
		c, err := net.Dial("tcp", addr)
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
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 3 {
		resp, err := client.Get(hs.URL + "/healthz")
		if err != nil {
			t.Fatalf("request %d past %d idle connections: %v", i, len(idle), err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %s", i, resp.Status)
		}
	}
	waitFor(t, "the connections open to fall to the cap", 10*time.Second, func() bool {
		return value(lim.open) <= max
	})
	if n := value(lim.closed.WithLabelValues("idle_evicted")); n < 5*max-max {
		t.Fatalf("%v idle connections closed, want at least %d", n, 5*max-max)
	}
}

// Past the cap with every connection busy, a new one is answered 503 with
// Retry-After and closed.
func TestConnectionsPastTheCapRefused(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
	})
	hs, lim := limitedServer(t, 2, time.Minute, h)
	defer close(release)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for range 2 {
		go func() {
			if resp, err := client.Get(hs.URL + "/slow"); err == nil {
				resp.Body.Close()
			}
		}()
		<-entered
	}
	resp, err := client.Get(hs.URL + "/fast")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "--max-conns") {
		t.Fatalf("past the cap: %s %v %s", resp.Status, resp.Header, body)
	}
	if n := value(lim.closed.WithLabelValues("max_conns")); n != 1 {
		t.Fatalf("%v refusals counted", n)
	}
}

// A keep-alive connection left idle after a request is closed by the
// server after IdleTimeout.
func TestIdleKeepAliveClosed(t *testing.T) {
	ts := newTestServer(t)
	hs, lim := limitedServer(t, 0, 50*time.Millisecond, ts.api)
	c, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 || resp.Close {
		t.Fatalf("keep-alive request: %v %+v", err, resp)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	// The server closes it: the read ends with EOF well before the guard.
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("idle keep-alive connection: read %v, want EOF", err)
	}
	waitFor(t, "the closed connection to be counted out", 10*time.Second, func() bool { return value(lim.open) == 0 })
}

// On TLS 1.2 the HTTP listener offers AEAD suites only: a client that
// offers CBC suites alone fails the handshake, one with GCM succeeds.
func TestTLS12AEADOnly(t *testing.T) {
	cert := testCert(t)
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	hs.TLS = ServerTLS(cert)
	hs.StartTLS()
	defer hs.Close()
	dial := func(suite uint16) error {
		c, err := tls.Dial("tcp", hs.Listener.Addr().String(), &tls.Config{
			InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{suite},
		})
		if err == nil {
			c.Close()
		}
		return err
	}
	for _, s := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256} {
		if err := dial(s); err == nil {
			t.Errorf("TLS 1.2 with %s: accepted", tls.CipherSuiteName(s))
		}
	}
	for _, s := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256} {
		if err := dial(s); err != nil {
			t.Errorf("TLS 1.2 with %s: %v", tls.CipherSuiteName(s), err)
		}
	}
}

// testCert is a self-signed ECDSA certificate for 127.0.0.1.
func testCert(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// value reads a gauge or a counter.
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if d.Gauge != nil {
		return d.Gauge.GetValue()
	}
	return d.Counter.GetValue()
}
