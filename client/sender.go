package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// SenderConfig configures a Sender. The zero value of every field takes
// the default noted.
type SenderConfig struct {
	// MaxEvents is the most events a batch (one request) holds (default
	// 500). With a Rate, a batch holds at most ceil(Rate/10) events, so
	// that events flow at 100 ms granularity rather than in bursts.
	MaxEvents int
	// MaxBytes sends a batch early once its body reaches this many bytes
	// (default 4 MiB; the server's default limit is 16 MiB).
	MaxBytes int
	// Concurrency is the number of requests in flight (default 2). Batches
	// may arrive out of order across them; the events inside a batch keep
	// the order they were added in.
	Concurrency int
	// Rate paces the batches to this many events per second (0: as fast as
	// the server takes them). The schedule is a token bucket of one batch
	// (GCRA): after a stall no burst follows.
	Rate float64
	// FlushAfter sends a batch that is not full this long after its first
	// event was added (default 100ms; negative: only when full, on Flush
	// and on Close).
	FlushAfter time.Duration
	// Grace lets requests in flight finish for this long after the
	// Sender's context ends (default 0: they are cancelled with it).
	Grace time.Duration
	// OnResult, when set, is called once for every batch the server
	// answered for good: accepted, or refused as bad (400) or too large
	// (413). It is called from the sending goroutines, possibly at once.
	OnResult func(Result)
	// OnRetry, when set, is called before each retry of a batch.
	OnRetry func(*Batch, Retry)
	// OnBadEvent, when set, keeps one bad event from costing its batch's
	// good ones: a batch refused (400) for an event the error names by its
	// line is sent again without that event, which is reported here and
	// counted as refused, until the server accepts the rest or refuses it
	// for a reason that names no event (then the rest is refused as a
	// whole, as without OnBadEvent). The server refuses a request whole at
	// its first bad event, so a batch costs at most one request more per
	// bad event. Called from the sending goroutines, possibly at once; the
	// event's bytes are valid only during the call.
	OnBadEvent func(BadEvent)
	// Recycle hands the arrays of an answered batch to a later one, sparing
	// an allocation per batch. OnResult and OnRetry must then not keep a
	// *Batch, its Body or its Tags after they return.
	Recycle bool
}

// Defaults of SenderConfig.
const (
	DefaultBatchEvents = 500
	DefaultBatchBytes  = 4 << 20
	DefaultConcurrency = 2
	DefaultFlushAfter  = 100 * time.Millisecond
)

// Batch is the body of one request and a tag per event.
type Batch struct {
	Body []byte // NDJSON, one event a line
	// Tags holds, per event in order, the tag it was added with (AddRaw)
	// or its 1-based position among the events added (Add).
	Tags []int64
}

// Len is the number of events.
func (b *Batch) Len() int { return len(b.Tags) }

// Result is the server's final answer to a batch.
type Result struct {
	Batch *Batch
	// Ingested is the answer to an accepted batch.
	Ingested Ingested
	// Err is the *Error of a refused batch (400 or 413), nil when accepted.
	Err *Error
}

// BadEvent is an event the server refused on its own (SenderConfig.
// OnBadEvent).
type BadEvent struct {
	Tag   int64  // as in Batch.Tags
	Event []byte // the event's line, without its newline
	Err   *Error // the server's answer, its Line that of the request
}

// SenderStats are a Sender's counts so far.
type SenderStats struct {
	Added    int64 // events added
	Sent     int64 // events with a final answer: accepted or refused
	Accepted int64
	Refused  int64 // events of batches refused as bad or too large
	// Retries429 counts retries after a 429, RetriesErr after connection
	// errors, timeouts, 408 and 5xx.
	Retries429, RetriesErr int64
}

// SendError stops a Sender: the server refused a batch in a way that
// refuses every other too (404: no job reads the stream; 401, 403, ...), or
// the retries of a batch gave up (*GiveUpError). It wraps that error.
type SendError struct {
	Batch *Batch
	Err   error
}

func (e *SendError) Error() string { return fmt.Sprintf("sending %d events: %v", e.Batch.Len(), e.Err) }
func (e *SendError) Unwrap() error { return e.Err }

