package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/mlstream/mlstream/api"
	"github.com/mlstream/mlstream/ft"
	_ "github.com/mlstream/mlstream/kinds/all" // the job kinds
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
	authFile            string
	insecureNoAuth      bool
	tlsCert, tlsKey     string
	maxConns            int
	idleTimeout         time.Duration
	maxWSClients        int
	wsBacklog           int
	wsSlowTimeout       time.Duration
	maxMemory           string
	bodyTimeout         time.Duration
	maxValue            float64
	minTS, maxTS        int64
	maxJobs             int
	maxPartitions       int
	rescaleTimeout      time.Duration
	autoscaleInterval   time.Duration
	authPoll            time.Duration     // how often the auth file is checked for changes (default 1s)
	ready               func(l listening) // called once listening
	extraSpecs          []runtime.Spec
	onEngine            func(e *runtime.Engine)
	stdout, stderr      io.Writer
	cl                  clusterOptions
}

func (o *serverOptions) register(fs *flag.FlagSet, defConfig bool) {
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "listen address; a non-loopback one needs tokens (--auth-file or $"+api.TokensEnv+") or --insecure-no-auth")
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
	fs.StringVar(&o.authFile, "auth-file", "", "bearer tokens, one \"scope token\" a line (scopes: ingest, read, admin); re-read on change and on SIGHUP")
	fs.BoolVar(&o.insecureNoAuth, "insecure-no-auth", false, "allow a non-loopback --addr without tokens: anyone who reaches the port may read and change everything")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate (chain) file: serve HTTPS and WSS (with --tls-key)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key file of --tls-cert")
	fs.IntVar(&o.maxConns, "max-conns", 4096, "most HTTP connections open at once (WebSockets included; 0: no cap): past it the longest idle one is closed, or, none idle, the new one refused (503)")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", 60*time.Second, "a keep-alive connection idle this long between requests is closed")
	fs.IntVar(&o.maxWSClients, "max-ws-clients", 256, "concurrent WebSocket connections (503 above)")
	fs.IntVar(&o.wsBacklog, "ws-backlog", 4096, "messages a WebSocket client may fall behind before its messages are dropped")
	fs.DurationVar(&o.wsSlowTimeout, "ws-slow-timeout", 10*time.Second, "a WebSocket client losing messages for this long is closed")
	fs.DurationVar(&o.bodyTimeout, "body-timeout", api.DefaultBodyTimeout, "longest a request body may take to arrive (408 and the connection closed past it)")
	def := runtime.DefaultLimits()
	fs.Float64Var(&o.maxValue, "max-value", def.MaxValue, "largest magnitude of a feature value or join value (400 above)")
	fs.Int64Var(&o.minTS, "min-ts", def.MinTS, "earliest event time, epoch milliseconds (400 before)")
	fs.Int64Var(&o.maxTS, "max-ts", def.MaxTS, "latest event time, epoch milliseconds (400 after)")
	fs.StringVar(&o.maxMemory, "max-memory", "auto", "memory budget of all jobs' estimated state and queues (e.g. 8GiB; auto = half the machine's or cgroup's memory; none = no budget): PUT answers 507 past it")
	fs.IntVar(&o.maxJobs, "max-jobs", 64, "most jobs at once (negative: no limit): PUT answers 507 past it")
	fs.IntVar(&o.maxPartitions, "max-partitions", runtime.MaxPartitions, "most partitions a rescale (PATCH, or the autoscaler) may give a job: 400 above")
	fs.DurationVar(&o.autoscaleInterval, "autoscale-interval", 10*time.Second, "time between two decisions of the autoscaler of a job with an autoscale section")
	fs.DurationVar(&o.rescaleTimeout, "rescale-timeout", 30*time.Second, "how long a rescale waits for the job's queued events to drain before it gives up (503, the job unchanged)")
	o.cl.register(fs)
}

// listening is what serve tells its caller once it accepts connections.
type listening struct {
	addr string    // the bound address
	url  string    // a URL a browser can open: http(s)://host:port/
	auth *api.Auth // nil: no tokens
	// clientTLS, with TLS, is a client config trusting exactly this
	// server's certificate (whatever names it holds).
	clientTLS *tls.Config
}

