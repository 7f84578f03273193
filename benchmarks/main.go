// Command benchmarks measures mlstream on this machine against the
// papers' experiments (AF-Stream's Table 5 and Figures 5-8, Drizzle's
// latency against group size) and against peers that run here (scikit-
// learn, Redis), and prints markdown tables. Everything runs for real on
// this machine, one measurement after the other, so figures compare as
// ratios within one run. -json writes every table, with the machine and
// the date; figures are drawn as PNG files with gonum/plot.
//
//	go run ./benchmarks                      # the full run, about 25 minutes
//	go run ./benchmarks -quick               # a few minutes, smaller inputs
//	go run ./benchmarks -sections join,crash -json out.json -plots dir
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mlstream/mlstream/api"
	"github.com/mlstream/mlstream/client"
	"github.com/mlstream/mlstream/ft"
	"github.com/mlstream/mlstream/internal/gen"
	_ "github.com/mlstream/mlstream/kinds/all" // the job kinds
	"github.com/mlstream/mlstream/learners"
	"github.com/mlstream/mlstream/runtime"
	"github.com/valyala/fastjson"
)

type result struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Note   string  `json:"note,omitempty"`
	Target string  `json:"target,omitempty"`
}

func main() {
	quick := flag.Bool("quick", false, "smaller inputs, fewer repetitions: a few minutes")
	jsonOut := flag.String("json", "", "also write every table, with the machine and the date, to this JSON file")
	flag.StringVar(&plotsDir, "plots", "benchmarks/plots", "draw the figures as PNG files into this directory (empty: none)")
	reps := flag.Int("reps", 5, "repetitions per measurement; the median is reported")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	sections := flag.String("sections", "core,synopses,join,peers,redis-http,drizzle,elastic,ft,crash,cluster", "which tables: elastic (the pause of a rescale against state size; the imbalance of a hot key without and with spreading, alone: elastic-spread; the autoscaler under a step workload, alone: elastic-step), core (learning, ingest against parsing), synopses (heavy hitters, distinct), join (throughput, memory, estimates), peers (scikit-learn, Redis), redis-http (the real binary over HTTP against redis-cli --pipe, wall and CPU), drizzle (latency against throughput by group size), ft (Table 5 for logreg, heavy hitters, join; the Θ×L sweep), crash (kill -9 of the real binary: Figures 6-8, restart time), cluster (cluster mode with real processes on loopback: ingest against single-node, failover after kill -9, events lost, logreg accuracy after kills, the pause of a rescale; about 12 minutes; its parts alone: cluster-ingest, cluster-failover, cluster-accuracy, cluster-rescale)")
	ftKinds := flag.String("ft-kinds", "logreg,heavy_hitters,join", "the kinds of Table 5 (section ft); the Θ×L sweep runs with logreg")
	flag.Parse()
	want := map[string]bool{}
	for _, s := range strings.Split(*sections, ",") {
		want[strings.TrimSpace(s)] = true
	}
	n := 1_000_000
	if *quick {
		n, *reps = 200_000, 3
	}
	machine := describeMachine(*reps, *quick)
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			panic(err)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	runSections(want, n, *reps, *quick, strings.Split(*ftKinds, ","))
	if *jsonOut != "" {
		if err := writeJSON(*jsonOut, machine); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

// describeMachine prints the report's heading, the machine and the
// command, and returns them for the JSON file.
func describeMachine(reps int, quick bool) map[string]any {
	host, _ := os.Hostname()
	machine := map[string]any{"date": time.Now().UTC(), "go": goruntime.Version(), "cpus": goruntime.NumCPU(),
		"gomaxprocs": goruntime.GOMAXPROCS(0), "host": host, "memory_bytes": totalMemory(), "reps": reps, "quick": quick,
		"command": "go run ./benchmarks " + strings.Join(os.Args[1:], " ")}
	fmt.Printf("# mlstream benchmarks\n\n%s, %s, %d CPUs, GOMAXPROCS %d, %s of memory, host %s; median of %d runs each. Command: `%s`.\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), goruntime.Version(), goruntime.NumCPU(), goruntime.GOMAXPROCS(0),
		humanizeBytes(totalMemory()), host, reps, machine["command"])
	return machine
}

// runSections runs the sections wanted, in the report's order.
func runSections(want map[string]bool, n, reps int, quick bool, ftKinds []string) {
	body, events := ndjson(n / 2)
	if want["core"] {
		coreTables(n, reps, body, events)
	}
	if want["synopses"] {
		synopsesTables(quick, reps)
	}
	if want["join"] {
		joinTables(quick, reps)
	}
	if want["peers"] {
		peersTables(quick)
	}
	if want["redis-http"] {
		redisHTTPTable(quick, reps)
	}
	if want["elastic"] {
		elasticTable(quick, reps)
	}
	if want["elastic"] || want["elastic-spread"] {
		spreadTable(quick)
	}
	if want["elastic"] || want["elastic-step"] {
		autoscaleTable(quick)
	}
	if want["drizzle"] {
		drizzleTable(quick)
	}
	if want["ft"] {
		ftBody, ftN := body, events
		if *ftEvents > 0 {
			ftBody, ftN = ndjson(*ftEvents)
		}
		table5(ftBody, ftN, reps, ftKinds)
		if slices.Contains(ftKinds, "logreg") {
			sweep(firstLines(body, events/4))
		}
	}
	parts := clusterParts(want)
	if want["crash"] || len(parts) > 0 {
		// One build of the binary for all: go build takes seconds.
		if bin, err := buildBinary(); err != nil {
			fmt.Printf("\n(crash and cluster benchmarks skipped: %v)\n", err)
		} else {
			if want["crash"] {
				crashFigures(bin, quick)
				restartBig(bin, quick)
			}
			if len(parts) > 0 {
				clusterTables(bin, quick, parts)
			}
			os.RemoveAll(filepath.Dir(bin))
		}
	}
}

// totalMemory is the machine's memory in bytes (0 when unknown).
func totalMemory() int64 {
	var info syscall.Sysinfo_t
	if err := syscall.Sysinfo(&info); err != nil {
		return 0
	}
	return int64(info.Totalram) * int64(info.Unit)
}

func humanizeBytes(b int64) string {
	return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
}

func median(reps int, f func() float64) float64 {
	xs := make([]float64, reps)
	for i := range xs {
		xs[i] = f()
	}
	return mid(xs)
}

func mid(xs []float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// humanize prints a number with thousands separators, or, below 100 and
// not whole, with three significant digits.
func humanize(v float64) string {
	if math.Abs(v) < 100 && v != math.Trunc(v) {
		return fmt.Sprintf("%.3g", v)
	}
	s := fmt.Sprintf("%.0f", math.Abs(v))
	var b strings.Builder
	if v < 0 && s != "0" {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// learnRate is the rate of one Learner (ftrl, defaults) cycling over
// distinct events of 20 features from gen.FeatureEvents with a Zipf(1.1)
// vocabulary of vocab words, syncing every 1,000; with prefetch, each
// Learn is preceded by Learner.Prefetch of the next event. cpu counts
// events per second of CPU time of the learning thread (locked to it;
// the wall rate where the system does not tell), wall per second of the
// clock: on a shared machine the clock also counts the time other
// processes held the core.
func learnRate(n, distinct, vocab int, prefetch bool) (cpu, wall float64) {
	events, labels := gen.FeatureEvents(distinct, vocab)
	m, err := learners.NewModel(learners.DefaultConfig())
	if err != nil {
		panic(err)
	}
	l := m.NewLearner()
	goruntime.GC() // the events just built: no collection runs beside the loop
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	cpu0, cpuOK := threadCPU()
	start := time.Now()
	for i := range n {
		k := i % distinct
		if prefetch {
			l.Prefetch(events[(i+1)%distinct])
		}
		l.Learn(events[k], labels[k])
		if l.Pending() >= 1000 {
			l.Sync()
		}
	}
	wall = float64(n) / time.Since(start).Seconds()
	if cpu1, ok := threadCPU(); ok && cpuOK && cpu1 > cpu0 {
		return float64(n) / (cpu1 - cpu0).Seconds(), wall
	}
	return wall, wall
}

// threadCPU is the CPU time of the calling thread (Linux's
// RUSAGE_THREAD, 1), and whether the system told it.
func threadCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// learnRows adds the in-process learning rates: 4k and 100k vocabularies,
// each with and without Learner.Prefetch of the next event, and the 4k
// vocabulary over as many distinct events as the 100k case (100,000
// events of 20 features are 32 MB streamed through the caches where the
// 4k case's 4,096 stay in L2: the row tells that cost of the benchmark's
// event array from the vocabulary's), all alternating in every repetition (the machine is
// shared: ratios within a repetition are what compare), per second of the
// learning thread's CPU time, with the wall-clock rate in the note.
func learnRows(t *Table, n, reps int) {
	type learnCase struct {
		name            string
		distinct, vocab int
		prefetch        bool
	}
	cases := []learnCase{
		{"learn (in process, one core, 20 features/event, 4k-word vocabulary, ftrl)", 4096, 4000, false},
		{"learn, same, Learner.Prefetch of the next event", 4096, 4000, true},
		{"learn, same with a 100k-word vocabulary and 100k distinct events", 100_000, 100_000, false},
		{"learn, 100k-word vocabulary, Learner.Prefetch of the next event", 100_000, 100_000, true},
		{"learn, 4k-word vocabulary over 100k distinct events, Learner.Prefetch", 100_000, 4000, true},
	}
	rates := make([][]float64, len(cases))
	walls := make([][]float64, len(cases))
	for range reps {
		for i, c := range cases {
			cpu, wall := learnRate(n, c.distinct, c.vocab, c.prefetch)
			rates[i], walls[i] = append(rates[i], cpu), append(walls[i], wall)
		}
	}
	for i, c := range cases {
		note, target := "", ""
		switch i {
		case 0:
			target = ">= 2,000,000"
		case 1:
			note, target = fmt.Sprintf("%.2f× Learn alone (median of per-repetition ratios)", mid(ratios(rates[1], rates[0]))), ">= 2,000,000"
		case 2:
			note = "cache misses"
		case 3:
			note, target = fmt.Sprintf("%.2f× the 4k vocabulary over the same 100k events, %.2f× the 4k case of 4,096 events (with Prefetch; medians of per-repetition ratios)",
				mid(ratios(rates[3], rates[4])), mid(ratios(rates[3], rates[1]))), ">= 0.9× the 4k vocabulary"
		case 4:
			note = fmt.Sprintf("%.2f× the 4k case of 4,096 events: the event array's share", mid(ratios(rates[4], rates[1])))
		}
		note = strings.TrimPrefix(note+fmt.Sprintf("; wall clock %s/s", humanize(mid(walls[i]))), "; ")
		t.Row(c.name, mid(rates[i]), "events/CPU-s", note, target)
	}
}

// ratios is a[i]/b[i] for each i.
func ratios(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] / b[i]
	}
	return out
}

// ndjson is n generated events, one per line.
func ndjson(n int) ([]byte, int) {
	g := gen.New(gen.Config{Seed: 11})
	var b []byte
	for range n {
		ev := g.Next()
		b = append(ev.AppendJSON(b), '\n')
	}
	return b, n
}

func lines(body []byte, fn func([]byte)) {
	for len(body) > 0 {
		i := bytes.IndexByte(body, '\n')
		if i < 0 {
			fn(body)
			return
		}
		fn(body[:i])
		body = body[i+1:]
	}
}

func parseRate(body []byte, events int) float64 {
	var p fastjson.Parser
	start := time.Now()
	lines(body, func(l []byte) {
		if _, err := p.ParseBytes(l); err != nil {
			panic(err)
		}
	})
	return float64(events) / time.Since(start).Seconds()
}

func stdParseRate(body []byte, events int) float64 {
	start := time.Now()
	lines(body, func(l []byte) {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			panic(err)
		}
	})
	return float64(events) / time.Since(start).Seconds()
}

// request is one ingest request of the benchmarks: a stream and its
// NDJSON body.
type request struct {
	stream string
	body   []byte
}

// chunk cuts an NDJSON body for stream into requests of 1,000 events.
// firstLines returns the first n lines of body and their count.
func firstLines(body []byte, n int) ([]byte, int) {
	k := 0
	for i := range body {
		if body[i] == '\n' {
			if k++; k == n {
				return body[:i+1], k
			}
		}
	}
	return body, k
}

func chunk(stream string, body []byte) []request {
	var out []request
	for rest := body; len(rest) > 0; {
		cut, k := 0, 0
		for k < 1000 && cut < len(rest) {
			i := bytes.IndexByte(rest[cut:], '\n')
			if i < 0 {
				cut = len(rest)
				break
			}
			cut += i + 1
			k++
		}
		out = append(out, request{stream, rest[:cut]})
		rest = rest[cut:]
	}
	return out
}

// ingestRate posts body in requests of 1,000 events from two client
// goroutines to a real server on loopback, and times until the job has
// processed every event. No fault tolerance: see table5.
func ingestRate(body []byte, events int) float64 {
	spec := runtime.Spec{Name: "bench", Kind: "logreg", Input: "s", Params: map[string]any{"hash_bits": 18}}
	rate, _ := ingest(chunk("s", body), events, spec, "")
	return rate
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// ingest runs one ingest measurement of spec; with dataDir the engine has
// a backup store there. It returns the rate and the job's final status.
func ingest(reqs []request, events int, spec runtime.Spec, dataDir string) (float64, runtime.JobStatus) {
	e, rate := ingestEngine(reqs, events, spec, dataDir)
	defer e.Close(context.Background())
	j, _ := e.Job(spec.Name)
	return rate, j.Status(false)
}

// newBenchEngine is an engine of 2 partitions per job; with dataDir, it
// has a backup store there.
func newBenchEngine(dataDir string) *runtime.Engine {
	cfg := runtime.Config{Partitions: 2, Logger: quiet, DataDir: dataDir}
	if dataDir != "" {
		store, err := ft.NewDirStore(dataDir)
		if err != nil {
			panic(err)
		}
		cfg.Store = store
	}
	return runtime.NewEngine(cfg)
}

// ingestEngine measures ingest of the requests (in order, from two client
// goroutines) into a new job of spec over HTTP on loopback, and returns the
// engine, still running, with the rate.
func ingestEngine(reqs []request, events int, spec runtime.Spec, dataDir string) (*runtime.Engine, float64) {
	e := newBenchEngine(dataDir)
	if _, err := e.PutJob(spec); err != nil {
		panic(err)
	}
	job, _ := e.Job(spec.Name)
	srv := api.New(api.Config{Engine: e, Logger: quiet})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	hs := &http.Server{Handler: srv}
	go hs.Serve(ln)
	defer hs.Close()
	c, err := client.New("http://"+ln.Addr().String(), client.Config{HTTPClient: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}})
	if err != nil {
		panic(err)
	}
	cpu0 := cpuTime()
	work := make(chan request, len(reqs))
	for _, r := range reqs {
		work <- r
	}
	close(work)
	start := time.Now()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for r := range work {
				if _, err := c.PostEvents(context.Background(), r.stream, r.body); err != nil { // 429s are retried
					panic(err)
				}
			}
		})
	}
	wg.Wait()
	for job.Status(false).Processed < uint64(events) {
		time.Sleep(time.Millisecond)
	}
	lastCPUPerEvent = (cpuTime() - cpu0).Seconds() / float64(events)
	return e, float64(events) / time.Since(start).Seconds()
}

