package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"github.com/mlstream/mlstream/runtime"
)

// upgrader keeps gorilla's default Origin check (a browser page may open
// the feed only from this service's own origin) and selects the
// "mlstream" subprotocol, which a browser offers next to its token
// ("bearer.<token>"): a browser drops a connection whose server selects
// none of the protocols it offered.
var upgrader = websocket.Upgrader{ReadBufferSize: 1024, WriteBufferSize: 64 << 10, Subprotocols: []string{wsProtocol},
	// A refused handshake is a JSON error like every other answer.
	Error: func(w http.ResponseWriter, r *http.Request, status int, reason error) {
		writeError(w, status, apiError{Error: "WebSocket handshake: " + reason.Error()})
	},
}

const (
	wsWriteWait = 10 * time.Second
	wsPongWait  = 60 * time.Second
	wsPingEvery = wsPongWait / 2
)

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// ws serves GET /v1/ws?jobs=a,b&types=prediction,stats. Without jobs, all
// jobs (also ones declared later); without types, all types.
func (s *Server) ws(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	jobs := splitList(q.Get("jobs"))
	for _, j := range jobs {
		if _, err := s.engine.Job(j); err != nil {
			writeError(w, http.StatusNotFound, apiError{Error: fmt.Sprintf("no job %q", j), Field: "jobs"})
			return
		}
	}
	types := splitList(q.Get("types"))
	for _, t := range types {
		if known := runtime.OutputTypes(); !slices.Contains(known, t) {
			writeError(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("unknown message type %q; known: %s", t, strings.Join(known, ", ")), Field: "types"})
			return
		}
	}
	if len(types) == 0 {
		types = runtime.OutputTypes()
	}
	if !s.takeWSSlot(w, r) {
		return
	}
	defer s.wsClients.Add(-1)
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader has answered
	}
	hub := s.engine.Hub()
	sub := hub.Subscribe(jobs, types, s.cfg.WSBacklog)
	defer hub.Unsubscribe(sub)

	// The reader notices the client going away and answers pings.
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		conn.SetReadLimit(4096)
		_ = conn.SetReadDeadline(time.Now().Add(wsPongWait))
		conn.SetPongHandler(func(string) error { return conn.SetReadDeadline(time.Now().Add(wsPongWait)) })
		for {
			if _, _, err := conn.NextReader(); err != nil {
				return
			}
		}
	}()
	defer conn.Close()

	wantStats := slices.Contains(types, runtime.TypeStats)
	statsTick := time.NewTicker(s.cfg.StatsInterval)
	defer statsTick.Stop()
	pingTick := time.NewTicker(wsPingEvery)
	defer pingTick.Stop()
	slow := slowWatch{timeout: s.cfg.WSSlowTimeout}
	slowTick := time.NewTicker(min(s.cfg.WSSlowTimeout/4, time.Second))
	defer slowTick.Stop()
	write := func(msg []byte) bool {
		_ = conn.SetWriteDeadline(time.Now().Add(wsWriteWait))
		return conn.WriteMessage(websocket.TextMessage, msg) == nil
	}
	if slices.Contains(types, runtime.TypeRecovery) && !s.sendRecoveries(jobs, write) {
		return
	}
	if wantStats && !s.sendStats(sub, jobs, write) {
		return
	}
	for {
		select {
		case <-gone:
			return
		case msg := <-sub.C:
			if !write(msg) {
				return
			}
		case <-statsTick.C:
			if wantStats && !s.sendStats(sub, jobs, write) {
				return
			}
		case <-pingTick.C:
			if conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(wsWriteWait)) != nil {
				return
			}
		case now := <-slowTick.C:
			if slow.behind(sub.Dropped(), now) {
				s.closeSlow(conn, r, sub.Dropped())
				return
			}
		}
	}
}

// takeWSSlot counts a new WebSocket client, or answers 503 when
// MaxWSClients are connected. The caller gives the slot back.
func (s *Server) takeWSSlot(w http.ResponseWriter, r *http.Request) bool {
	if n := s.wsClients.Add(1); n > int64(s.cfg.MaxWSClients) {
		s.wsClients.Add(-1)
		s.countRefusal("ws_full")
		s.log.Warn("WebSocket refused: too many clients", "max", s.cfg.MaxWSClients, "remote", r.RemoteAddr)
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, apiError{Error: fmt.Sprintf("too many WebSocket clients (the limit is %d); try again later", s.cfg.MaxWSClients)})
		return false
	}
	return true
}

// slowWatch tells a client that keeps losing messages from one that lost
// a burst: it is behind when its drop count has grown at every check for
// longer than timeout.
type slowWatch struct {
	timeout     time.Duration
	lastDropped uint64
	since       time.Time // first check of the current run of drops; zero: none
}

func (sw *slowWatch) behind(dropped uint64, now time.Time) bool {
	grew := dropped > sw.lastDropped
	sw.lastDropped = dropped
	if !grew {
		sw.since = time.Time{}
		return false
	}
	if sw.since.IsZero() {
		sw.since = now
	}
	return now.Sub(sw.since) >= sw.timeout
}

// closeSlow closes a client that stayed behind, with a close frame saying
// why (1008, policy violation), and logs it.
func (s *Server) closeSlow(conn *websocket.Conn, r *http.Request, dropped uint64) {
	s.countRefusal("ws_slow")
	reason := fmt.Sprintf("too slow: lost messages for %v (%d dropped); reconnect", s.cfg.WSSlowTimeout, dropped)
	s.log.Warn("WebSocket client closed: too slow", "remote", r.RemoteAddr, "dropped", dropped, "for", s.cfg.WSSlowTimeout)
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.ClosePolicyViolation, reason), time.Now().Add(wsWriteWait))
}

func (s *Server) sendStats(sub *runtime.Sub, jobs []string, write func([]byte) bool) bool {
	now := time.Now().UnixMilli()
	for _, j := range s.selectedJobs(jobs) {
		msg, err := json.Marshal(runtime.StatsMessage{Envelope: runtime.Envelope{Type: runtime.TypeStats, Job: j.Name(), TS: now}, Dropped: sub.Dropped(), Stats: j.Status(false)})
		if err != nil {
			s.log.Error("encoding stats", "err", err)
			continue
		}
		if !write(msg) {
			return false
		}
	}
	return true
}

// selectedJobs are the engine's jobs named in jobs, or all of them when
// jobs is empty.
func (s *Server) selectedJobs(jobs []string) []*runtime.Job {
	all := s.engine.Jobs()
	if len(jobs) == 0 {
		return all
	}
	return slices.DeleteFunc(all, func(j *runtime.Job) bool { return !slices.Contains(jobs, j.Name()) })
}

// sendRecoveries tells a new subscriber how each job last recovered: the
// recovery happened before anyone could connect.
func (s *Server) sendRecoveries(jobs []string, write func([]byte) bool) bool {
	for _, j := range s.selectedJobs(jobs) {
		rep := j.Recovery()
		if rep == nil {
			continue
		}
		msg, err := runtime.EncodeRecovery(j.Name(), rep)
		if err != nil {
			s.log.Error("encoding recovery", "err", err)
			continue
		}
		if !write(msg) {
			return false
		}
	}
	return true
}
