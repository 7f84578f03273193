package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/mlstream/mlstream/client"
	"github.com/mlstream/mlstream/internal/gen"
	"github.com/mlstream/mlstream/joins"
	"github.com/mlstream/mlstream/kinds/join"
	"github.com/mlstream/mlstream/kinds/logreg"
	"github.com/mlstream/mlstream/runtime"
)

// AF-Stream's Figures 6-8 with the real binary: the stream is cut into k+1
// parts, and after each of the first k the server is killed with SIGKILL
// right after its last 202, then restarted on the same data directory. The
// accuracy at the end is compared with k = 0.

var crashCounts = []int{0, 1, 2, 5, 10}

// crashRun is one series point: k crashes of a job declared by cfg (a
// config file's JSON), post(url, part) sending part of k+1, and finish(url)
// measuring once everything is processed.
type crashRun struct {
	lost, bound int64
	restarts    []time.Duration
}

func runCrashes(bin, cfg string, k int, post func(url string, part int), finish func(url string)) (crashRun, error) {
	var out crashRun
	dir, err := os.MkdirTemp("", "mlstream-crash")
	if err != nil {
		return out, err
	}
	defer os.RemoveAll(dir)
	cfgFile := filepath.Join(dir, "jobs.json")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		return out, err
	}
	for part := 0; part <= k; part++ {
		srv, url, ready, err := startServer(bin, cfgFile, filepath.Join(dir, "data"))
		if err != nil {
			return out, err
		}
		if part > 0 {
			out.restarts = append(out.restarts, ready)
			var st runtime.JobStatus
			getStatus(url, &st)
			if st.FT != nil && st.FT.Recovery != nil {
				out.lost += st.FT.Recovery.Lost
				out.bound = st.FT.Recovery.Bound.Events
			}
		}
		post(url, part)
		if part < k {
			srv.Process.Signal(syscall.SIGKILL)
			srv.Wait()
			continue
		}
		waitProcessed(url, 0)
		finish(url)
		srv.Process.Signal(syscall.SIGTERM)
		srv.Wait()
	}
	return out, nil
}

// part returns the bounds of part i of k+1 of n items.
func part(i, k, n int) (lo, hi int) { return i * n / (k + 1), (i + 1) * n / (k + 1) }

// crashFigures runs Figures 6-8 with the binary bin.
func crashFigures(bin string, quick bool) {
	lrCrashes(bin, quick)
	hhCrashes(bin, quick)
	joinCrashes(bin, quick)
}

// lrCrashes is Figure 8: held-out accuracy of logreg.
func lrCrashes(bin string, quick bool) {
	total := 100_000
	if quick {
		total = 30_000
	}
	train, held := lrData(total)
	t := newTable("crash", "Fault tolerance: logreg accuracy after kill -9 crashes (AF-Stream Figure 8)",
		fmt.Sprintf("The real binary, mode approx with the default bounds (Θ = 10, L = Γ = 10,000), hash_bits 20, 2 partitions; %s training events split evenly between crashes, each crash right after the last 202 of its part; accuracy on 20,000 held-out events. Restart: process start to /readyz 200. The paper: prediction rate 94.3%% → 90.4%% after 10 failures.", humanize(float64(total))),
		"crashes", "held-out accuracy", "vs no crash", "events lost (reported)", "bound per crash", "restart to ready (median)", "non-zero weights")
	var base float64
	pts := series{Name: "logreg held-out accuracy"}
	for _, k := range crashCounts {
		var acc float64
		var nonzero int
		run, err := runCrashes(bin, `{"jobs":[{"name":"bench","kind":"logreg","input":"s","partitions":2,"params":{"hash_bits":20}}]}`, k,
			func(url string, i int) { lo, hi := part(i, k, total); postLines(url, train[lo:hi]) },
			func(url string) {
				acc = predictAccuracy(url, held)
				var st runtime.JobStatus
				getStatus(url, &st)
				nonzero = logreg.StatusOf(st).Model.NonZero
			})
		if err != nil {
			fmt.Println("server:", err)
			return
		}
		if k == 0 {
			base = acc
		}
		t.Row(k, num(acc, "%.4f"), num(100*(acc-base), "%+.2f points"), run.lost, run.bound, medianDuration(run.restarts), nonzero)
		pts.X, pts.Y = append(pts.X, float64(k)), append(pts.Y, 100*acc)
	}
	t.Print()
	figure("fig8-logreg", "logreg: held-out accuracy after kill -9 crashes", "crashes", "accuracy (%)", pts)
}

