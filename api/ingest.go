package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/mlstream/mlstream/runtime"
	"github.com/valyala/fastjson"
)

// BodyLimits bound how request bodies are read. The size limits are in
// Config (MaxBodyBytes, MaxEventBytes); these are about time and memory.
type BodyLimits struct {
	// Timeout is the longest a request body may take to arrive, counted
	// from when the handler starts reading it (default 30s). A body still
	// arriving then is refused with 408 and the connection closed, so a
	// client trickling bytes holds a connection for no longer than this.
	Timeout time.Duration
	// PoolMax is the capacity above which a body buffer is dropped after
	// use instead of kept for the next request (default 1 MiB), so that
	// one large body does not stay allocated.
	PoolMax int
}

// Defaults of BodyLimits.
const (
	DefaultBodyTimeout = 30 * time.Second
	DefaultBodyPoolMax = 1 << 20
)

var bodyLimits atomic.Pointer[BodyLimits]

func init() { SetBodyLimits(BodyLimits{}) }

// SetBodyLimits sets the body limits of every Server in the process; zero
// fields take the defaults.
func SetBodyLimits(l BodyLimits) {
	if l.Timeout <= 0 {
		l.Timeout = DefaultBodyTimeout
	}
	if l.PoolMax <= 0 {
		l.PoolMax = DefaultBodyPoolMax
	}
	bodyLimits.Store(&l)
}

// CurrentBodyLimits returns the body limits in force.
func CurrentBodyLimits() BodyLimits { return *bodyLimits.Load() }

var bodyBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// releaseBody returns a buffer of readBody to the pool, unless it is
// larger than BodyLimits.PoolMax: a pooled buffer lives until the pool is
// cleared, and a body of many MiB must not. Dropping it frees the heap
// only at the next collection, and the pages only when the runtime
// scavenges them, which an idle server may not do for minutes: so a large
// body also schedules a return of free memory to the system.
func releaseBody(buf *bytes.Buffer) {
	if buf.Cap() > bodyLimits.Load().PoolMax {
		scheduleReturnMemory()
		return
	}
	bodyBufs.Put(buf)
}

// returnMemoryAfter is how long after a large body the memory is given
// back: time for the events it queued to be processed. Large bodies in
// the meantime share the one call, so it runs at most once per period.
const returnMemoryAfter = 2 * time.Second

var returnMemoryPending atomic.Bool

func scheduleReturnMemory() {
	if returnMemoryPending.CompareAndSwap(false, true) {
		time.AfterFunc(returnMemoryAfter, func() {
			returnMemoryPending.Store(false)
			debug.FreeOSMemory()
		})
	}
}

// minBodyBuf is the first capacity of a body buffer.
const minBodyBuf = 4 << 10

// readBody reads the whole body into a pooled buffer, refusing bodies over
// max with a 413 and bodies that take longer than BodyLimits.Timeout with
// a 408 DecodeError. The buffer grows with the bytes that arrive, never
// with what Content-Length announces. Give the buffer back with
// releaseBody.
func readBody(w http.ResponseWriter, r *http.Request, max int64) (*bytes.Buffer, error) {
	if r.ContentLength > max {
		return nil, bodyTooLarge(max)
	}
	stop := bodyDeadline(w)
	defer stop()
	buf := bodyBufs.Get().(*bytes.Buffer)
	buf.Reset()
	data, err := readGrowing(buf.AvailableBuffer(), http.MaxBytesReader(w, r.Body, max), max)
	*buf = *bytes.NewBuffer(data)
	if err != nil {
		releaseBody(buf)
		return nil, bodyReadError(err, max)
	}
	return buf, nil
}

// readGrowing appends all of rd to b, doubling the capacity when it is
// full, up to max+1 bytes (enough for rd to report that it holds more).
// Doubling from what has arrived keeps the buffer within twice the body.
func readGrowing(b []byte, rd io.Reader, limit int64) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			nb := make([]byte, len(b), min(max(2*cap(b), minBodyBuf), int(limit)+1))
			copy(nb, b)
			b = nb
		}
		n, err := rd.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// bodyDeadline sets the connection's read deadline BodyLimits.Timeout
