package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/mlstream/mlstream/internal/gen"
	"github.com/mlstream/mlstream/kinds/logreg"
	"github.com/mlstream/mlstream/runtime"
)

// The fault-tolerance benchmarks: AF-Stream's Table 5 (throughput of the
// modes) for logreg, heavy hitters and the join, and its Figure 5 (a sweep
// of Θ and L) on logreg. Figures 6-8 (accuracy after kill -9 crashes) are
// in crash.go.

func ftSpec(mode string, theta float64, l int) runtime.Spec {
	return runtime.Spec{Name: "bench", Kind: "logreg", Input: "s", Params: map[string]any{"hash_bits": 18},
		FT: runtime.FTSpec{Mode: mode, MaxDivergence: theta, MaxPending: l, MaxUnacked: 10_000}}
}

// workload is one kind's input for Table 5.
type workload struct {
	kind   string
	reqs   []request
	events int
	spec   func(mode string) runtime.Spec
}

// ftWorkloads are the three kinds of Table 5 on their own streams, each
// with the default bounds: logreg on the generated labelled stream, heavy
// hitters on Zipf items, the join on two joinable streams.
func ftWorkloads(body []byte, events int) []workload {
	_, _, hhBody := zipfStream(events)
	joinReqs := joinRequests(gen.JoinEvents(13, events, 100, joinStart))
	return []workload{
		{"logreg", chunk("s", body), events, func(mode string) runtime.Spec { return ftSpec(mode, 10, 10_000) }},
		{"heavy_hitters", chunk("s", hhBody), events, func(mode string) runtime.Spec {
			return runtime.Spec{Name: "bench", Kind: "heavy_hitters", Input: "s", Params: map[string]any{"field": "item", "counters": 2000},
				FT: runtime.FTSpec{Mode: mode}}
		}},
		{"join", joinReqs, events, func(mode string) runtime.Spec { return joinBenchSpec(1, mode) }},
	}
}

// table5 measures HTTP ingest of each kind in each mode, alternating the
// modes within a repetition so that the ratios compare runs made close
// together.
func table5(body []byte, events, reps int, kinds []string) {
	t := newTable("ft", "Fault tolerance: AF-Stream Table 5",
		fmt.Sprintf("HTTP NDJSON ingest of %s events per kind into a 2-partition job on loopback (client in process), default bounds (Θ = 10 for logreg, 1,000 for heavy hitters, 100,000 tuples for the join; L = Γ = 10,000); median of %d runs, ratios within each run. Beside wall-clock events/s, the CPU time per event (process-wide, client included) and the throughput it implies relative to none: steadier than wall time on a shared machine. The paper: approximate FT keeps > 95%% of none, error-free modes < 25%%.", humanize(float64(events)), reps),
		"kind", "mode", "events/s", "vs none (wall)", "CPU µs/event", "vs none (CPU)", "state backups (full + delta)", "backup bytes", "events in item log", "target")
	targets := map[string]string{"none": "", "approx": ">= 97% of none", "exact": ">= 50% of none"}
	for _, w := range ftWorkloads(body, events) {
		if !slices.Contains(kinds, w.kind) {
			continue
		}
		modes := append([]string{"none"}, slices.DeleteFunc(strings.Split(*ftModes, ","), func(m string) bool { return m == "none" || m == "" })...)
		rates, ratios, cpus, cpuRatios := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
		last := map[string]runtime.JobStatus{}
		for range reps {
			var none, noneCPU float64
			for _, m := range modes {
				dir, _ := os.MkdirTemp("", "mlstream-bench")
				stop := profileRun(w.kind, m)
				r, st := ingest(w.reqs, w.events, w.spec(m), dir)
				stop()
				os.RemoveAll(dir)
				if m == "none" {
					none, noneCPU = r, lastCPUPerEvent
				}
				rates[m], cpus[m] = append(rates[m], r), append(cpus[m], lastCPUPerEvent)
				ratios[m], cpuRatios[m] = append(ratios[m], r/none), append(cpuRatios[m], noneCPU/lastCPUPerEvent)
				last[m] = st
			}
		}
		for _, m := range modes {
			st := last[m]
			backups, bytes, logged := "-", "-", "-"
			if st.FT != nil {
				backups = fmt.Sprintf("%d + %d", st.FT.Backups.Full, st.FT.Backups.Delta)
				bytes = humanize(float64(st.FT.Backups.Bytes))
				var n int64
				for _, p := range st.FT.Partitions {
					n += p.Logged
				}
				logged = fmt.Sprintf("%s (%.1f%%)", humanize(float64(n)), 100*float64(n)/float64(w.events))
			}
			t.Row(w.kind, m, mid(rates[m]), num(100*mid(ratios[m]), "%.1f%%"), num(1e6*mid(cpus[m]), "%.2f"),
				num(100*mid(cpuRatios[m]), "%.1f%%"), backups, bytes, logged, targets[m])
		}
	}
	t.Print()
}