// Sender streams events to one stream in batches, with Concurrency
// requests in flight, each retried as the client's RetryPolicy says
// (resending the whole batch: a request is accepted or refused whole). A
// batch refused as bad (400) or too large (413) is reported to OnResult
// and the Sender goes on; any other refusal and a batch whose retries give
// up stop it with a *SendError. Add blocks while Concurrency batches are
// in flight. Close must be called: it ends the sending goroutines. Safe
// for concurrent use.
type Sender struct {
	c      *Client
	stream string
	cfg    SenderConfig
	limit  int // events per batch

	mu     sync.Mutex
	cur    *Batch
	gen    uint64 // batch generation, for FlushAfter timers
	timer  *time.Timer
	pace   pacer
	closed bool

	work chan *Batch
	free chan *Batch // answered batches to fill again (Recycle)
	wg   sync.WaitGroup

	ctx       context.Context // the user's
	runCtx    context.Context // ends with the user's ctx or a fatal error: no new work
	cancelRun context.CancelFunc
	reqCtx    context.Context // requests: ends on a fatal error, or Grace after ctx
	cancelReq context.CancelFunc
	stopGrace func() bool

	fatalMu sync.Mutex
	fatal   error

	added, sent, accepted, refused, retries429, retriesErr atomic.Int64
}

// NewSender returns a Sender of events to stream. When ctx ends the Sender
// stops sending; Close then reports ctx's error.
func (c *Client) NewSender(ctx context.Context, stream string, cfg SenderConfig) *Sender {
	if cfg.MaxEvents <= 0 {
		cfg.MaxEvents = DefaultBatchEvents
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultBatchBytes
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.FlushAfter == 0 {
		cfg.FlushAfter = DefaultFlushAfter
	}
	s := &Sender{c: c, stream: stream, cfg: cfg, limit: cfg.MaxEvents, cur: &Batch{}, pace: pacer{rate: cfg.Rate}, work: make(chan *Batch)}
	if cfg.Recycle {
		s.free = make(chan *Batch, cfg.Concurrency+1)
	}
	if cfg.Rate > 0 {
		s.limit = min(s.limit, max(1, int(math.Ceil(cfg.Rate/10))))
	}
	s.ctx = ctx
	s.runCtx, s.cancelRun = context.WithCancel(ctx)
	s.reqCtx, s.cancelReq = context.WithCancel(context.WithoutCancel(ctx))
	s.stopGrace = context.AfterFunc(ctx, func() { time.AfterFunc(cfg.Grace, s.cancelReq) })
	for range cfg.Concurrency {
		s.wg.Go(func() {
			for b := range s.work {
				s.send(b)
			}
		})
	}
	return s
}

// Add encodes v as JSON and adds it as one event, tagged with its position
// among the events added.
func (s *Sender) Add(v any) error {
	line, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("client: encoding an event: %w", err)
	}
	return s.add(line, 0, true)
}

// AddRaw adds one event already encoded as JSON on one line (surrounding
// white space is dropped; an empty line is skipped). tag comes back in
// Batch.Tags, e.g. the event's line in a file.
func (s *Sender) AddRaw(event []byte, tag int64) error {
	event = bytes.TrimSpace(event)
	if len(event) == 0 {
		return s.err()
	}
	if bytes.IndexByte(event, '\n') >= 0 {
		return errors.New("client: an event for AddRaw must be on one line")
	}
	return s.add(event, tag, false)
}

func (s *Sender) add(event []byte, tag int64, position bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usableLocked(); err != nil {
		return err
	}
	n := s.added.Add(1)
	if position {
		tag = n
	}
	b := s.cur
	b.Body = append(append(b.Body, event...), '\n')
	b.Tags = append(b.Tags, tag)
	return s.addedLocked()
}

// usableLocked is the error of an Add now: the Sender stopped or closed.
func (s *Sender) usableLocked() error {
	if err := s.err(); err != nil {
		return err
	}
	if s.closed {
		return errors.New("client: Add after Close")
	}
	return nil
}

// addedLocked sends the current batch once it is full, and starts its
// FlushAfter timer when it got its first event.
func (s *Sender) addedLocked() error {
	b := s.cur
	if len(b.Tags) >= s.limit || len(b.Body) >= s.cfg.MaxBytes {
		return s.flushLocked()
	}
	if len(b.Tags) == 1 && s.cfg.FlushAfter > 0 {
		gen := s.gen
		s.timer = time.AfterFunc(s.cfg.FlushAfter, func() { s.flushGen(gen) })
	}
	return nil
}

// AddLines adds every line of lines (NDJSON: lines end with '\n', the
// last one may not) as AddRaw would, each tagged with firstTag plus its
// index among the lines: blank lines are skipped but counted. It is how
// to send a file: many lines a call, copied into the batches in runs of
// lines rather than one at a time.
func (s *Sender) AddLines(lines []byte, firstTag int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usableLocked(); err != nil {
		return err
	}
	a := linesAdder{s: s, lines: lines}
	tag := firstTag
	for i := 0; i < len(lines); tag++ {
		end, next := len(lines), len(lines)
		if k := bytes.IndexByte(lines[i:], '\n'); k >= 0 {
			end, next = i+k, i+k+1
		}
		var err error
		if line := lines[i:end]; end < next && len(line) > 0 && !isSpace(line[0]) && !isSpace(line[len(line)-1]) {
			err = a.clean(next, tag)
		} else {
			err = a.trimmed(i, next, bytes.TrimSpace(line), tag)
		}
		if err != nil {
			return err
		}
		i = next
	}
	a.copyRun(len(lines))
	a.count()
	if len(s.cur.Tags) > 0 && s.timer == nil && s.cfg.FlushAfter > 0 {
		gen := s.gen
		s.timer = time.AfterFunc(s.cfg.FlushAfter, func() { s.flushGen(gen) })
	}
	return nil
}

