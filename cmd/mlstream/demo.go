package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/mlstream/mlstream/internal/gen"
	"github.com/mlstream/mlstream/runtime"
)

// demoStream and demoJob name what `mlstream demo` declares.
const (
	demoStream = "events"
	demoJob    = "clicks"
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
	o.extraSpecs = []runtime.Spec{{
		Name: demoJob, Kind: "logreg", Input: demoStream,
		Params: map[string]any{"hash_bits": 18, "window": 5000},
	}, {
		Name: "top-features", Kind: "heavy_hitters", Input: demoStream,
		Params: map[string]any{"field": "features", "k": 10, "counters": 500, "window": "10s"},
	}, {
		Name: "users", Kind: "distinct", Input: demoStream,
		Params: map[string]any{"field": "key"},
	}}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	genDone := make(chan struct{})
	started := false
	o.ready = func(addr string) {
		started = true
		url := dashboardURL(addr)
		fmt.Fprintf(stdout, "mlstream demo: dashboard at %s\n", url)
		fmt.Fprintf(stdout, "  job %q (logreg) learns from stream %q: %d events/s from a known true model, which drifts after %d events\n", demoJob, demoStream, *rate, *drift)
		fmt.Fprintf(stdout, "  jobs \"top-features\" (heavy hitters, 10 s windows) and \"users\" (distinct keys) read it too\n")
		fmt.Fprintf(stdout, "  try: curl %sv1/jobs/%s   |   Ctrl-C stops\n", url, demoJob)
		go func() {
			defer close(genDone)
			generate(ctx, url+"v1/streams/"+demoStream+"/events", gen.Config{Seed: *seed, DriftAfter: *drift}, *rate, slog.Default())
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

// generate posts generated events to url at about rate events/s, in
// batches every 50ms, until ctx ends. It honours 429's retry_after_ms.
func generate(ctx context.Context, url string, cfg gen.Config, rate int, log *slog.Logger) {
	g := gen.New(cfg)
	client := &http.Client{Timeout: 10 * time.Second}
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
		body = body[:0]
		for range due {
			ev := g.Next()
			body = ev.AppendJSON(body)
			body = append(body, '\n')
		}
		wait, err := post(ctx, client, url, body)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("demo generator", "err", err)
			}
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

// post sends one NDJSON body; on 429 it returns how long to wait.
func post(ctx context.Context, c *http.Client, url string, body []byte) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := c.Do(req)
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
