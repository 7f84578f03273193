// Package api is mlstream's HTTP surface: the routes under /v1 (jobs,
// ingest, the kinds' queries and predictions, the WebSocket feed; chi),
// decoding of JSON and NDJSON request bodies, JSON error responses, the
// WebSocket feed (gorilla/websocket) and /metrics. It holds no state of its
// own beyond connections: everything lives in the runtime.Engine.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/mlstream/mlstream/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Config configures a Server. Zero fields take the defaults noted.
type Config struct {
	Engine *runtime.Engine
	// Jobs creates and deletes jobs (default: Engine). A cluster node
	// passes its own, which stores the job for every node.
	Jobs JobAdmin
	// Cluster answers GET /v1/cluster (nil: 404, single-node mode).
	Cluster ClusterView
	// MaxBodyBytes caps a request body (default 16 MiB); larger gets 413.
	MaxBodyBytes int64
	// MaxEventBytes caps one event (default 1 MiB); larger gets 413.
	MaxEventBytes int
	// WSBacklog is how many messages a WebSocket client may fall behind
	// before messages to it are dropped and counted (default 4096).
	WSBacklog int
	// MaxWSClients caps concurrent WebSocket connections (default 256);
	// an upgrade past it gets 503.
	MaxWSClients int
	// WSSlowTimeout is how long a WebSocket client may keep losing
	// messages (its backlog full) before it is closed (default 10s).
	WSSlowTimeout time.Duration
	// StatsInterval is the period of `stats` messages (default 1s).
	StatsInterval time.Duration
	// Gatherer serves /metrics (default: an empty registry).
	Gatherer prometheus.Gatherer
	// Registerer takes the server's own metrics (default: none kept).
	Registerer prometheus.Registerer
	// Auth holds the bearer tokens; nil: no authentication.
	Auth *Auth
	// LoopbackHosts makes the server refuse requests whose Host is not a
	// loopback name or address (421): set it on a loopback listener
	// without tokens, against DNS rebinding.
	LoopbackHosts bool
	// DataDir is the data directory (--data; empty: none): /readyz is not
	// ready while it cannot be written.
	DataDir string
	// Dashboard serves GET / (default: 404).
	Dashboard http.Handler
	Logger    *slog.Logger
}

// JobAdmin creates, rescales and deletes jobs: the engine, or a cluster
// node.
type JobAdmin interface {
	PutJob(spec runtime.Spec) (created bool, err error)
	Rescale(ctx context.Context, name string, partitions int, reason string) (runtime.RescaleReport, error)
	DeleteJob(name string) error
}

// ClusterView is a cluster node's view of the cluster, for GET
// /v1/cluster: any value that encodes as a JSON object.
type ClusterView interface {
	ClusterStatus() any
}

func (s *Server) clusterStatus(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Cluster == nil {
		writeError(w, http.StatusNotFound, apiError{Error: "not a cluster: this node runs single-node (start it with --cluster or --nats)"})
		return
	}
	writeJSON(w, http.StatusOK, s.cfg.Cluster.ClusterStatus())
}

// Server is the HTTP handler of mlstream. Safe for concurrent use.
type Server struct {
	cfg       Config
	engine    *runtime.Engine
	jobs      JobAdmin
	log       *slog.Logger
	ready     atomic.Bool
	router    chi.Router
	wsClients atomic.Int64
	refused   *prometheus.CounterVec
	disk      *diskProbe // nil without a data directory
}

