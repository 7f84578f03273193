package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/mlstream/mlstream/internal/gen"
	"github.com/mlstream/mlstream/joins"
	"github.com/mlstream/mlstream/runtime"
	"github.com/valyala/fastjson"
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
	// 100 keys, one event per ms, within 100 ms: about one match per two tuples.
	const keys, within = 100, 100
	evs := gen.JoinEvents(11, n, keys, joinStart)
	names := make([]string, keys)
	for i := range names {
		names[i] = "ad-" + strconv.Itoa(i)
	}

	fmt.Printf("\n## Join: throughput\n\n")
	fmt.Printf("%s tuples of two streams over %d keys, one per ms, joined within %d ms (about one match per two tuples). Operator: joins.Join alone on one core. Engine: NDJSON parsed, extracted, queued and joined in process (no HTTP), 2 partitions, requests of 1,000 events. Median of %d runs.\n\n", humanize(float64(n)), keys, within, reps)
	fmt.Println("| path | sample | ft mode | tuples/s | matches/tuple | target |")
	fmt.Println("| --- | ---: | --- | ---: | ---: | --- |")
	for _, p := range []float64{1, 0.1} {
		var matches uint64
		rate := median(reps, func() float64 {
			j, err := joins.New(joins.Config{Within: within, Lateness: 10, MaxBytes: 64 << 20, Sample: p})
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
			matches = j.Counters().Matches
			return float64(n) / time.Since(start).Seconds()
		})
		fmt.Printf("| operator | %v | - | %s | %.2f | ≥ 1M/s |\n", p, humanize(rate), float64(matches)/float64(n))
	}
	streams, bodies := gen.JoinBodies(evs, 1000, "imp", "clk")
	for _, mode := range []string{"none", "approx", "exact"} {
		rate := median(reps, func() float64 {
			dir, _ := os.MkdirTemp("", "mlstream-join")
			defer os.RemoveAll(dir)
			spec := joinBenchSpec(1, mode)
			return engineJoinRate(streams, bodies, n, spec, dir)
		})
		fmt.Printf("| engine | 1 | %s | %s | | |\n", mode, humanize(rate))
	}

	fmt.Printf("\n## Join: memory per buffered tuple\n\n")
	fmt.Printf("Heap growth (runtime.MemStats, after GC) of a join holding every tuple (interval longer than the stream), divided by the tuples held, beside the state's accounting (%d B per ring slot + %d B per key: what max_state is checked against).\n\n", joins.TupleBytes, joins.IndexBytes)
	fmt.Println("| tuples held | distinct keys | measured B/tuple | accounted B/tuple (state_bytes / tuples) | max_state held |")
	fmt.Println("| ---: | ---: | ---: | ---: | --- |")
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
		fmt.Printf("| %s | %s | %.0f | %.0f | %s |\n", humanize(float64(j.Tuples())), humanize(float64(min(k, held))),
			float64(measured)/float64(j.Tuples()), float64(j.StateBytes())/float64(j.Tuples()), yes(j.StateBytes() <= 1<<30))
	}

	fmt.Printf("\n## Join: COUNT estimates with sampling (Ripple Join)\n\n")
	truth := float64(gen.JoinCount(evs, within))
	fmt.Printf("True COUNT %s on the stream above; each side sampled with probability p (seeds 1..%d); the interval is at 95%%.\n\n", humanize(truth), max(reps, 10))
	fmt.Println("| sample p | tuples kept | median relative error | median interval half-width | interval holds the truth | tuples/s |")
	fmt.Println("| ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, p := range []float64{1, 0.5, 0.1, 0.01} {
		var errs, halves, rates []float64
		held, runs := 0, max(reps, 10)
		var kept uint64
		for seed := 1; seed <= runs; seed++ {
			j, _ := joins.New(joins.Config{Within: within, Lateness: 10, MaxBytes: 64 << 20, Sample: p, Seed: uint64(seed)})
			start := time.Now()
			for i, e := range evs {
				side := joins.Left
				if e.Right {
					side = joins.Right
				}
				j.Add(side, names[e.Key], e.TS, e.Cost, uint64(i+1), nil)
			}
			rates = append(rates, float64(n)/time.Since(start).Seconds())
			open, _ := j.Windows()
			est := open[0].Estimate(p, 0.95)
			errs = append(errs, math.Abs(est.Count.Estimate-truth)/truth)
			halves = append(halves, (est.Count.High-est.Count.Low)/2/truth)
			if est.Count.Low <= truth && truth <= est.Count.High {
				held++
			}
			kept = j.Counters().Sampled
		}
		fmt.Printf("| %v | %s | %.2f%% | %.2f%% | %d/%d | %s |\n", p, humanize(float64(kept)), 100*mid(errs), 100*mid(halves), held, runs, humanize(mid(rates)))
	}
	joinCrashes(quick)
}

func joinBenchSpec(sample float64, mode string) runtime.Spec {
	return runtime.Spec{Name: "bench", Kind: "join", Left: "imp", Right: "clk", Partitions: 2,
		Params: map[string]any{"on": "ad", "within": "100ms", "allowed_lateness": "2s", "sample": sample, "value": "cost"},
		FT:     runtime.FTSpec{Mode: mode}}
}

