package main

import (
	"context"
	"fmt"
	"math"
	"os"
	goruntime "runtime"
	"strconv"
	"time"

	"github.com/mlstream/mlstream/internal/gen"
	"github.com/mlstream/mlstream/joins"
	"github.com/mlstream/mlstream/runtime"
)

// joinStart is the event time of the first generated join event.
const joinStart = 1_700_000_000_000

// joinTables measures the join: tuples/s of the operator and of the engine
// per fault-tolerance mode, bytes per buffered tuple, the relative error of
// COUNT with and without sampling, and after kill -9 crashes.
func joinTables(quick bool, reps int) {
	n := 2_000_000
	if quick {
		n = 400_000
	}
	evs := gen.JoinEvents(11, n, joinKeys, joinStart)
	names := make([]string, joinKeys)
	for i := range names {
		names[i] = "ad-" + strconv.Itoa(i)
	}
	joinThroughputTable(evs, names, reps)
	joinMemoryTable(n)
	joinSamplingTable(evs, names, reps)
}

// 100 keys, one event per ms, within 100 ms: about one match per two tuples.
const joinKeys, joinWithin = 100, 100

// joinThroughputTable: tuples/s of the operator alone, with and without
// sampling, and of the engine in each fault-tolerance mode.
func joinThroughputTable(evs []gen.JoinEvent, names []string, reps int) {
	n := len(evs)
	t := newTable("join", "Join: throughput",
		fmt.Sprintf("%s tuples of two streams over %d keys, one per ms, joined within %d ms (about one match per two tuples). Operator: joins.Join alone on one core. Engine: NDJSON parsed, extracted, queued and joined in process (no HTTP), 2 partitions, requests of 1,000 events. Median of %d runs.", humanize(float64(n)), joinKeys, joinWithin, reps),
		"path", "sample", "ft mode", "tuples/s", "matches/tuple", "target")
	for _, p := range []float64{1, 0.1} {
		var matches uint64
		rate := median(reps, func() float64 {
			j, rate := runJoin(evs, names, joins.Config{Within: joinWithin, Lateness: 10, MaxBytes: 64 << 20, Sample: p})
			matches = j.Counters().Matches
			return rate
		})
		t.Row("operator", num(p, "%g"), "-", rate, num(float64(matches)/float64(n), "%.3f"), "≥ 1M/s")
	}
	reqs := joinRequests(evs)
	for _, mode := range []string{"none", "approx", "exact"} {
		rate := median(reps, func() float64 {
			dir, _ := os.MkdirTemp("", "mlstream-join")
			defer os.RemoveAll(dir)
			e, _, rate := feedEngine(reqs, n, joinBenchSpec(1, mode), dir)
			e.Close(context.Background())
			return rate
		})
		t.Row("engine", "1", mode, rate, "", "")
	}
	t.Print()
}

// joinMemoryTable: heap bytes per buffered tuple, measured and accounted,
// with few and with many keys.
func joinMemoryTable(n int) {
	t := newTable("join", "Join: memory per buffered tuple",
		fmt.Sprintf("Heap growth (runtime.MemStats, after GC) of a join holding every tuple (interval longer than the stream), divided by the tuples held, beside the state's accounting (%d B per ring slot + %d B per key: what max_state is checked against).", joins.TupleBytes, joins.IndexBytes),
		"tuples held", "distinct keys", "measured B/tuple", "accounted B/tuple", "max_state held")
	for _, k := range []int{100, 1_000_000} {
		held := min(n, 1_000_000)
		var j *joins.Join
		measured := heapDelta(func() any {
			j, _ = joins.New(joins.Config{Within: math.MaxInt64 / 4, MaxBytes: 1 << 30})
			for i := range held {
				j.Add(joins.Side(i&1), strconv.Itoa(i%k), int64(i), 1, uint64(i+1), nil)
			}
			return j
		})
		t.Row(j.Tuples(), min(k, held), num(float64(measured)/float64(j.Tuples()), "%.0f"),
			num(float64(j.StateBytes())/float64(j.Tuples()), "%.0f"), yes(j.StateBytes() <= 1<<30))
	}
	t.Print()
}

