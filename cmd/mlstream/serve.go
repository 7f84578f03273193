package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/mlstream/mlstream/api"
	"github.com/mlstream/mlstream/ft"
	"github.com/mlstream/mlstream/runtime"
	"github.com/mlstream/mlstream/web"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// errUsage means the flags were wrong; the flag package has said why.
var errUsage = errors.New("usage")

// serverOptions are the flags shared by serve and demo.
type serverOptions struct {
	addr, config, data  string
	partitions, queue   int
	ingestWait          time.Duration
	maxBody, maxEvent   int64
	logLevel, logFormat string
	shutdownGrace       time.Duration
	ready               func(addr string) // called once listening, with the bound address
	extraSpecs          []runtime.Spec
	onEngine            func(e *runtime.Engine)
	stdout, stderr      io.Writer
}

func (o *serverOptions) register(fs *flag.FlagSet, defConfig bool) {
	fs.StringVar(&o.addr, "addr", ":8080", "listen address")
	if defConfig {
		fs.StringVar(&o.config, "config", "", "job config file, YAML or JSON: {jobs: [...]}")
	}
	fs.StringVar(&o.data, "data", "./mlstream-data", "directory for backups and item logs (empty: no fault tolerance)")
	fs.IntVar(&o.partitions, "partitions", 0, "default partitions per job (0 = number of CPUs)")
	fs.IntVar(&o.queue, "queue-size", 65536, "default capacity of a partition queue, in events")
	fs.DurationVar(&o.ingestWait, "ingest-wait", 200*time.Millisecond, "how long ingest waits for room in full queues before answering 429")
	fs.Int64Var(&o.maxBody, "max-body", 16<<20, "largest request body, in bytes (413 above)")
	fs.Int64Var(&o.maxEvent, "max-event", 1<<20, "largest event, in bytes (413 above)")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "text", "text or json")
	fs.DurationVar(&o.shutdownGrace, "shutdown-timeout", 30*time.Second, "how long a graceful shutdown may take to drain the queues")
}

// parseFlags parses args; -h gives flag.ErrHelp (exit 0), a bad flag
// errUsage (exit 2). The flag package has printed the message.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return errUsage
	}
	return nil
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format must be text or json, got %q", format)
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mlstream serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := serverOptions{stdout: stdout, stderr: stderr}
	o.register(fs, true)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return serve(ctx, o)
}

// serve runs the service until ctx ends, then shuts down gracefully: stop
// taking requests, then process everything queued.
func serve(ctx context.Context, o serverOptions) error {
	log, err := newLogger(o.stderr, o.logLevel, o.logFormat)
	if err != nil {
		return err
	}
	var specs []runtime.Spec
	if o.config != "" {
		data, err := os.ReadFile(o.config)
		if err != nil {
			return fmt.Errorf("--config: %w", err)
		}
		if specs, err = runtime.ParseConfig(data); err != nil {
			return fmt.Errorf("%s: %w", o.config, err)
		}
	}
	specs = append(specs, o.extraSpecs...)
	if o.data != "" {
		if err := os.MkdirAll(o.data, 0o755); err != nil {
			return fmt.Errorf("--data: %w", err)
		}
		unlock, err := ft.LockDir(o.data) // one process per data directory
		if err != nil {
			return fmt.Errorf("--data: %w", err)
		}
		defer unlock()
	}

	var store ft.Store
	if o.data != "" {
		ds, err := ft.NewDirStore(o.data)
		if err != nil {
			return fmt.Errorf("--data: %w", err)
		}
		store = ds
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	engine := runtime.NewEngine(runtime.Config{
		Partitions: o.partitions, QueueSize: o.queue, IngestWait: o.ingestWait, Registry: reg, Logger: log,
		Store: store, DataDir: o.data,
	})
	for i, s := range specs {
		if _, err := engine.PutJob(s); err != nil {
			_ = engine.Close(context.Background())
			var se *runtime.SpecError
			if errors.As(err, &se) && o.config != "" && i < len(specs)-len(o.extraSpecs) {
				return fmt.Errorf("%s: jobs[%d].%w", o.config, i, err)
			}
			return fmt.Errorf("job %q: %w", s.Name, err)
		}
	}
	srv := api.New(api.Config{
		Engine: engine, MaxBodyBytes: o.maxBody, MaxEventBytes: int(o.maxEvent),
		Gatherer: reg, Dashboard: web.Handler(), Logger: log,
	})
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		_ = engine.Close(context.Background())
		return err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	srv.SetReady(true)
	addr := ln.Addr().String()
	log.Info("mlstream serving", "addr", addr, "jobs", len(specs), "version", version)
	if o.onEngine != nil {
		o.onEngine(engine)
	}
	if o.ready != nil {
		o.ready(addr)
	}

	select {
	case <-ctx.Done():
	case err := <-errc:
		_ = engine.Close(context.Background())
		return err
	}
	log.Info("shutting down: refusing new requests, draining queues")
	sctx, cancel := context.WithTimeout(context.Background(), o.shutdownGrace)
	defer cancel()
	srv.SetReady(false)
	if err := hs.Shutdown(sctx); err != nil {
		log.Warn("http shutdown", "err", err)
	}
	var processed uint64
	start := time.Now()
	if err := engine.Close(sctx); err != nil {
		return fmt.Errorf("draining queues: %w", err)
	}
	for _, j := range engine.Jobs() {
		processed += j.Status(false).Processed
	}
	log.Info("stopped", "processed", processed, "drain", time.Since(start).Round(time.Millisecond))
	return nil
}

// dashboardURL turns a listen address into a URL a browser can open.
func dashboardURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr + "/"
	}
	if host == "" || host == "::" || host == "0.0.0.0" || strings.HasPrefix(host, "[::") {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}
