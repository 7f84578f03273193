package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mlstream/mlstream/runtime"
)

// The usage names every command's main flags as they are: --config is
// optional, demo has --nodes.
func TestUsageShowsFlagsAsTheyAre(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"--help"}, &out, &errOut); code != 0 {
		t.Fatalf("--help: %d %s", code, errOut.String())
	}
	for _, want := range []string{"mlstream serve  [--config FILE]", "--nodes N", "a cluster of 3 nodes"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, out.String())
		}
	}
}

// The start log counts the jobs that run, not those of the config file:
// a job restored from the data directory or added before counts too.
func TestStartLogCountsRunningJobs(t *testing.T) {
	e := runtime.NewEngine(runtime.Config{Partitions: 1})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Close(ctx)
	})
	for _, name := range []string{"a", "b"} {
		if _, err := e.PutJob(runtime.Spec{Name: name, Kind: "distinct", Input: "s", Params: map[string]any{"field": "item"}}); err != nil {
			t.Fatal(err)
		}
	}
	var log bytes.Buffer
	announce(serverOptions{}, "127.0.0.1:1", e, edge{}, slog.New(slog.NewTextHandler(&log, nil)))
	if !strings.Contains(log.String(), "jobs=2") {
		t.Errorf("start log %q does not say jobs=2", log.String())
	}
}
