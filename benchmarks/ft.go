package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"time"

	"github.com/mlstream/mlstream/internal/gen"
	"github.com/mlstream/mlstream/runtime"
)

// The fault-tolerance benchmarks: AF-Stream's Table 5 (throughput of the
// modes), its Figure 8 (accuracy after kill -9 crashes) and Figure 5 (a
// sweep of Θ and L), on our logistic regression.

func ftSpec(mode string, theta float64, l int) runtime.Spec {
	return runtime.Spec{Name: "bench", Kind: "logreg", Input: "s", Params: map[string]any{"hash_bits": 18},
		FT: runtime.FTSpec{Mode: mode, MaxDivergence: theta, MaxPending: l, MaxUnacked: 10_000}}
}

// table5 measures ingest with each mode, alternating modes within a
// repetition so that the ratios compare runs made close together.
func table5(body []byte, events, reps int) {
	modes := []string{"none", "approx", "exact"}
	rates := map[string][]float64{}
	ratios := map[string][]float64{}
	cpus := map[string][]float64{}
	cpuRatios := map[string][]float64{}
	last := map[string]runtime.JobStatus{}
	for range reps {
		var none, noneCPU float64
		for _, m := range modes {
			dir, _ := os.MkdirTemp("", "mlstream-bench")
			r, st := ingest(body, events, ftSpec(m, 10, 10000), dir)
			os.RemoveAll(dir)
			rates[m] = append(rates[m], r)
			cpus[m] = append(cpus[m], lastCPUPerEvent)
			if m == "none" {
				none, noneCPU = r, lastCPUPerEvent
			}
			ratios[m] = append(ratios[m], r/none)
			cpuRatios[m] = append(cpuRatios[m], noneCPU/lastCPUPerEvent)
			last[m] = st
		}
	}
	fmt.Printf("\n## Fault tolerance: AF-Stream Table 5 on logreg\n\n")
	fmt.Printf("HTTP NDJSON ingest of %d generated events into a 2-partition logreg job, the default bounds Θ = 10, L = Γ = 10,000; median of %d runs, ratios within each run.\n\n", events, reps)
	fmt.Println("The machine is shared, so beside wall-clock events/s the table gives the CPU time per event (process-wide, client included) and the throughput it implies relative to none (CPU of none / CPU of the mode): on a CPU-bound run that is the throughput ratio, without the noise of other load.")
	fmt.Println()
	fmt.Println("| mode | events/s | vs none (wall) | CPU µs/event | vs none (CPU) | state backups (full + delta) | backup bytes | events in item log | target |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	targets := map[string]string{"none": "", "approx": ">= 97% of none", "exact": ">= 50% of none"}
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
			logged = fmt.Sprintf("%s (%.1f%%)", humanize(float64(n)), 100*float64(n)/float64(events))
		}
		fmt.Printf("| %s | %s | %.1f%% | %.2f | %.1f%% | %s | %s | %s | %s |\n", m, humanize(mid(rates[m])), 100*mid(ratios[m]),
			1e6*mid(cpus[m]), 100*mid(cpuRatios[m]), backups, bytes, logged, targets[m])
	}
}

// sweep is Figure 5: throughput, share of events backed up and crash
// recovery for a grid of Θ and L. The crash is simulated in process: once
// the job is idle the engine is abandoned without Close (what kill -9 does
// to a quiet process) and a new one recovers from the same directory.
func sweep(body []byte, events int) {
	fmt.Printf("\n## Fault tolerance: Θ × L sweep (AF-Stream Figure 5)\n\n")
	fmt.Printf("%d events per cell; throughput relative to mode none in the same cell; recovery after a crash at the end.\n\n", events)
	fmt.Println("| Θ | L | events/s | vs none | state backups | events in item log | recovery | lost | bound (2L+Γ) |")
	fmt.Println("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, theta := range []float64{0.1, 1, 10} {
		for _, l := range []int{100, 1000, 10000} {
			none, _ := ingest(body, events, ftSpec("none", theta, l), "")
			dir, _ := os.MkdirTemp("", "mlstream-sweep")
			e, r, st := ingestKeep(body, events, ftSpec("approx", theta, l), dir)
			_ = e // abandoned: the crash
			rep, took := recoverFrom(ftSpec("approx", theta, l), dir)
			os.RemoveAll(dir)
			var logged int64
			for _, p := range st.FT.Partitions {
				logged += p.Logged
			}
			fmt.Printf("| %g | %d | %s | %.1f%% | %d | %.1f%% | %s | %d | %d |\n", theta, l, humanize(r), 100*r/none,
				st.FT.Backups.Full+st.FT.Backups.Delta, 100*float64(logged)/float64(events), took.Round(time.Millisecond), rep.Lost, rep.Bound.Events)
		}
	}
}