// joinSamplingTable: the error of COUNT and its interval's coverage
// against the sample probability, over seeded runs.
func joinSamplingTable(evs []gen.JoinEvent, names []string, reps int) {
	truth := float64(gen.JoinCount(evs, joinWithin))
	t := newTable("join", "Join: COUNT estimates with sampling (Ripple Join)",
		fmt.Sprintf("True COUNT %s on the stream above; each side sampled with probability p (seeds 1..%d); the interval is at 95%%.", humanize(truth), max(reps, 10)),
		"sample p", "tuples kept", "median relative error", "median interval half-width", "interval holds the truth", "tuples/s")
	errCurve := series{Name: "median relative error of COUNT"}
	for _, p := range []float64{1, 0.5, 0.1, 0.01} {
		var errs, halves, rates []float64
		held, runs := 0, max(reps, 10)
		var kept uint64
		for seed := 1; seed <= runs; seed++ {
			j, rate := runJoin(evs, names, joins.Config{Within: joinWithin, Lateness: 10, MaxBytes: 64 << 20, Sample: p, Seed: uint64(seed)})
			rates = append(rates, rate)
			open, _ := j.Windows()
			est := open[0].Estimate(p, 0.95)
			errs = append(errs, math.Abs(est.Count.Estimate-truth)/truth)
			halves = append(halves, (est.Count.High-est.Count.Low)/2/truth)
			if est.Count.Low <= truth && truth <= est.Count.High {
				held++
			}
			kept = j.Counters().Sampled
		}
		t.Row(num(p, "%g"), kept, num(100*mid(errs), "%.2f%%"), num(100*mid(halves), "%.2f%%"), fmt.Sprintf("%d/%d", held, runs), mid(rates))
		errCurve.X, errCurve.Y = append(errCurve.X, p), append(errCurve.Y, 100*mid(errs))
	}
	t.Print()
	figure("join-sampling", "join: relative error of COUNT against the sample probability", "sample p", "median relative error (%)", errCurve)
}

// runJoin offers the events to a new join of cfg, in order, and returns it
// with the tuples/s it took them at.
func runJoin(evs []gen.JoinEvent, names []string, cfg joins.Config) (*joins.Join, float64) {
	j, err := joins.New(cfg)
	if err != nil {
		panic(err)
	}
	start := time.Now()
	for i, e := range evs {
		side := joins.Left
		if e.Right {
			side = joins.Right
		}
		j.Add(side, names[e.Key], e.TS, e.Cost, uint64(i+1), nil)
	}
	return j, float64(len(evs)) / time.Since(start).Seconds()
}

// joinRequests are the events as requests: blocks of 1,000 events, each
// one request per stream.
func joinRequests(evs []gen.JoinEvent) []request {
	streams, bodies := gen.JoinBodies(evs, 1000, "imp", "clk")
	reqs := make([]request, len(bodies))
	for i := range bodies {
		reqs[i] = request{streams[i], bodies[i]}
	}
	return reqs
}

func joinBenchSpec(sample float64, mode string) runtime.Spec {
	return runtime.Spec{Name: "bench", Kind: "join", Left: "imp", Right: "clk", Partitions: 2,
		Params: map[string]any{"on": "ad", "within": "100ms", "allowed_lateness": "2s", "sample": sample, "value": "cost"},
		FT:     runtime.FTSpec{Mode: mode}}
}

// heapDelta is the heap growth, after GC, of what f builds and returns.
func heapDelta(f func() any) int64 {
	goruntime.GC()
	var before, after goruntime.MemStats
	goruntime.ReadMemStats(&before)
	v := f()
	goruntime.GC()
	goruntime.ReadMemStats(&after)
	goruntime.KeepAlive(v)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc)
}