// engineJoinRate feeds the bodies to a new engine through Batch (what the
// HTTP handler does after reading the body) and times until all n events
// are processed.
func engineJoinRate(streams []string, bodies [][]byte, n int, spec runtime.Spec, dir string) float64 {
	e := newBenchEngine(dir)
	defer e.Close(context.Background())
	if _, err := e.PutJob(spec); err != nil {
		panic(err)
	}
	job, _ := e.Job(spec.Name)
	var sc fastjson.Scanner
	start := time.Now()
	for i, body := range bodies {
		for {
			b, err := e.NewBatch(streams[i])
			if err != nil {
				panic(err)
			}
			sc.InitBytes(body)
			line := 0
			for sc.Next() {
				line++
				if err := b.Add(sc.Value(), line); err != nil {
					panic(err)
				}
			}
			if _, err := b.Commit(context.Background()); err == nil {
				break
			}
		}
	}
	for job.Status(false).Processed < uint64(n) {
		time.Sleep(time.Millisecond)
	}
	return float64(n) / time.Since(start).Seconds()
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

// joinCrashes is AF-Stream's Figure 7: the join's COUNT after kill -9
// crashes of the real binary, 10% sampling, against the exact COUNT.
func joinCrashes(quick bool) {
	bin, err := buildBinary()
	if err != nil {
		fmt.Printf("\n(join crash benchmark skipped: %v)\n", err)
		return
	}
	defer os.RemoveAll(filepath.Dir(bin))
	total := 400_000
	if quick {
		total = 100_000
	}
	evs := gen.JoinEvents(12, total, 100, joinStart)
	truth := float64(gen.JoinCount(evs, 100))
	fmt.Printf("\n## Join: COUNT after kill -9 crashes (AF-Stream Figure 7)\n\n")
	fmt.Printf("The real binary, mode approx with the default bounds (Θ = 100,000 tuples, L = Γ = 10,000), 2 partitions, sample 0.1 (the paper's setting); %s events split evenly between crashes, each crash right after the last 202 of its part. Relative error of the estimated COUNT against the exact COUNT of every event sent (%s), lost events included; the interval is at 95%%, widened after each recovery.\n\n", humanize(float64(total)), humanize(truth))
	fmt.Println("| crashes | COUNT estimate | relative error | interval | holds the truth | events lost (reported) | bound per crash |")
	fmt.Println("| ---: | ---: | ---: | --- | --- | ---: | ---: |")
	for _, k := range []int{0, 1, 2, 5, 10} {
		dir, _ := os.MkdirTemp("", "mlstream-joincrash")
		cfg := filepath.Join(dir, "jobs.json")
		os.WriteFile(cfg, []byte(`{"jobs":[{"name":"bench","kind":"join","left":"imp","right":"clk","partitions":2,
			"params":{"on":"ad","within":"100ms","allowed_lateness":"2s","sample":0.1}}]}`), 0o644)
		var lost, bound int64
		var est *joins.Estimate
		for part := 0; part <= k; part++ {
			srv, url, _, err := startServer(bin, cfg, filepath.Join(dir, "data"))
			if err != nil {
				fmt.Println("server:", err)
				return
			}
			if part > 0 {
				var st runtime.JobStatus
				getStatus(url, &st)
				if st.FT != nil && st.FT.Recovery != nil {
					lost += st.FT.Recovery.Lost
					bound = st.FT.Recovery.Bound.Events
				}
			}
			lo, hi := part*total/(k+1), (part+1)*total/(k+1)
			streams, bodies := gen.JoinBodies(evs[lo:hi], 1000, "imp", "clk")
			postBodies(url, streams, bodies)
			if part < k {
				srv.Process.Signal(syscall.SIGKILL)
				srv.Wait()
				continue
			}
			waitProcessed(url, hi)
			var st runtime.JobStatus
			getStatus(url, &st)
			if st.Join != nil {
				est = st.Join.Estimate
			}
			srv.Process.Signal(syscall.SIGTERM)
			srv.Wait()
		}
		os.RemoveAll(dir)
		if est == nil {
			fmt.Printf("| %d | (no estimate) | | | | | |\n", k)
			continue
		}
		c := est.Count
		fmt.Printf("| %d | %s | %.2f%% | [%s, %s] | %s | %d | %d |\n", k, humanize(c.Estimate), 100*math.Abs(c.Estimate-truth)/truth,
			humanize(c.Low), humanize(c.High), yes(c.Low <= truth && truth <= c.High && !est.Unbounded), lost, bound)
	}
}

// postBodies posts each body to its stream, retrying 429s.
func postBodies(url string, streams []string, bodies [][]byte) {
	for i, body := range bodies {
		for {
			resp, err := http.Post(url+"/v1/streams/"+streams[i]+"/events", "application/x-ndjson", bytes.NewReader(body))
			if err != nil {
				panic(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 202 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
