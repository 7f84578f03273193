// Package api is mlstream's HTTP surface: the routes of DESIGN.md (chi),
// decoding of JSON and NDJSON request bodies, JSON error responses, the
// WebSocket feed (gorilla/websocket) and /metrics. It holds no state of its
// own beyond connections: everything lives in the runtime.Engine.
package api

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/mlstream/mlstream/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Config configures a Server. Zero fields take the defaults noted.
type Config struct {
	Engine *runtime.Engine
	// MaxBodyBytes caps a request body (default 16 MiB); larger gets 413.
	MaxBodyBytes int64
	// MaxEventBytes caps one event (default 1 MiB); larger gets 413.
	MaxEventBytes int
	// WSBacklog is how many messages a WebSocket client may fall behind
	// before messages to it are dropped and counted (default 4096).
	WSBacklog int
	// StatsInterval is the period of `stats` messages (default 1s).
	StatsInterval time.Duration
	// Gatherer serves /metrics (default: an empty registry).
	Gatherer prometheus.Gatherer
	// Dashboard serves GET / (default: 404).
	Dashboard http.Handler
	Logger    *slog.Logger
}

// Server is the HTTP handler of mlstream. Safe for concurrent use.
type Server struct {
	cfg    Config
	engine *runtime.Engine
	log    *slog.Logger
	ready  atomic.Bool
	router chi.Router
}

// New returns a server; it answers /readyz with 503 until SetReady(true).
func New(cfg Config) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 16 << 20
	}
	if cfg.MaxEventBytes <= 0 {
		cfg.MaxEventBytes = 1 << 20
	}
	if cfg.WSBacklog <= 0 {
		cfg.WSBacklog = 4096
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
	s := &Server{cfg: cfg, engine: cfg.Engine, log: cfg.Logger}
	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, apiError{Error: "no route " + r.Method + " " + r.URL.Path})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusMethodNotAllowed, apiError{Error: "method " + r.Method + " not allowed on " + r.URL.Path})
	})
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !s.ready.Load() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "starting"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	r.Handle("/metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}))
	r.Route("/v1", func(r chi.Router) {
		r.Post("/streams/{stream}/events", s.ingest)
		r.Get("/jobs", s.listJobs)
		r.Get("/jobs/{job}", s.getJob)
		r.Put("/jobs/{job}", s.putJob)
		r.Delete("/jobs/{job}", s.deleteJob)
		r.Post("/jobs/{job}/predict", s.predict)
		r.Get("/jobs/{job}/model", s.model)
		r.Get("/jobs/{job}/topk", s.topK)
		r.Get("/jobs/{job}/distinct", s.distinct)
		r.Get("/jobs/{job}/matches", s.matches)
		r.Get("/ws", s.ws)
	})
	if cfg.Dashboard != nil {
		r.Handle("/*", cfg.Dashboard)
	}
	s.router = r
	return s
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
}

func writeError(w http.ResponseWriter, status int, e apiError) { writeJSON(w, status, e) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}
