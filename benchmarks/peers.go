package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mlstream/mlstream/internal/gen"
	"github.com/mlstream/mlstream/kinds/distinct"
	"github.com/mlstream/mlstream/kinds/heavyhitters"
	"github.com/mlstream/mlstream/kinds/logreg"
	"github.com/mlstream/mlstream/learners"
	"github.com/mlstream/mlstream/runtime"
	"github.com/mlstream/mlstream/synopses"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fastjson"
)

// Peers on the same events, in the same order (issue 8, item 4):
// scikit-learn's SGDClassifier beside our logistic regression, and Redis's
// HyperLogLog and sorted sets beside our distinct and heavy hitters. The
// peers are Debian's packages, run here; they are installed with apt-get
// when missing, and skipped (with the reason) when that fails.

const (
	peersPython = "/usr/bin/python3" // Debian's, which sees python3-sklearn
	sgdScript   = "benchmarks/peers/sgd.py"
	peersReps   = 3
)

func peersTables(quick bool) {
	sklearnTables(quick)
	redisTables(quick)
}

// aptEnsure runs check and, when it fails, installs pkg with apt-get (an
// apt-get update first if the install fails) and checks again. It returns
// what it did, for the table's note.
func aptEnsure(pkg string, check func() error) (string, error) {
	if check() == nil {
		return "", nil
	}
	fmt.Printf("\n%s is missing: installing it with apt-get.\n", pkg)
	install := func() error {
		cmd := exec.Command("apt-get", "install", "-y", "-q", pkg)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get install %s: %v: %s", pkg, err, lastLine(out))
		}
		return nil
	}
	if err := install(); err != nil {
		if out, uerr := exec.Command("apt-get", "update", "-q").CombinedOutput(); uerr != nil {
			return "", fmt.Errorf("%v; apt-get update: %v: %s", err, uerr, lastLine(out))
		}
		if err := install(); err != nil {
			return "", err
		}
	}
	if err := check(); err != nil {
		return "", fmt.Errorf("installed %s, but: %v", pkg, err)
	}
	return fmt.Sprintf(" %s was missing and was installed with apt-get by this run.", pkg), nil
}

func lastLine(out []byte) string {
	s := strings.TrimSpace(string(out))
	return s[strings.LastIndexByte(s, '\n')+1:]
}

// skipped reports, as a table of its own (so that -json has it too), why
// a peer did not run.
func skipped(peer string, err error) {
	t := newTable("peers", "Peers: "+peer+" skipped", "", "peer", "why")
	t.Row(peer, err.Error())
	t.Print()
}

// ---- scikit-learn ----

// labelled is a data set as our learner sees it, with its NDJSON.
type labelled struct {
	name    string
	file    string // NDJSON, one event a line
	feats   [][]learners.Feature
	labels  []bool
	trueP   []float64 // the true model's probabilities (generated stream only)
	one     int       // events sklearn learns one at a time (a prefix)
	batches []int     // sklearn's mini-batch sizes
	// variants are sklearn's preprocessings (sgd.py --variants); nil:
	// as-is and max-abs. ours are extra params of our job to run.
	variants []string
	ours     []map[string]any
}

// readLabelled reads an NDJSON file of labelled events and hashes each
// event's features as the engine does (runtime/record.go): a number v under
// name is (name, v), a string v is ("name=v", 1), true is (name, 1); zeros,
// false and null are skipped.
func readLabelled(name, file string) (*labelled, error) {
	body, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	d := &labelled{name: name, file: file}
	var p fastjson.Parser
	for line := range bytes.Lines(body) {
		v, err := p.ParseBytes(line)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %v", file, len(d.labels)+1, err)
		}
		var fs []learners.Feature
		v.GetObject("features").Visit(func(k []byte, x *fastjson.Value) {
			switch x.Type() {
			case fastjson.TypeNumber:
				if f := x.GetFloat64(); f != 0 {
					fs = append(fs, learners.Feature{Hash: learners.HashName(string(k)), Value: f})
				}
			case fastjson.TypeString:
				fs = append(fs, learners.Feature{Hash: learners.HashNameValue(string(k), string(x.GetStringBytes())), Value: 1})
			case fastjson.TypeTrue:
				fs = append(fs, learners.Feature{Hash: learners.HashName(string(k)), Value: 1})
			}
		})
		d.feats, d.labels = append(d.feats, fs), append(d.labels, v.GetInt("label") == 1)
	}
	return d, nil
}