// Flags of section ft beside main's: which modes Table 5 measures (none
// always: the ratios are against it), per-mode CPU profiles, to see what a
// mode costs beyond none without the other modes' work mixed in, and the
// events of a run (a run of 500,000 heavy-hitter events lasts ~50 ms and
// starts fewer chains than a running job does, so its files are mostly
// new; longer runs show the steady state).
var (
	ftModes   = flag.String("ft-modes", "none,approx,exact", "the modes of Table 5 (section ft); none always runs, the ratios are against it")
	ftProfile = flag.String("ft-profile", "", "write a CPU profile of each Table 5 run into this directory, <kind>-<mode>-<n>.prof (go tool pprof merges several); not with -cpuprofile")
	ftEvents  = flag.Int("ft-events", 0, "events of each Table 5 run (0: as the other sections, 500,000; 100,000 with -quick)")
)

// profileRun starts the CPU profile of one Table 5 run when -ft-profile
// asks for it; the function it returns stops it.
func profileRun(kind, mode string) (stop func()) {
	if *ftProfile == "" {
		return func() {}
	}
	profileRuns++
	f, err := os.Create(filepath.Join(*ftProfile, fmt.Sprintf("%s-%s-%d.prof", kind, mode, profileRuns)))
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ft-profile:", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

var profileRuns int

// sweep is Figure 5: throughput, share of events backed up and crash
// recovery for a grid of Θ and L. The crash is simulated in process: once
// the job is idle the engine is abandoned without Close (what kill -9 does
// to a quiet process) and a new one recovers from the same directory.
func sweep(body []byte, events int) {
	t := newTable("ft", "Fault tolerance: Θ × L sweep (AF-Stream Figure 5)",
		fmt.Sprintf("logreg, %s events per cell; throughput relative to mode none in the same cell; recovery after a crash at the end.", humanize(float64(events))),
		"Θ", "L", "events/s", "vs none", "state backups", "events in item log", "recovery", "lost", "bound (2L+Γ)")
	reqs := chunk("s", body)
	thetas, ls := []float64{0.1, 1, 10}, []int{100, 1000, 10000}
	throughput := make([]series, len(thetas))
	recovery := make([]series, len(thetas))
	for i, theta := range thetas {
		throughput[i].Name = fmt.Sprintf("Θ = %g", theta)
		recovery[i].Name = throughput[i].Name
		for _, l := range ls {
			none, _ := ingest(reqs, events, ftSpec("none", theta, l), "")
			dir, _ := os.MkdirTemp("", "mlstream-sweep")
			e, r, st := ingestKeep(reqs, events, ftSpec("approx", theta, l), dir)
			_ = e // abandoned: the crash
			rep, took := recoverFrom(ftSpec("approx", theta, l), dir)
			os.RemoveAll(dir)
			var logged int64
			for _, p := range st.FT.Partitions {
				logged += p.Logged
			}
			t.Row(num(theta, "%g"), l, r, num(100*r/none, "%.1f%%"), st.FT.Backups.Full+st.FT.Backups.Delta,
				num(100*float64(logged)/float64(events), "%.1f%%"), took.Round(time.Millisecond).String(), rep.Lost, rep.Bound.Events)
			throughput[i].X, throughput[i].Y = append(throughput[i].X, float64(l)), append(throughput[i].Y, 100*r/none)
			recovery[i].X, recovery[i].Y = append(recovery[i].X, float64(l)), append(recovery[i].Y, float64(took.Milliseconds()))
		}
	}
	t.Print()
	figure("fig5-throughput", "Θ × L: throughput of approx against none", "L (events)", "% of none", throughput...)
	figure("fig5-recovery", "Θ × L: recovery time after a crash", "L (events)", "ms", recovery...)
}

// ingestKeep is ingest that leaves the engine running, for a simulated
// crash; it waits until the job's backups are written.
func ingestKeep(reqs []request, events int, spec runtime.Spec, dir string) (*runtime.Engine, float64, runtime.JobStatus) {
	e, rate := ingestEngine(reqs, events, spec, dir)
	j, _ := e.Job(spec.Name)
	return e, rate, j.Status(false)
}

// recoverFrom starts a new engine on dir and returns its recovery report
// and how long putting the job (recovery included) took.
func recoverFrom(spec runtime.Spec, dir string) (runtime.RecoveryReport, time.Duration) {
	e := newBenchEngine(dir)
	defer e.Close(context.Background())
	start := time.Now()
	if _, err := e.PutJob(spec); err != nil {
		panic(err)
	}
	took := time.Since(start)
	j, _ := e.Job(spec.Name)
	if rep := j.Recovery(); rep != nil {
		return *rep, took
	}
	return runtime.RecoveryReport{}, took
}

func durations(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d.Round(time.Millisecond))
	}
	return out
}