// edge is the network-facing setup of serve, checked before the engine
// starts: tokens, TLS and whether the listener is loopback.
type edge struct {
	auth     *api.Auth
	tls      *tls.Config
	loopback bool
}

// prepareEdge loads tokens and the certificate and refuses a non-loopback
// address without tokens unless --insecure-no-auth.
func prepareEdge(o serverOptions, log *slog.Logger) (edge, error) {
	var e edge
	var err error
	if e.auth, err = api.NewAuth(o.authFile, os.Getenv(api.TokensEnv), log); err != nil {
		return e, err
	}
	if e.loopback, err = loopbackAddr(o.addr); err != nil {
		return e, fmt.Errorf("--addr: %w", err)
	}
	if !e.loopback && e.auth == nil && !o.insecureNoAuth {
		return e, fmt.Errorf("refusing to listen on %s, which is not a loopback address, without tokens: "+
			"add tokens with --auth-file FILE (lines \"admin TOKEN\", \"read TOKEN\", \"ingest TOKEN\"; make a token with: openssl rand -hex 32) "+
			"or with %s=admin:TOKEN in the environment; or listen on 127.0.0.1; or pass --insecure-no-auth to let anyone in", o.addr, api.TokensEnv)
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return e, errors.New("--tls-cert and --tls-key go together")
	}
	if o.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			return e, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		e.tls = api.ServerTLS(cert)
	}
	return e, nil
}

// loopbackAddr reports whether a listen address binds loopback only. An
// empty host (all interfaces) is not; a name is when all its addresses are.
func loopbackAddr(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if host == "" {
		return false, nil
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback(), nil
	}
	if strings.EqualFold(host, "localhost") {
		return true, nil
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return false, err
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return false, nil
		}
	}
	return len(ips) > 0, nil
}

// pinnedClientTLS trusts exactly the server's own certificate, so the
// demo's generator can post to its own HTTPS listener whatever names the
// certificate holds.
func pinnedClientTLS(server *tls.Config) *tls.Config {
	leaf := server.Certificates[0].Certificate[0]
	return &tls.Config{
		InsecureSkipVerify: true, // replaced by the pin below
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || !bytes.Equal(raw[0], leaf) {
				return errors.New("not this server's certificate")
			}
			return nil
		},
	}
}

// reloadOnHUP re-reads the tokens on SIGHUP until ctx ends.
func reloadOnHUP(ctx context.Context, auth *api.Auth) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			_ = auth.Reload()
		}
	}
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
	opts := &slog.HandlerOptions{Level: l, ReplaceAttr: durationString}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format must be text or json, got %q", format)
}

// durationString writes durations as Go duration strings ("1.5s") in
// both formats: the JSON handler would write integer nanoseconds, which
// readers take for milliseconds or seconds. Fields that carry a unit in
// their name (duration_ms) are plain numbers and stay as they are.
func durationString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
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
	edge, err := prepareEdge(o, log)
	if err != nil {
		return err
	}
	if err := setInputLimits(o); err != nil {
		return err
	}
	specs, err := loadSpecs(o)
	if err != nil {
		return err
	}
	storage, err := openDataDir(o.data)
	if err != nil {
		return err
	}
	if storage != nil {
		defer storage.Close()
	}
	reg := prometheus.NewRegistry()
	var cl *clusterRun
	if o.cl.enabled() {
		if cl, err = startCluster(ctx, o, edge.auth != nil, log); err != nil {
			return err
		}
		defer cl.close()
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), readBuildInfo().collector())
	engine, err := startEngine(o, specs, storage, metricsRegisterer(reg, cl), log, cl)
	if err != nil {
		return err
	}
	srv := newAPIServer(o, engine, reg, edge, log, cl)
	conns := api.NewConnLimiter(o.maxConns, metricsRegisterer(reg, cl), log)
	hs, ln, errc, err := listenAndServe(o, srv, edge, conns)
	if err != nil {
		closeAll(context.Background(), engine, cl)
		return err
	}
	if edge.auth != nil {
		actx, stopAuth := context.WithCancel(ctx)
		defer stopAuth()
		watchTokens(actx, edge.auth, cmp.Or(o.authPoll, time.Second))
	}
	srv.SetReady(true)
	announce(o, ln.Addr().String(), engine, edge, log)

	select {
	case <-ctx.Done():
	case err := <-errc:
		closeAll(context.Background(), engine, cl)
		return err
	}
	return shutdown(o.shutdownGrace, srv, hs, engine, cl, log)
}

