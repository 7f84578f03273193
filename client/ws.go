package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Message types of the WebSocket feed.
const (
	TypePrediction = "prediction" // a logreg job predicted (and learned) an event
	TypeStats      = "stats"      // a job's status, every second
	TypeBackup     = "backup"     // a state backup was written
	TypeRecovery   = "recovery"   // a job restarted from its backups
	TypeTopK       = "topk"       // a heavy_hitters job's top k changed
	TypeDistinct   = "distinct"   // a distinct job's count changed
	TypeMatch      = "match"      // a join found a pair
	TypeJoin       = "join"       // a join's statistics and estimates, every second
	TypeDrift      = "drift"      // a logreg partition's drift detector fired
	TypeFailover   = "failover"   // a partition changed owner (cluster mode)
)

// feedQuiet is how long a feed may stay silent, pings included, before the
// connection counts as dead: the server pings every 30s.
const feedQuiet = 90 * time.Second

// ErrClosed is what Next returns after Close.
var ErrClosed = errors.New("client: subscription closed")

// SubscribeOptions select the messages of a subscription.
type SubscribeOptions struct {
	// Jobs to follow (empty: every job, also ones declared later). An
	// unknown job is a 404 *Error.
	Jobs []string
	// Types of messages (empty: all); an unknown type is a 400 *Error.
	Types []string
	// WaitSubscribed makes Subscribe return only once the server has
	// registered the subscription, so that it sees the outputs of events
	// posted next. The server registers it just after the handshake and
	// says so only by the stats messages it sends at once: the client asks
	// for stats too (and drops them unless Types has them) and waits for
	// the first. Some job must exist, or Subscribe waits until ctx ends.
	WaitSubscribed bool
}

// Message is one message of the feed. The typed accessors decode it by
// its Type; Raw is the whole JSON message.
type Message struct {
	Type string `json:"type"`
	Job  string `json:"job"`
	// TS is the message's time in epoch ms (for a prediction, the event's
	// time); 0 when the message has none.
	TS  int64           `json:"ts"`
	Raw json.RawMessage `json:"-"`
}

// PredictionMessage is a prediction message: an event's key and
// probability, its label when it had one (it was then learned, after the
// prediction), the model version and the event's sequence number.
type PredictionMessage struct {
	Key          string  `json:"key"`
	P            float64 `json:"p"`
	Label        *int    `json:"label,omitempty"`
	ModelVersion uint64  `json:"model_version"`
	TS           int64   `json:"ts"`
	Seq          uint64  `json:"seq"`
}

// StatsMessage is a stats message. Dropped counts the messages this
// subscription missed because it fell behind by more than the server's
// backlog.
type StatsMessage struct {
	Dropped uint64    `json:"dropped"`
	Stats   JobStatus `json:"stats"`
}

// BackupMessage is a backup message: a unit of state was backed up.
type BackupMessage struct {
	Index      uint64   `json:"index"`
	Full       bool     `json:"full"`
	Bytes      int64    `json:"bytes"`
	Divergence float64  `json:"divergence"`
	LastSeqs   []uint64 `json:"last_seqs"`
	Partitions []int    `json:"partitions"`
	// Partition is the unit's partition, nil for a unit of the whole job.
	Partition *int `json:"partition,omitempty"`
}

// DriftMessage is a drift message: a partition's Page-Hinkley detector saw
// its per-event log loss rise. Seq is the event that completed the drift,
// Events how many labelled events the partition had validated then, Drifts
// the job's drift count including this one.
type DriftMessage struct {
	Partition int    `json:"partition"`
	Seq       uint64 `json:"seq"`
	Events    int64  `json:"events"`
	Drifts    int64  `json:"drifts"`
	OnDrift   string `json:"on_drift"`
}

// Recovery is how a job came back from its backups (recovery messages).
type Recovery struct {
	Job      string    `json:"job"`
	Clean    bool      `json:"clean"` // after a graceful shutdown: nothing lost
	At       time.Time `json:"at"`
	Failures int       `json:"failures"`
	Backups  int       `json:"backups"`
	Replayed int       `json:"replayed"`
	// Lost events, and whether that stayed within the job's bound (the
	// bound itself is in Raw).
	Lost       int64           `json:"lost"`
	Within     bool            `json:"within"`
	DurationMs float64         `json:"duration_ms"`
	Raw        json.RawMessage `json:"-"`
}

// Prediction decodes a prediction message.
func (m Message) Prediction() (PredictionMessage, error) {
	return decodeMessage[PredictionMessage](m, TypePrediction, "")
}

// Stats decodes a stats message.
func (m Message) Stats() (StatsMessage, error) { return decodeMessage[StatsMessage](m, TypeStats, "") }

// Backup decodes a backup message.
func (m Message) Backup() (BackupMessage, error) {
	return decodeMessage[BackupMessage](m, TypeBackup, "")
}

// Recovery decodes a recovery message.
func (m Message) Recovery() (Recovery, error) {
	r, err := decodeMessage[Recovery](m, TypeRecovery, TypeRecovery)
	if err == nil {
		r.Raw = m.payload(TypeRecovery)
	}
	return r, err
}

// Failover decodes a failover message.
func (m Message) Failover() (Failover, error) {
	return decodeMessage[Failover](m, TypeFailover, TypeFailover)
}

// TopK decodes a topk message.
func (m Message) TopK() (TopK, error) { return decodeMessage[TopK](m, TypeTopK, TypeTopK) }

// Distinct decodes a distinct message.
func (m Message) Distinct() (Distinct, error) {
	return decodeMessage[Distinct](m, TypeDistinct, TypeDistinct)
}