func buildBinary() (string, error) {
	dir, err := os.MkdirTemp("", "mlstream-bin")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "mlstream")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/mlstream").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v: %s", err, out)
	}
	return bin, nil
}

var servingRE = regexp.MustCompile(`msg="mlstream serving" addr=(\S+)`)

// startServer starts the binary and returns once /readyz answers 200,
// with the time that took.
func startServer(bin, cfg, data string) (*exec.Cmd, string, time.Duration, error) {
	start := time.Now()
	cmd := exec.Command(bin, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", data)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		return nil, "", 0, err
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	select {
	case a := <-addr:
		url := "http://" + a
		c := clientFor(url)
		for { // polled every 2 ms, finer than WaitReady, for the restart times
			if ok, _ := c.Ready(context.Background()); ok {
				return cmd, url, time.Since(start), nil
			}
			time.Sleep(2 * time.Millisecond)
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		return nil, "", 0, fmt.Errorf("server did not start")
	}
}

func postLines(url string, lines [][]byte) {
	var reqs []request
	for i := 0; i < len(lines); i += 1000 {
		reqs = append(reqs, request{"s", bytes.Join(lines[i:min(i+1000, len(lines))], []byte{'\n'})})
	}
	postRequests(url, reqs)
}

// getStatus reads the status of job bench, with every field of the
// runtime's.
func getStatus(url string, st *runtime.JobStatus) {
	s, err := clientFor(url).Job(context.Background(), "bench")
	if err != nil {
		panic(err)
	}
	if err := json.Unmarshal(s.Raw, st); err != nil {
		panic(err)
	}
}

func waitProcessed(url string, n int) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		var st runtime.JobStatus
		getStatus(url, &st)
		if st.QueueDepth == 0 && st.Processed > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func predictAccuracy(url string, held []gen.Event) float64 {
	evs := make([]any, len(held))
	for i, ev := range held {
		evs[i] = json.RawMessage(ev.AppendJSON(nil))
	}
	out, err := clientFor(url).Predict(context.Background(), "bench", evs...)
	if err != nil {
		panic(err)
	}
	right := 0
	for i, p := range out.Predictions {
		if (p.P > 0.5) == held[i].Label {
			right++
		}
	}
	return float64(right) / float64(len(held))
}

// restartBig measures restart to ready after kill -9 with a model whose
// 2^20 weights are nearly all non-zero: events of 20 random one-hot
// features each, so every event touches new slots.
func restartBig(bin string, quick bool) {
	n := 150_000
	if quick {
		n = 50_000
	}
	dir, _ := os.MkdirTemp("", "mlstream-big")
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "jobs.json")
	os.WriteFile(cfg, []byte(`{"jobs":[{"name":"bench","kind":"logreg","input":"s","partitions":2,"params":{"hash_bits":20},"ft":{"mode":"approx"}}]}`), 0o644)
	data := filepath.Join(dir, "data")
	srv, url, _, err := startServer(bin, cfg, data)
	if err != nil {
		fmt.Println("server:", err)
		return
	}
	rng := uint64(7)
	lines := make([][]byte, n)
	for i := range lines {
		b := fmt.Appendf(nil, `{"key":"%d","label":%d,"features":[`, i, i%2)
		for k := range 20 {
			rng = rng*6364136223846793005 + 1442695040888963407
			if k > 0 {
				b = append(b, ',')
			}
			b = fmt.Appendf(b, `"f%d"`, rng>>40)
		}
		lines[i] = append(b, "]}"...)
	}
	postLines(url, lines)
	waitProcessed(url, n)
	var st runtime.JobStatus
	getStatus(url, &st)
	srv.Process.Signal(syscall.SIGKILL)
	srv.Wait()
	var readies []float64
	for range 3 {
		srv, _, ready, err := startServer(bin, cfg, data)
		if err != nil {
			fmt.Println("server:", err)
			return
		}
		readies = append(readies, float64(ready))
		srv.Process.Signal(syscall.SIGKILL)
		srv.Wait()
	}
	t := newTable("crash", "Fault tolerance: restart to ready with a 2^20-weight model",
		"kill -9, then process start to /readyz 200 (backup chain applied, item logs replayed), median of 3.",
		"restart to ready", "non-zero weights", "of", "target")
	t.Row(time.Duration(mid(readies)).Round(time.Millisecond).String(), logreg.StatusOf(st).Model.NonZero, 1<<20, "<= 1 s")
	t.Print()
}