// hhCrashes is Figure 6: heavy-hitter precision and recall.
func hhCrashes(bin string, quick bool) {
	total := 400_000
	if quick {
		total = 100_000
	}
	_, counts, body := zipfStream(total)
	reqs := chunk("s", body)
	const phi = 0.001 // a heavy hitter has more than φN of the stream
	threshold := uint64(phi * float64(total))
	truth := map[string]bool{}
	for item, c := range counts {
		if uint64(c) > threshold {
			truth[item] = true
		}
	}
	t := newTable("crash", "Fault tolerance: heavy-hitter precision after kill -9 crashes (AF-Stream Figure 6)",
		fmt.Sprintf("The real binary, heavy_hitters with 2,000 counters, mode approx with the default bounds (Θ = 1,000, L = Γ = 10,000), 2 partitions; %s Zipf(1.1) items split evenly between crashes. A heavy hitter has more than φ = 0.1%% of the stream (%d items truly do); reported: every item whose estimate is above φN. Precision = true among reported; recall = reported among true. The paper: precision 98.9%% → 92.8%% after 10 failures.", humanize(float64(total)), len(truth)),
		"crashes", "reported", "precision", "recall", "events lost (reported)", "bound per crash", "restart to ready (median)")
	prec := series{Name: "precision"}
	rec := series{Name: "recall"}
	for _, k := range crashCounts {
		var reported, hits int
		run, err := runCrashes(bin, `{"jobs":[{"name":"bench","kind":"heavy_hitters","input":"s","partitions":2,"params":{"field":"item","counters":2000}}]}`, k,
			func(url string, i int) { lo, hi := part(i, k, len(reqs)); postRequests(url, reqs[lo:hi]) },
			func(url string) {
				top, err := clientFor(url).TopK(context.Background(), "bench", 2000, client.WindowAll)
				if err != nil {
					panic(err)
				}
				for _, it := range top.Items {
					if it.Estimate > threshold {
						reported++
						if truth[it.Key] {
							hits++
						}
					}
				}
			})
		if err != nil {
			fmt.Println("server:", err)
			return
		}
		p, r := float64(hits)/math.Max(float64(reported), 1), float64(hits)/float64(len(truth))
		t.Row(k, reported, num(100*p, "%.1f%%"), num(100*r, "%.1f%%"), run.lost, run.bound, medianDuration(run.restarts))
		prec.X, prec.Y = append(prec.X, float64(k)), append(prec.Y, 100*p)
		rec.X, rec.Y = append(rec.X, float64(k)), append(rec.Y, 100*r)
	}
	t.Print()
	figure("fig6-heavy-hitters", "heavy hitters: precision and recall after kill -9 crashes", "crashes", "%", prec, rec)
}

// joinCrashes is Figure 7: the sampled join's COUNT against the exact one.
func joinCrashes(bin string, quick bool) {
	total := 400_000
	if quick {
		total = 100_000
	}
	evs := gen.JoinEvents(12, total, 100, joinStart)
	truth := float64(gen.JoinCount(evs, 100))
	t := newTable("crash", "Fault tolerance: join COUNT after kill -9 crashes (AF-Stream Figure 7)",
		fmt.Sprintf("The real binary, mode approx with the default bounds (Θ = 100,000 tuples, L = Γ = 10,000), 2 partitions, sample 0.1 (the paper's setting); %s events split evenly between crashes. Relative error of the estimated COUNT against the exact COUNT of every event sent (%s), lost events included; the interval is at 95%%, widened after each recovery. The paper: 9.1%% error → 11.3%% after 10 failures.", humanize(float64(total)), humanize(truth)),
		"crashes", "COUNT estimate", "relative error", "interval", "holds the truth", "events lost (reported)", "bound per crash")
	errs := series{Name: "relative error of COUNT"}
	for _, k := range crashCounts {
		var est *joins.Estimate
		run, err := runCrashes(bin, `{"jobs":[{"name":"bench","kind":"join","left":"imp","right":"clk","partitions":2,
			"params":{"on":"ad","within":"100ms","allowed_lateness":"2s","sample":0.1,"value":"cost"}}]}`, k,
			func(url string, i int) {
				lo, hi := part(i, k, total)
				postRequests(url, joinRequests(evs[lo:hi]))
			},
			func(url string) {
				var st runtime.JobStatus
				getStatus(url, &st)
				if js := join.StatusOf(st); js != nil && js.Join != nil {
					est = js.Join.Estimate
				}
			})
		if err != nil {
			fmt.Println("server:", err)
			return
		}
		if est == nil {
			t.Row(k, "(no estimate)", "", "", "", run.lost, run.bound)
			continue
		}
		c := est.Count
		rel := math.Abs(c.Estimate-truth) / truth
		t.Row(k, c.Estimate, num(100*rel, "%.2f%%"), fmt.Sprintf("[%s, %s]", humanize(c.Low), humanize(c.High)),
			yes(c.Low <= truth && truth <= c.High && !est.Unbounded), run.lost, run.bound)
		errs.X, errs.Y = append(errs.X, float64(k)), append(errs.Y, 100*rel)
	}
	t.Print()
	figure("fig7-join", "join (10% sample): relative error of COUNT after kill -9 crashes", "crashes", "relative error (%)", errs)
}

func medianDuration(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	return time.Duration(mid(durations(ds))).String()
}

// benchClients holds one client per server URL, so that connections are
// reused across calls.
var benchClients sync.Map

// clientFor returns the client of the server at url.
func clientFor(url string) *client.Client {
	if c, ok := benchClients.Load(url); ok {
		return c.(*client.Client)
	}
	c, err := client.New(url, client.Config{Retry: client.RetryPolicy{GiveUpAfter: time.Minute}})
	if err != nil {
		panic(err)
	}
	got, _ := benchClients.LoadOrStore(url, c)
	return got.(*client.Client)
}

// postRequests posts each request, retrying as the server asks.
func postRequests(url string, reqs []request) {
	c := clientFor(url)
	for _, r := range reqs {
		if _, err := c.PostEvents(context.Background(), r.stream, r.body); err != nil {
			panic(err)
		}
	}
}