// from now; the returned func clears it, so that the server's own
// background read of an idle connection is not cut short. Writers that
// cannot set deadlines (a ResponseRecorder) read without one.
func bodyDeadline(w http.ResponseWriter) (stop func()) {
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(bodyLimits.Load().Timeout)) != nil {
		return func() {}
	}
	return func() { _ = rc.SetReadDeadline(time.Time{}) }
}

// discardBody reads and drops up to max bytes of the body, within the
// body deadline, so that a refused client sees the answer instead of a
// reset connection.
func discardBody(w http.ResponseWriter, r *http.Request, max int64) {
	stop := bodyDeadline(w)
	defer stop()
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, max))
}

func bodyTooLarge(max int64) error {
	return &DecodeError{http.StatusRequestEntityTooLarge, 0, fmt.Sprintf("body is over the limit of %d bytes; send smaller batches", max)}
}

// bodyReadError turns an error reading a body into a DecodeError.
func bodyReadError(err error, max int64) error {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return bodyTooLarge(max)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return &DecodeError{http.StatusRequestTimeout, 0, fmt.Sprintf("the body did not arrive within %v; send it faster or in smaller requests", bodyLimits.Load().Timeout)}
	}
	return &DecodeError{http.StatusBadRequest, 0, "reading body: " + err.Error()}
}

// ingestResponse is the 202 body.
type ingestResponse struct {
	Accepted int `json:"accepted"`
	// Shed counts, per job with load shedding, the accepted events it
	// dropped to keep its queueing delay under max_delay.
	Shed map[string]uint64 `json:"shed,omitempty"`
}

func (s *Server) ingest(w http.ResponseWriter, r *http.Request) {
	stream := chi.URLParam(r, "stream")
	b, accepted, ok := s.commitBody(w, r, batchRequest{
		stream: stream, what: fmt.Sprintf("the jobs reading stream %q", stream), unit: "events",
		newBatch: func() (*runtime.Batch, error) { return s.engine.NewBatch(stream) },
		add:      (*runtime.Batch).Add,
		fast:     true,
	})
	if ok {
		writeJSON(w, http.StatusAccepted, ingestResponse{Accepted: accepted, Shed: b.Shed()})
	}
}

// batchRequest is a request whose body goes into a batch: a stream's
// events, or a job's labels.
type batchRequest struct {
	stream   string // for the metrics and Retry-After
	what     string // whose queues, for the error of a request too large
	unit     string // what the body holds, for that error
	newBatch func() (*runtime.Batch, error)
	add      func(b *runtime.Batch, v *fastjson.Value, line int) error
	// fast lets add's events take the fast paths (decodeInto): add is
	// Batch.Add.
	fast bool
}

// commitBody reads the body into a new batch and commits it, honouring an
// Idempotency-Key. A refusal is answered here and ok is false.
func (s *Server) commitBody(w http.ResponseWriter, r *http.Request, br batchRequest) (b *runtime.Batch, accepted int, ok bool) {
	stream := br.stream
	key := r.Header.Get("Idempotency-Key")
	if err := checkIdempotencyKey(key); err != nil {
		discardBody(w, r, s.cfg.MaxBodyBytes)
		s.engine.Refused(stream, "bad_input", 1)
		writeError(w, http.StatusBadRequest, apiError{Error: err.Error(), Field: "Idempotency-Key"})
		return nil, 0, false
	}
	b, err := br.newBatch()
	if err != nil {
		discardBody(w, r, s.cfg.MaxBodyBytes)
		s.engineError(w, stream, err, 1)
		return nil, 0, false
	}
	buf, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		s.refuse(w, stream, err, 1)
		return nil, 0, false
	}
	defer releaseBody(buf)
	b.SetKey(key)
	n, err := s.decodeBatch(b, br, buf.Bytes(), r.Header.Get("Content-Type"))
	if err != nil {
		s.refuse(w, stream, err, n)
		return nil, 0, false
	}
	accepted, err = b.Commit(runtime.WithIngestKey(r.Context(), key))
	if err != nil {
		s.engineError(w, stream, err, n)
		return nil, 0, false
	}
	return b, accepted, true
}