// generated writes n events of the generated stream (drift at n/2) to a
// temporary NDJSON file and reads it back.
func generated(n int) (*labelled, error) {
	g := gen.New(gen.Config{Seed: 11, DriftAfter: n / 2})
	var b []byte
	var trueP []float64
	for range n {
		ev := g.Next()
		b = append(ev.AppendJSON(b), '\n')
		trueP = append(trueP, ev.TrueP)
	}
	f, err := os.CreateTemp("", "mlstream-peers-*.ndjson")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		return nil, err
	}
	d, err := readLabelled("generated", f.Name())
	if err != nil {
		return nil, err
	}
	d.trueP = trueP
	return d, nil
}

// sklearnRun is one run of benchmarks/peers/sgd.py.
type sklearnRun struct {
	Variant string    `json:"variant"`
	Batch   int       `json:"batch"`
	Events  int       `json:"events"`
	Seconds float64   `json:"seconds"`
	P       []float64 `json:"p"`
}

// sklearnInfo is the script's first line.
type sklearnInfo struct {
	Events      int     `json:"events"`
	Columns     int     `json:"columns"`
	LoadSeconds float64 `json:"load_seconds"`
	Sklearn     string  `json:"sklearn"`
	Numpy       string  `json:"numpy"`
	Python      string  `json:"python"`
}

// runSklearn runs the script on d and returns its runs.
func runSklearn(d *labelled) (sklearnInfo, []sklearnRun, error) {
	var batches []string
	for _, b := range d.batches {
		batches = append(batches, strconv.Itoa(b))
	}
	args := []string{sgdScript, d.file, "--one", strconv.Itoa(d.one), "--batches", strings.Join(batches, ",")}
	if d.variants != nil {
		args = append(args, "--variants", strings.Join(d.variants, ","))
	}
	cmd := exec.Command(peersPython, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return sklearnInfo{}, nil, fmt.Errorf("%s %s: %v: %s", peersPython, sgdScript, err, lastLine(stderr.Bytes()))
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<30)
	var info sklearnInfo
	var runs []sklearnRun
	for i := 0; sc.Scan(); i++ {
		var err error
		if i == 0 {
			err = json.Unmarshal(sc.Bytes(), &info)
		} else {
			var r sklearnRun
			err = json.Unmarshal(sc.Bytes(), &r)
			runs = append(runs, r)
		}
		if err != nil {
			return info, nil, fmt.Errorf("%s output: %v", sgdScript, err)
		}
	}
	if info.Events != len(d.labels) {
		return info, nil, fmt.Errorf("%s read %d events of %s, we read %d", sgdScript, info.Events, d.file, len(d.labels))
	}
	return info, runs, nil
}

// oursLearn is our learner (defaults, as a logreg job has them) on the
// first n events, one at a time, syncing every 1,000 as a partition does:
// the median events/s of peersReps runs of the loop alone, and the
// predictions made before each event was learned.
func oursLearn(d *labelled, n int) (float64, []float64) {
	preds := make([]float64, n)
	rate := median(peersReps, func() float64 {
		m, err := learners.NewModel(learners.DefaultConfig())
		if err != nil {
			panic(err)
		}
		l := m.NewLearner()
		start := time.Now()
		for i, f := range d.feats[:n] {
			preds[i] = l.Learn(f, d.labels[i])
			if l.Pending() >= 1000 {
				l.Sync()
			}
		}
		return float64(n) / time.Since(start).Seconds()
	})
	return rate, preds
}

// progressive is the progressive validation measures of predictions, by
// our own code (learners.Progressive), for every learner alike.
func progressive(preds []float64, labels []bool) learners.Measures {
	p := learners.NewProgressive(1)
	for i, x := range preds {
		p.Observe(x, labels[i])
	}
	return p.Summary().All
}

// oursEngine is a logreg job of one partition (so the events are learned
// in file order) with params fed d's file: events/s, JSON parsing
// included, and the job's own progressive measures.
func oursEngine(d *labelled, params map[string]any) (float64, learners.Measures) {
	body, err := os.ReadFile(d.file)
	if err != nil {
		panic(err)
	}
	spec := runtime.Spec{Name: "peers", Kind: "logreg", Input: "s", Partitions: 1, Params: params}
	var m learners.Measures
	rate := median(peersReps, func() float64 {
		e, job, rate := feedEngine(chunk(spec.Input, body), len(d.labels), spec, "")
		defer e.Close(context.Background())
		m = logreg.StatusOf(job.Status(false)).Metrics.All
		return rate
	})
	return rate, m
}

