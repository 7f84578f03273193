package main

import (
	"bytes"
	"context"
	le "encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mlstream/mlstream/client"
	"github.com/mlstream/mlstream/internal/gen"
)

// ftView is the fault-tolerance part of GET /v1/jobs/{job}.
type ftView struct {
	Processed uint64
	Metrics   struct{ All struct{ Count int64 } }
	FT        struct {
		Mode            string
		Failures        int
		StateThresholds struct {
			Theta float64
			L     int
		} `json:"state_thresholds"`
		PartitionThresholds struct{ L, Gamma int } `json:"partition_thresholds"`
		Promise             struct{ Events int64 }
		Backups             struct{ Full, Delta int64 }
		Recovery            *struct {
			Clean, Within               bool
			Failures, Backups, Replayed int
			Lost                        int64
			Skipped                     []string
			Bound                       struct{ Events int64 }
		}
		Recoveries []struct{ Failures int }
	}
}

// postGen posts n generated events in requests of batch and returns the
// number accepted.
func postGen(t *testing.T, url string, g *gen.Generator, n, batch int) int {
	t.Helper()
	accepted := 0
	for sent := 0; sent < n; sent += batch {
		var body []byte
		for range min(batch, n-sent) {
			ev := g.Next()
			body = append(ev.AppendJSON(body), '\n')
		}
		accepted += postNDJSON(t, url, "mail", body)
	}
	return accepted
}

func kill9(t *testing.T, p *proc) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("kill -9 did not end the process")
	}
}

func ftConfig(t *testing.T, ft string) string {
	return writeConfig(t, fmt.Sprintf(`{"jobs":[{"name":"spam","kind":"logreg","input":"mail","partitions":2,"params":{"hash_bits":16},"ft":%s}]}`, ft))
}

// heldOutAccuracy asks the server to predict events it never saw and
// scores the answers against their labels.
func heldOutAccuracy(t *testing.T, url string, events []gen.Event) float64 {
	t.Helper()
	evs := make([]any, len(events))
	for i, ev := range events {
		evs[i] = json.RawMessage(ev.AppendJSON(nil))
	}
	out, err := clientOf(t, url).Predict(t.Context(), "spam", evs...)
	if err != nil {
		t.Fatalf("predict: %v", err)
	}
	if len(out.Predictions) != len(events) {
		t.Fatalf("predict: %d answers to %d events", len(out.Predictions), len(events))
	}
	right := 0
	for i, p := range out.Predictions {
		if (p.P > 0.5) == events[i].Label {
			right++
		}
	}
	return float64(right) / float64(len(events))
}