// errTooMany stops decoding a body of more events than the batch takes.
var errTooMany = errors.New("too many events")

// decodeBatch decodes body into b in one pass and returns its number of
// events. A body that fails is then counted (countEvents), so that it is
// refused as if its framing, its events' sizes and their number had been
// checked before any event was decoded, and n is the count of its events
// (at least 1), for the metric of refused events.
func (s *Server) decodeBatch(b *runtime.Batch, br batchRequest, body []byte, ctype string) (n int, err error) {
	most := b.MaxEvents()
	add := func(v *fastjson.Value, line int) error {
		if b.Len() >= most {
			return errTooMany // the batch holds no more than its queues take
		}
		return br.add(b, v, line)
	}
	if br.fast {
		n, err = decodeInto(b, body, ctype, s.cfg.MaxEventBytes, most, add)
	} else {
		n, err = decodeEvents(body, ctype, s.cfg.MaxEventBytes, add)
	}
	if err == nil {
		return n, nil
	}
	events, cerr := countEvents(body, ctype, s.cfg.MaxEventBytes)
	switch {
	case cerr != nil:
		return max(events, 1), cerr
	case events > most:
		return events, &DecodeError{http.StatusRequestEntityTooLarge, 0, fmt.Sprintf(
			"%d %s, more than the queues of %s can take in one request (%d); send smaller batches", events, br.unit, br.what, most)}
	}
	return events, err
}

// maxIdempotencyKey is the longest Idempotency-Key header taken.
const maxIdempotencyKey = 128

// checkIdempotencyKey accepts an empty key or up to 128 characters of
// [A-Za-z0-9_.:-] (they become part of message ids in cluster mode).
func checkIdempotencyKey(key string) error {
	if len(key) > maxIdempotencyKey {
		return fmt.Errorf("Idempotency-Key: at most %d characters, got %d", maxIdempotencyKey, len(key))
	}
	for _, c := range key {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == ':') {
			return fmt.Errorf("Idempotency-Key: only letters, digits and _ - . : are allowed, got %q", c)
		}
	}
	return nil
}

// refuse answers a body that cannot be taken, and counts its events as
// refused with the reason of the status.
func (s *Server) refuse(w http.ResponseWriter, stream string, err error, events int) {
	reason := "bad_input"
	var de *DecodeError
	if errors.As(err, &de) {
		switch de.Status {
		case http.StatusRequestEntityTooLarge:
			reason = "too_large"
		case http.StatusRequestTimeout:
			reason = "timeout"
			// The rest of the body is not coming: the connection goes.
			w.Header().Set("Connection", "close")
		}
	}
	s.engine.Refused(stream, reason, events)
	s.decodeError(w, err)
}

// decodeError answers a DecodeError or an InputError.
func (s *Server) decodeError(w http.ResponseWriter, err error) {
	var de *DecodeError
	var ie *runtime.InputError
	switch {
	case errors.As(err, &de):
		writeError(w, de.Status, apiError{Error: de.Msg, Line: de.Line})
	case errors.As(err, &ie):
		writeError(w, http.StatusBadRequest, apiError{Error: ie.Msg, Line: ie.Line, Field: ie.Field})
	default:
		writeError(w, http.StatusBadRequest, apiError{Error: err.Error()})
	}
}