// closeAll leaves the cluster (if any) and closes the engine.
func closeAll(ctx context.Context, engine *runtime.Engine, cl *clusterRun) {
	if cl != nil {
		_ = cl.leave(ctx)
	}
	_ = engine.Close(ctx)
}

// metricsRegisterer labels every series of a cluster node with its name.
func metricsRegisterer(reg *prometheus.Registry, cl *clusterRun) prometheus.Registerer {
	if cl == nil {
		return reg
	}
	return prometheus.WrapRegistererWith(prometheus.Labels{"node": cl.name}, reg)
}

// loadSpecs reads the jobs of --config, if any, and adds the caller's.
func loadSpecs(o serverOptions) ([]runtime.Spec, error) {
	var specs []runtime.Spec
	if o.config != "" {
		data, err := os.ReadFile(o.config)
		if err != nil {
			return nil, fmt.Errorf("--config: %w", err)
		}
		if specs, err = runtime.ParseConfig(data); err != nil {
			return nil, fmt.Errorf("%s: %w", o.config, err)
		}
	}
	return append(specs, o.extraSpecs...), nil
}

// openDataDir creates and locks the data directory (one process per data
// directory) and opens its storage; closing it releases the lock. An empty
// dir means no fault tolerance: no storage.
func openDataDir(dir string) (*ft.Dir, error) {
	if dir == "" {
		return nil, nil
	}
	d, err := ft.OpenDir(dir) // locked: one process per data directory
	if err != nil {
		return nil, fmt.Errorf("--data: %w", err)
	}
	return d, nil
}

// newAPIServer makes the HTTP API and dashboard over engine.
func newAPIServer(o serverOptions, engine *runtime.Engine, reg *prometheus.Registry, edge edge, log *slog.Logger, cl *clusterRun) *api.Server {
	cfg := api.Config{
		Engine: engine, MaxBodyBytes: o.maxBody, MaxEventBytes: int(o.maxEvent),
		WSBacklog: o.wsBacklog, MaxWSClients: o.maxWSClients, WSSlowTimeout: o.wsSlowTimeout,
		Gatherer: reg, Registerer: metricsRegisterer(reg, cl), Auth: edge.auth, LoopbackHosts: edge.loopback && edge.auth == nil,
		Dashboard: web.Handler(api.NotFound), Logger: log, DataDir: o.data,
	}
	if cl != nil {
		cfg.Jobs, cfg.Cluster = cl.node, cl.node
	}
	return api.New(cfg)
}

// listenAndServe binds --addr and serves h on it, over TLS when the edge
// has a certificate, its connections capped by conns and closed when idle
// for --idle-timeout; errc receives the error that ends serving.
func listenAndServe(o serverOptions, h http.Handler, edge edge, conns *api.ConnLimiter) (hs *http.Server, ln net.Listener, errc chan error, err error) {
	ln, err = net.Listen("tcp", o.addr)
	if err != nil {
		return nil, nil, nil, err
	}
	hs = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: o.idleTimeout, TLSConfig: edge.tls, ConnState: conns.ConnState}
	limited := conns.Listener(ln, edge.tls != nil)
	errc = make(chan error, 1)
	if edge.tls != nil {
		go func() { errc <- hs.ServeTLS(limited, "", "") }()
	} else {
		go func() { errc <- hs.Serve(limited) }()
	}
	return hs, ln, errc, nil
}

// watchTokens re-reads the tokens when their file changes or on SIGHUP,
// until ctx ends.
func watchTokens(ctx context.Context, auth *api.Auth, poll time.Duration) {
	go auth.Watch(ctx, poll)
	go reloadOnHUP(ctx, auth)
}

// announce logs that the service is up and tells the caller (the demo,
// tests) where.
func announce(o serverOptions, addr string, engine *runtime.Engine, edge edge, log *slog.Logger) {
	scheme := "http"
	if edge.tls != nil {
		scheme = "https"
	}
	log.Info("mlstream serving", "addr", addr, "scheme", scheme, "tokens", edge.auth.Count(), "jobs", len(engine.Jobs()), "version", version)
	if o.onEngine != nil {
		o.onEngine(engine)
	}
	if o.ready != nil {
		l := listening{addr: addr, url: dashboardURL(scheme, addr), auth: edge.auth}
		if edge.tls != nil {
			l.clientTLS = pinnedClientTLS(edge.tls)
		}
		o.ready(l)
	}
}

