package api

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ConnLimiter caps the connections a listener holds open, so that
// connections nobody uses cannot exhaust the process's file descriptors.
// Each connection open costs one; past Max, a new connection first makes
// room by closing the connection that has waited longest without a
// request in progress (idle between requests, or opened and silent), so a
// flood of idle connections cannot lock a real client out. When every
// connection is busy, the new one is refused: a plain-HTTP listener
// answers it 503 with Retry-After and closes it, a TLS one closes it.
//
// Wrap the listener with Listener and set the http.Server's ConnState to
// the limiter's. Safe for concurrent use.
type ConnLimiter struct {
	max int
	log *slog.Logger

	mu    sync.Mutex
	conns map[net.Conn]*connEntry // open connections, by the raw conn
	// lastLog is when a refusal was last logged (at most one line per
	// logEvery); refusedSince counts the refusals since.
	lastLog      time.Time
	refusedSince int

	refusing chan struct{} // a slot per refused connection being answered

	open   prometheus.Gauge
	closed *prometheus.CounterVec
}

type connEntry struct {
	idle  bool      // no request in progress: new and silent, or between requests
	since time.Time // when it last became idle
}

// logEvery spaces the log lines of refused or evicted connections.
const logEvery = 10 * time.Second

// NewConnLimiter caps connections at max (0 or less: no cap, connections
// are only counted). Its metrics go to reg when not nil.
func NewConnLimiter(max int, reg prometheus.Registerer, log *slog.Logger) *ConnLimiter {
	if log == nil {
		log = slog.Default()
	}
	c := &ConnLimiter{max: max, log: log, conns: map[net.Conn]*connEntry{}, refusing: make(chan struct{}, maxRefusing),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mlstream_http_connections",
			Help: "HTTP connections open (WebSocket ones included).",
		}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mlstream_http_connections_closed_total",
			Help: "Connections closed by the server's connection cap (--max-conns): refused (at the cap, none idle) or idle_evicted (an idle one closed to make room).",
		}, []string{"reason"}),
	}
	if reg != nil {
		reg.MustRegister(c.open, c.closed)
	}
	return c
}

// Listener wraps ln; tlsOn says the server speaks TLS on it (a refusal is
// then a bare close: a plain-text 503 would be garbage to a TLS client).
func (c *ConnLimiter) Listener(ln net.Listener, tlsOn bool) net.Listener {
	return &limitListener{Listener: ln, c: c, tls: tlsOn}
}

type limitListener struct {
	net.Listener
	c   *ConnLimiter
	tls bool
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if tc, ok := l.c.admit(conn); ok {
			return tc, nil
		}
		l.c.refuse(conn, l.tls)
	}
}

// admit counts conn in, closing the longest idle connection first when at
// the cap; false when every connection is busy.
func (c *ConnLimiter) admit(conn net.Conn) (net.Conn, bool) {
	c.mu.Lock()
	var evict net.Conn
	if c.max > 0 && len(c.conns) >= c.max {
		evict = c.oldestIdle()
		if evict == nil {
			c.mu.Unlock()
			return nil, false
		}
		delete(c.conns, evict)
		c.note("idle_evicted")
	}
	c.conns[conn] = &connEntry{idle: true, since: time.Now()}
	c.mu.Unlock()
	if evict != nil {
		_ = evict.Close()
	}
	c.open.Inc()
	return &limitedConn{Conn: conn, c: c}, true
}

// oldestIdle is the connection idle the longest, or nil; mu held.
func (c *ConnLimiter) oldestIdle() net.Conn {
	var oldest net.Conn
	var since time.Time
	for conn, e := range c.conns {
		if e.idle && (oldest == nil || e.since.Before(since)) {
			oldest, since = conn, e.since
		}
	}
	return oldest
}

// refusalBody is what a refused plain-HTTP connection reads.
const refusalBody = `{"error":"too many connections to this server (--max-conns); retry later"}` + "\n"

// refuse answers a connection past the cap and closes it. The answer
// waits for the request's header (at most refuseWait): a client reads a
// response that comes before its request as a broken connection, not as
// a 503. At most maxRefusing connections wait so at once; past that, and
// on TLS, a refused connection is closed without an answer.
func (c *ConnLimiter) refuse(conn net.Conn, tlsOn bool) {
	c.mu.Lock()
	c.note("max_conns")
	c.mu.Unlock()
	select {
	case c.refusing <- struct{}{}:
	default:
		tlsOn = true
	}
	if tlsOn {
		_ = conn.Close()
		return
	}
	go func() {
		defer func() { <-c.refusing }()
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(refuseWait))
		_, _ = http.ReadRequest(bufio.NewReader(conn))
		_, _ = fmt.Fprintf(conn, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
			len(refusalBody), refusalBody)
	}()
}

// refuseWait bounds how long a refused connection is held for its answer;
// maxRefusing how many are held at once.
const (
	refuseWait  = time.Second
	maxRefusing = 64
)

// note counts a connection closed by the cap and logs, at most once per
// logEvery, how many were; mu held.
func (c *ConnLimiter) note(reason string) {
	c.closed.WithLabelValues(reason).Inc()
	c.refusedSince++
	if now := time.Now(); now.Sub(c.lastLog) >= logEvery {
		c.log.Warn("connection cap reached: connections closed or refused (--max-conns)",
			"max_conns", c.max, "closed", c.refusedSince, "last_reason", reason)
		c.lastLog, c.refusedSince = now, 0
	}
}

// ConnState is the http.Server's ConnState hook: it tells the limiter
// which connections are idle.
func (c *ConnLimiter) ConnState(conn net.Conn, st http.ConnState) {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	lc, ok := conn.(*limitedConn)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.conns[lc.Conn]
	if e == nil {
		return
	}
	switch st {
	case http.StateActive, http.StateHijacked:
		// A hijacked connection (a WebSocket) is never idle to the server.
		e.idle = false
	case http.StateIdle:
		e.idle, e.since = true, time.Now()
	}
}

// limitedConn gives its slot back when closed.
type limitedConn struct {
	net.Conn
	c    *ConnLimiter
	once sync.Once
}

func (lc *limitedConn) Close() error {
	err := lc.Conn.Close()
	lc.once.Do(func() {
		lc.c.mu.Lock()
		delete(lc.c.conns, lc.Conn)
		lc.c.mu.Unlock()
		lc.c.open.Dec()
	})
	return err
}

// ServerTLS is the TLS configuration of the HTTP listener: TLS 1.2 or
// later, and on TLS 1.2 only AEAD suites with forward secrecy (TLS 1.3
// has nothing else). The CBC suites Go still offers by default are left
// out: their padding and MAC-then-encrypt have a history of attacks.
func ServerTLS(cert tls.Certificate) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		CipherSuites: []uint16{
			tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
			tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
		},
	}
}
