package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mlstream/mlstream/client"
	"github.com/mlstream/mlstream/cluster"
	"github.com/mlstream/mlstream/internal/gen"
	"github.com/mlstream/mlstream/kinds/logreg"
	"github.com/mlstream/mlstream/learners"
	"github.com/mlstream/mlstream/runtime"
)

// The cluster section: cluster mode with real processes of the binary on
// loopback, started together as docs/cluster.md says (--lease-ttl 2s).
// Ingest throughput of single-node mode against clusters of 1 (on a
// nats-server of its own), 2 and 3 nodes; failover after kill -9 (time
// until every partition is owned by a live node and probe events of the
// partitions the dead node owned are counted), whether the survivors'
// queries stop meanwhile, and acknowledged events lost or counted twice;
// logreg accuracy after 10 kills. Misbehaviour is reported, in the tables'
// trouble cells and by keeping the nodes' logs, not worked around, except
// a node that does not start a job, which is restarted once (and listed).

const (
	hhJob, hhStream = "hh", "clicks"
	// The logreg job is "bench", the name getStatus and predictAccuracy read.
	lrJob, lrStream = "bench", "mail"
	clusterLeaseTTL = "2s"
	senders         = 6 // concurrent client senders of the ingest runs
)

func hhJobSpec() client.JobSpec {
	return client.JobSpec{Name: hhJob, Kind: "heavy_hitters", Input: hhStream, Partitions: 6,
		Params: map[string]any{"field": "item", "counters": 500}}
}

func lrJobSpec() client.JobSpec {
	return client.JobSpec{Name: lrJob, Kind: "logreg", Input: lrStream, Partitions: 6, Params: map[string]any{"hash_bits": 18}}
}

// clusterTables runs the section with the binary bin.
// clusterParts are the parts of the cluster section wanted: all of them
// for "cluster", else those named "cluster-<part>".
func clusterParts(want map[string]bool) map[string]bool {
	parts := map[string]bool{}
	for _, p := range []string{"ingest", "failover", "accuracy", "rescale"} {
		if want["cluster"] || want["cluster-"+p] {
			parts[p] = true
		}
	}
	return parts
}

func clusterTables(bin string, quick bool, parts map[string]bool) {
	reps, posting, kills := 3, 10*time.Second, 10
	if quick {
		reps, posting, kills = 1, 4*time.Second, 3
	}
	natsBin := filepath.Join(filepath.Dir(bin), "nats-server")
	if out, err := exec.Command("go", "build", "-o", natsBin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		fmt.Printf("\n(cluster: no nats-server for the 1-node cluster: %v: %s)\n", err, out)
	}
	if parts["ingest"] {
		clusterIngest(bin, reps, posting)
	}
	if parts["failover"] {
		clusterFailover(bin, kills)
	}
	if parts["accuracy"] {
		clusterAccuracy(bin, kills, quick)
	}
	if parts["rescale"] {
		clusterRescale(bin, 2*reps)
	}
}

// benchNode is one mlstream process of a benchmark cluster.
type benchNode struct {
	name, addr, route, dir, logFile string
	cmd                             *exec.Cmd
	alive                           atomic.Bool
	c                               *client.Client // retries as the server asks
	once                            *client.Client // one attempt a call: the caller picks the next node
}

// benchCluster is nodes on loopback ports under one temporary directory,
// in single-node mode when not clustered. It counts the answers of the
// postAnywhere attempts that failed, by status (0: no answer).
type benchCluster struct {
	bin, root string
	clustered bool
	nodes     []*benchNode
	// natsURL, when set, is the nats-server (natsCmd) the nodes use with
	// --nats instead of embedding one.
	natsURL string
	natsCmd *exec.Cmd
	retries atomic.Int64 // retries of the nodes' retrying clients

	mu       sync.Mutex
	failures map[int]int
	keep     string // why the logs are kept ("": removed with the directory)
	// workarounds are what the benchmark did to get past misbehaviour.
	workarounds []string
}

// launchCluster starts a new cluster of setup s and declares spec on it;
// the caller closes it.
func launchCluster(bin string, s ingestSetup, spec client.JobSpec) (*benchCluster, error) {
	bc, err := newBenchCluster(bin, s.nodes, s.clustered, s.external)
	if err != nil {
		return nil, err
	}
	if err = bc.startAll(); err == nil {
		err = bc.putJob(spec)
	}
	if err != nil {
		bc.close()
		return nil, err
	}
	return bc, nil
}

