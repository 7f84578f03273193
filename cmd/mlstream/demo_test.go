package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mlstream/mlstream/client"
	"github.com/mlstream/mlstream/internal/gen"
)

// startDemoServer runs the service in-process with the demo's jobs and no
// data directory, and returns its URL (without the trailing slash).
func startDemoServer(t *testing.T) string {
	t.Helper()
	o := serveOptions(t, "--addr", "127.0.0.1:0", "--partitions", "2")
	o.extraSpecs = demoSpecs()
	return strings.TrimSuffix(serveInProcess(t, o).url, "/")
}

// newTestGenerator is a demo generator posting to the server at url.
func newTestGenerator(url string, src *gen.Demo, limit int, stateFile string) *demoGenerator {
	return &demoGenerator{src: src, client: poster{client: &http.Client{Timeout: 30 * time.Second}},
		streams: url + "/v1/streams/", rate: 10000, limit: limit, stateFile: stateFile, log: slog.New(slog.DiscardHandler)}
}

// The demo's join matches each purchase with the click it follows and
// nothing else: as many matches as purchases, every one 0 to 2 s after
// its click, and SUM is the amount the generator produced.
func TestDemoJoinMatchesEachPurchaseOnce(t *testing.T) {
	url := startDemoServer(t)
	c := clientOf(t, url)
	sub, err := c.Subscribe(t.Context(), client.SubscribeOptions{Jobs: []string{"conversions"}, Types: []string{client.TypeMatch}, WaitSubscribed: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	g := newTestGenerator(url, gen.NewDemo(gen.Config{Seed: 3}), 15000, "")
	g.run(t.Context())
	tot := g.src.Totals()
	if g.lost != 0 || tot.Events != 15000 || tot.Purchases < 1000 {
		t.Fatalf("generated %+v, lost %d", tot, g.lost)
	}

	var m *client.Matches
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if m, err = c.Matches(t.Context(), "conversions", client.WindowAll, 0); err != nil {
			t.Fatal(err)
		}
		if m.Seen >= uint64(tot.Events+tot.Purchases) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the join saw %d of %d events", m.Seen, tot.Events+tot.Purchases)
		}
	}
	e := m.Estimate
	t.Logf("%d clicks, %d purchases worth %d: %d matches, COUNT %.0f SUM %.0f", tot.Events, tot.Purchases, tot.Amount, m.Matches, e.Count.Estimate, e.Sum.Estimate)
	if m.Seen != uint64(tot.Events+tot.Purchases) || m.Late != 0 || m.Evicted != 0 || m.Matches != uint64(tot.Purchases) {
		t.Fatalf("join: seen %d, late %d, evicted %d, matches %d; want %d seen and %d matches",
			m.Seen, m.Late, m.Evicted, m.Matches, tot.Events+tot.Purchases, tot.Purchases)
	}
	if !e.Exact || e.Count.Estimate != float64(tot.Purchases) || e.Sum.Estimate != float64(tot.Amount) {
		t.Fatalf("estimate of all windows %+v, want COUNT %d and SUM %d", e, tot.Purchases, tot.Amount)
	}

	// Every match, from the feed: a distinct click, the purchase 0-2 s after it.
	clicks := map[string]bool{}
	var sum float64
	for len(clicks) < tot.Purchases {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		msg, err := sub.Next(ctx)
		cancel()
		if err != nil {
			t.Fatalf("after %d matches: %v", len(clicks), err)
		}
		mt, err := msg.Match()
		if err != nil {
			t.Fatal(err)
		}
		if d := mt.RightTS - mt.LeftTS; d < 0 || d > gen.PurchaseDelay || clicks[mt.Key] {
			t.Fatalf("match %+v: Δ %d ms, click matched before: %v", mt, d, clicks[mt.Key])
		}
		clicks[mt.Key] = true
		sum += mt.RightValue
	}
	if sum != float64(tot.Amount) {
		t.Fatalf("the matches' amounts add up to %.0f, the purchases' to %d", sum, tot.Amount)
	}
}

// The generator saves its position; restarted from it past the drift, it
// goes on after the drift, exactly where an uninterrupted one would be.
func TestDemoGeneratorResumesAfterTheDrift(t *testing.T) {
	url := startDemoServer(t)
	cfg := gen.Config{Seed: 5, DriftAfter: 2000}
	state := filepath.Join(t.TempDir(), demoStateFile)
	first := newTestGenerator(url, gen.NewDemo(cfg), 3000, state)
	first.run(t.Context())

	again := newTestGenerator(url, nil, 0, state)
	src := again.resume(cfg)
	if !src.Drifted() || src.Totals() != first.src.Totals() {
		t.Fatalf("resumed drifted=%v at %+v, stopped at %+v", src.Drifted(), src.Totals(), first.src.Totals())
	}
	uninterrupted := gen.NewDemo(cfg)
	for range 3000 {
		uninterrupted.Next(0, nil, nil)
	}
	for i := range 100 {
		_, a, _ := src.Next(0, nil, nil)
		_, b, _ := uninterrupted.Next(0, nil, nil)
		if !bytes.Equal(a, b) {
			t.Fatalf("event %d after the restart:\n%s\nwant\n%s", i, a, b)
		}
	}
	// A position saved for another seed is not used: the generator starts over.
	if other := again.resume(gen.Config{Seed: 6, DriftAfter: 2000}); other.Totals().Events != 0 || other.Drifted() {
		t.Fatalf("a position of seed 5 resumed seed 6 at %+v", other.Totals())
	}
}

// The real demo, stopped after its drift and started again on the same
// data directory, restores its model and resumes its generator past the
// drift: the two agree.
func TestDemoRestartKeepsTheGeneratorsPhase(t *testing.T) {
	data := t.TempDir()
	args := []string{"demo", "--addr", "127.0.0.1:0", "--data", data, "--rate", "5000", "--drift-after", "3000"}
	p := start(t, args...)
	url := p.url()
	// The generator saves the position after the last batch it posted
	// whole; the batch in flight at the stop (up to a second's events,
	// 5,000, after a stall) may have been taken all the same. Past 8,500
	// events counted, the saved position is past the drift (3,000).
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if j := getJob(t, url, demoJob, nil); j.Metrics != nil && j.Metrics.All.Count >= 8500 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the demo did not get past its drift")
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	p.wait()
	data0, err := os.ReadFile(filepath.Join(data, demoStateFile))
	if err != nil {
		t.Fatal(err)
	}
	var st gen.DemoState
	if err := json.Unmarshal(data0, &st); err != nil || !st.Drifted || st.Totals.Events <= 3000 {
		t.Fatalf("saved position %s: %v", data0, err)
	}

	p = start(t, args...)
	url = p.url()
	resumed := `msg="demo generator resumed" events=` + strconv.Itoa(st.Totals.Events) + " drifted=true"
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out := p.output()
		if strings.Contains(out, "Ctrl-C stops") { // the banner is out
			if !strings.Contains(out, resumed) || !strings.Contains(out, "which drifted after 3000 events") {
				t.Fatalf("the restarted demo does not resume after the drift (want %q):\n%s", resumed, out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no banner")
		}
	}
	if j := getJob(t, url, demoJob, nil); j.Metrics == nil || j.Metrics.All.Count < 3000 {
		t.Fatalf("the model was not restored: %+v", j.Metrics)
	}
}
