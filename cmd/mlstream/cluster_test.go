package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mlstream/mlstream/client"
	"github.com/mlstream/mlstream/cluster"
	"github.com/mlstream/mlstream/internal/gen"
	"github.com/mlstream/mlstream/internal/testaddr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// testCluster is n nodes of the binary on loopback, each with its own
// data directory, clustered by the embedded NATS servers' routes.
type testCluster struct {
	t      *testing.T
	nodes  []*proc
	args   [][]string
	routes []string
	// clients are the embedded NATS servers' client addresses, for a
	// test to read the streams when it fails (as the admin user of
	// secret).
	clients []string
	secret  []byte
}

const clusterTTL = "2s"

func startTestCluster(t *testing.T, n int, extra ...string) *testCluster {
	t.Helper()
	c := &testCluster{t: t, secret: []byte("the test cluster's secret")}
	secretFile := filepath.Join(t.TempDir(), "cluster.secret")
	if err := os.WriteFile(secretFile, c.secret, 0o600); err != nil {
		t.Fatal(err)
	}
	for range n {
		c.routes = append(c.routes, testaddr.Free(t))
	}
	peers := strings.Join(c.routes, ",")
	for i := range n {
		c.clients = append(c.clients, testaddr.Free(t))
		args := []string{"serve", "--addr", testaddr.Free(t), "--data", t.TempDir(), "--node", nodeName(i),
			"--cluster", c.routes[i], "--peers", peers, "--lease-ttl", clusterTTL, "--partitions", "6",
			"--cluster-secret", secretFile, "--nats-listen", c.clients[i]}
		c.args = append(c.args, append(args, extra...))
	}
	// Started together: a clustered node has no JetStream until a
	// majority of its peers is up.
	for i := range n {
		c.nodes = append(c.nodes, start(t, c.args[i]...))
	}
	for _, p := range c.nodes {
		p.url()
	}
	return c
}

func nodeName(i int) string { return fmt.Sprintf("n%d", i+1) }

func (c *testCluster) url(i int) string { return c.nodes[i].url() }

// restart starts node i again with its data directory.
func (c *testCluster) restart(i int) {
	c.nodes[i] = start(c.t, c.args[i]...)
	c.nodes[i].url()
}

// status is GET /v1/cluster of node i.
func (c *testCluster) status(i int) cluster.Status {
	c.t.Helper()
	return clusterStatusAt(c.t, c.url(i))
}

// clusterStatusAt is GET /v1/cluster of the node at url.
func clusterStatusAt(t *testing.T, url string) cluster.Status {
	t.Helper()
	var s cluster.Status
	getJSON(t, url+"/v1/cluster", &s)
	return s
}

// owners counts, as node i sees them, the partitions of job each node
// owns ("" for none).
func (c *testCluster) owners(i int, job string) map[string]int {
	out := map[string]int{}
	for _, j := range c.status(i).Jobs {
		if j.Job == job {
			for _, p := range j.Partitions {
				out[p.Node]++
			}
		}
	}
	return out
}