// ingestKeep is ingest that leaves the engine running, for a simulated
// crash; it waits until the job's backups are written.
func ingestKeep(body []byte, events int, spec runtime.Spec, dir string) (*runtime.Engine, float64, runtime.JobStatus) {
	e, rate := ingestEngine(body, events, spec, dir)
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

// crashes is Figure 8 with the real binary: the stream is cut into k+1
// parts, and after each of the first k the server is killed with SIGKILL
// right after its last 202, then restarted on the same data directory.
// Held-out accuracy at the end is compared with k = 0.
func crashes(quick bool) {
	bin, err := buildBinary()
	if err != nil {
		fmt.Printf("\n(crash benchmark skipped: %v)\n", err)
		return
	}
	defer os.RemoveAll(filepath.Dir(bin))
	total := 100_000
	if quick {
		total = 30_000
	}
	g := gen.New(gen.Config{Seed: 5, Vocabulary: 50_000})
	train := make([][]byte, total)
	for i := range train {
		ev := g.Next()
		train[i] = ev.AppendJSON(nil)
	}
	held := make([]gen.Event, 20000)
	for i := range held {
		held[i] = g.Next()
	}
	fmt.Printf("\n## Fault tolerance: accuracy after kill -9 crashes (AF-Stream Figure 8)\n\n")
	fmt.Printf("The real binary, mode approx with the default bounds (Θ = 10, L = Γ = 10,000), hash_bits 20, 2 partitions; %d training events split evenly between crashes, each crash right after the last 202 of its part; accuracy on 20,000 held-out events. Restart: process start to /readyz 200.\n\n", total)
	fmt.Println("| crashes | held-out accuracy | vs no crash | events lost (reported) | bound | restart to ready (median) | non-zero weights |")
	fmt.Println("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	var base float64
	for _, k := range []int{0, 1, 2, 5, 10} {
		dir, _ := os.MkdirTemp("", "mlstream-crash")
		cfg := filepath.Join(dir, "jobs.json")
		os.WriteFile(cfg, []byte(`{"jobs":[{"name":"bench","kind":"logreg","input":"s","partitions":2,"params":{"hash_bits":20},"ft":{"mode":"approx"}}]}`), 0o644)
		var lost, bound int64
		var restarts []time.Duration
		var acc float64
		var nonzero int
		for part := 0; part <= k; part++ {
			srv, url, ready, err := startServer(bin, cfg, filepath.Join(dir, "data"))
			if err != nil {
				fmt.Println("server:", err)
				return
			}
			if part > 0 {
				restarts = append(restarts, ready)
				var st runtime.JobStatus
				getStatus(url, &st)
				if st.FT != nil && st.FT.Recovery != nil {
					lost += st.FT.Recovery.Lost
					bound = st.FT.Recovery.Bound.Events
				}
			}
			lo, hi := part*total/(k+1), (part+1)*total/(k+1)
			postLines(url, train[lo:hi])
			if part < k {
				srv.Process.Signal(syscall.SIGKILL)
				srv.Wait()
				continue
			}
			waitProcessed(url, hi)
			acc = predictAccuracy(url, held)
			var st runtime.JobStatus
			getStatus(url, &st)
			nonzero = st.Model.NonZero
			srv.Process.Signal(syscall.SIGTERM)
			srv.Wait()
		}
		os.RemoveAll(dir)
		if k == 0 {
			base = acc
		}
		ready := "-"
		if len(restarts) > 0 {
			ready = time.Duration(mid(durations(restarts))).String()
		}
		fmt.Printf("| %d | %.4f | %+.2f points | %d | %d | %s | %s |\n", k, acc, 100*(acc-base), lost, bound, ready, humanize(float64(nonzero)))
	}
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
		for {
			resp, err := http.Get(url + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return cmd, url, time.Since(start), nil
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		return nil, "", 0, fmt.Errorf("server did not start")
	}
}

func postLines(url string, lines [][]byte) {
	var streams []string
	var bodies [][]byte
	for i := 0; i < len(lines); i += 1000 {
		streams = append(streams, "s")
		bodies = append(bodies, bytes.Join(lines[i:min(i+1000, len(lines))], []byte{'\n'}))
	}
	postBodies(url, streams, bodies)
}

func getStatus(url string, st *runtime.JobStatus) {
	resp, err := http.Get(url + "/v1/jobs/bench")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(st); err != nil {
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
	var body []byte
	for _, ev := range held {
		body = append(ev.AppendJSON(body), '\n')
	}
	resp, err := http.Post(url+"/v1/jobs/bench/predict", "application/x-ndjson", bytes.NewReader(body))
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var out struct{ Predictions []struct{ P float64 } }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
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
func restartBig(quick bool) {
	bin, err := buildBinary()
	if err != nil {
		fmt.Printf("\n(restart benchmark skipped: %v)\n", err)
		return
	}
	defer os.RemoveAll(filepath.Dir(bin))
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
	fmt.Printf("\n## Fault tolerance: restart to ready with a 2^20-weight model\n\n")
	fmt.Printf("kill -9, then process start to /readyz 200 (backup chain applied, item logs replayed), median of 3: **%s** with %s non-zero weights of %s (target <= 1 s).\n",
		time.Duration(mid(readies)).Round(time.Millisecond), humanize(float64(st.Model.NonZero)), humanize(float64(1<<20)))
}
