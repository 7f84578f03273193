package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/mlstream/mlstream/api"
	"github.com/mlstream/mlstream/internal/gen"
	"github.com/mlstream/mlstream/runtime"
)

// demoStream and demoJob name what `mlstream demo` declares; purchases is
// the second stream, joined with the first.
const (
	demoStream     = "events"
	demoJob        = "clicks"
	purchaseStream = "purchases"
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mlstream demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := serverOptions{stdout: stdout, stderr: stderr}
	o.register(fs, false)
	rate := fs.Int("rate", 2000, "generated events per second")
	drift := fs.Int("drift-after", 60000, "events after which the true model changes (0 = never)")
	seed := fs.Int64("seed", 1, "generator seed")
	nodes := fs.Int("nodes", 1, "run a cluster of this many nodes on loopback (the others are child processes of this binary)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *nodes < 1 || *nodes > 9 {
		return fmt.Errorf("--nodes must be in [1, 9], got %d", *nodes)
	}
	root := o.data
	var dc *demoCluster
	if *nodes > 1 {
		var err error
		if dc, err = startDemoCluster(&o, *nodes, stdout); err != nil {
			return err
		}
		defer dc.stop()
		// The children no longer hear the terminal's Ctrl-C: they stop
		// when the demo does, at once, so that the nodes leave together.
		stopChildren := context.AfterFunc(ctx, dc.stop)
		defer stopChildren()
	}
	if *rate <= 0 {
		return fmt.Errorf("--rate must be positive, got %d", *rate)
	}
	log, err := newLogger(stderr, o.logLevel, o.logFormat)
	if err != nil {
		return err
	}
	o.extraSpecs = demoSpecs()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	genDone := make(chan struct{})
	started := false
	o.ready = func(l listening) {
		started = true
		// serve holds the data directory's lock now: the saved position
		// is ours to read.
		d := demoGenerator{streams: l.url + "v1/streams/", rate: *rate, log: log}
		if o.data != "" {
			d.stateFile = filepath.Join(o.data, demoStateFile)
		}
		d.src = d.resume(gen.Config{Seed: *seed, DriftAfter: *drift})
		demoBanner(stdout, l, *rate, *drift, d.src)
		if dc != nil {
			dc.banner(stdout, root, l.url)
		}
		// The generator posts over HTTP like any client: with tokens
		// configured, with one of its own that nobody else sees.
		d.client = poster{client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: l.clientTLS}}}
		if l.auth != nil {
			d.client.token = l.auth.Ephemeral(api.ScopeIngest)
		}
		go func() {
			defer close(genDone)
			d.run(ctx)
		}()
	}
	err = serve(ctx, o)
	cancel()
	if dc != nil && errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintf(stdout, "  stopped after %v without handing every partition over: the cluster's log keeps "+
			"what they had not processed, and the next demo recovers it, as after a crash\n", o.shutdownGrace)
		err = nil
	}
	if started {
		select {
		case <-genDone:
		case <-time.After(5 * time.Second):
		}
	}
	return err
}

// demoSpecs are the demo's jobs: a logreg job, heavy hitters and distinct
// counts on its stream, and a join of it with the purchases.
func demoSpecs() []runtime.Spec {
	return []runtime.Spec{{
		Name: demoJob, Kind: "logreg", Input: demoStream,
		Params: map[string]any{"hash_bits": 18, "window": 5000},
	}, {
		Name: "top-features", Kind: "heavy_hitters", Input: demoStream,
		Params: map[string]any{"field": "features", "k": 10, "counters": 500, "window": "10s"},
	}, {
		Name: "users", Kind: "distinct", Input: demoStream,
		Params: map[string]any{"field": "key"},
	}, {
		// Every click has an id and a purchase names the click it follows
		// by 0 to 2 s: joined on the id within 2 s, each purchase matches
		// its click and nothing else (joined on the user, every click of a
		// busy user would match each of their purchases, before or after).
		// Purchases are posted in the same tick as their clicks with later
		// event times: a lateness of 10 s covers that and the generator's
		// retries, and keeps about 12 s of events in state.
		Name: "conversions", Kind: "join", Left: demoStream, Right: purchaseStream,
		Params: map[string]any{"on": "click", "within": "2s", "allowed_lateness": "10s", "value": "amount", "value_side": "right",
			"window": "10s", "max_state": "16MiB"},
	}}
}