// linesAdder is AddLines's progress through its lines: the lines from
// run on are whole lines that go into the current batch as they are, not
// yet copied; added counts the events not yet in the Sender's stats.
type linesAdder struct {
	s     *Sender
	lines []byte
	run   int
	added int64
}

// clean adds the line that ends before next as it is, sending the batch
// when full.
func (a *linesAdder) clean(next int, tag int64) error {
	b := a.s.cur
	b.Tags = append(b.Tags, tag)
	a.added++
	if len(b.Tags) >= a.s.limit || len(b.Body)+next-a.run >= a.s.cfg.MaxBytes {
		a.copyRun(next)
		return a.flush()
	}
	return nil
}

// trimmed adds ev, the line from i to next without its white space,
// unless it is empty.
func (a *linesAdder) trimmed(i, next int, ev []byte, tag int64) error {
	a.copyRun(i)
	a.run = next
	if len(ev) == 0 {
		return nil
	}
	b := a.s.cur
	b.Body = append(append(b.Body, ev...), '\n')
	b.Tags = append(b.Tags, tag)
	a.added++
	if len(b.Tags) >= a.s.limit || len(b.Body) >= a.s.cfg.MaxBytes {
		return a.flush()
	}
	return nil
}

// copyRun copies the lines from run to end into the current batch.
func (a *linesAdder) copyRun(end int) {
	b := a.s.cur
	b.Body = append(b.Body, a.lines[a.run:end]...)
	a.run = end
}

func (a *linesAdder) count() {
	a.s.added.Add(a.added)
	a.added = 0
}

func (a *linesAdder) flush() error {
	a.count()
	return a.s.flushLocked()
}

// isSpace says whether a line starting or ending with c may need
// bytes.TrimSpace: ASCII control characters and space, and any byte of a
// multi-byte character (Unicode has white space beyond ASCII).
func isSpace(c byte) bool { return c <= ' ' || c >= 0x80 }

// flushGen sends the batch of generation gen if it is still filling.
func (s *Sender) flushGen(gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen == s.gen && !s.closed {
		_ = s.flushLocked()
	}
}

// Flush hands the batch being filled to a sending goroutine, waiting for
// one to be free.
func (s *Sender) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flushLocked()
}

// flushLocked paces and dispatches the current batch; s.mu is held.
func (s *Sender) flushLocked() error {
	b := s.cur
	if len(b.Tags) == 0 {
		return s.err()
	}
	s.cur = s.nextBatch(b)
	s.gen++
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	if !s.pace.wait(s.runCtx, len(b.Tags)) {
		return s.err()
	}
	select {
	case s.work <- b:
		return nil
	case <-s.runCtx.Done():
		return s.err()
	}
}

