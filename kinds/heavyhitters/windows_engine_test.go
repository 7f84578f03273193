package heavyhitters_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mlstream/mlstream/kinds/heavyhitters"
	"github.com/mlstream/mlstream/runtime"
	"github.com/valyala/fastjson"
)

// keyOf is a key that goes to partition p of n.
func keyOf(p, n int) string {
	for i := 0; ; i++ {
		if k := fmt.Sprint("u", i); runtime.PartitionOf(k, n) == p {
			return k
		}
	}
}

// The reproduction through the engine: with window 10s and two
// partitions, one event of the next window reaching one partition leaves
// current at window W with all of W's events and none of the next, and
// last at W−1, empty.
func TestEngineNextWindowEventAtOnePartition(t *testing.T) {
	e := runtime.NewEngine(runtime.Config{Partitions: 2, IngestWait: time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer e.Close(context.Background())
	spec := runtime.Spec{Name: "hh", Kind: "heavy_hitters", Input: "s", Partitions: 2,
		Params: map[string]any{"field": "item", "key_field": "user", "window": "10s", "allowed_lateness": "0s", "idle_timeout": "1m"}}
	if _, err := e.PutJob(spec); err != nil {
		t.Fatal(err)
	}
	j, err := e.Job("hh")
	if err != nil {
		t.Fatal(err)
	}
	k0, k1 := keyOf(0, 2), keyOf(1, 2)
	var lines []string
	for i := range 1000 {
		lines = append(lines, fmt.Sprintf(`{"user":%q,"item":"a","ts":%d}`, []string{k0, k1}[i%2], 10_000+i))
	}
	post(t, e, lines...)
	post(t, e, fmt.Sprintf(`{"user":%q,"item":"next","ts":20000}`, k0))
	waitProcessed(t, j, 1001)
	deadline := time.Now().Add(10 * time.Second)
	for {
		cur, err := heavyhitters.TopKOf(j, "current", 5)
		if err != nil {
			t.Fatal(err)
		}
		last, _ := heavyhitters.TopKOf(j, "last", 5)
		if cur.Total == 1000 {
			if cur.Start != 10_000 || cur.End != 20_000 || len(cur.Items) != 1 || last.Start != 0 || last.Total != 0 {
				t.Fatalf("current [%d,%d) %+v, last [%d,%d) with %d events", cur.Start, cur.End, cur.Items, last.Start, last.End, last.Total)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("current [%d,%d) holds %d events, want the 1000 of [10000,20000)", cur.Start, cur.End, cur.Total)
		}
		time.Sleep(time.Millisecond) // published at the partitions' next idle
	}
}

// The window params are checked like every other: a negative duration
// or an unknown name is refused, naming it.
func TestWindowParamsChecked(t *testing.T) {
	e := runtime.NewEngine(runtime.Config{Partitions: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer e.Close(context.Background())
	for _, c := range []struct {
		params map[string]any
		want   string
	}{
		{map[string]any{"allowed_lateness": "-1s"}, "params.allowed_lateness"},
		{map[string]any{"idle_timeout": "soon"}, "params.idle_timeout"},
		{map[string]any{"max_open_windows": 0}, "params.max_open_windows"},
		{map[string]any{"idle_timeot": "1s"}, "idle_timeot"},
	} {
		c.params["field"], c.params["window"] = "item", "10s"
		_, err := e.PutJob(runtime.Spec{Name: "hh", Kind: "heavy_hitters", Input: "s", Params: c.params})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("params %v: %v, want an error naming %s", c.params, err, c.want)
		}
	}
}

func post(t *testing.T, e *runtime.Engine, lines ...string) {
	t.Helper()
	vs := make([]*fastjson.Value, len(lines))
	for i, l := range lines {
		vs[i] = fastjson.MustParse(l)
	}
	commit(t, e, vs)
}