// demoBanner tells the user where the dashboard is and what runs.
func demoBanner(stdout io.Writer, l listening, rate, drift int, src *gen.Demo) {
	url := l.url
	fmt.Fprintf(stdout, "mlstream demo: dashboard at %s\n", url)
	phase := fmt.Sprintf("which drifts after %d events", drift)
	switch {
	case drift == 0:
		phase = "which never drifts"
	case src.Drifted():
		phase = fmt.Sprintf("which drifted after %d events", drift)
	}
	fmt.Fprintf(stdout, "  job %q (logreg) learns from stream %q: %d events/s from a known true model, %s\n", demoJob, demoStream, rate, phase)
	if n := src.Totals().Events; n > 0 {
		fmt.Fprintf(stdout, "  the generator resumes at event %d, where the last run stopped\n", n)
	}
	fmt.Fprintf(stdout, "  jobs \"top-features\" (heavy hitters, 10 s windows) and \"users\" (distinct keys) read it too\n")
	fmt.Fprintf(stdout, "  job \"conversions\" joins each purchase of stream %q with the click it follows by 0-2 s (on \"click\", within 2 s; SUM of amounts)\n", purchaseStream)
	if l.auth != nil {
		fmt.Fprintf(stdout, "  try: curl -H \"Authorization: Bearer $READ_TOKEN\" %sv1/jobs/%s   |   Ctrl-C stops\n", url, demoJob)
	} else {
		fmt.Fprintf(stdout, "  try: curl %sv1/jobs/%s   |   Ctrl-C stops\n", url, demoJob)
	}
}

// demoStateFile, in the data directory, holds the generator's position,
// so that a restarted demo goes on in the phase (before or after the
// drift) of the model it restores. It is rewritten every demoSaveEvery
// and when the generator stops.
const (
	demoStateFile = "demo-generator.json"
	demoSaveEvery = 5 * time.Second
)

// demoGenerator posts the demo's events to the streams under streams (the
// URL of /v1/streams/) at about rate events/s, in batches every 50ms:
// clicks to the demo stream and purchases to the purchase stream.
type demoGenerator struct {
	src       *gen.Demo
	client    poster
	streams   string
	rate      int
	limit     int    // stop after this many events in all (0: until ctx ends)
	stateFile string // "": the position is not kept
	log       *slog.Logger
	lost      int // events of batches the service did not take
}

// resume returns the source at the saved position, or at the start when
// there is none or it does not fit cfg (then it says why).
func (d *demoGenerator) resume(cfg gen.Config) *gen.Demo {
	if d.stateFile == "" {
		return gen.NewDemo(cfg)
	}
	data, err := os.ReadFile(d.stateFile)
	if errors.Is(err, fs.ErrNotExist) {
		return gen.NewDemo(cfg)
	}
	var st gen.DemoState
	if err == nil {
		err = json.Unmarshal(data, &st)
	}
	var src *gen.Demo
	if err == nil {
		src, err = gen.RestoreDemo(cfg, st)
	}
	if err != nil {
		d.log.Warn("demo generator: saved position not used, starting over", "file", d.stateFile, "err", err)
		return gen.NewDemo(cfg)
	}
	t := src.Totals()
	d.log.Info("demo generator resumed", "events", t.Events, "drifted", src.Drifted(), "purchases", t.Purchases)
	return src
}

