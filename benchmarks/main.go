// Command benchmarks measures mlstream on this machine and prints markdown
// tables: in-process learning rate, and HTTP NDJSON ingest into a logreg
// job beside the rate at which the fastest Go JSON parser we know
// (valyala/fastjson) merely parses the same bytes. Everything runs in one
// process, one after the other, so the figures compare as ratios.
//
//	go run ./benchmarks            # about a minute
//	go run ./benchmarks -quick     # a few seconds, smaller inputs
//	go run ./benchmarks -json out.json
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mlstream/mlstream/api"
	"github.com/mlstream/mlstream/ft"
	"github.com/mlstream/mlstream/internal/gen"
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
	quick := flag.Bool("quick", false, "smaller inputs, fewer repetitions")
	jsonOut := flag.String("json", "", "also write the results to this JSON file")
	reps := flag.Int("reps", 5, "repetitions per measurement; the median is reported")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	sections := flag.String("sections", "core,synopses,join,drizzle,ft,crash", "which tables: core (learning, ingest), synopses (heavy hitters, distinct), join (throughput, memory, estimates, kill -9), drizzle (latency against throughput by group size), ft (fault-tolerance modes and the Θ×L sweep), crash (kill -9 of the real binary)")
	flag.Parse()
	want := map[string]bool{}
	for _, s := range strings.Split(*sections, ",") {
		want[strings.TrimSpace(s)] = true
	}
	n := 1_000_000
	if *quick {
		n, *reps = 200_000, 3
	}
	host, _ := os.Hostname()
	fmt.Printf("# mlstream benchmarks\n\n%s, %s, %d CPUs, GOMAXPROCS %d, host %s; median of %d runs each.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), goruntime.Version(), goruntime.NumCPU(), goruntime.GOMAXPROCS(0), host, *reps)

	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			panic(err)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	var results []result
	body, events := ndjson(n / 2)
	if want["core"] {
		results = coreTables(n, *reps, body, events)
	}
	if want["synopses"] {
		synopsesTables(*quick, *reps)
	}
	if want["join"] {
		joinTables(*quick, *reps)
	}
	if want["drizzle"] {
		drizzleTable(*quick)
	}
	if want["ft"] {
		table5(body, events, *reps)
		quarter, k := body, 0
		for i := range body {
			if body[i] == '\n' {
				if k++; k == events/4 {
					quarter = body[:i+1]
					break
				}
			}
		}
		sweep(quarter, k)
	}
	if want["crash"] {
		crashes(*quick)
		restartBig(*quick)
	}
	if *jsonOut != "" {
		data, _ := json.MarshalIndent(map[string]any{"date": time.Now().UTC(), "cpus": goruntime.NumCPU(), "results": results}, "", "  ")
		if err := os.WriteFile(*jsonOut, data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
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

// learnRate is events/s of one Learner (ftrl, defaults) cycling over
// distinct events of 20 features from gen.FeatureEvents with a Zipf(1.1)
// vocabulary of vocab words, syncing every 1,000.
func learnRate(n, distinct, vocab int) float64 {
	events, labels := gen.FeatureEvents(distinct, vocab)
	m, err := learners.NewModel(learners.DefaultConfig())
	if err != nil {
		panic(err)
	}
	l := m.NewLearner()
	start := time.Now()
	for i := range n {
		k := i % distinct
		l.Learn(events[k], labels[k])
		if l.Pending() >= 1000 {
			l.Sync()
		}
	}
	return float64(n) / time.Since(start).Seconds()
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

// ingestRate posts body in requests of 1,000 events from two client
// goroutines to a real server on loopback, and times until the job has
// processed every event. No fault tolerance: see ftIngest.
func ingestRate(body []byte, events int) float64 {
	spec := runtime.Spec{Name: "bench", Kind: "logreg", Input: "s", Params: map[string]any{"hash_bits": 18}}
	rate, _ := ingest(body, events, spec, "")
	return rate
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// ingest runs one ingest measurement of spec; with dataDir the engine has
// a backup store there. It returns the rate and the job's final status.
func ingest(body []byte, events int, spec runtime.Spec, dataDir string) (float64, runtime.JobStatus) {
	e, rate := ingestEngine(body, events, spec, dataDir)
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

// ingestEngine measures ingest of body into a new job of spec, and
// returns the engine, still running, with the rate.
func ingestEngine(body []byte, events int, spec runtime.Spec, dataDir string) (*runtime.Engine, float64) {
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
	url := "http://" + ln.Addr().String() + "/v1/streams/s/events"

	var chunks [][]byte
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
		chunks = append(chunks, rest[:cut])
		rest = rest[cut:]
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	cpu0 := cpuTime()
	work := make(chan []byte, len(chunks))
	for _, c := range chunks {
		work <- c
	}
	close(work)
	start := time.Now()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for c := range work {
				for {
					resp, err := client.Post(url, "application/x-ndjson", bytes.NewReader(c))
					if err != nil {
						panic(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusAccepted {
						break
					}
					if resp.StatusCode != http.StatusTooManyRequests {
						panic(resp.Status)
					}
					time.Sleep(5 * time.Millisecond)
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
func coreTables(n, reps int, body []byte, events int) []result {
	var results []result
	learn := median(reps, func() float64 { return learnRate(n, 4096, 4000) })
	results = append(results, result{Name: "learn (in process, one core, 20 features/event, 4k-word vocabulary, ftrl)", Value: learn, Unit: "events/s", Target: ">= 2,000,000"})
	wide := median(reps, func() float64 { return learnRate(n, 100_000, 100_000) })
	results = append(results, result{Name: "learn, same with a 100k-word vocabulary and 100k distinct events", Value: wide, Unit: "events/s", Note: "cache misses"})

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
	results = append(results, result{Name: "parse NDJSON with fastjson (one core)", Value: parse, Unit: "events/s", Note: fmt.Sprintf("%.0f MB/s, %d B/event", parse*float64(len(body))/float64(events)/1e6, len(body)/events)})
	results = append(results, result{Name: "parse NDJSON with encoding/json into a map (one core)", Value: std, Unit: "events/s", Note: "for reference"})
	results = append(results, result{Name: "HTTP NDJSON ingest -> logreg (2 partitions, loopback, client in process)", Value: ingest, Unit: "events/s",
		Note: fmt.Sprintf("%.0f%% of the fastjson parse rate (median of per-pair ratios)", 100*ratio), Target: ">= 50% of parse"})

	fmt.Println("| measurement | value | note | target |")
	fmt.Println("| --- | ---: | --- | --- |")
	for _, r := range results {
		fmt.Printf("| %s | %s %s | %s | %s |\n", r.Name, humanize(r.Value), r.Unit, r.Note, r.Target)
	}
	return results
}