// newBenchCluster is n nodes, not started; with external, the nodes use a
// nats-server of their own (--nats) instead of embedded ones.
func newBenchCluster(bin string, n int, clustered, external bool) (*benchCluster, error) {
	root, err := os.MkdirTemp("", "mlstream-cluster")
	if err != nil {
		return nil, err
	}
	bc := &benchCluster{bin: bin, root: root, clustered: clustered, failures: map[int]int{}}
	if external {
		port, err := freePort()
		if err != nil {
			os.RemoveAll(root)
			return nil, err
		}
		bc.natsURL = "nats://" + port
	}
	for i := range n {
		nd := &benchNode{name: fmt.Sprintf("n%d", i+1)}
		nd.dir, nd.logFile = filepath.Join(root, nd.name), filepath.Join(root, nd.name+".log")
		if nd.addr, err = freePort(); err == nil {
			nd.route, err = freePort()
		}
		if err != nil {
			os.RemoveAll(root)
			return nil, err
		}
		url := "http://" + nd.addr
		nd.c, _ = client.New(url, client.Config{HTTPClient: idemHTTPClient(), Retry: client.RetryPolicy{GiveUpAfter: time.Minute},
			OnRetry: func(client.Retry) { bc.retries.Add(1) }})
		nd.once, _ = client.New(url, client.Config{HTTPClient: idemHTTPClient(), RequestTimeout: 5 * time.Second,
			Retry: client.RetryPolicy{MaxRetries: -1}})
		bc.nodes = append(bc.nodes, nd)
	}
	return bc, nil
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// start starts node i on its data directory; its output goes, appended,
// to its log file.
func (bc *benchCluster) start(i int) error {
	nd := bc.nodes[i]
	args := []string{"serve", "--addr", nd.addr, "--data", nd.dir}
	if bc.natsURL != "" {
		args = append(args, "--node", nd.name, "--nats", bc.natsURL, "--lease-ttl", clusterLeaseTTL)
	} else if bc.clustered {
		var routes []string
		for _, o := range bc.nodes {
			routes = append(routes, o.route)
		}
		args = append(args, "--node", nd.name, "--cluster", nd.route, "--peers", strings.Join(routes, ","), "--lease-ttl", clusterLeaseTTL)
	}
	logf, err := os.OpenFile(nd.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bc.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The nodes go with the benchmark, even when it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	nd.cmd = cmd
	nd.alive.Store(true)
	return nil
}

// waitReady polls node i's /readyz until it answers 200.
func (bc *benchCluster) waitReady(i int, within time.Duration) error {
	nd := bc.nodes[i]
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if ok, _ := nd.once.Ready(context.Background()); ok {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	bc.keepLogs(nd.name + " not ready")
	return fmt.Errorf("%s not ready after %v; log %s", nd.name, within, nd.logFile)
}

// startAll starts every node together (a clustered node waits for a
// majority of its peers) and waits until all are ready.
func (bc *benchCluster) startAll() error {
	if bc.natsURL != "" {
		if err := bc.startNATS(); err != nil {
			return err
		}
	}
	for i := range bc.nodes {
		if err := bc.start(i); err != nil {
			return err
		}
	}
	for i := range bc.nodes {
		if err := bc.waitReady(i, 90*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// startNATS starts the nats-server binary (built next to the mlstream
// one) with JetStream in the cluster's directory.
func (bc *benchCluster) startNATS() error {
	logf, err := os.Create(filepath.Join(bc.root, "nats-server.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(filepath.Dir(bc.bin), "nats-server"), "-js", "-a", "127.0.0.1",
		"-p", strings.TrimPrefix(bc.natsURL[strings.LastIndexByte(bc.natsURL, ':'):], ":"), "-sd", filepath.Join(bc.root, "nats"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	bc.natsCmd = cmd
	addr := strings.TrimPrefix(bc.natsURL, "nats://")
	if !poll(30*time.Second, 20*time.Millisecond, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}) {
		return fmt.Errorf("nats-server not listening on %s after 30 s", addr)
	}
	return nil
}

// kill ends node i with SIGKILL.
func (bc *benchCluster) kill(i int) {
	nd := bc.nodes[i]
	nd.alive.Store(false)
	_ = nd.cmd.Process.Signal(syscall.SIGKILL)
	_ = nd.cmd.Wait()
}

// close stops every live node (SIGTERM, SIGKILL after 20 s) and removes
// the directory; logs asked to be kept are copied out first.
func (bc *benchCluster) close() {
	for _, nd := range bc.nodes {
		if nd.alive.Load() {
			_ = nd.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, nd := range bc.nodes {
		if nd.alive.Load() {
			nd.waitExit()
		}
	}
	if bc.natsCmd != nil {
		_ = bc.natsCmd.Process.Signal(syscall.SIGTERM)
		_ = bc.natsCmd.Wait()
	}
	if bc.keep != "" {
		dir := bc.root + "-logs"
		_ = os.MkdirAll(dir, 0o755)
		for _, nd := range bc.nodes {
			if b, err := os.ReadFile(nd.logFile); err == nil {
				_ = os.WriteFile(filepath.Join(dir, nd.name+".log"), b, 0o644)
			}
		}
		fmt.Printf("\n(cluster: %s; the nodes' logs are in %s)\n", bc.keep, dir)
	}
	os.RemoveAll(bc.root)
}

// stop stops node i with SIGTERM (SIGKILL after 20 s).
func (bc *benchCluster) stop(i int) {
	nd := bc.nodes[i]
	_ = nd.cmd.Process.Signal(syscall.SIGTERM)
	nd.waitExit()
}

// waitExit waits for the node's process, killing it after 20 s.
func (nd *benchNode) waitExit() {
	t := time.AfterFunc(20*time.Second, func() { _ = nd.cmd.Process.Kill() })
	_ = nd.cmd.Wait()
	t.Stop()
	nd.alive.Store(false)
}

// keepLogs asks close to keep the nodes' logs, for reason.
func (bc *benchCluster) keepLogs(reason string) {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	if bc.keep == "" {
		bc.keep = reason
	} else if !strings.Contains(bc.keep, reason) {
		bc.keep += "; " + reason
	}
}

func (bc *benchCluster) live() []*benchNode {
	var out []*benchNode
	for _, nd := range bc.nodes {
		if nd.alive.Load() {
			out = append(out, nd)
		}
	}
	return out
}

// idemKey is the context key of a batch's Idempotency-Key.
type idemKey struct{}

// idemTransport sends the Idempotency-Key of the request's context: the
// client retries with the same context, so every attempt of a batch
// carries the same key.
type idemTransport struct{ http.RoundTripper }

func (t idemTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if k, ok := r.Context().Value(idemKey{}).(string); ok {
		r = r.Clone(r.Context())
		r.Header.Set("Idempotency-Key", k)
	}
	return t.RoundTripper.RoundTrip(r)
}

func idemHTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 16
	return &http.Client{Transport: idemTransport{tr}}
}

func withIdemKey(key string) context.Context {
	return context.WithValue(context.Background(), idemKey{}, key)
}

// postAnywhere posts one batch to the live nodes in turn, starting at the
// from-th, with the same Idempotency-Key on every attempt, until one
// accepts it, refuses it for good, or within has passed. It returns the
// events accepted.
func (bc *benchCluster) postAnywhere(stream string, body []byte, key string, from int, within time.Duration) (int, error) {
	ctx := withIdemKey(key)
	deadline := time.Now().Add(within)
	var last error
	for try := from; time.Now().Before(deadline); try++ {
		live := bc.live()
		ing, err := live[try%len(live)].once.PostEvents(ctx, stream, body)
		if err == nil {
			return ing.Accepted, nil
		}
		status := 0
		var e *client.Error
		if errors.As(err, &e) {
			status = e.Status
		}
		bc.mu.Lock()
		bc.failures[status]++
		bc.mu.Unlock()
		if status != 0 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests && status < 500 {
			return 0, err
		}
		last = err
		time.Sleep(100 * time.Millisecond) // a backoff between attempts, not a synchronisation
	}
	return 0, fmt.Errorf("batch %s not accepted within %v: %w", key, within, last)
}

// failuresText lists the failed attempts by status, "none" without any.
func (bc *benchCluster) failuresText() string {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	if len(bc.failures) == 0 {
		return "none"
	}
	var parts []string
	for _, s := range slices.Sorted(maps.Keys(bc.failures)) {
		name := fmt.Sprint(s)
		if s == 0 {
			name = "no answer"
		}
		parts = append(parts, fmt.Sprintf("%s ×%d", name, bc.failures[s]))
	}
	return strings.Join(parts, ", ")
}

// clusterStatus is GET /v1/cluster of node nd.
func (nd *benchNode) clusterStatus() (cluster.Status, error) {
	var st cluster.Status
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+nd.addr+"/v1/cluster", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return st, err
	}
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET /v1/cluster: %d %s", resp.StatusCode, body)
	}
	return st, json.Unmarshal(body, &st)
}

// owners is who owns each partition of job as nd sees it ("" for nobody).
func (nd *benchNode) owners(job string) ([]string, error) {
	st, err := nd.clusterStatus()
	if err != nil {
		return nil, err
	}
	for _, j := range st.Jobs {
		if j.Job == job {
			out := make([]string, len(j.Partitions))
			for _, p := range j.Partitions {
				out[p.Partition] = p.Node
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("%s does not list job %s", nd.name, job)
}

// ownedBy says whether every partition is owned by one of names.
func ownedBy(owners []string, names []string) bool {
	for _, o := range owners {
		if !slices.Contains(names, o) {
			return false
		}
	}
	return len(owners) > 0
}

func names(nodes []*benchNode) []string {
	var out []string
	for _, nd := range nodes {
		out = append(out, nd.name)
	}
	return out
}

// poll calls cond every interval until it is true or within has passed.
func poll(within, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
}

// putJob declares spec on the first node and waits until every node runs
// it and, clustered, every partition has an owner.
func (bc *benchCluster) putJob(spec client.JobSpec) error {
	var err error
	// A PUT right after the start can fail with a 400 that is a JetStream
	// timeout: retried, and kept in the logs' reasons.
	if !poll(60*time.Second, 500*time.Millisecond, func() bool {
		if _, err = bc.nodes[0].c.PutJob(context.Background(), spec); err != nil {
			bc.keepLogs("PUT /v1/jobs/" + spec.Name + ": " + err.Error())
		}
		return err == nil
	}) {
		return err
	}
	return bc.ensureRunning(spec.Name, "")
}

// running says whether every node runs job and, clustered, every
// partition is owned by a node, one of them must when not "".
func (bc *benchCluster) running(job, must string) bool {
	for _, nd := range bc.nodes {
		if _, err := nd.once.Job(context.Background(), job); err != nil {
			return false
		}
	}
	if !bc.clustered {
		return true
	}
	owners, err := bc.nodes[0].owners(job)
	return err == nil && ownedBy(owners, names(bc.nodes)) && (must == "" || slices.Contains(owners, must))
}

// ensureRunning waits a minute until running(job, must). A node that
// still does not run the job then is restarted once (SIGTERM), a
// workaround the report lists, and running is waited for another minute.
func (bc *benchCluster) ensureRunning(job, must string) error {
	if poll(time.Minute, 50*time.Millisecond, func() bool { return bc.running(job, must) }) {
		return nil
	}
	bc.keepLogs("job " + job + " not running everywhere after a minute")
	for i, nd := range bc.nodes {
		if _, err := nd.once.Job(context.Background(), job); err != nil {
			bc.workaround(fmt.Sprintf("%s did not run job %s a minute after it was declared or the node started (%v): restarted it", nd.name, job, err))
			bc.stop(i)
			if err := bc.start(i); err != nil {
				return err
			}
			if err := bc.waitReady(i, time.Minute); err != nil {
				return err
			}
		}
	}
	if poll(time.Minute, 50*time.Millisecond, func() bool { return bc.running(job, must) }) {
		return nil
	}
	owners, _ := bc.nodes[0].owners(job)
	return fmt.Errorf("job %s not running on every node with every partition owned (owners %q, %s needed) two minutes after it was declared or a node started", job, owners, cmp.Or(must, "no node"))
}

// workaroundsText is a sentence listing the workarounds, if any.
func workaroundsText(bc *benchCluster) string {
	if len(bc.workarounds) == 0 {
		return ""
	}
	return " Workarounds: " + strings.Join(bc.workarounds, "; ") + "."
}

// workaround records what the benchmark did to get past a misbehaviour.
func (bc *benchCluster) workaround(what string) {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	bc.workarounds = append(bc.workarounds, what)
	fmt.Printf("\n(cluster workaround: %s)\n", what)
}

// total is the topk total of the heavy-hitters job on nd.
func (nd *benchNode) total() (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	top, err := nd.once.TopK(ctx, hhJob, 1, "")
	if err != nil {
		return 0, err
	}
	return top.Total, nil
}

// waitCounted polls nd's topk total every 20 ms until it reaches want,
// and returns the last total; a total that stops short for within is an
// error (it may also overshoot: a batch counted twice).
func waitCounted(nd *benchNode, want uint64, within time.Duration) (uint64, error) {
	var got uint64
	changed := time.Now()
	for {
		t, err := nd.total()
		if err == nil && t != got {
			got, changed = t, time.Now()
		}
		if got >= want {
			return got, nil
		}
		if time.Since(changed) > within {
			return got, fmt.Errorf("topk total stuck at %d of %d acknowledged for %v", got, want, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stableTotal polls nd's total, from last, until it has not changed for
// 3 s (at most 20 s), and returns it.
func stableTotal(nd *benchNode, last uint64) uint64 {
	changed := time.Now()
	poll(20*time.Second, 100*time.Millisecond, func() bool {
		if t, err := nd.total(); err == nil && t != last {
			last, changed = t, time.Now()
		}
		return time.Since(changed) >= 3*time.Second
	})
	return last
}

// totalsText is the topk total of each node, for a trouble report.
func totalsText(nodes []*benchNode) string {
	var parts []string
	for _, nd := range nodes {
		t, err := nd.total()
		if err != nil {
			parts = append(parts, fmt.Sprintf("%s: %v", nd.name, err))
		} else {
			parts = append(parts, fmt.Sprintf("%s total %d", nd.name, t))
		}
	}
	return strings.Join(parts, ", ")
}

// ingestSetup is one row of the ingest table.
type ingestSetup struct {
	name      string
	nodes     int
	clustered bool
	external  bool // on a nats-server of its own (--nats)
}

// The 1-node cluster is --cluster with no other peer: the binary then runs
// a lone embedded JetStream server (a clustered one would wait for a
// second member). The nats-server of its own (external) stays for
// comparing.
var ingestSetups = []ingestSetup{
	{"single node (no cluster flags)", 1, false, false},
	{"1-node cluster (embedded NATS)", 1, true, false},
	{"2-node cluster", 2, true, false},
	{"3-node cluster", 3, true, false},
}

// threeNodes is the cluster of the failover and accuracy tables.
var threeNodes = ingestSetups[3]

// ingestRun is one measurement: events accepted (202) and counted, the
// rate until counted, how long counting took after the posting stopped,
// the client's retries and the requests that failed for good.
type ingestRun struct {
	rate              float64
	accepted, counted uint64
	drain             time.Duration
	retries, failed   int64
}

// clusterIngest is table 1: each setup in turn, reps times.
func clusterIngest(bin string, reps int, posting time.Duration) {
	_, _, body := zipfStream(200_000)
	reqs := chunk(hhStream, body)
	runs := make([][]ingestRun, len(ingestSetups))
	ratios := make([][]float64, len(ingestSetups))
	for range reps {
		for i, s := range ingestSetups {
			r, err := ingestCluster(bin, s, reqs, posting)
			if err != nil {
				fmt.Printf("\n(cluster ingest, %s: %v)\n", s.name, err)
			}
			runs[i] = append(runs[i], r)
			if single := runs[0][len(runs[0])-1].rate; single > 0 {
				ratios[i] = append(ratios[i], r.rate/single)
			}
		}
	}
	t := newTable("cluster", "Cluster: ingest throughput",
		fmt.Sprintf("The real binary, nodes on loopback on this 2-core machine (every node and the client share the 2 cores), --lease-ttl %s, default replicas (1 below 3 nodes, 3 with 3). One heavy_hitters job, 6 partitions, field item, 500 counters, Zipf(1.1) items in requests of 1,000 events from %d concurrent client senders (spread over the nodes) for %v; an event counts when its request got 202, and the run ends when the job's topk total on the first node reaches the accepted count. Median of %d runs; the ratio is the median of per-repetition ratios to single-node mode (which keeps backups in its data directory).",
			clusterLeaseTTL, senders, posting, reps),
		"setup", "ingest (events/s)", "vs single node", "accepted (median run)", "counting after posting stopped", "client retries (429, 5xx)", "failed requests", "target")
	for i, s := range ingestSetups {
		m := medianIngest(runs[i])
		target := ""
		if s.nodes == 1 && s.clustered {
			target = ">= 50% of single node"
		}
		ratio := cell{Text: "-"}
		if len(ratios[i]) > 0 {
			ratio = num(100*mid(ratios[i]), "%.0f%%")
		}
		t.Row(s.name, m.rate, ratio, m.accepted, m.drain.Round(time.Millisecond).String(), m.retries, m.failed, target)
	}
	t.Print()
}

// medianIngest is the run of median rate.
func medianIngest(runs []ingestRun) ingestRun {
	runs = slices.Clone(runs)
	slices.SortFunc(runs, func(a, b ingestRun) int {
		switch {
		case a.rate < b.rate:
			return -1
		case a.rate > b.rate:
			return 1
		}
		return 0
	})
	return runs[len(runs)/2]
}

// ingestCluster measures one setup on a new cluster.
func ingestCluster(bin string, s ingestSetup, reqs []request, posting time.Duration) (ingestRun, error) {
	var run ingestRun
	bc, err := launchCluster(bin, s, hhJobSpec())
	if err != nil {
		return run, err
	}
	defer bc.close()
	var accepted atomic.Uint64
	var failed atomic.Int64
	start := time.Now()
	stop := start.Add(posting)
	var wg sync.WaitGroup
	for k := range senders {
		nd := bc.nodes[k%len(bc.nodes)]
		wg.Go(func() {
			for i := k; time.Now().Before(stop); i += senders {
				r := reqs[i%len(reqs)]
				ing, err := nd.c.PostEvents(withIdemKey(fmt.Sprintf("tp-%d", i)), r.stream, r.body)
				if err != nil {
					failed.Add(1)
					continue
				}
				accepted.Add(uint64(ing.Accepted))
			}
		})
	}
	wg.Wait()
	posted := time.Now()
	run.accepted, run.retries, run.failed = accepted.Load(), bc.retries.Load(), failed.Load()
	run.counted, err = waitCounted(bc.nodes[0], run.accepted, time.Minute)
	run.drain = time.Since(posted)
	run.rate = float64(run.accepted) / time.Since(start).Seconds()
	if err != nil {
		bc.keepLogs(s.name + ": " + err.Error())
		return run, err
	}
	if run.counted != run.accepted {
		bc.keepLogs(fmt.Sprintf("%s: counted %d of %d accepted", s.name, run.counted, run.accepted))
	}
	return run, nil
}

// trickle posts a steady stream of small batches (100 events every 50 ms)
// to the live nodes in turn, counting the events acknowledged.
type trickle struct {
	bc      *benchCluster
	acked   atomic.Uint64
	dropped atomic.Uint64 // events of batches never accepted
	// mu is held while a batch is in flight: pause takes it.
	mu   sync.Mutex
	stop chan struct{}
	done sync.WaitGroup
}

func startTrickle(bc *benchCluster) *trickle {
	items := zipfNames(100_000)
	tr := &trickle{bc: bc, stop: make(chan struct{})}
	tr.done.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for b := 0; ; b++ {
			select {
			case <-tr.stop:
				return
			case <-tick.C:
			}
			var body []byte
			for i := range 100 {
				body = fmt.Appendf(body, "{\"item\":%q}\n", items[(b*100+i)%len(items)])
			}
			tr.mu.Lock()
			n, err := bc.postAnywhere(hhStream, body, fmt.Sprintf("trickle-%d", b), b, 30*time.Second)
			if err != nil {
				tr.dropped.Add(100)
			}
			tr.acked.Add(uint64(n))
			tr.mu.Unlock()
		}
	})
	return tr
}

func (tr *trickle) pause()  { tr.mu.Lock() }
func (tr *trickle) resume() { tr.mu.Unlock() }
func (tr *trickle) end()    { close(tr.stop); tr.done.Wait() }

// gapProbe asks each of some nodes for the topk 10 times a second and
// keeps the longest time between two answers of a node, and the failures.
type gapProbe struct {
	stop   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	maxGap time.Duration
	failed int
}

func startGapProbe(nodes []*benchNode) *gapProbe {
	g := &gapProbe{stop: make(chan struct{})}
	for _, nd := range nodes {
		g.wg.Go(func() { g.probe(nd) })
	}
	return g
}

func (g *gapProbe) probe(nd *benchNode) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-g.stop:
			g.answered(time.Since(last), true)
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := nd.once.TopK(ctx, hhJob, 10, "")
		cancel()
		g.answered(time.Since(last), err == nil)
		if err == nil {
			last = time.Now()
		}
	}
}

func (g *gapProbe) answered(gap time.Duration, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !ok {
		g.failed++
		return
	}
	g.maxGap = max(g.maxGap, gap)
}

func (g *gapProbe) end() (time.Duration, int) {
	close(g.stop)
	g.wg.Wait()
	return g.maxGap, g.failed
}

// killResult is one kill of the failover table.
type killResult struct {
	victim         string
	at             time.Time // of the kill, to find it in the logs
	moved          []int
	owned, counted time.Duration // after the kill: every partition on a live node; the probe counted
	stuck          string        // what never happened, if anything
	gap            time.Duration
	failedProbes   int
	acked          uint64
	lost           int64  // acknowledged − counted at the check (so far, all kills)
	unsettled      string // the cluster had not counted what it acknowledged before the kill
	rejoin         time.Duration
}

func (k killResult) failover() time.Duration { return max(k.owned, k.counted) }

// probeEvents is the size of each probe batch.
const probeEvents = 1000

// probeKey is a key that routes an event to partition p of 6.
func probeKey(p, kill int) string {
	for i := 0; ; i++ {
		k := fmt.Sprintf("probe-%d-%d", kill, i)
		if learners.HashName(k)%6 == uint64(p) {
			return k
		}
	}
}

// clusterFailover is tables 2 and 3: kills of a 3-node cluster under a
// trickle of events.
func clusterFailover(bin string, kills int) {
	bc, err := launchCluster(bin, threeNodes, hhJobSpec())
	if err != nil {
		fmt.Println("cluster:", err)
		return
	}
	defer bc.close()
	tr := startTrickle(bc)
	var results []killResult
	for k := range kills {
		excess, unsettled := settle(bc, tr)
		r := oneKill(bc, tr, k%3, k, excess)
		r.unsettled = unsettled
		results = append(results, r)
		for _, trouble := range []string{r.unsettled, r.stuck} {
			if trouble != "" {
				bc.keepLogs(fmt.Sprintf("kill %d of %s: %s", k+1, r.victim, trouble))
			}
		}
		if r.lost != 0 {
			bc.keepLogs(fmt.Sprintf("kill %d of %s: acknowledged − counted = %d", k+1, r.victim, r.lost))
		}
	}
	tr.end()
	end := finalCount{acked: tr.acked.Load()}
	var stuck []string
	for _, nd := range bc.nodes {
		counted, err := waitCounted(nd, end.acked, 20*time.Second)
		if err != nil {
			stuck = append(stuck, nd.name+": "+err.Error())
		} else {
			// Events counted twice make the total pass the acknowledged
			// before every view is in: the last total is what counts.
			counted = stableTotal(nd, counted)
		}
		end.counted = append(end.counted, counted)
	}
	if len(stuck) > 0 {
		end.trouble = strings.Join(stuck, "; ")
		bc.keepLogs("at the end: " + end.trouble)
	}
	failoverTables(results, end, tr, bc)
}

// finalCount is what was acknowledged, and counted by each node, once the
// trickle ended with every node up.
type finalCount struct {
	acked   uint64
	counted []uint64
	trouble string
}

// settle waits, at most 20 s, until every node has counted what was
// acknowledged when it was called, so that a kill finds the cluster
// steady (not still handing partitions back to a restarted node); it
// returns what went wrong, if anything.
//
// It also returns by how much the first node's total exceeds what was
// acknowledged (events counted twice so far, less those in flight), so
// that they do not pass for the probes of the next failover.
func settle(bc *benchCluster, tr *trickle) (excess uint64, trouble string) {
	want := tr.acked.Load()
	for _, nd := range bc.nodes {
		if _, err := waitCounted(nd, want, 20*time.Second); err != nil {
			return 0, fmt.Sprintf("not steady before the kill: %s: %v (%s)", nd.name, err, totalsText(bc.nodes))
		}
	}
	acked := tr.acked.Load()
	if t, err := bc.nodes[0].total(); err == nil && t > acked {
		excess = t - acked
	}
	return excess, ""
}

// oneKill kills node victim with SIGKILL and measures until the cluster
// processes its partitions again, then restarts it and waits until it
// owns partitions again.
func oneKill(bc *benchCluster, tr *trickle, victim, k int, excess uint64) killResult {
	nd := bc.nodes[victim]
	r := killResult{victim: nd.name}
	var survivors []*benchNode
	for _, o := range bc.nodes {
		if o != nd {
			survivors = append(survivors, o)
		}
	}
	if owners, err := survivors[0].owners(hhJob); err == nil {
		for p, o := range owners {
			if o == nd.name {
				r.moved = append(r.moved, p)
			}
		}
	}
	gaps := startGapProbe(survivors)
	t0 := time.Now()
	r.at = t0.UTC()
	bc.kill(victim)
	r.owned, r.counted, r.stuck = awaitFailover(bc, tr, survivors, r.moved, k, t0, excess)
	r.gap, r.failedProbes = gaps.end()

	// Losses: stop the trickle and let the counts settle.
	tr.pause()
	r.acked = tr.acked.Load()
	counted, err := waitCounted(survivors[0], r.acked, 10*time.Second)
	if err != nil && r.stuck == "" {
		r.stuck = err.Error() + " (" + totalsText(survivors) + ")"
	}
	r.lost = int64(r.acked) - int64(counted)
	tr.resume()

	start := time.Now()
	if err := restartAndRejoin(bc, victim, hhJob); err != nil {
		r.stuck = strings.TrimPrefix(r.stuck+"; "+err.Error(), "; ")
	}
	r.rejoin = time.Since(start)
	return r
}

// awaitFailover polls every 50 ms, for at most a minute, until every
// partition is owned by a survivor and probe events posted after the kill
// to each partition the dead node owned (moved) are counted: the topk total
// of the first survivor reaches what was acknowledged once the probes
// were, plus the excess counted before the kill.
func awaitFailover(bc *benchCluster, tr *trickle, survivors []*benchNode, moved []int, k int, t0 time.Time, excess uint64) (owned, counted time.Duration, stuck string) {
	probed := postProbes(bc, tr, moved, k)
	var want uint64
	done := poll(time.Minute, 50*time.Millisecond, func() bool {
		if owned == 0 {
			if owners, err := survivors[0].owners(hhJob); err == nil && ownedBy(owners, names(survivors)) {
				owned = time.Since(t0)
			}
		}
		if want == 0 {
			select {
			case want = <-probed:
				if want == 0 {
					stuck = "a probe event was never accepted"
					return true
				}
			default:
			}
		}
		if want > 0 && counted == 0 {
			if t, err := survivors[0].total(); err == nil && t >= want+excess {
				counted = time.Since(t0)
			}
		}
		return owned > 0 && counted > 0
	})
	if !done && stuck == "" {
		stuck = fmt.Sprintf("not processing again after a minute (owned by survivors: %v, probe counted: %v)", owned > 0, counted > 0)
	}
	return owned, counted, stuck
}

// postProbes posts, concurrently, probeEvents events to each partition of
// moved (partition 0 when none), and sends on the channel returned what
// was acknowledged once all were (0 when one was not accepted). So many
// that batches counted twice during the failover (a retried batch the
// dead node had partly published: at most 100 events) cannot pass for
// them.
func postProbes(bc *benchCluster, tr *trickle, moved []int, k int) <-chan uint64 {
	if len(moved) == 0 {
		moved = []int{0}
	}
	probed := make(chan uint64, 1)
	go func() {
		var wg sync.WaitGroup
		var failed atomic.Bool
		for _, p := range moved {
			wg.Go(func() {
				line := fmt.Appendf(nil, "{\"key\":%q,\"item\":\"probe\"}\n", probeKey(p, k))
				body := bytes.Repeat(line, probeEvents)
				n, err := bc.postAnywhere(hhStream, body, fmt.Sprintf("probe-%d-%d", k, p), k+p, 50*time.Second)
				if err != nil {
					failed.Store(true)
				}
				tr.acked.Add(uint64(n))
			})
		}
		wg.Wait()
		if failed.Load() {
			probed <- 0
			return
		}
		probed <- tr.acked.Load()
	}()
	return probed
}

// failoverTables prints the per-kill table and the summary.
func failoverTables(results []killResult, end finalCount, tr *trickle, bc *benchCluster) {
	t := newTable("cluster", "Cluster: failover after kill -9, per kill",
		fmt.Sprintf("3 nodes (replicas 3), --lease-ttl %s, the heavy_hitters job of the ingest table under a trickle of 2,000 events/s (batches of 100 to the live nodes in turn, retried on the next live node with the same Idempotency-Key). Each kill rotates the node; owned: every partition owned by a live node (GET /v1/cluster of a survivor); processing: probe events posted after the kill, 1,000 to each partition the dead node owned, are counted (the survivor's topk total reaches what was acknowledged once the probes were, plus what it had counted beyond the acknowledged before the kill; merged views are up to ~1 s behind their owners). Gap: the longest time between two answers of a 10 Hz GET topk on each survivor. Before each kill every node has counted what was acknowledged (at most 20 s is waited). Acknowledged − counted: all acknowledged so far against the survivor's total once the trickle is paused and the total stops changing for 10 s (positive: not counted yet, or lost; negative: counted twice). Rejoin: restart with its data directory until it owns partitions again.", clusterLeaseTTL),
		"kill", "node", "killed at (UTC)", "partitions it owned", "owned by live nodes after", "processing again after", "longest topk gap", "failed topk probes", "acknowledged so far", "acknowledged − counted", "rejoin", "trouble")
	var fo, gaps []float64
	var worstGap time.Duration
	var failedProbes int
	for i, r := range results {
		t.Row(i+1, r.victim, r.at.Format("15:04:05.000"), fmt.Sprint(r.moved), r.owned.Round(time.Millisecond).String(), r.counted.Round(time.Millisecond).String(),
			r.gap.Round(time.Millisecond).String(), r.failedProbes, r.acked, r.lost, r.rejoin.Round(time.Millisecond).String(),
			strings.Trim(r.unsettled+"; "+r.stuck, "; "))
		d := r.failover()
		if r.stuck != "" && (r.owned == 0 || r.counted == 0) {
			d = time.Minute
		}
		fo = append(fo, float64(d))
		gaps = append(gaps, float64(r.gap))
		worstGap = max(worstGap, r.gap)
		failedProbes += r.failedProbes
	}
	t.Print()
	if len(results) == 0 {
		return
	}
	s := newTable("cluster", "Cluster: failover after kill -9, summary",
		fmt.Sprintf("%d kills of the per-kill table. Failed ingest attempts of the trickle and probes, by status: %s; trickle batches never accepted: %d events. At the end, the trickle stopped and every node up: %s.", len(results), bc.failuresText(), tr.dropped.Load(), cmp.Or(end.trouble, "every node counted every acknowledged event"))+workaroundsText(bc),
		"measurement", "value", "unit", "target")
	s.Row("failover: processing again after kill -9 (median)", num(time.Duration(mid(fo)).Seconds(), "%.2f"), "s", "<= 6 s")
	s.Row("failover: worst", num(time.Duration(slices.Max(fo)).Seconds(), "%.2f"), "s", "<= 12 s")
	s.Row("longest gap between topk answers of a survivor (median of kills)", num(time.Duration(mid(gaps)).Seconds(), "%.2f"), "s", "they never stop answering")
	s.Row("longest gap between topk answers of a survivor (worst)", num(worstGap.Seconds(), "%.2f"), "s", "")
	s.Row("failed topk probes on survivors (all kills)", failedProbes, "requests", "0")
	s.Row("acknowledged events (all kills)", end.acked, "events", "")
	for i, c := range end.counted {
		s.Row(fmt.Sprintf("acknowledged − counted by %s at the end, all nodes up (positive: lost or not counted; negative: counted twice)", bc.nodes[i].name),
			int64(end.acked)-int64(c), "events", "0")
	}
	s.Print()
}

// lrRun is one logreg training of the accuracy table.
type lrRun struct {
	acc            float64
	acked, updates uint64
	version        uint64
	trouble        []string
}

// clusterAccuracy is table 4: logreg on 3 nodes, without and with kills.
func clusterAccuracy(bin string, kills int, quick bool) {
	total := 100_000
	if quick {
		total = 30_000
	}
	train, held := lrData(total)
	t := newTable("cluster", "Cluster: logreg accuracy after kill -9 of nodes",
		fmt.Sprintf("3 nodes (replicas 3), --lease-ttl %s; logreg, 6 partitions, hash_bits 18, %s training events of internal/gen (seed 5, 50,000-word vocabulary) in requests of 1,000 to the live nodes in turn; accuracy of the first node's predictions on 20,000 held-out events. With kills: the training cut into %d parts; after each but the last, kill -9 of a node (rotating), the next part posted to the survivors, the node restarted on its data directory and waited for until it owns partitions again. Model updates: labelled events merged into the first node's model (every event once when nothing is lost or learned twice).",
			clusterLeaseTTL, humanize(float64(total)), kills+1),
		"kills", "held-out accuracy", "vs no kill", "acknowledged", "model updates", "model version", "target", "trouble")
	var base float64
	for i, k := range []int{0, kills} {
		r, err := lrClusterRun(bin, train, held, k)
		if err != nil {
			fmt.Printf("\n(cluster accuracy, %d kills: %v)\n", k, err)
			continue
		}
		if i == 0 {
			base = r.acc
		}
		target := ""
		if k > 0 {
			target = "within 1 point"
		}
		t.Row(k, num(100*r.acc, "%.2f%%"), num(100*(r.acc-base), "%+.2f points"), r.acked, r.updates, r.version, target, strings.Join(r.trouble, "; "))
	}
	t.Print()
}

// lrData is total training events of internal/gen as JSON and 20,000
// held-out events after them (seed 5, a 50,000-word vocabulary).
func lrData(total int) ([][]byte, []gen.Event) {
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
	return train, held
}

// lrClusterRun trains the logreg job on a new 3-node cluster with kills
// spread over the training, and scores it.
func lrClusterRun(bin string, train [][]byte, held []gen.Event, kills int) (lrRun, error) {
	var run lrRun
	bc, err := launchCluster(bin, threeNodes, lrJobSpec())
	if err != nil {
		return run, err
	}
	defer bc.close()
	for i := 0; i <= kills; i++ {
		lo, hi := part(i, kills, len(train))
		n, err := postTraining(bc, train[lo:hi], i)
		run.acked += n
		if err != nil {
			return run, err
		}
		if i > 0 {
			if err := restartAndRejoin(bc, (i-1)%3, lrJob); err != nil {
				run.trouble = append(run.trouble, err.Error())
			}
		}
		if i < kills {
			bc.kill(i % 3)
		}
	}
	url := "http://" + bc.nodes[0].addr
	var st runtime.JobStatus
	learned := func() bool {
		getStatus(url, &st)
		s := logreg.StatusOf(st)
		if s != nil && s.Model != nil {
			run.updates, run.version = s.Model.Updates, s.Model.Version
		}
		return run.updates >= run.acked
	}
	if !poll(90*time.Second, 200*time.Millisecond, learned) {
		msg := fmt.Sprintf("%d model updates of %d acknowledged after 90 s", run.updates, run.acked)
		run.trouble = append(run.trouble, msg)
		bc.keepLogs(fmt.Sprintf("logreg with %d kills: %s", kills, msg))
	}
	run.acc = predictAccuracy(url, held)
	run.trouble = append(run.trouble, bc.workarounds...)
	return run, nil
}

// postTraining posts lines in requests of 1,000 to the live nodes in turn.
func postTraining(bc *benchCluster, lines [][]byte, cut int) (uint64, error) {
	var acked uint64
	for i := 0; i < len(lines); i += 1000 {
		body := append(bytes.Join(lines[i:min(i+1000, len(lines))], []byte{'\n'}), '\n')
		n, err := bc.postAnywhere(lrStream, body, fmt.Sprintf("lr-%d-%d", cut, i), i/1000, time.Minute)
		if err != nil {
			return acked, err
		}
		acked += uint64(n)
	}
	return acked, nil
}

// restartAndRejoin restarts node i and waits until it owns partitions of
// job again.
func restartAndRejoin(bc *benchCluster, i int, job string) error {
	if err := bc.start(i); err != nil {
		return err
	}
	if err := bc.waitReady(i, 60*time.Second); err != nil {
		return err
	}
	return bc.ensureRunning(job, bc.nodes[i].name)
}