// Ten kill -9 crashes in approx mode: every recovery loses no more than
// its bound, the thresholds halve after each, the total stays within the
// promise, and the model ends within a point of a run without crashes.
func TestKill9ApproxLossStaysBounded(t *testing.T) {
	const (
		crashes = 10
		perRun  = 5000
		theta   = 1.0
	)
	dir := t.TempDir()
	cfg := ftConfig(t, `{"mode":"approx","max_divergence":1,"max_pending":2000,"max_unacked":1000}`)
	g := gen.New(gen.Config{Seed: 21})
	var stream [][]gen.Event
	var totalLost int64
	var promise int64
	accepted := 0
	var last *proc // the process started after the last crash
	for run := 0; run <= crashes; run++ {
		p := start(t, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", dir)
		last = p
		url := p.url()
		var v ftView
		getJob(t, url, "spam", &v)
		promise = v.FT.Promise.Events
		if run > 0 {
			rec := v.FT.Recovery
			if rec == nil || rec.Clean || rec.Failures != run {
				t.Fatalf("run %d: recovery %+v", run, rec)
			}
			if !rec.Within || rec.Lost > rec.Bound.Events {
				t.Fatalf("run %d: lost %d events, bound %d", run, rec.Lost, rec.Bound.Events)
			}
			totalLost += rec.Lost
			// Every recovery so far is in the history, oldest first.
			if h := v.FT.Recoveries; len(h) != run || h[run-1].Failures != run {
				t.Fatalf("run %d: recovery history %+v", run, h)
			}
			// θ = Θ/2 for the one state copy, halved once per failure.
			if want := theta / 2 / math.Pow(2, float64(run)); math.Abs(v.FT.StateThresholds.Theta-want) > 1e-12 || v.FT.Failures != run {
				t.Fatalf("run %d: theta %v, failures %d; want %v", run, v.FT.StateThresholds.Theta, v.FT.Failures, want)
			}
			t.Logf("crash %d: lost %d (bound %d), replayed %d, backups applied %d, l now %d",
				run, rec.Lost, rec.Bound.Events, rec.Replayed, rec.Backups, v.FT.PartitionThresholds.L)
		}
		if run == crashes {
			break
		}
		var events []gen.Event
		for range perRun {
			events = append(events, g.Next())
		}
		stream = append(stream, events)
		accepted += postEvents(t, url, events)
		kill9(t, p)
	}
	if totalLost > promise {
		t.Fatalf("%d events lost over %d crashes, promise %d", totalLost, crashes, promise)
	}
	var held []gen.Event
	for range 5000 {
		held = append(held, g.Next())
	}
	// Asked of the process running since the last crash: a second one on
	// the same directory would be refused.
	crashed := heldOutAccuracy(t, last.url(), held)

	// The same events, in the same order, without a crash.
	q := start(t, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", t.TempDir())
	for _, events := range stream {
		postEvents(t, q.url(), events)
	}
	var v ftView
	for getJob(t, q.url(), "spam", &v); v.Processed < uint64(accepted); getJob(t, q.url(), "spam", &v) {
		time.Sleep(10 * time.Millisecond)
	}
	clean := heldOutAccuracy(t, q.url(), held)
	t.Logf("%d events, %d lost in %d crashes (promise %d); held-out accuracy %.4f after crashes, %.4f without", accepted, totalLost, crashes, promise, crashed, clean)
	if math.Abs(crashed-clean) > 0.01 {
		t.Fatalf("accuracy after %d crashes %.4f, without %.4f", crashes, crashed, clean)
	}
}

// postEvents posts events in requests of 1,000 and returns how many were
// accepted.
func postEvents(t *testing.T, url string, events []gen.Event) int {
	t.Helper()
	accepted := 0
	for i := 0; i < len(events); i += 1000 {
		var body []byte
		for _, ev := range events[i:min(i+1000, len(events))] {
			body = append(ev.AppendJSON(body), '\n')
		}
		accepted += postNDJSON(t, url, "mail", body)
	}
	return accepted
}

// In exact mode every accepted event survives kill -9.
func TestKill9ExactLosesNothing(t *testing.T) {
	dir := t.TempDir()
	cfg := ftConfig(t, `{"mode":"exact"}`)
	g := gen.New(gen.Config{Seed: 22})
	accepted := 0
	for run := 0; run <= 3; run++ {
		p := start(t, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", dir)
		url := p.url()
		var v ftView
		getJob(t, url, "spam", &v)
		if run > 0 {
			if rec := v.FT.Recovery; rec == nil || rec.Lost != 0 || rec.Failures != run {
				t.Fatalf("run %d: recovery %+v", run, rec)
			}
			// Everything accepted so far is learned: from the backup or
			// replayed from the item log.
			deadline := time.Now().Add(20 * time.Second)
			for v.Metrics.All.Count != int64(accepted) {
				if time.Now().After(deadline) {
					t.Fatalf("run %d: learned %d of %d accepted events", run, v.Metrics.All.Count, accepted)
				}
				time.Sleep(10 * time.Millisecond)
				getJob(t, url, "spam", &v)
			}
		}
		if run == 3 {
			p.cmd.Process.Signal(syscall.SIGTERM)
			p.wait()
			break
		}
		accepted += postGen(t, url, g, 4000, 500)
		kill9(t, p)
	}
}

// Graceful shutdown loses nothing in any mode, and the restart after it
// counts no failure.
func TestGracefulShutdownLosesNothingInAnyMode(t *testing.T) {
	for _, mode := range []string{"none", "approx", "exact"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			cfg := ftConfig(t, fmt.Sprintf(`{"mode":%q}`, mode))
			p := start(t, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", dir)
			n := postGen(t, p.url(), gen.New(gen.Config{Seed: 23}), 6000, 1000)
			p.cmd.Process.Signal(syscall.SIGTERM)
			p.wait()
			q := start(t, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", dir)
			var v ftView
			getJob(t, q.url(), "spam", &v)
			if mode == "none" {
				if v.FT.Mode != "" || v.Metrics.All.Count != 0 {
					t.Fatalf("mode none restored something: %+v", v)
				}
				return
			}
			rec := v.FT.Recovery
			if rec == nil || !rec.Clean || rec.Lost != 0 || rec.Failures != 0 || v.Metrics.All.Count != int64(n) {
				t.Fatalf("after a graceful stop: learned %d of %d, recovery %+v", v.Metrics.All.Count, n, rec)
			}
		})
	}
}

// Damaged backup files are passed over: the previous good chain is used
// and the service starts.
func TestDamagedBackupsAreSurvived(t *testing.T) {
	dir := t.TempDir()
	cfg := ftConfig(t, `{"mode":"approx","max_divergence":0.5,"max_pending":20000,"compact_every":2}`)
	p := start(t, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", dir)
	postGen(t, p.url(), gen.New(gen.Config{Seed: 24}), 20000, 1000)
	kill9(t, p)
	// One file per chain (a full backup and its deltas, then an end mark,
	// then what is left of an older chain in a reused file); two are kept,
	// and a third may be there, empty or torn: kill -9 between the
	// creation of a new chain's file and the end of its first write.
	// Damage the two whose backups end with their mark (a third is damage
	// of its own).
	all, _ := filepath.Glob(filepath.Join(dir, "spam", "global", "chain-*.bin"))
	sort.Strings(all)
	var files []string
	var ends []int
	for _, f := range all {
		data, _ := os.ReadFile(f)
		if end := chainEnd(f, data); end > 0 {
			files, ends = append(files, f), append(ends, end)
		}
	}
	if len(files) < 2 {
		t.Fatalf("only %d backup chains with content: %v", len(files), all)
	}
	// Flip a byte in the newest chain's backups, tear the last backup of
	// the one before.
	newest, before := files[len(files)-1], files[len(files)-2]
	data, _ := os.ReadFile(newest)
	data[ends[len(ends)-1]/2] ^= 0xff
	os.WriteFile(newest, data, 0o644)
	data, _ = os.ReadFile(before)
	os.WriteFile(before, data[:ends[len(ends)-2]-3], 0o644)
	// And tear the tail of an item log.
	logs, _ := filepath.Glob(filepath.Join(dir, "spam", "*", "items-*.log"))
	for _, l := range logs {
		if fi, err := os.Stat(l); err == nil && fi.Size() > 10 {
			os.Truncate(l, fi.Size()-7)
		}
	}
	q := start(t, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", dir)
	var v ftView
	getJob(t, q.url(), "spam", &v)
	rec := v.FT.Recovery
	if rec == nil || len(rec.Skipped) == 0 || rec.Backups == 0 {
		t.Fatalf("recovery %+v", rec)
	}
	t.Logf("skipped: %v; restored from %d backups, lost %d", rec.Skipped, rec.Backups, rec.Lost)
	checkReady(t, q.url())
	postGen(t, q.url(), gen.New(gen.Config{Seed: 25}), 1000, 500)
}

// chainEnd is where the backups of the chain file at path end (data is its
// content): at the chain's end mark, "MLSE" and the index in its name as a
// little-endian uint64 (package ft); 0 without one.
func chainEnd(path string, data []byte) int {
	index, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "chain-"), ".bin"), 10, 64)
	if err != nil {
		return 0
	}
	mark := le.LittleEndian.AppendUint64([]byte("MLSE"), index)
	return max(bytes.Index(data, mark), 0)
}

// Thresholds halved by a crash reset when the window ends.
func TestThresholdsResetAtWindowEnd(t *testing.T) {
	dir := t.TempDir()
	cfg := ftConfig(t, `{"mode":"approx","max_divergence":1,"window":3000}`)
	p := start(t, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", dir)
	g := gen.New(gen.Config{Seed: 26})
	postGen(t, p.url(), g, 1000, 500)
	kill9(t, p)
	q := start(t, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", dir)
	var v ftView
	getJob(t, q.url(), "spam", &v)
	if v.FT.Failures != 1 || v.FT.StateThresholds.Theta != 0.25 {
		t.Fatalf("after a crash: failures %d theta %v", v.FT.Failures, v.FT.StateThresholds.Theta)
	}
	postGen(t, q.url(), g, 4000, 500)
	deadline := time.Now().Add(20 * time.Second)
	for getJob(t, q.url(), "spam", &v); v.FT.Failures != 0; getJob(t, q.url(), "spam", &v) {
		if time.Now().After(deadline) {
			t.Fatalf("thresholds not reset: failures %d, theta %v", v.FT.Failures, v.FT.StateThresholds.Theta)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if v.FT.StateThresholds.Theta != 0.5 {
		t.Fatalf("theta %v after the reset", v.FT.StateThresholds.Theta)
	}
}

// After kill -9 crashes, the heavy hitters' bounds still contain every true
// count (they are widened by what may have been lost), and the distinct
// count's bounds contain the true cardinality.
func TestKill9SynopsesBoundsHold(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, `{"jobs":[
		{"name":"top","kind":"heavy_hitters","input":"clicks","partitions":2,"params":{"field":"item","k":20,"counters":200},"ft":{"max_pending":100000}},
		{"name":"users","kind":"distinct","input":"clicks","partitions":2,"params":{"field":"user","precision":12},"ft":{"max_pending":100000}}]}`)
	r := rand.New(rand.NewPCG(3, 4))
	z := rand.NewZipf(r, 1.1, 1, 9999)
	counts, users := map[string]int{}, map[string]bool{}
	for run := 0; run <= 3; run++ {
		p := start(t, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", dir)
		url := p.url()
		if run > 0 {
			top, err := clientOf(t, url).TopK(t.Context(), "top", 20, client.WindowAll)
			if err != nil {
				t.Fatal(err)
			}
			var v ftView
			getJob(t, url, "top", &v)
			t.Logf("run %d: heavy hitters lost %d events (bound %d); %d items listed, max_untracked %d",
				run, v.FT.Recovery.Lost, v.FT.Recovery.Bound.Events, len(top.Items), top.MaxUntracked)
			for _, it := range top.Items {
				if c := uint64(counts[it.Key]); c > it.Upper {
					t.Fatalf("run %d: %s counted %d, upper bound %d", run, it.Key, c, it.Upper)
				}
			}
			// No true heavy hitter is missed: every item heavier than the
			// bound of an untracked one is listed.
			listed := map[string]bool{}
			for _, it := range top.Items {
				listed[it.Key] = true
			}
			for k, c := range counts {
				if uint64(c) > top.MaxUntracked && !listed[k] && len(top.Items) < 20 {
					t.Fatalf("run %d: %s (%d) above max_untracked %d but not listed", run, k, c, top.MaxUntracked)
				}
			}
			d, err := clientOf(t, url).Distinct(t.Context(), "users", client.WindowAll)
			if err != nil {
				t.Fatal(err)
			}
			if n := uint64(len(users)); d.Upper < n {
				t.Fatalf("run %d: %d users, distinct upper bound %d (estimate %d)", run, n, d.Upper, d.Estimate)
			}
		}
		if run == 3 {
			break
		}
		var body []byte
		for range 20000 {
			item, user := fmt.Sprintf("i%d", z.Uint64()), fmt.Sprintf("u%d", r.IntN(5000))
			counts[item]++
			users[user] = true
			body = fmt.Appendf(body, "{\"user\":%q,\"item\":%q}\n", user, item)
		}
		postNDJSON(t, url, "clicks", body)
		kill9(t, p)
	}
}

// A second process on the data directory of a running one refuses to start
// and names the holder's PID; once the holder is killed with -9 (no stale
// lock), a new process starts on the directory.
func TestSecondProcessOnDataDirIsRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := ftConfig(t, `{"mode":"approx"}`)
	p := start(t, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", dir)
	p.url()
	q := start(t, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", dir)
	select {
	case err := <-q.done:
		if err == nil {
			t.Fatal("the second process exited 0")
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the second process did not exit")
	}
	if want := fmt.Sprintf("in use by process %d", p.cmd.Process.Pid); !strings.Contains(q.output(), want) {
		t.Fatalf("the refusal does not say %q:\n%s", want, q.output())
	}
	kill9(t, p)
	r := start(t, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", dir)
	r.url()
}

// In mode exact, kill -9 while requests spanning every partition are being
// written: after each restart every acknowledged request is counted in
// full and none in part (a request cut between its partitions' parts is
// dropped whole), and nothing accepted is lost.
func TestKill9ExactRequestsAreWholeOrAbsent(t *testing.T) {
	const perReq = 16
	dir := t.TempDir()
	cfg := writeConfig(t, `{"jobs":[{"name":"top","kind":"heavy_hitters","input":"clicks","partitions":4,
		"params":{"field":"item","k":4000,"counters":4000},"ft":{"mode":"exact"}}]}`)
	var mu sync.Mutex
	acked := map[string]bool{}
	for run := 0; run <= 3; run++ {
		p := start(t, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", dir)
		url := p.url()
		if run > 0 {
			checkWholeRequests(t, url, run, perReq, acked)
		}
		if run == 3 {
			break
		}
		// Four senders post until the kill; each request is one item, its
		// events keyed to spread over the partitions.
		c := clientOf(t, url)
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					id := fmt.Sprintf("r%d-%d-%d", run, w, i)
					var body []byte
					for e := range perReq {
						body = fmt.Appendf(body, "{\"key\":\"%s-%d\",\"item\":%q}\n", id, e, id)
					}
					_, err := c.PostEvents(context.Background(), "clicks", body)
					var refused *client.Error
					if err != nil && !errors.As(err, &refused) {
						return // killed
					}
					if err == nil {
						mu.Lock()
						acked[id] = true
						mu.Unlock()
					}
				}
			})
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			mu.Lock()
			n := len(acked)
			mu.Unlock()
			if n >= 250*(run+1) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %d: only %d requests acknowledged", run, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
		kill9(t, p)
		wg.Wait()
	}
}

// checkWholeRequests asserts that every item (request) is counted 0 or
// perReq times, every acknowledged one perReq times, and that the recovery
// lost nothing.
func checkWholeRequests(t *testing.T, url string, run, perReq int, acked map[string]bool) {
	t.Helper()
	var v struct {
		FT struct {
			Recovery *struct {
				Lost, Unacknowledged int64
				Skipped              []string
			}
		}
	}
	getJob(t, url, "top", &v)
	if rec := v.FT.Recovery; rec == nil || rec.Lost != 0 {
		t.Fatalf("run %d: recovery %+v", run, rec)
	}
	// With more counters than items, nothing is evicted: the lower bound
	// is the count (the upper one is widened by what a crash might have
	// lost, which is nothing here).
	top, err := clientOf(t, url).TopK(t.Context(), "top", 4000, client.WindowAll)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, it := range top.Items {
		counts[it.Key] = it.Lower
		if it.Lower != uint64(perReq) {
			t.Fatalf("run %d: request %s counted %d times, want %d or none", run, it.Key, it.Lower, perReq)
		}
	}
	for id := range acked {
		if counts[id] != uint64(perReq) {
			t.Fatalf("run %d: acknowledged request %s counted %d times", run, id, counts[id])
		}
	}
	t.Logf("run %d: %d requests acknowledged, %d counted whole, %d events unacknowledged at the crash",
		run, len(acked), len(counts), v.FT.Recovery.Unacknowledged)
}

// flipByte flips a byte in the middle of a file; truncateTo cuts it.
func flipByte(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		t.Fatalf("%s: %v, %d bytes", path, err, len(b))
	}
	b[len(b)/2] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func truncateTo(t *testing.T, path string, n int64) {
	t.Helper()
	if err := os.Truncate(path, n); err != nil {
		t.Fatal(err)
	}
}

// afterDamage checks a service started on a damaged data directory: it is
// ready and takes events, learns them, and its recovery reports the damage
// (each of want in Skipped) and a loss that is not negative.
func afterDamage(t *testing.T, p *proc, want ...string) {
	t.Helper()
	url := p.url()
	var v struct {
		Metrics struct{ All struct{ Count int64 } }
		FT      struct {
			Recovery *struct {
				Clean    bool
				Failures int
				Lost     int64
				Skipped  []string
			}
		}
	}
	getJob(t, url, "spam", &v)
	rec := v.FT.Recovery
	if rec == nil || rec.Lost < 0 || rec.Clean {
		t.Fatalf("recovery %+v", rec)
	}
	skipped := strings.Join(rec.Skipped, "; ")
	for _, w := range want {
		if !strings.Contains(skipped, w) {
			t.Fatalf("the recovery does not report the damaged %s: skipped %q", w, skipped)
		}
	}
	checkReady(t, url)
	before := v.Metrics.All.Count
	n := postGen(t, url, gen.New(gen.Config{Seed: 27}), 1000, 500)
	deadline := time.Now().Add(20 * time.Second)
	for getJob(t, url, "spam", &v); v.Metrics.All.Count < before+int64(n); getJob(t, url, "spam", &v) {
		if time.Now().After(deadline) {
			t.Fatalf("learned %d events after the restart, %d posted", v.Metrics.All.Count-before, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Damaged metadata files (sequence marks flipped and emptied, the recovery
// history truncated, the clean-shutdown marker flipped): the service
// starts, is ready, takes and learns events, and reports the damage.
func TestDamagedMetadataIsSurvivedByTheService(t *testing.T) {
	dir := t.TempDir()
	cfg := ftConfig(t, `{"mode":"approx"}`)
	g := gen.New(gen.Config{Seed: 28})
	for range 2 { // two crashes: the second start writes a recovery history
		p := start(t, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", dir)
		postGen(t, p.url(), g, 2000, 500)
		kill9(t, p)
	}
	flipByte(t, filepath.Join(dir, "spam", "0", "seq"))
	truncateTo(t, filepath.Join(dir, "spam", "1", "seq"), 0)
	hist := filepath.Join(dir, "spam", "recoveries.json")
	fi, err := os.Stat(hist)
	if err != nil {
		t.Fatal(err)
	}
	truncateTo(t, hist, fi.Size()-5)
	p := start(t, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", dir)
	afterDamage(t, p, "spam/0/seq", "spam/1/seq", "recovery history")

	p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait()
	flipByte(t, filepath.Join(dir, "spam", "clean"))
	q := start(t, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", dir)
	afterDamage(t, q, "clean")
}