// Match decodes a match message.
func (m Message) Match() (Match, error) { return decodeMessage[Match](m, TypeMatch, TypeMatch) }

// Drift decodes a drift message.
func (m Message) Drift() (DriftMessage, error) {
	return decodeMessage[DriftMessage](m, TypeDrift, "")
}

// Join decodes a join message.
func (m Message) Join() (Matches, error) { return decodeMessage[Matches](m, TypeJoin, TypeJoin) }

// payload is the object under key, or nil.
func (m Message) payload(key string) json.RawMessage {
	var fields map[string]json.RawMessage
	if json.Unmarshal(m.Raw, &fields) != nil {
		return nil
	}
	return fields[key]
}

// decodeMessage decodes a message of type typ: the object under key, or
// the whole message when key is "".
func decodeMessage[T any](m Message, typ, key string) (T, error) {
	var v T
	if m.Type != typ {
		return v, fmt.Errorf("client: a %q message is not a %q message", m.Type, typ)
	}
	data := []byte(m.Raw)
	if key != "" {
		if data = m.payload(key); data == nil {
			return v, fmt.Errorf("client: %s message without %q", typ, key)
		}
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return v, fmt.Errorf("client: decoding a %s message: %w", typ, err)
	}
	return v, nil
}

// Subscription is a live WebSocket feed. Read it with Next; it ends with
// Close or when the context given to Subscribe ends.
type Subscription struct {
	conn       *websocket.Conn
	msgs       chan Message
	subscribed chan struct{} // closed at the first stats message
	err        error         // why msgs was closed; read after it is
	closeOnce  sync.Once
	closed     chan struct{} // closed by Close
	done       chan struct{} // closed when read returns, after err is set
}

// Subscribe opens the WebSocket feed (GET /v1/ws) with the client's token.
// A refused handshake is an *Error. The subscription lives until Close or
// until ctx ends.
func (c *Client) Subscribe(ctx context.Context, opts SubscribeOptions) (*Subscription, error) {
	types := opts.Types
	dropStats := false
	if opts.WaitSubscribed && len(types) > 0 && !slices.Contains(types, TypeStats) {
		types = append(slices.Clip(types), TypeStats)
		dropStats = true
	}
	conn, err := c.dialFeed(ctx, opts.Jobs, types)
	if err != nil {
		return nil, err
	}
	s := &Subscription{conn: conn, msgs: make(chan Message, 256), subscribed: make(chan struct{}), closed: make(chan struct{}), done: make(chan struct{})}
	stop := context.AfterFunc(ctx, func() { s.Close() })
	go func() {
		defer stop()
		s.read(dropStats)
	}()
	if !opts.WaitSubscribed {
		return s, nil
	}
	select {
	case <-s.subscribed:
		return s, nil
	case <-s.done:
		s.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("client: waiting for the subscription: %w", ctx.Err())
		}
		return nil, s.err
	}
}

// dialFeed makes the WebSocket handshake, reading a refusal as an *Error.
func (c *Client) dialFeed(ctx context.Context, jobs, types []string) (*websocket.Conn, error) {
	u := *c.base
	u.Scheme = map[string]string{"http": "ws", "https": "wss"}[u.Scheme]
	u.Path += "/v1/ws"
	q := u.Query()
	if len(jobs) > 0 {
		q.Set("jobs", strings.Join(jobs, ","))
	}
	if len(types) > 0 {
		q.Set("types", strings.Join(types, ","))
	}
	u.RawQuery = q.Encode()
	h := http.Header{}
	c.setHeaders(h)
	h.Del("Accept")
	conn, resp, err := c.cfg.WSDialer.DialContext(ctx, u.String(), h)
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			return nil, newError(resp.StatusCode, resp.Header, body, time.Now())
		}
		return nil, fmt.Errorf("client: subscribing: %w", err)
	}
	conn.SetReadLimit(c.cfg.MaxResponseBytes)
	return conn, nil
}

// read moves messages from the connection to s.msgs until it fails.
func (s *Subscription) read(dropStats bool) {
	defer close(s.done)
	defer close(s.msgs)
	alive := func() { _ = s.conn.SetReadDeadline(time.Now().Add(feedQuiet)) }
	alive()
	s.conn.SetPingHandler(func(data string) error {
		alive()
		_ = s.conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
		return nil
	})
	first := true
	for {
		_, data, err := s.conn.ReadMessage()
		if err != nil {
			s.err = s.readErr(err)
			return
		}
		alive()
		m := Message{Raw: data}
		if err := json.Unmarshal(data, &m); err != nil {
			s.err = fmt.Errorf("client: a feed message is not JSON: %w", err)
			return
		}
		if m.Type == TypeStats {
			if first {
				first = false
				close(s.subscribed)
			}
			if dropStats {
				continue
			}
		}
		select {
		case s.msgs <- m:
		case <-s.closed:
			s.err = ErrClosed
			return
		}
	}
}

func (s *Subscription) readErr(err error) error {
	select {
	case <-s.closed:
		return ErrClosed
	default:
		return fmt.Errorf("client: feed: %w", err)
	}
}

// Next returns the next message. It fails when ctx ends, after Close
// (ErrClosed), or when the connection fails.
func (s *Subscription) Next(ctx context.Context) (Message, error) {
	select {
	case m, ok := <-s.msgs:
		if !ok {
			return Message{}, s.err
		}
		return m, nil
	case <-ctx.Done():
		return Message{}, ctx.Err()
	}
}

// Close ends the subscription.
func (s *Subscription) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.closed)
		_ = s.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		err = s.conn.Close()
	})
	return err
}