// accuracyCurve is the accuracy of the predictions in each bucket of
// events, at the bucket's end.
func accuracyCurve(name string, preds []float64, labels []bool, bucket int) series {
	s := series{Name: name}
	for lo := 0; lo+bucket <= len(preds); lo += bucket {
		m := progressive(preds[lo:lo+bucket], labels[lo:lo+bucket])
		s.X, s.Y = append(s.X, float64(lo+bucket)), append(s.Y, m.Accuracy)
	}
	return s
}

// sklearnTables compares our logistic regression with scikit-learn's
// SGDClassifier on the generated stream and the real sets in
// benchmarks/data: speed and progressive measures.
func sklearnTables(quick bool) {
	n, one := 100_000, 20_000
	if quick {
		n, one = 20_000, 5_000
	}
	note, sets, err := sklearnSets(n, one, quick)
	if err != nil {
		skipped("scikit-learn", err)
		return
	}
	g := sets[0]
	defer os.Remove(g.file)
	var info sklearnInfo
	var curves []series
	same := true // the engine's measures equal those of our learner in process
	t := newTable("peers", "Peers: scikit-learn's SGDClassifier against our logistic regression, same events, same order", "", "data", "learner", "updates", "events", "events/s", "events/s ÷ ours", "accuracy", "log loss", "AUC")
	for _, d := range sets {
		i, runs, err := runSklearn(d)
		if err != nil {
			skipped("scikit-learn on "+d.name, err)
			continue
		}
		info = i
		bucket := 0 // no curves but the generated stream's
		if d == g {
			bucket = n / 40
		}
		rows, ours, dc, dsame := sklearnRows(d, runs, bucket)
		curves, same = append(curves, dc...), same && dsame
		for _, r := range rows {
			rate, ratio := any("-"), any("-")
			if r.rate > 0 {
				rate, ratio = r.rate, num(r.rate/ours[r.events], "%.3g")
			}
			t.Row(d.name, r.learner, r.updates, r.events, rate, ratio, num(r.m.Accuracy, "%.4f"), num(r.m.LogLoss, "%.4f"), num(r.m.AUC, "%.4f"))
		}
	}
	t.Note = sklearnNote(n, one, same, info, note)
	t.Print()
	figure("peers-sklearn", fmt.Sprintf("generated stream (drift at %s): accuracy per %s events", humanize(float64(n/2)), humanize(float64(n/40))), "events", "accuracy", curves...)
}

// sklearnSets installs scikit-learn if need be and makes the data sets:
// the generated stream of n events (its first one learned by sklearn one at
// a time; the caller removes its file) and the real sets that are there.
func sklearnSets(n, one int, quick bool) (note string, sets []*labelled, err error) {
	note, err = aptEnsure("python3-sklearn", func() error {
		return exec.Command(peersPython, "-c", "import sklearn").Run()
	})
	if err != nil {
		return "", nil, err
	}
	if _, err := os.Stat(sgdScript); err != nil {
		return "", nil, fmt.Errorf("%v (run from the repository's root)", err)
	}
	g, err := generated(n)
	if err != nil {
		return "", nil, err
	}
	g.one, g.batches = one, []int{100, 1000}
	sets = []*labelled{g}
	for _, s := range []struct{ name, file string }{{"breast cancer", "benchmarks/data/breast_cancer.ndjson"}, {"digits 0-4 / 5-9", "benchmarks/data/digits.ndjson"}} {
		d, err := readLabelled(s.name, s.file)
		if err != nil {
			fmt.Printf("\n(%s skipped: %v)\n", s.name, err)
			continue
		}
		d.one, d.batches = len(d.labels), []int{10, 100}
		sets = append(sets, d)
	}
	if d, err := readLabelled("SpamAssassin (word counts)", "benchmarks/data/spam_assassin.ndjson"); err != nil {
		fmt.Printf("\n(SpamAssassin skipped: %v)\n", err)
	} else {
		d.one, d.batches = len(d.labels), []int{10, 100}
		if quick {
			d.one = 1000
		}
		d.variants = []string{"as-is", "max-abs", "log1p-l2"}
		d.ours = []map[string]any{{"normalize": "log1p_l2"}}
		sets = append(sets, d)
	}
	return note, sets, nil
}

// sklearnRow is a row of the scikit-learn table.
type sklearnRow struct {
	learner, updates string
	events           int
	rate             float64 // 0: not timed
	m                learners.Measures
}