// shutdown stops taking requests, then drains the queues within grace.
func shutdown(grace time.Duration, srv *api.Server, hs *http.Server, engine *runtime.Engine, cl *clusterRun, log *slog.Logger) error {
	log.Info("shutting down: refusing new requests, draining queues")
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	srv.SetReady(false)
	if err := hs.Shutdown(sctx); err != nil {
		log.Warn("http shutdown", "err", err)
	}
	if cl != nil {
		if err := cl.leave(sctx); err != nil {
			log.Warn("leaving the cluster", "err", err)
		}
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
func dashboardURL(scheme, addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return scheme + "://" + addr + "/"
	}
	if host == "" || host == "::" || host == "0.0.0.0" || strings.HasPrefix(host, "[::") {
		host = "localhost"
	}
	return scheme + "://" + net.JoinHostPort(host, port) + "/"
}

// maxMemoryBytes reads --max-memory: auto (0: the engine's default), none
// (-1: no budget) or a size.
func maxMemoryBytes(v string) (int64, error) {
	switch v {
	case "auto", "":
		return 0, nil
	case "none":
		return -1, nil
	}
	n, err := runtime.ParseBytes(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("--max-memory: want a size such as 8GiB, auto or none; got %q", v)
	}
	return n, nil
}

// startEngine makes the engine and starts the config file's jobs, then the
// jobs recorded at run time in the data directory.
func startEngine(o serverOptions, specs []runtime.Spec, storage *ft.Dir, reg prometheus.Registerer, log *slog.Logger, cl *clusterRun) (*runtime.Engine, error) {
	maxMem, err := maxMemoryBytes(o.maxMemory)
	if err != nil {
		return nil, err
	}
	cfg := runtime.Config{
		Partitions: o.partitions, QueueSize: o.queue, IngestWait: o.ingestWait, Registry: reg, Logger: log,
		MaxMemory: maxMem, MaxJobs: o.maxJobs, MaxPartitions: o.maxPartitions, RescaleTimeout: o.rescaleTimeout,
		AutoscaleInterval: o.autoscaleInterval,
	}
	if storage != nil && cl == nil {
		cfg.Storage = storage
		jobs, err := storage.JobRecords()
		if err != nil {
			return nil, fmt.Errorf("--data: %w", err)
		}
		cfg.Jobs = jobs
	}
	start := func(e *runtime.Engine) error { return e.Start(specs) }
	if cl != nil {
		// Jobs live in the cluster: the node starts them.
		cfg.Cluster = cl.node
		start = func(e *runtime.Engine) error { return cl.start(context.Background(), e, specs) }
	}
	engine := runtime.NewEngine(cfg)
	if err := start(engine); err != nil {
		closeAll(context.Background(), engine, cl)
		var fe *runtime.FileJobError
		if errors.As(err, &fe) {
			var se *runtime.SpecError
			if errors.As(fe.Err, &se) && o.config != "" && fe.Index < len(specs)-len(o.extraSpecs) {
				return nil, fmt.Errorf("%s: jobs[%d].%w", o.config, fe.Index, se)
			}
			return nil, fmt.Errorf("job %q: %w", fe.Name, fe.Err)
		}
		return nil, err
	}
	return engine, nil
}

// setInputLimits applies the flags that bound request bodies and the
// numbers in events; they hold for the whole process.
func setInputLimits(o serverOptions) error {
	api.SetBodyLimits(api.BodyLimits{Timeout: o.bodyTimeout})
	lim := runtime.DefaultLimits()
	if o.maxValue != 0 || o.minTS != 0 || o.maxTS != 0 {
		lim = runtime.Limits{MaxValue: o.maxValue, MinTS: o.minTS, MaxTS: o.maxTS}
	}
	if err := runtime.SetLimits(lim); err != nil {
		return fmt.Errorf("--max-value, --min-ts, --max-ts: %w", err)
	}
	return nil
}