// Close sends what was added, waits for every batch's answer and returns
// the error that stopped the Sender (a *SendError), or ctx's error when it
// ended first, or nil.
func (s *Sender) Close() error {
	s.mu.Lock()
	if !s.closed {
		_ = s.flushLocked()
		s.closed = true
		close(s.work)
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.stopGrace()
	s.cancelReq()
	s.cancelRun()
	return s.err()
}

// Stats returns the counts so far.
func (s *Sender) Stats() SenderStats {
	return SenderStats{
		Added: s.added.Load(), Sent: s.sent.Load(), Accepted: s.accepted.Load(), Refused: s.refused.Load(),
		Retries429: s.retries429.Load(), RetriesErr: s.retriesErr.Load(),
	}
}

// err is the fatal error, else the error of the Sender's context.
func (s *Sender) err() error {
	s.fatalMu.Lock()
	defer s.fatalMu.Unlock()
	if s.fatal != nil {
		return s.fatal
	}
	return s.ctx.Err()
}

// stop records the first fatal error and stops all work, in flight
// included.
func (s *Sender) stop(err error) {
	s.fatalMu.Lock()
	if s.fatal == nil {
		s.fatal = err
	}
	s.fatalMu.Unlock()
	s.cancelRun()
	s.cancelReq()
}

// send delivers one batch; it returns when the batch has a final answer,
// when the Sender stops, or after stopping it.
func (s *Sender) send(b *Batch) {
	cl := &call{sleepCtx: s.runCtx, onRetry: func(r Retry) {
		var e *Error
		if errors.As(r.Err, &e) && e.Status == http.StatusTooManyRequests {
			s.retries429.Add(1)
		} else {
			s.retriesErr.Add(1)
		}
		if s.cfg.OnRetry != nil {
			s.cfg.OnRetry(b, r)
		}
	}}
	ing, err := s.c.postEvents(s.reqCtx, cl, s.stream, b.Body)
	var e *Error
	var gu *GiveUpError
	for err != nil && s.cfg.OnBadEvent != nil && !errors.As(err, &gu) && errors.As(err, &e) && s.dropBad(b, e) {
		if b.Len() == 0 {
			s.report(Result{Batch: b})
			return
		}
		// A new call: a new idempotency key (the refused attempt stored
		// nothing) and its own retries.
		cl = &call{sleepCtx: cl.sleepCtx, onRetry: cl.onRetry}
		ing, err = s.c.postEvents(s.reqCtx, cl, s.stream, b.Body)
	}
	n := int64(b.Len())
	switch {
	case err == nil:
		s.accepted.Add(int64(ing.Accepted))
		s.sent.Add(n)
		s.report(Result{Batch: b, Ingested: ing})
	case !errors.As(err, &gu) && errors.As(err, &e) && (e.Status == http.StatusBadRequest || e.Status == http.StatusRequestEntityTooLarge):
		s.refused.Add(n)
		s.sent.Add(n)
		s.report(Result{Batch: b, Err: e})
	case s.runCtx.Err() != nil || s.reqCtx.Err() != nil:
		// stopped: the context ended or another batch stopped the Sender
	default:
		s.stop(&SendError{Batch: b, Err: err})
	}
}

// dropBad takes the event that e, a refusal of b, names out of b,
// reporting it to OnBadEvent, and says whether it did: only a 400 naming
// a line of b (one event a line) names one.
func (s *Sender) dropBad(b *Batch, e *Error) bool {
	if e.Status != http.StatusBadRequest || e.Line < 1 || e.Line > b.Len() {
		return false
	}
	start := 0
	for range e.Line - 1 {
		start += bytes.IndexByte(b.Body[start:], '\n') + 1
	}
	end := start + bytes.IndexByte(b.Body[start:], '\n')
	if end < start {
		return false // not one event a line: leave the batch whole
	}
	s.cfg.OnBadEvent(BadEvent{Tag: b.Tags[e.Line-1], Event: b.Body[start:end], Err: e})
	s.refused.Add(1)
	s.sent.Add(1)
	b.Body = append(b.Body[:start], b.Body[end+1:]...)
	b.Tags = append(b.Tags[:e.Line-1], b.Tags[e.Line:]...)
	return true
}

func (s *Sender) report(r Result) {
	if s.cfg.OnResult != nil {
		s.cfg.OnResult(r)
	}
	if s.free != nil {
		r.Batch.Body, r.Batch.Tags = r.Batch.Body[:0], r.Batch.Tags[:0]
		select {
		case s.free <- r.Batch:
		default:
		}
	}
}

// nextBatch is an empty batch to fill after last: an answered one
// (Recycle), else a new one with room for as much as last held, which the
// next batch likely holds too.
func (s *Sender) nextBatch(last *Batch) *Batch {
	select {
	case b := <-s.free: // nil channel without Recycle: never ready
		return b
	default:
	}
	return &Batch{Body: make([]byte, 0, len(last.Body)+len(last.Body)/4), Tags: make([]int64, 0, len(last.Tags)+len(last.Tags)/4)}
}

// pacer schedules batches at a rate in events per second (GCRA, burst of
// one batch): the batch that carries events [c, c+n) leaves no earlier
// than one batch interval after the one before, with at most one batch of
// catch-up credit after a stall, so timer overshoot does not accumulate.
type pacer struct {
	rate float64
	tat  time.Time // theoretical time at which the next batch may leave
}

// wait blocks until a batch of n events may be sent; false if ctx ended
// first.
func (p *pacer) wait(ctx context.Context, n int) bool {
	if p.rate <= 0 {
		return ctx.Err() == nil
	}
	cost := time.Duration(float64(n) / p.rate * float64(time.Second))
	now := time.Now()
	if p.tat.IsZero() {
		p.tat = now // the first batch leaves at once, with no credit
	}
	if floor := now.Add(-cost); p.tat.Before(floor) {
		p.tat = floor
	}
	if d := p.tat.Sub(now); d > 0 && !sleep(ctx, d) {
		return false
	}
	p.tat = p.tat.Add(cost)
	return ctx.Err() == nil
}