// sklearnRows runs our learner on d, in process and as a job, beside
// sklearn's runs: the rows, our events/s by the number of events learned,
// the accuracy curves per bucket events (none for bucket 0), and whether
// the job's measures equal those of our learner in process.
func sklearnRows(d *labelled, runs []sklearnRun, bucket int) (rows []sklearnRow, ours map[int]float64, curves []series, same bool) {
	ours = map[int]float64{} // our events/s on the first n events
	for _, k := range []int{d.one, len(d.labels)} {
		if _, done := ours[k]; done {
			continue
		}
		rate, preds := oursLearn(d, k)
		ours[k] = rate
		rows = append(rows, sklearnRow{"mlstream logreg, in process", "1 event", k, rate, progressive(preds, d.labels[:k])})
		if bucket > 0 && k == len(d.labels) {
			curves = append(curves, accuracyCurve("mlstream logreg", preds, d.labels, bucket))
		}
	}
	rate, m := oursEngine(d, nil)
	rows = append(rows, sklearnRow{"mlstream logreg job, engine (1 partition, JSON parsed)", "1 event", len(d.labels), rate, m})
	same = m == rows[len(rows)-2].m
	// The drift responses (on_drift), on every set: they must help the
	// drifting stream and leave the others alone.
	for _, act := range []string{"reset_rates", "reset"} {
		rate, m := oursEngine(d, map[string]any{"on_drift": act})
		rows = append(rows, sklearnRow{"mlstream logreg job, engine, on_drift: " + act, "1 event", len(d.labels), rate, m})
	}
	// normalize none: the default before sqrt, for comparison.
	for _, params := range append([]map[string]any{{"normalize": "none"}}, d.ours...) {
		rate, m := oursEngine(d, params)
		rows = append(rows, sklearnRow{fmt.Sprintf("mlstream logreg job, engine, %v", params), "1 event", len(d.labels), rate, m})
	}
	for _, r := range runs {
		updates := "1 event"
		if r.Batch > 1 {
			updates = fmt.Sprintf("mini-batch %d", r.Batch)
		}
		rows = append(rows, sklearnRow{"sklearn SGD, " + r.Variant, updates, r.Events, float64(r.Events) / r.Seconds, progressive(r.P, d.labels[:r.Events])})
		if bucket > 0 && r.Batch == 100 {
			curves = append(curves, accuracyCurve("sklearn, "+r.Variant+", mini-batch 100", r.P, d.labels, bucket))
		}
	}
	if d.trueP != nil {
		rows = append(rows, sklearnRow{"the true model (the best possible)", "-", len(d.labels), 0, progressive(d.trueP, d.labels)})
		if bucket > 0 {
			curves = append(curves, accuracyCurve("the true model", d.trueP, d.labels, bucket))
		}
	}
	return rows, ours, curves, same
}

// sklearnNote says how the scikit-learn table was made.
func sklearnNote(n, one int, same bool, info sklearnInfo, note string) string {
	return fmt.Sprintf("Progressive validation for every learner: each event (or mini-batch) is first predicted with the current model, then learned; accuracy (p > 0.5), log loss (p clamped to [1e-15, 1-1e-15]) and AUC over the whole run, computed from the predictions by the same code (learners.Progressive). "+
		"The generated stream is internal/gen (seed 11, true-model drift after %s events), written once as NDJSON; the real sets are benchmarks/data (see its README). "+
		"**mlstream**: the defaults of a logreg job (FTRL-Proximal, α = 0.3, adaptive per-feature scales, 2^20 hashed weights, normalize sqrt: a value v with |v| > 1 as sign(v)·√|v|); *normalize: none*: the same job with raw values (the default before sqrt); in process: one Learner on one core, features hashed before timing, median of %d runs; engine: a 1-partition logreg job fed the NDJSON through Batch in order, 1,000 events a batch (JSON parsing, queue and learning; its own measures, which %s); on the small sets its rate is mostly fixed costs (job start, waiting for the last batch); *on_drift: reset_rates / reset*: the same job with that param (the default is none): when a Page-Hinkley detector finds a drift in the log loss, the optimizer's per-weight rates, or the whole model, start over. "+
		"A fresh model's first events touch its 32 MiB of weights for the first time (page faults): that dominates our rate on a short prefix (a second pass over the same events runs several times faster). "+
		"**scikit-learn** %s (Debian's python3-sklearn; numpy %s, Python %s): SGDClassifier(loss=\"log_loss\") with default settings except shuffle=False (stream order within a mini-batch) and random_state=0, partial_fit after predict_proba; features vectorised before timing with DictVectorizer (the same names as ours: numbers as is, a string v under name as the column name=v, no hashing collisions). "+
		"SpamAssassin: the public mail corpus as benchmarks/data/spam_assassin.ndjson holds it (6,046 messages, raw word counts, label 1 = spam; see its README); sklearn runs a third preprocessing there, *log1p-l2* (each count x as log(1+x), each event scaled to unit L2 norm: per event, nothing learned from others), and ours also with normalize log1p_l2. "+
		"*as-is*: values unscaled as they come (the generated amount goes up to 5,000); *max-abs*: each feature divided by the largest |value| seen so far, this event included (what MaxAbsScaler.partial_fit holds; no later event is looked at): the analogue of our adaptive scales. "+
		"One event at a time sklearn runs on the first %s events of the generated stream only (it learns ~1,000 events/s), mini-batches on all; \"events/s ÷ ours\" compares with our in-process rate on the same events. sklearn's events/s counts its training loop only (slicing, scaling, predict_proba, partial_fit), not Python's start nor loading.%s",
		humanize(float64(n/2)), peersReps, map[bool]string{true: "equal those in process: same learner, same order", false: "DIFFER from those in process"}[same], info.Sklearn, info.Numpy, info.Python, humanize(float64(one)), note)
}

