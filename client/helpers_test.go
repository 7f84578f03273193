package client_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/mlstream/mlstream/api"
	"github.com/mlstream/mlstream/runtime"
)

// server is a real engine behind a real HTTP server on loopback.
type server struct {
	engine *runtime.Engine
	http   *httptest.Server
}

// startServer starts one; wrap, when set, wraps its handler (to look at
// requests). It is stopped by stop, or at the end of the test.
func startServer(tb testing.TB, ecfg runtime.Config, wrap func(http.Handler) http.Handler) (*server, func()) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ecfg.Logger = log
	if ecfg.Partitions == 0 {
		ecfg.Partitions = 1
	}
	e := runtime.NewEngine(ecfg)
	a := api.New(api.Config{Engine: e, Logger: log, StatsInterval: 50 * time.Millisecond})
	a.SetReady(true)
	var h http.Handler = a
	if wrap != nil {
		h = wrap(h)
	}
	s := &server{engine: e, http: httptest.NewServer(h)}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		s.http.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Close(ctx)
	}
	if tb != nil {
		tb.Cleanup(stop)
	}
	return s, stop
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
