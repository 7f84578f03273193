package natsnode

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"
)

// testSecret is the cluster secret of the tests' nodes.
var testSecret = []byte("a test cluster secret, 16 bytes or more")

func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// startNode starts an embedded node and closes it when the test ends.
func startNode(t *testing.T, ctx context.Context, cfg Config) *Node {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	n, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start %s: %v", cfg.Name, err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// syncBuffer is a bytes.Buffer that a logger may write to from the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