// ---- Redis ----

// ensureRedis installs redis-server (and redis-cli) with apt when missing
// and starts it; note says how it was installed. On failure it prints why
// the Redis tables are skipped and returns ok = false.
func ensureRedis() (rdb *redis.Client, stop func(), note string, ok bool) {
	note, err := aptEnsure("redis-server", func() error {
		if _, err := exec.LookPath("redis-server"); err != nil {
			return err
		}
		_, err := exec.LookPath("redis-cli")
		return err
	})
	if err == nil {
		rdb, stop, err = startRedis()
	}
	if err != nil {
		skipped("Redis", err)
		return nil, nil, "", false
	}
	return rdb, stop, note, true
}

// startRedis starts redis-server on a free loopback port, without
// persistence, and returns a client and a stop function that kills it.
// The server also dies with this process (Pdeathsig).
func startRedis() (*redis.Client, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--loglevel", "warning")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port, DisableIdentity: true, Protocol: 2})
	stop := func() {
		rdb.Close()
		cmd.Process.Kill()
		cmd.Wait()
	}
	for start := time.Now(); rdb.Ping(context.Background()).Err() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			stop()
			return nil, nil, fmt.Errorf("redis-server on port %s did not answer PING within 10 s: %s", port, lastLine(logs.Bytes()))
		}
	}
	return rdb, stop, nil
}

// serverCPU is redis-server's CPU time (user + system) so far, in seconds.
func serverCPU(rdb *redis.Client) float64 {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		panic(err)
	}
	var s float64
	for _, l := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(l), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, _ := strconv.ParseFloat(v, 64)
			s += f
		}
	}
	return s
}

// redisRun is one timed run against Redis: ops/s and the server's CPU
// microseconds per op.
type redisRun struct{ rate, cpuUs float64 }

// timeRedis runs f (ops commands) from a fresh key and times it.
func timeRedis(rdb *redis.Client, key string, ops int, f func()) redisRun {
	ctx := context.Background()
	if err := rdb.Del(ctx, key).Err(); err != nil {
		panic(err)
	}
	cpu := serverCPU(rdb)
	start := time.Now()
	f()
	secs := time.Since(start).Seconds()
	return redisRun{float64(ops) / secs, 1e6 * (serverCPU(rdb) - cpu) / float64(ops)}
}

// pipelined sends one command per item, batch commands per round trip.
func pipelined(rdb *redis.Client, items []string, batch int, add func(p redis.Pipeliner, item string)) {
	ctx := context.Background()
	for lo := 0; lo < len(items); lo += batch {
		p := rdb.Pipeline()
		for _, it := range items[lo:min(lo+batch, len(items))] {
			add(p, it)
		}
		if _, err := p.Exec(ctx); err != nil {
			panic(err)
		}
	}
}

// medianRun is the run of median rate of reps runs (with its CPU).
func medianRun(reps int, f func() redisRun) redisRun {
	runs := make([]redisRun, reps)
	for i := range runs {
		runs[i] = f()
	}
	slices.SortFunc(runs, func(a, b redisRun) int { return cmp.Compare(a.rate, b.rate) })
	return runs[reps/2]
}

// zipfStream is n items drawn Zipf(1.1) from 100,000 ("item-<rank>"),
// their exact counts, and the stream as NDJSON events {"item": ...}.
func zipfStream(n int) ([]string, map[string]int, []byte) {
	items := zipfNames(n)
	counts := map[string]int{}
	var body []byte
	for _, item := range items {
		counts[item]++
		body = fmt.Appendf(body, "{\"item\":%q}\n", item)
	}
	return items, counts, body
}