// engineError maps the engine's errors to statuses, counting refused
// events.
func (s *Server) engineError(w http.ResponseWriter, stream string, err error, events int) {
	switch {
	case errors.Is(err, runtime.ErrUnknownStream):
		s.engine.Refused(stream, "unknown_stream", events)
		writeError(w, http.StatusNotFound, apiError{Error: fmt.Sprintf("no job reads stream %q; declare a job with input %q first", stream, stream)})
	case errors.Is(err, runtime.ErrDurability):
		// Counted by the engine. Nothing of the request is processed; the
		// next request tries the disk again.
		s.log.Error("ingest refused: events could not be made durable", "stream", stream, "err", err)
		w.Header().Set("Retry-After", strconv.Itoa(storageRetryAfter))
		// The system's reason, without the server's paths.
		cause := "a storage error"
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			cause = pe.Err.Error()
		}
		writeError(w, http.StatusInsufficientStorage, apiError{
			Error:        "the events could not be made durable (" + cause + "); nothing of this request was accepted: retry it later (with the same Idempotency-Key)",
			RetryAfterMs: storageRetryAfter * 1000,
		})
	case errors.Is(err, runtime.ErrBackupsFailing):
		// Counted by the engine.
		w.Header().Set("Retry-After", strconv.Itoa(storageRetryAfter))
		writeError(w, http.StatusTooManyRequests, apiError{
			Error:        err.Error() + ": taking more events would lose them past the job's loss bound on a crash; nothing of this request was accepted, retry later",
			RetryAfterMs: storageRetryAfter * 1000,
		})
	case errors.Is(err, runtime.ErrBusy):
		// ErrBusy is counted by the engine.
		d := s.engine.RetryAfter(stream)
		secs := int(math.Ceil(d.Seconds()))
		w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
		msg := "queues are full: " + err.Error() + "; nothing of this request was accepted, retry later"
		if s.cfg.Cluster != nil {
			msg = "the cluster is behind: " + err.Error() + "; part of this request may be stored: retry it with the same Idempotency-Key header, and only the rest is added"
		}
		writeError(w, http.StatusTooManyRequests, apiError{Error: msg, RetryAfterMs: d.Milliseconds()})
	case errors.Is(err, runtime.ErrTooLarge):
		s.engine.Refused(stream, "too_large", events)
		writeError(w, http.StatusRequestEntityTooLarge, apiError{Error: err.Error()})
	case errors.Is(err, runtime.ErrClosed):
		s.engine.Refused(stream, "closed", events)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, apiError{Error: "the service is shutting down; nothing of this request was accepted"})
	default:
		s.log.Error("ingest failed", "stream", stream, "err", err)
		writeError(w, http.StatusInternalServerError, apiError{Error: err.Error()})
	}
}

// storageRetryAfter is the Retry-After, in seconds, of a request refused
// because the disk did not take it: long enough not to hammer a full
// disk, short enough to resume soon after space returns.
const storageRetryAfter = 2

// predictResponse is the body of POST /v1/jobs/{job}/predict.
type predictResponse struct {
	Job          string              `json:"job"`
	ModelVersion uint64              `json:"model_version"`
	Predictions  []runtime.Predicted `json:"predictions"`
}

func (s *Server) predict(w http.ResponseWriter, r *http.Request) {
	job, ok := s.lookupJob(w, r)
	if !ok {
		return
	}
	pr, err := job.Predictor()
	if err != nil {
		writeError(w, http.StatusBadRequest, apiError{Error: err.Error()})
		return
	}
	// The version before predicting: the predictions saw at least it.
	resp := predictResponse{Job: job.Name(), ModelVersion: pr.Version()}
	held := s.newHolder(job, pr)
	ok = s.eachEvent(w, r, func(v *fastjson.Value, line int) error {
		p, err := pr.Predict(v, line)
		if err != nil {
			return err
		}
		resp.Predictions = append(resp.Predictions, p)
		return held.hold()
	})
	if !ok || !held.commit(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// eachEvent reads the request body and calls fn with each of its events,
// in order; a bad body, or an error of fn, is answered here and eachEvent
// returns false. For routes that take events and answer per event
// (predict, explain).
func (s *Server) eachEvent(w http.ResponseWriter, r *http.Request, fn func(v *fastjson.Value, line int) error) bool {
	buf, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		s.decodeError(w, err)
		return false
	}
	defer releaseBody(buf)
	if _, err := decodeEvents(buf.Bytes(), r.Header.Get("Content-Type"), s.cfg.MaxEventBytes, fn); err != nil {
		s.decodeError(w, err)
		return false
	}
	return true
}