// save writes st to the state file atomically: a crash leaves the old
// position or the new one.
func (d *demoGenerator) save(st gen.DemoState) {
	if d.stateFile == "" {
		return
	}
	data, err := json.Marshal(st)
	if err == nil {
		err = writeFileAtomic(d.stateFile, data)
	}
	if err != nil {
		d.log.Warn("demo generator: saving its position", "file", d.stateFile, "err", err)
	}
}

// run generates and posts until ctx ends or the limit is reached, then
// saves the position after the last batch it posted. Event time is the
// wall clock, spread over each tick: a restarted demo goes on in time
// (the generator's own clock would start over and its events fall behind
// the windows of the run before).
func (d *demoGenerator) run(ctx context.Context) {
	const tick = 50 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	posted := d.src.State() // the position after the last batch posted
	defer func() { d.save(posted) }()
	lastSave := time.Now()
	start, sent := time.Now(), 0
	var clicks, purchases []byte
	for d.limit == 0 || d.src.Totals().Events < d.limit {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		due := int(time.Since(start).Seconds()*float64(d.rate)) - sent
		if due <= 0 {
			continue
		}
		if due > d.rate { // after a stall, keep the pace rather than catch up in bursts
			sent += due - d.rate
			due = d.rate
		}
		if d.limit > 0 {
			due = min(due, d.limit-d.src.Totals().Events)
		}
		clicks, purchases = d.batch(due, tick, clicks[:0], purchases[:0])
		if !d.postBatch(ctx, clicks, purchases) {
			return // stopped mid-batch: the batch is generated again after a restart
		}
		sent += due
		posted = d.src.State()
		if time.Since(lastSave) >= demoSaveEvery {
			d.save(posted)
			lastSave = time.Now()
		}
	}
}

// batch generates n events spread over the tick that just ended, with
// the wall clock as event time, appended to clicks and purchases.
func (d *demoGenerator) batch(n int, tick time.Duration, clicks, purchases []byte) ([]byte, []byte) {
	base := time.Now().UnixMilli() - tick.Milliseconds()
	for k := range n {
		_, clicks, purchases = d.src.Next(base+int64(k)*tick.Milliseconds()/int64(n), clicks, purchases)
	}
	return clicks, purchases
}

// postBatch posts the clicks, then their purchases, each retried while
// the service answers 429. It returns false when ctx ended first; a batch
// the service refused otherwise is logged and counted as lost.
func (d *demoGenerator) postBatch(ctx context.Context, clicks, purchases []byte) bool {
	for _, req := range []struct {
		stream string
		body   []byte
	}{{demoStream, clicks}, {purchaseStream, purchases}} {
		if len(req.body) == 0 {
			continue
		}
		err := d.client.deliver(ctx, d.streams+req.stream+"/events", req.body)
		if ctx.Err() != nil {
			return false
		}
		if err != nil {
			d.lost += bytes.Count(req.body, []byte{'\n'})
			d.log.Warn("demo generator: batch lost", "stream", req.stream, "err", err)
		}
	}
	return true
}

// writeFileAtomic replaces path with data: written to a temporary file in
// the same directory, synced, then renamed over it.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

// poster posts the demo's events, with a bearer token when it has one.
type poster struct {
	client *http.Client
	token  string
}

// deliver posts body until the service takes it, waiting as told after
// each 429, or until ctx ends.
func (p poster) deliver(ctx context.Context, url string, body []byte) error {
	for {
		wait, err := p.post(ctx, url, body)
		if wait == 0 {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// post sends one NDJSON body; on 429 it returns how long to wait.
func (p poster) post(ctx context.Context, url string, body []byte) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	switch resp.StatusCode {
	case http.StatusAccepted:
		return 0, nil
	case http.StatusTooManyRequests:
		var e struct {
			RetryAfterMs int64 `json:"retry_after_ms"`
		}
		_ = json.Unmarshal(data, &e)
		return time.Duration(max(e.RetryAfterMs, 50)) * time.Millisecond, fmt.Errorf("server busy (429): %s", bytes.TrimSpace(data))
	}
	return 0, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(data))
}