// feedEngine feeds the requests, in order, to a new job of spec through
// Batch (what the HTTP handler does after reading a body, without HTTP),
// retrying while queues are full; it returns the engine, still running,
// the job and the rate until all n events are processed.
func feedEngine(reqs []request, n int, spec runtime.Spec, dataDir string) (*runtime.Engine, *runtime.Job, float64) {
	e := newBenchEngine(dataDir)
	if _, err := e.PutJob(spec); err != nil {
		panic(err)
	}
	job, _ := e.Job(spec.Name)
	var sc fastjson.Scanner
	start := time.Now()
	for _, r := range reqs {
		for {
			b, err := e.NewBatch(r.stream)
			if err != nil {
				panic(err)
			}
			sc.InitBytes(r.body)
			for line := 1; sc.Next(); line++ {
				if err := b.Add(sc.Value(), line); err != nil {
					panic(err)
				}
			}
			if _, err := b.Commit(context.Background()); err == nil {
				break
			} else if !errors.Is(err, runtime.ErrBusy) {
				panic(err)
			}
		}
	}
	for job.Status(false).Processed < uint64(n) {
		time.Sleep(time.Millisecond)
	}
	return e, job, float64(n) / time.Since(start).Seconds()
}

// lastCPUPerEvent is the process CPU time (user + system, client included)
// per event of the last ingestEngine run. On a shared machine it is
// steadier than wall time: other load changes how long a run takes, not
// how much CPU it needs.
var lastCPUPerEvent float64

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// coreTables measures learning, parsing and HTTP ingest, and prints them.
func coreTables(n, reps int, body []byte, events int) {
	t := newTable("core", "Learning and ingest",
		"In-process learning on one core (events per second of the learning thread's CPU time; the wall-clock rate, which on a shared machine also counts other processes, in the note), and HTTP NDJSON ingest into a 2-partition logreg job on loopback (client in process) beside the rate at which valyala/fastjson merely parses the same bytes. The learner and ingest figures have Go benchmarks too: `go test -run X -bench . -benchmem ./learners/ ./api/`.",
		"measurement", "value", "unit", "note", "target")
	learnRows(t, n, reps)
	std := median(reps, func() float64 { return stdParseRate(body, events) })
	// Parse and ingest alternate, and each pair gives a ratio: the machine
	// is shared, so a ratio within one pair is what compares.
	var parses, ingests, ratios []float64
	for range reps {
		p := parseRate(body, events)
		i := ingestRate(body, events)
		parses, ingests, ratios = append(parses, p), append(ingests, i), append(ratios, i/p)
	}
	parse, ingest, ratio := mid(parses), mid(ingests), mid(ratios)
	t.Row("parse NDJSON with fastjson (one core)", parse, "events/s", fmt.Sprintf("%.0f MB/s, %d B/event", parse*float64(len(body))/float64(events)/1e6, len(body)/events), "")
	t.Row("parse NDJSON with encoding/json into a map (one core)", std, "events/s", "for reference", "")
	t.Row("HTTP NDJSON ingest -> logreg (2 partitions, loopback, client in process)", ingest, "events/s",
		fmt.Sprintf("%.0f%% of the fastjson parse rate (median of per-pair ratios)", 100*ratio), ">= 70% of parse")
	t.Print()
}