// zipfNames is n items "item-<k>" drawn Zipf(1.1) from 100,000, the same
// stream for every caller.
func zipfNames(n int) []string {
	r := rand.New(rand.NewPCG(9, 10))
	z := rand.NewZipf(r, 1.1, 1, 99_999)
	items := make([]string, n)
	for i := range items {
		items[i] = "item-" + strconv.FormatUint(z.Uint64(), 10)
	}
	return items
}

// topHits counts the reported items that are truly in the top k: whose
// exact count is at least the k-th largest (ties at the boundary count).
func topHits(reported []string, counts map[string]int, k int) int {
	cs := make([]int, 0, len(counts))
	for _, c := range counts {
		cs = append(cs, c)
	}
	slices.Sort(cs)
	kth, hits := cs[max(len(cs)-k, 0)], 0
	for _, it := range reported {
		if counts[it] >= kth {
			hits++
		}
	}
	return hits
}

// redisTables compares Redis's HyperLogLog and sorted sets with our
// distinct counts and heavy hitters on the same Zipf stream.
func redisTables(quick bool) {
	n, single := 1_000_000, 20_000
	if quick {
		n, single = 200_000, 10_000
	}
	rdb, stop, note, ok := ensureRedis()
	if !ok {
		return
	}
	defer stop()
	rb := &redisBench{rdb: rdb, ctx: context.Background(), n: n, single: single, note: note}
	rb.version = redisVersion(rb.ctx, rdb)
	rb.items, rb.counts, rb.body = zipfStream(n)
	rb.distinctTable()
	rb.topKTable()
}

// redisBench is what both Redis tables share: the server, the stream and
// how it is sent.
type redisBench struct {
	rdb       *redis.Client
	ctx       context.Context
	version   string
	note      string // how redis-server was installed, if it was
	n, single int    // items; items sent one command a round trip
	items     []string
	counts    map[string]int
	body      []byte // items as NDJSON
}

// Items a pipeline or a PFADD command carries; the k of top k.
const redisBatch, redisK = 1000, 100

// redisVersion is the server's version, "?" if INFO does not say.
func redisVersion(ctx context.Context, rdb *redis.Client) string {
	version := "?"
	if info, err := rdb.Info(ctx, "server").Result(); err == nil {
		for _, l := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "redis_version:"); ok {
				version = v
			}
		}
	}
	return version
}

// distinctTable: PFADD pipelined, in batches and one a round trip against
// synopses.Distinct in process and a distinct job.
func (rb *redisBench) distinctTable() {
	dt := newTable("peers", "Peers: Redis PFADD/PFCOUNT against our distinct", "", "system", "how", "items", "items/s", "÷ ours in process", "server CPU µs/item", "memory", "estimate", "exact", "relative error")
	exact := float64(len(rb.counts))
	var oursD *synopses.Distinct
	oursRate := median(peersReps, func() float64 {
		oursD, _ = synopses.NewDistinct(14)
		start := time.Now()
		for _, it := range rb.items {
			oursD.InsertString(it)
		}
		return float64(rb.n) / time.Since(start).Seconds()
	})
	rb.pfaddRows(dt, oursRate)
	dt.Row("mlstream synopses.Distinct (p = 14)", "in process, one core", rb.n, oursRate, num(1, "%.3g"), "-", humanize(float64(oursD.MemoryBytes()))+" B", float64(oursD.Estimate()), exact, relErr(float64(oursD.Estimate()), exact))
	dspec := runtime.Spec{Name: "peers", Kind: "distinct", Input: "s", Params: map[string]any{"field": "item"}}
	var dest float64
	drate := median(peersReps, func() float64 {
		e, job, rate := feedEngine(chunk(dspec.Input, rb.body), rb.n, dspec, "")
		defer e.Close(context.Background())
		dc, err := distinct.CountOf(job, runtime.WindowAll)
		if err != nil {
			panic(err)
		}
		dest = float64(dc.Estimate)
		return rate
	})
	dt.Row("mlstream distinct job (p = 14)", "engine, 2 partitions, JSON parsed", rb.n, drate, num(drate/oursRate, "%.3g"), "-", "-", dest, exact, relErr(dest, exact))
	dt.Note = fmt.Sprintf("%s items drawn Zipf(1.1) from 100,000, the same stream in the same order for every row; %d distinct. "+
		"Redis %s (Debian's redis-server, started by this run on a loopback port with no persistence, stopped after) through the go-redis v9 client (RESP2), from one goroutine; "+
		"its HyperLogLog has 2^14 registers, like our default (standard error 0.81%% for both; the errors are single draws, not a mean). "+
		"items/s is wall time of the client (median of %d runs): on this 2-core machine client and server share the cores; server CPU µs/item is redis-server's own CPU time (INFO cpu) over the run, the cost Redis itself pays. "+
		"Ours: in process on one core (strings hashed with xxhash), and a distinct job fed NDJSON through Batch (what the HTTP handler does after reading a body). Machine-relative: compare within a column.%s",
		humanize(float64(rb.n)), len(rb.counts), rb.version, peersReps, rb.note)
	dt.Print()
}

