package heavyhitters_test

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/mlstream/mlstream/ft"
	_ "github.com/mlstream/mlstream/kinds/heavyhitters"
	"github.com/mlstream/mlstream/runtime"
	"github.com/valyala/fastjson"
)

// zipfEvents is n events {"item": "item-<k>"}, k drawn Zipf(1.1) from
// 100,000: the stream of the fault-tolerance table of the benchmarks.
func zipfEvents(n int) []*fastjson.Value {
	r := rand.New(rand.NewPCG(9, 10))
	z := rand.NewZipf(r, 1.1, 1, 99_999)
	var a fastjson.Arena
	out := make([]*fastjson.Value, n)
	for i := range out {
		o := a.NewObject()
		o.Set("item", a.NewString("item-"+strconv.FormatUint(z.Uint64(), 10)))
		out[i] = o
	}
	return out
}

// cpuTime is the CPU time the process has used, steadier than wall time on
// a shared machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFTApprox times a 2-partition heavy_hitters job (2,000 counters)
// processing 500,000 Zipf events in requests of 1,000, in mode none and in
// mode approx alternately in every iteration, and reports approx's
// throughput as a share of none's (wall and CPU time), the median over the
// iterations: the ratio of two runs made close together is what a shared
// machine lets one compare. Run with -benchtime=10x or more.
//
// Sub-benchmark default has the default bounds; compact1024 the same with
// compact_every 1024 (no full backup after the first: what the full ones
// cost); bounds10x has Θ, L and Γ ten times the defaults (10,000 and
// 100,000); nodivergence has Θ out of reach and the default L and Γ
// (the backups the events at risk force by themselves: 168 of the
// default's 270); unbounded has bounds too large to be reached (a backup at the
// start and the end only, no sender held back): the cost of the mode
// without its backups.
func BenchmarkFTApprox(b *testing.B) {
	vs := zipfEvents(500_000)
	for _, v := range []struct {
		name string
		fts  runtime.FTSpec
	}{
		{"default", runtime.FTSpec{Mode: ft.ModeApprox}},
		{"compact1024", runtime.FTSpec{Mode: ft.ModeApprox, CompactEvery: 1024}},
		{"bounds10x", runtime.FTSpec{Mode: ft.ModeApprox, MaxDivergence: 10_000, MaxPending: 100_000, MaxUnacked: 100_000}},
		{"nodivergence", runtime.FTSpec{Mode: ft.ModeApprox, MaxDivergence: 1e15}},
		{"unbounded", runtime.FTSpec{Mode: ft.ModeApprox, MaxDivergence: 1e15, MaxPending: 1 << 30, MaxUnacked: 1 << 30}},
	} {
		b.Run(v.name, func(b *testing.B) { benchFTApprox(b, v.fts, vs) })
	}
}

func benchFTApprox(b *testing.B, approx runtime.FTSpec, vs []*fastjson.Value) {
	var wallRatios, cpuRatios []float64
	var last runtime.JobStatus
	var noneCPU time.Duration
	for b.Loop() {
		var wall, cpu [2]time.Duration
		for i, fts := range []runtime.FTSpec{{Mode: ft.ModeNone}, approx} {
			wall[i], cpu[i], last = runFTMode(b, fts, vs)
		}
		noneCPU += cpu[0]
		wallRatios = append(wallRatios, float64(wall[0])/float64(wall[1]))
		cpuRatios = append(cpuRatios, float64(cpu[0])/float64(cpu[1]))
	}
	b.ReportMetric(100*median(wallRatios), "%wall-of-none")
	b.ReportMetric(100*median(cpuRatios), "%cpu-of-none")
	b.ReportMetric(float64(noneCPU.Nanoseconds())/float64(len(cpuRatios)*len(vs)), "none-cpu-ns/event")
	b.ReportMetric(float64(last.FT.Backups.Full+last.FT.Backups.Delta), "backups")
	b.ReportMetric(float64(last.FT.Backups.Full), "full-backups")
	b.ReportMetric(float64(last.HeldBackTotal), "held-back")
}

func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// runFTMode processes vs, in requests of 1,000, in a new job with fault
// tolerance fts and returns the wall and CPU time it took and the job's
// status at the end.
func runFTMode(b *testing.B, fts runtime.FTSpec, vs []*fastjson.Value) (wall, cpu time.Duration, st runtime.JobStatus) {
	e, j := newJob(b, 2, fts)
	defer e.Close(context.Background())
	start, startCPU := time.Now(), cpuTime()
	for off := 0; off < len(vs); off += 1000 {
		commit(b, e, vs[off:min(off+1000, len(vs))])
	}
	// Status merges the partitions' summaries: not too often.
	for j.Status(false).Processed < uint64(len(vs)) {
		time.Sleep(time.Millisecond)
	}
	wall, cpu = time.Since(start), cpuTime()-startCPU
	return wall, cpu, j.Status(false)
}

// newJob starts an engine with a backup store in a temporary directory
// and a heavy_hitters job "hh" (2,000 counters of field item) reading
// stream s, with the given partitions and fault tolerance.
func newJob(tb testing.TB, partitions int, fts runtime.FTSpec) (*runtime.Engine, *runtime.Job) {
	dir := tb.TempDir()
	store, err := ft.NewDirStore(dir)
	if err != nil {
		tb.Fatal(err)
	}
	e := runtime.NewEngine(runtime.Config{Partitions: partitions, Store: store, DataDir: dir, IngestWait: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	spec := runtime.Spec{Name: "hh", Kind: "heavy_hitters", Input: "s", Partitions: partitions,
		Params: map[string]any{"field": "item", "counters": 2000}, FT: fts}
	if _, err := e.PutJob(spec); err != nil {
		tb.Fatal(err)
	}
	j, err := e.Job(spec.Name)
	if err != nil {
		tb.Fatal(err)
	}
	return e, j
}

func commit(b testing.TB, e *runtime.Engine, vs []*fastjson.Value) {
	bt, err := e.NewBatch("s")
	if err != nil {
		b.Fatal(err)
	}
	bt.Expect(len(vs))
	for k, v := range vs {
		if err := bt.Add(v, k+1); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := bt.Commit(context.Background()); err != nil {
		b.Fatal(err)
	}
}
