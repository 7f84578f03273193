package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
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
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *rate <= 0 {
		return fmt.Errorf("--rate must be positive, got %d", *rate)
	}
	o.extraSpecs = demoSpecs()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	genDone := make(chan struct{})
	started := false
	o.ready = func(l listening) {
		started = true
		demoBanner(stdout, l, *rate, *drift)
		// The generator posts over HTTP like any client: with tokens
		// configured, with one of its own that nobody else sees.
		c := poster{client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: l.clientTLS}}}
		if l.auth != nil {
			c.token = l.auth.Ephemeral(api.ScopeIngest)
		}
		go func() {
			defer close(genDone)
			generate(ctx, c, l.url+"v1/streams/", gen.Config{Seed: *seed, DriftAfter: *drift}, *rate, slog.Default())
		}()
	}
	err := serve(ctx, o)
	cancel()
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
		// Purchases come up to 2 s of event time after their click and are
		// posted in the same tick: a minute of lateness covers them and
		// stalls of the generator.
		Name: "conversions", Kind: "join", Left: demoStream, Right: purchaseStream,
		Params: map[string]any{"on": "key", "within": "5s", "allowed_lateness": "1m", "value": "amount", "value_side": "right",
			"window": "10s", "max_state": "16MiB"},
	}}
}

// demoBanner tells the user where the dashboard is and what runs.
func demoBanner(stdout io.Writer, l listening, rate, drift int) {
	url := l.url
	fmt.Fprintf(stdout, "mlstream demo: dashboard at %s\n", url)
	fmt.Fprintf(stdout, "  job %q (logreg) learns from stream %q: %d events/s from a known true model, which drifts after %d events\n", demoJob, demoStream, rate, drift)
	fmt.Fprintf(stdout, "  jobs \"top-features\" (heavy hitters, 10 s windows) and \"users\" (distinct keys) read it too\n")
	fmt.Fprintf(stdout, "  job \"conversions\" joins it with stream %q (a purchase after some clicks) within 5 s\n", purchaseStream)
	if l.auth != nil {
		fmt.Fprintf(stdout, "  try: curl -H \"Authorization: Bearer $READ_TOKEN\" %sv1/jobs/%s   |   Ctrl-C stops\n", url, demoJob)
	} else {
		fmt.Fprintf(stdout, "  try: curl %sv1/jobs/%s   |   Ctrl-C stops\n", url, demoJob)
	}
}

// generate posts generated events to the demo stream under streams (the
// URL of /v1/streams/) at about rate events/s, in batches every 50ms, until
// ctx ends, and for some clicks (positive labels) a purchase up to 2 s of
// event time later to the purchase stream. It honours 429's
// retry_after_ms.
func generate(ctx context.Context, client poster, streams string, cfg gen.Config, rate int, log *slog.Logger) {
	g := gen.New(cfg)
	r := rand.New(rand.NewPCG(uint64(cfg.Seed), 99))
	var purchases []byte
	const tick = 50 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	start := time.Now()
	sent := 0
	var body []byte
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		due := int(time.Since(start).Seconds()*float64(rate)) - sent
		if due <= 0 {
			continue
		}
		due = min(due, rate) // after a stall, do not burst more than a second's worth
		body, purchases = body[:0], purchases[:0]
		// Event time is the wall clock, spread over the tick: a restarted
		// demo goes on in time (the generator's own clock would start over
		// and its events fall behind the windows of the run before).
		base := time.Now().UnixMilli()
		for k := range due {
			ev := g.Next()
			ev.TS = base - int64(tick/time.Millisecond) + int64(k)*int64(tick/time.Millisecond)/int64(due)
			body = ev.AppendJSON(body)
			body = append(body, '\n')
			if ev.Label && r.IntN(3) == 0 {
				purchases = fmt.Appendf(purchases, "{\"key\":%q,\"ts\":%d,\"amount\":%d}\n", ev.Key, ev.TS+r.Int64N(2000), 5+r.IntN(95))
			}
		}
		var wait time.Duration
		for _, req := range []struct {
			stream string
			body   []byte
		}{{demoStream, body}, {purchaseStream, purchases}} {
			if len(req.body) == 0 {
				continue
			}
			w, err := client.post(ctx, streams+req.stream+"/events", req.body)
			if err != nil && ctx.Err() == nil {
				log.Warn("demo generator", "stream", req.stream, "err", err)
			}
			wait = max(wait, w)
		}
		sent += due
		if wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
	}
}

// poster posts the demo's events, with a bearer token when it has one.
type poster struct {
	client *http.Client
	token  string
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