// relErr is the relative error of est, in percent, as a cell.
func relErr(est, exact float64) cell { return num(100*(est-exact)/exact, "%+.2f%%") }

// pfaddRows adds Redis's rows to the distinct table: PFADD pipelined, in
// batches of redisBatch items, and one a round trip.
func (rb *redisBench) pfaddRows(dt *Table, oursRate float64) {
	rdb, ctx, n, items := rb.rdb, rb.ctx, rb.n, rb.items
	exact := float64(len(rb.counts))
	row := func(how string, r redisRun) {
		est, err := rdb.PFCount(ctx, "hll").Result()
		if err != nil {
			panic(err)
		}
		mem, _ := rdb.MemoryUsage(ctx, "hll", 0).Result()
		dt.Row("Redis "+rb.version, how, n, r.rate, num(r.rate/oursRate, "%.3g"), num(r.cpuUs, "%.2f"), humanize(float64(mem))+" B", float64(est), exact, relErr(float64(est), exact))
	}
	row("PFADD of 1 item, "+rb.pipelinedHow(), medianRun(peersReps, func() redisRun {
		return timeRedis(rdb, "hll", n, func() {
			pipelined(rdb, items, redisBatch, func(p redis.Pipeliner, it string) { p.PFAdd(ctx, "hll", it) })
		})
	}))
	row(fmt.Sprintf("PFADD of %s items a command", humanize(redisBatch)), medianRun(peersReps, func() redisRun {
		return timeRedis(rdb, "hll", n, func() {
			for lo := 0; lo < n; lo += redisBatch {
				args := make([]any, 0, redisBatch)
				for _, it := range items[lo:min(lo+redisBatch, n)] {
					args = append(args, it)
				}
				if err := rdb.PFAdd(ctx, "hll", args...).Err(); err != nil {
					panic(err)
				}
			}
		})
	}))
	unp := timeRedis(rdb, "hll", rb.single, func() {
		for _, it := range items[:rb.single] {
			if err := rdb.PFAdd(ctx, "hll", it).Err(); err != nil {
				panic(err)
			}
		}
	})
	dt.Row("Redis "+rb.version, "PFADD of 1 item, one command a round trip (first items only)", rb.single, unp.rate, num(unp.rate/oursRate, "%.3g"), num(unp.cpuUs, "%.2f"), "-", "-", "-", "-")
}

func (rb *redisBench) pipelinedHow() string {
	return fmt.Sprintf("pipelined, %s commands a round trip", humanize(redisBatch))
}

// hitCells are the top-k recall and precision of the reported items.
func (rb *redisBench) hitCells(reported []string) (cell, cell) {
	h := float64(topHits(reported, rb.counts, redisK))
	return num(h/redisK, "%.2f"), num(h/float64(max(len(reported), 1)), "%.2f")
}