// waitOwned waits until node i sees every partition of job owned by one
// of the nodes in want (and each of them owning at least one).
func (c *testCluster) waitOwned(i int, job string, within time.Duration, want ...string) map[string]int {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for {
		o := c.owners(i, job)
		ok := o[""] == 0 && len(o) == len(want)
		for _, w := range want {
			ok = ok && o[w] > 0
		}
		if ok {
			return o
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("job %s: owners %v, want all partitions over %v", job, o, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func putJobAt(t *testing.T, url, spec string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, url+"/v1/jobs/"+jobNameOf(t, spec), strings.NewReader(spec))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		var e map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&e)
		t.Fatalf("PUT job: %d %v", resp.StatusCode, e)
	}
}

func jobNameOf(t *testing.T, spec string) string {
	var s struct{ Name string }
	if err := json.Unmarshal([]byte(spec), &s); err != nil || s.Name == "" {
		t.Fatalf("spec without a name: %s", spec)
	}
	return s.Name
}

// clickBody is n events {"item": "i<k>"} for a heavy-hitters job, from
// offset on.
func clickBody(offset, n int) []byte { return clickFields(offset, n, "item") }

// clickFields is n click events from offset on with the fields named
// (event k: item "i<k%97>", user "u<k%1013>"): a stream takes only the
// fields its jobs read.
func clickFields(offset, n int, fields ...string) []byte {
	var b []byte
	for k := offset; k < offset+n; k++ {
		b = append(b, '{')
		for i, f := range fields {
			if i > 0 {
				b = append(b, ',')
			}
			switch f {
			case "item":
				b = fmt.Appendf(b, `"item":"i%d"`, k%97)
			case "user":
				b = fmt.Appendf(b, `"user":"u%d"`, k%1013)
			}
		}
		b = append(b, "}\n"...)
	}
	return b
}

// retryingPost posts body to node url with the client's retries (429,
// 503, connection errors: a node being killed), every attempt carrying
// the same Idempotency-Key; it reports whether the events were accepted.
func retryingPost(ctx context.Context, url, stream string, body []byte) (bool, error) {
	c, err := client.New(url, client.Config{Retry: client.RetryPolicy{MaxRetries: 1000, GiveUpAfter: time.Minute,
		Backoff: 20 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}})
	if err != nil {
		return false, err
	}
	if _, err := c.PostEvents(ctx, stream, body); err != nil {
		return false, err
	}
	return true, nil
}

// postRetrying posts batches from..to-1 round robin over the nodes with
// retries (the cluster may answer 429 while partitions move) and returns
// the events accepted.
func (c *testCluster) postRetrying(from, to int) int {
	c.t.Helper()
	sent := 0
	for i := from; i < to; i++ {
		sent += mustPostRetrying(c.t, c.url(i%len(c.nodes)), "clicks", clickBody(i*100, 100))
	}
	return sent
}

// mustPostRetrying posts body with retries (a cluster answers 429 while
// its streams settle or partitions move) and returns the events in it.
func mustPostRetrying(t *testing.T, url, stream string, body []byte) int {
	t.Helper()
	if ok, err := retryingPost(t.Context(), url, stream, body); !ok {
		t.Fatalf("posting to %s on %s: %v", stream, url, err)
	}
	return bytes.Count(body, []byte("\n"))
}

// topTotal is the heavy-hitters job's total count as node url answers it.
func topTotal(t *testing.T, url, job string) uint64 {
	t.Helper()
	tk, err := clientOf(t, url).TopK(t.Context(), job, 5, "")
	if err != nil {
		t.Fatalf("topk on %s: %v", url, err)
	}
	return tk.Total
}

// waitTotal waits until node url counts want events in job.
func waitTotal(t *testing.T, url, job string, want uint64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := topTotal(t, url, job)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			var st struct {
				Partitions []struct {
					Partition int    `json:"partition"`
					Processed uint64 `json:"processed"`
					LastSeq   uint64 `json:"last_seq"`
				}
			}
			getJob(t, url, job, &st)
			t.Fatalf("%s on %s counts %d events, want %d (every acknowledged event); partitions here: %+v; cluster view: %s",
				job, url, got, want, st.Partitions, clusterJobsText(url))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// clusterJobsText is a node's view of the cluster's jobs and counters,
// for a failure's message.
func clusterJobsText(url string) string {
	resp, err := http.Get(url + "/v1/cluster")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var st struct {
		Jobs   json.RawMessage `json:"jobs"`
		Counts json.RawMessage `json:"counts"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return err.Error()
	}
	return string(st.Jobs) + " " + string(st.Counts)
}

const spamSpec = `{"name":"spam","kind":"logreg","input":"mail","partitions":6,"params":{"hash_bits":16}}`

const hhSpec = `{"name":"top","kind":"heavy_hitters","input":"clicks","partitions":6,"params":{"field":"item","k":10,"counters":500},"ft":{"mode":"approx"}}`

// Three nodes take a logreg job, a heavy-hitters job and a join: a job
// PUT on one node runs on all, events posted to any node are counted
// once, partitions spread over the nodes, and queries and predictions
// answer on every node.
func TestClusterRunsEveryKind(t *testing.T) {
	c := startTestCluster(t, 3)
	putJobAt(t, c.url(0), hhSpec)
	putJobAt(t, c.url(1), spamSpec)
	putJobAt(t, c.url(2), `{"name":"pairs","kind":"join","left":"clicks","right":"views","partitions":3,"params":{"on":"user","within":"1m"}}`)
	for i := range 3 {
		for _, job := range []string{"top", "spam", "pairs"} {
			getJob(t, c.url(i), job, nil)
		}
	}
	owners := c.waitOwned(0, "top", 30*time.Second, "n1", "n2", "n3")
	for n, k := range owners {
		if k != 2 {
			t.Errorf("node %s owns %d of 6 partitions of top, want 2 each: %v", n, k, owners)
		}
	}
	// A cluster may answer 429 while its streams settle (clients retry
	// with the same Idempotency-Key, as the Go client does).
	sent := 0
	for i := range 30 {
		sent += mustPostRetrying(t, c.url(i%3), "clicks", clickFields(i*200, 200, "item", "user"))
	}
	for i := range 3 {
		waitTotal(t, c.url(i), "top", uint64(sent), 30*time.Second)
	}
	// The same events into a single-node server: the cluster's model must
	// predict as well (within noise: partitions merge in another order).
	single := start(t, "serve", "--addr", "127.0.0.1:0", "--data", "", "--partitions", "6")
	putJobAt(t, single.url(), spamSpec)
	g := gen.New(gen.Config{Seed: 5})
	var train []gen.Event
	// Enough events for both to converge: the cluster's partitions learn
	// apart between deltas, and a short run leaves it behind by chance.
	for i := range 30 {
		events := make([]gen.Event, 500)
		for k := range events {
			events[k] = g.Next()
		}
		train = append(train, events...)
		var body []byte
		for _, ev := range events {
			body = append(ev.AppendJSON(body), '\n')
		}
		mustPostRetrying(t, c.url(i%3), "mail", body)
	}
	postEvents(t, single.url(), train)
	test := make([]gen.Event, 1000) // the same true model: the generator goes on
	for k := range test {
		test[k] = g.Next()
	}
	for _, u := range []string{c.url(0), c.url(1), c.url(2), single.url()} {
		waitUntil(t, 60*time.Second, "the model holding all 15,000 events", func() bool {
			var st struct{ Model struct{ Updates int64 } }
			getJob(t, u, "spam", &st)
			return st.Model.Updates >= 15000
		})
	}
	want := heldOutAccuracy(t, single.url(), test)
	for i := range 3 {
		acc := heldOutAccuracy(t, c.url(i), test)
		t.Logf("node %d predicts with accuracy %.3f; single-node %.3f", i+1, acc, want)
		if acc < want-0.05 {
			t.Errorf("node %d predicts with accuracy %.3f, single-node %.3f", i+1, acc, want)
		}
	}
}

// Kill -9 of one node of three while events stream in: its partitions
// are taken over by the survivors, queries on the survivors answer all
// along, and every acknowledged event is counted once in the end.
func TestClusterKill9LosesNothingAcknowledged(t *testing.T) {
	c := startTestCluster(t, 3)
	putJobAt(t, c.url(0), hhSpec)
	c.waitOwned(0, "top", 30*time.Second, "n1", "n2", "n3")

	probe := startProbe(t, []string{c.url(0), c.url(1)}, "top")
	var acked atomic.Int64
	// Senders stop between requests (a request cancelled in flight may
	// be stored without its 202 reaching the count).
	var stop atomic.Bool
	cancel := func() { stop.Store(true) }
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				ok, err := retryingPost(t.Context(), c.url(w), "clicks", clickBody(i*100, 100))
				if ok {
					acked.Add(100)
				} else {
					t.Errorf("a request to a surviving node failed for good: %v", err)
					return
				}
			}
		}()
	}
	waitUntil(t, 30*time.Second, "events flowing", func() bool { return acked.Load() > 2000 })
	kill9(t, c.nodes[2])
	killed := time.Now()
	c.waitOwned(0, "top", 30*time.Second, "n1", "n2")
	t.Logf("partitions of n3 serving again on n1 and n2 %s after kill -9", time.Since(killed).Round(time.Millisecond))
	waitUntil(t, 30*time.Second, "more events after the kill", func() bool { return acked.Load() > 8000 })
	cancel()
	wg.Wait()
	gaps := probe.stop()
	waitTotal(t, c.url(0), "top", uint64(acked.Load()), 60*time.Second)
	waitTotal(t, c.url(1), "top", uint64(acked.Load()), 60*time.Second)
	if gaps.failures > 0 {
		t.Errorf("queries on the survivors failed %d times during the failover; longest gap %s", gaps.failures, gaps.longest)
	}
	t.Logf("longest gap of the 10 Hz query probe on the survivors: %s", gaps.longest)
}

// A node stopped (SIGSTOP) past its lease loses its partitions; when it
// resumes, it writes nothing over the new owners' state: the counts stay
// exact.
func TestClusterPausedNodeIsFencedOff(t *testing.T) {
	c := startTestCluster(t, 3)
	putJobAt(t, c.url(0), hhSpec)
	c.waitOwned(0, "top", 30*time.Second, "n1", "n2", "n3")
	sent := c.postRetrying(0, 10)
	waitTotal(t, c.url(0), "top", uint64(sent), 30*time.Second)
	paused := c.nodes[2]
	if err := paused.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = paused.cmd.Process.Signal(syscall.SIGCONT) }()
	c.waitOwned(0, "top", 30*time.Second, "n1", "n2")
	for i := 10; i < 20; i++ {
		ok, err := retryingPost(t.Context(), c.url(i%2), "clicks", clickBody(i*100, 100))
		if !ok {
			t.Fatal(err)
		}
		sent += 100
	}
	waitTotal(t, c.url(0), "top", uint64(sent), 30*time.Second)
	if err := paused.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// The woken node finds its leases gone and rejoins; whatever it
	// still had in hand must not overwrite the others' state.
	c.waitOwned(0, "top", 30*time.Second, "n1", "n2", "n3")
	sent += c.postRetrying(20, 30)
	for i := range 3 {
		waitTotal(t, c.url(i), "top", uint64(sent), 30*time.Second)
	}
}

// A node killed and restarted with its data directory rejoins and takes
// partitions back; nothing acknowledged is lost on the way.
func TestClusterRestartedNodeRejoins(t *testing.T) {
	c := startTestCluster(t, 3)
	putJobAt(t, c.url(0), hhSpec)
	c.waitOwned(0, "top", 30*time.Second, "n1", "n2", "n3")
	sent := c.postRetrying(0, 10)
	kill9(t, c.nodes[2])
	c.waitOwned(0, "top", 30*time.Second, "n1", "n2")
	c.restart(2)
	c.waitOwned(0, "top", 60*time.Second, "n1", "n2", "n3")
	sent += c.postRetrying(10, 20)
	for i := range 3 {
		waitTotal(t, c.url(i), "top", uint64(sent), 30*time.Second)
	}
}

// Two nodes use an external NATS server (built from the module we
// embed) instead of the embedded one.
func TestClusterOnExternalNATS(t *testing.T) {
	url, nodes := startExternalPair(t)
	u0, u1 := nodes[0].url(), nodes[1].url()
	sent := mustPostRetrying(t, u1, "clicks", clickBody(0, 500)) + mustPostRetrying(t, u0, "clicks", clickBody(500, 500))
	waitTotal(t, u0, "top", uint64(sent), 30*time.Second)
	waitTotal(t, u1, "top", uint64(sent), 30*time.Second)
	t.Run("sources", func(t *testing.T) { checkSources(t, url, u0, u1) })
}

// startExternalPair starts an external NATS server and two nodes on it,
// and job top (hhSpec, 4 partitions) on both; it returns the server's URL.
func startExternalPair(t *testing.T) (string, []*proc) {
	t.Helper()
	return startExternalPairWith(t, strings.Replace(hhSpec, `"partitions":6`, `"partitions":4`, 1))
}

// startExternalPairWith is startExternalPair with the job of spec.
func startExternalPairWith(t *testing.T, spec string) (string, []*proc) {
	t.Helper()
	url := startNATSServer(t)
	var nodes []*proc
	for i := range 2 {
		nodes = append(nodes, start(t, "serve", "--addr", testaddr.Free(t), "--data", t.TempDir(), "--node", nodeName(i),
			"--nats", url, "--lease-ttl", clusterTTL, "--partitions", "4"))
	}
	putJobAt(t, nodes[0].url(), spec)
	getJob(t, nodes[1].url(), jobNameOf(t, spec), nil)
	return url, nodes
}

// jetStreamAt connects to the NATS server at url (closed at the test's end).
func jetStreamAt(t *testing.T, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// checkSources: jobs read events that another system publishes to a
// JetStream stream (at least once) and to a core NATS subject, including
// a malformed message, which is refused and counted, not stuck.
func checkSources(t *testing.T, natsURL, u0, u1 string) {
	nc, js := jetStreamAt(t, natsURL)
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "SHOP", Subjects: []string{"shop.>"}}); err != nil {
		t.Fatal(err)
	}
	putJobAt(t, u0, `{"name":"shop","kind":"heavy_hitters","input":"shop-clicks","partitions":4,"params":{"field":"item"},"source":{"stream":"SHOP","subject":"shop.clicks"}}`)
	putJobAt(t, u1, `{"name":"core","kind":"heavy_hitters","input":"core-clicks","partitions":4,"params":{"field":"item"},"source":{"subject":"core.clicks"}}`)
	for i := range 20 {
		if _, err := js.Publish(t.Context(), "shop.clicks", clickBody(i*50, 50)); err != nil {
			t.Fatal(err)
		}
		if i == 3 {
			if _, err := js.Publish(t.Context(), "shop.clicks", []byte(`{"item": broken`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 10 {
		if err := nc.Publish("core.clicks", clickBody(i*50, 50)); err != nil {
			t.Fatal(err)
		}
	}
	_ = nc.Flush()
	for _, u := range []string{u0, u1} {
		waitTotal(t, u, "shop", 1000, 30*time.Second)
		waitTotal(t, u, "core", 500, 30*time.Second)
	}
}

// startNATSServer builds nats-server from the module and runs it with
// JetStream on a free port; it returns its URL.
func startNATSServer(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "nats-server")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		t.Skipf("cannot build nats-server: %v\n%s", err, out)
	}
	addr := testaddr.Free(t)
	_, port, _ := strings.Cut(addr, ":")
	cmd := exec.Command(bin, "-js", "-sd", filepath.Join(dir, "store"), "-a", "127.0.0.1", "-p", port)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return "nats://" + addr
}

func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// probe queries a job on some nodes ten times a second and measures the
// longest time without an answer.
type probe struct {
	cancel func()
	done   chan gapStats
}

type gapStats struct {
	failures int
	longest  time.Duration
}

func startProbe(t *testing.T, urls []string, job string) *probe {
	ctx, cancel := context.WithCancel(context.Background())
	p := &probe{cancel: cancel, done: make(chan gapStats, 1)}
	go func() {
		var g gapStats
		last := time.Now()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				p.done <- g
				return
			case <-tick.C:
			}
			for _, u := range urls {
				c, _ := client.New(u, client.Config{Retry: client.RetryPolicy{MaxRetries: -1}, RequestTimeout: time.Second})
				if _, err := c.TopK(ctx, job, 5, ""); err != nil {
					if ctx.Err() == nil {
						g.failures++
					}
					continue
				}
				now := time.Now()
				g.longest = max(g.longest, now.Sub(last))
				last = now
			}
		}
	}()
	t.Cleanup(cancel)
	return p
}

func (p *probe) stop() gapStats {
	p.cancel()
	return <-p.done
}

// A bsp logreg job on three nodes: partitions wait for each other across
// nodes (as their deltas report their rounds). One node stops for a
// moment (SIGSTOP, maybe past its leases) in mid-stream: nothing
// deadlocks, and every node ends on the same model version holding
// every event (a delta refused as fenced once stopped the newer run of
// the partition that took over, and the job stalled).
func TestClusterBSPAcrossNodes(t *testing.T) {
	c := startTestCluster(t, 3)
	putJobAt(t, c.url(0), `{"name":"sync","kind":"logreg","input":"mail","partitions":6,"params":{"hash_bits":16},"sync":{"consistency":"bsp"}}`)
	c.waitOwned(0, "sync", 30*time.Second, "n1", "n2", "n3")
	g := gen.New(gen.Config{Seed: 7})
	const batches, per = 40, 500
	slow := c.nodes[2]
	for i := range batches {
		var body []byte
		for range per {
			ev := g.Next()
			body = append(ev.AppendJSON(body), '\n')
		}
		// n3 stops for a moment in the middle: its partitions, busy in
		// their last deltas, fall behind, and the others wait for them.
		if i == batches/2 {
			if err := slow.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
		}
		mustPostRetrying(t, c.url(i%2), "mail", body)
		if i == batches/2+4 {
			if err := slow.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
		}
	}
	type status struct {
		Model struct {
			Updates int64
			Version uint64
		}
		Consistency struct {
			Model       string `json:"model"`
			Waits       uint64 `json:"waits"`
			RemoteWaits uint64 `json:"remote_waits"`
		}
	}
	var st [3]status
	defer func() {
		if t.Failed() {
			for i := range 3 {
				raw := getJob(t, c.url(i), "sync", &st[i]).Raw
				var sections struct {
					Consistency, Deltas, Partitions json.RawMessage
				}
				_ = json.Unmarshal(raw, &sections)
				t.Logf("node %d: %+v; consistency %s; deltas %s; partitions %s; cluster: %s", i+1, st[i], sections.Consistency,
					sections.Deltas, sections.Partitions, clusterJobsText(c.url(i)))
			}
			c.logDeltas()
		}
	}()
	waitUntil(t, 60*time.Second, "every node's model holding every event at one version", func() bool {
		for i := range 3 {
			getJob(t, c.url(i), "sync", &st[i])
			if st[i].Model.Updates != batches*per || st[i].Model.Version != st[0].Model.Version {
				return false
			}
		}
		return true
	})
	remote := uint64(0)
	for i := range 3 {
		if st[i].Consistency.Model != "bsp" {
			t.Errorf("node %d reports consistency %q", i+1, st[i].Consistency.Model)
		}
		remote += st[i].Consistency.RemoteWaits
	}
	// (How many waits were for another node's partitions depends on
	// whether n3's were busy when it stopped: logged, not asserted.)
	t.Logf("model version %d on every node; remote waits %d", st[0].Model.Version, remote)
}

// `mlstream demo --nodes 3` on a data directory that does not exist yet
// (a newcomer's first run) starts three nodes that form one cluster, and
// every node serves the demo's jobs.
func TestDemoClusterOnAFreshDirectory(t *testing.T) {
	data := filepath.Join(t.TempDir(), "mlstream-data")
	demo := start(t, "demo", "--nodes", "3", "--addr", testaddr.Free(t), "--data", data, "--rate", "500")
	// Stopped as a user does (Ctrl-C), which stops its nodes and waits for
	// them, before the directory goes: killed, it would leave them writing.
	t.Cleanup(func() {
		if demo.cmd.Process.Signal(syscall.SIGINT) == nil {
			demo.wait()
		}
	})
	var st cluster.Status
	waitUntil(t, 60*time.Second, "the demo's cluster of three", func() bool {
		resp, err := http.Get(demo.url() + "/v1/cluster")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&st) == nil && len(st.Nodes) == 3
	})
	// A node joins the cluster before its HTTP server listens: wait for
	// each to answer.
	for _, nd := range st.Nodes {
		waitUntil(t, 30*time.Second, nd.Name+" serving the demo's job", func() bool {
			resp, err := http.Get("http://" + nd.Addr + "/v1/jobs/clicks")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	}
}