// New returns a server; it answers /readyz with 503 until SetReady(true).
func New(cfg Config) *Server {
	cfg = withDefaults(cfg)
	s := &Server{cfg: cfg, engine: cfg.Engine, jobs: cfg.Jobs, log: cfg.Logger}
	if s.jobs == nil {
		s.jobs = cfg.Engine
	}
	if cfg.DataDir != "" {
		s.disk = &diskProbe{dir: cfg.DataDir, log: cfg.Logger}
	}
	s.registerMetrics()
	r := chi.NewRouter()
	r.Use(securityHeaders, s.recoverer, s.checkHost, s.checkContentType)
	r.NotFound(notFound)
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusMethodNotAllowed, apiError{Error: "method " + r.Method + " not allowed on " + r.URL.Path})
	})
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", s.readyz)
	r.With(knownParams()).Get("/v1/openapi.json", serveOpenAPI)
	read, ingest, admin := s.require(ScopeRead), s.require(ScopeIngest), s.require(ScopeAdmin)
	r.With(read).Get("/metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}).ServeHTTP)
	none := knownParams()
	r.Route("/v1", func(r chi.Router) {
		r.With(ingest, none).Post("/streams/{stream}/events", s.ingest)
		r.With(ingest, none).Post("/jobs/{job}/labels", s.labels)
		r.Group(func(r chi.Router) {
			r.Use(read)
			r.With(none).Get("/jobs", s.listJobs)
			r.With(none).Get("/jobs/{job}", s.getJob)
			r.With(none).Get("/jobs/{job}/history", s.getHistory)
			r.With(none).Post("/jobs/{job}/predict", s.predict)
			r.Get("/jobs/{job}/query/{name}", s.query)
			r.With(knownParams("format")).Get("/jobs/{job}/model/export", s.exportModel)
			r.With(none).Post("/jobs/{job}/explain", s.explain)
			// The query URLs older than /query/{name}.
			for _, name := range []string{"model", "topk", "distinct", "matches"} {
				r.Get("/jobs/{job}/"+name, s.queryAlias(name))
			}
			r.With(knownParams("jobs", "types")).Get("/ws", s.ws)
			r.With(none).Get("/cluster", s.clusterStatus)
			r.With(none).Get("/whoami", s.whoami)
		})
		r.With(admin, none).Put("/jobs/{job}", s.putJob)
		r.With(admin, none).Delete("/jobs/{job}", s.deleteJob)
		r.With(admin, none).Patch("/jobs/{job}", s.patchJob)
		r.With(admin, none).Put("/jobs/{job}/model", s.importModel)
		r.With(admin, none).Post("/jobs/{job}/pause", s.pauseJob)
		r.With(admin, none).Post("/jobs/{job}/resume", s.resumeJob)
	})
	if cfg.Dashboard != nil {
		r.Handle("/*", cfg.Dashboard)
	}
	s.router = r
	return s
}

func withDefaults(cfg Config) Config {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 16 << 20
	}
	if cfg.MaxEventBytes <= 0 {
		cfg.MaxEventBytes = 1 << 20
	}
	if cfg.WSBacklog <= 0 {
		cfg.WSBacklog = 4096
	}
	if cfg.MaxWSClients <= 0 {
		cfg.MaxWSClients = 256
	}
	if cfg.WSSlowTimeout <= 0 {
		cfg.WSSlowTimeout = 10 * time.Second
	}
	if cfg.StatsInterval <= 0 {
		cfg.StatsInterval = time.Second
	}
	if cfg.Gatherer == nil {
		cfg.Gatherer = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

// registerMetrics makes the counter of refused requests, registered when
// the config has a Registerer. (The runtime counts WebSocket clients.)
func (s *Server) registerMetrics() {
	s.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mlstream_http_refused_total",
		Help: "Requests refused by the HTTP edge, by reason (auth_missing, auth_invalid, auth_scope, content_type, host, ws_full, ws_slow, panic).",
	}, []string{"reason"})
	if s.cfg.Registerer != nil {
		s.cfg.Registerer.MustRegister(s.refused)
	}
}

// countRefusal counts a request refused at the edge for reason.
func (s *Server) countRefusal(reason string) { s.refused.WithLabelValues(reason).Inc() }

// NotFound answers the JSON 404 of an unknown path; the dashboard uses it
// for paths it does not serve.
var NotFound http.Handler = http.HandlerFunc(notFound)

func notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, apiError{Error: "no route " + r.Method + " " + r.URL.Path})
}

// staleNode is a cluster node that knows when it is cut off from the
// others: then /readyz is 503 "stale", saying why and for how long.
type staleNode interface {
	Stale() (reason string, behind time.Duration, stale bool)
}

// SetReady sets what /readyz answers.
func (s *Server) SetReady(ok bool) { s.ready.Store(ok) }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.router.ServeHTTP(w, r) }

// apiError is the JSON body of every error response.
type apiError struct {
	Error        string `json:"error"`
	Line         int    `json:"line,omitempty"`
	Field        string `json:"field,omitempty"`
	RetryAfterMs int64  `json:"retry_after_ms,omitempty"`
	// Scope is the token scope a 403 asked for.
	Scope string `json:"scope,omitempty"`
}

func writeError(w http.ResponseWriter, status int, e apiError) { writeJSON(w, status, e) }

// writeJSON encodes v whole before writing the status, so a value that
// cannot be encoded (NaN, say) is a 500 naming the problem, not a 200 with
// a cut body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		slog.Error("encoding a response", "err", err)
		buf.Reset()
		_ = json.NewEncoder(&buf).Encode(apiError{Error: "internal error: encoding the response: " + err.Error()})
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}