// topKTable: ZINCRBY (exact counts) pipelined and one a round trip against
// synopses.HeavyHitters in process, a heavy_hitters job and a Go map.
func (rb *redisBench) topKTable() {
	n, items := rb.n, rb.items
	ht := newTable("peers", "Peers: Redis ZINCRBY (exact top k) against our heavy hitters", "", "system", "how", "items", "items/s", "÷ ours in process", "server CPU µs/item", "memory", "top-100 recall", "top-100 precision")
	var hh *synopses.HeavyHitters
	hhRate := median(peersReps, func() float64 {
		hh = synopses.NewHeavyHitters(2000)
		start := time.Now()
		for _, it := range items {
			hh.Update(it, 1)
		}
		return float64(n) / time.Since(start).Seconds()
	})
	rb.zincrbyRows(ht, hhRate)
	var keys []string
	for _, it := range hh.TopK(redisK) {
		keys = append(keys, it.Key)
	}
	r, p := rb.hitCells(keys)
	ht.Row("mlstream synopses.HeavyHitters (2,000 counters)", "in process, one core", n, hhRate, num(1, "%.3g"), "-", bytesOf(func() any {
		h := synopses.NewHeavyHitters(2000)
		for _, it := range items {
			h.Update(it, 1)
		}
		return h
	}), r, p)
	hrate, keys := rb.heavyHittersJob()
	r, p = rb.hitCells(keys)
	ht.Row("mlstream heavy_hitters job (2,000 counters a partition)", "engine, 2 partitions, JSON parsed", n, hrate, num(hrate/hhRate, "%.3g"), "-", "-", r, p)
	mapRate := median(peersReps, func() float64 {
		m := map[string]uint64{}
		start := time.Now()
		for _, it := range items {
			m[it]++
		}
		return float64(n) / time.Since(start).Seconds()
	})
	ht.Row("exact counts in a Go map (reference)", "in process, one core", n, mapRate, num(mapRate/hhRate, "%.3g"), "-", "-", num(1, "%.2f"), num(1, "%.2f"))
	ht.Note = fmt.Sprintf("The same %s Zipf(1.1) items as above, in the same order. Redis keeps an exact count per item in a sorted set (ZINCRBY key 1 item; checked: its top 100 scores equal the exact counts); ours is Space-Saving with 2,000 counters, approximate with bounds. "+
		"Recall: share of the true top 100 among the reported 100; precision: share of the reported that are truly in the top 100 (an item tied with the 100th counts as true). "+
		"Redis as in the table above (go-redis, one goroutine, median of %d runs; memory: MEMORY USAGE of the key); ours in process (memory: live heap of the summary) and through a heavy_hitters job fed through Batch.",
		humanize(float64(n)), peersReps)
	ht.Print()
}

// zincrbyRows adds Redis's rows to the top-k table: ZINCRBY pipelined,
// then ZREVRANGE (its scores checked against the exact counts), and
// ZINCRBY one a round trip.
func (rb *redisBench) zincrbyRows(ht *Table, hhRate float64) {
	rdb, ctx, n, items, counts := rb.rdb, rb.ctx, rb.n, rb.items, rb.counts
	zin := medianRun(peersReps, func() redisRun {
		return timeRedis(rdb, "top", n, func() {
			pipelined(rdb, items, redisBatch, func(p redis.Pipeliner, it string) { p.ZIncrBy(ctx, "top", 1, it) })
		})
	})
	start := time.Now()
	top, err := rdb.ZRevRange(ctx, "top", 0, redisK-1).Result()
	if err != nil {
		panic(err)
	}
	zrangeMs := float64(time.Since(start).Microseconds()) / 1000
	zmem, _ := rdb.MemoryUsage(ctx, "top", 0).Result()
	for _, it := range top {
		if s, _ := rdb.ZScore(ctx, "top", it).Result(); int(s) != counts[it] {
			panic(fmt.Sprintf("redis counts %s %v times, the stream has it %d times", it, s, counts[it]))
		}
	}
	r, p := rb.hitCells(top)
	ht.Row("Redis "+rb.version, "ZINCRBY, "+rb.pipelinedHow()+fmt.Sprintf("; then ZREVRANGE 0 99 (%.2f ms)", zrangeMs), n, zin.rate, num(zin.rate/hhRate, "%.3g"), num(zin.cpuUs, "%.2f"), humanize(float64(zmem))+" B", r, p)
	unp := timeRedis(rdb, "top", rb.single, func() {
		for _, it := range items[:rb.single] {
			if err := rdb.ZIncrBy(ctx, "top", 1, it).Err(); err != nil {
				panic(err)
			}
		}
	})
	ht.Row("Redis "+rb.version, "ZINCRBY, one command a round trip (first items only)", rb.single, unp.rate, num(unp.rate/hhRate, "%.3g"), num(unp.cpuUs, "%.2f"), "-", "-", "-")
}

// heavyHittersJob feeds the stream to a heavy_hitters job: its events/s
// and the keys of its top redisK.
func (rb *redisBench) heavyHittersJob() (float64, []string) {
	hspec := runtime.Spec{Name: "peers", Kind: "heavy_hitters", Input: "s", Params: map[string]any{"field": "item", "counters": 2000}}
	var keys []string
	hrate := median(peersReps, func() float64 {
		e, job, rate := feedEngine(chunk(hspec.Input, rb.body), rb.n, hspec, "")
		defer e.Close(context.Background())
		tk, err := heavyhitters.TopKOf(job, runtime.WindowAll, redisK)
		if err != nil {
			panic(err)
		}
		keys = keys[:0]
		for _, it := range tk.Items {
			keys = append(keys, it.Key)
		}
		return rate
	})
	return hrate, keys
}
