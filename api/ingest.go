package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"

	"github.com/go-chi/chi/v5"
	"github.com/mlstream/mlstream/runtime"
	"github.com/valyala/fastjson"
)

var bodyBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// readBody reads the whole body into a pooled buffer, refusing bodies over
// max with a 413 DecodeError. Put the buffer back with bodyBufs.Put.
func readBody(w http.ResponseWriter, r *http.Request, max int64) (*bytes.Buffer, error) {
	if r.ContentLength > max {
		return nil, &DecodeError{http.StatusRequestEntityTooLarge, 0, fmt.Sprintf("body of %d bytes is over the limit of %d bytes; send smaller batches", r.ContentLength, max)}
	}
	buf := bodyBufs.Get().(*bytes.Buffer)
	buf.Reset()
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength))
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		bodyBufs.Put(buf)
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &DecodeError{http.StatusRequestEntityTooLarge, 0, fmt.Sprintf("body is over the limit of %d bytes; send smaller batches", max)}
		}
		return nil, &DecodeError{http.StatusBadRequest, 0, "reading body: " + err.Error()}
	}
	return buf, nil
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
	b, err := s.engine.NewBatch(stream)
	if err != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, s.cfg.MaxBodyBytes))
		s.engineError(w, stream, err, 1)
		return
	}
	buf, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		s.engine.Refused(stream, "too_large", 1)
		s.decodeError(w, err)
		return
	}
	defer bodyBufs.Put(buf)
	b.Expect(bytes.Count(buf.Bytes(), []byte{'\n'}) + 1)
	n, err := decodeEvents(buf.Bytes(), r.Header.Get("Content-Type"), s.cfg.MaxEventBytes, b.Add)
	if err != nil {
		events := max(n+1, bytes.Count(buf.Bytes(), []byte{'\n'}))
		reason := "bad_input"
		var de *DecodeError
		if errors.As(err, &de) && de.Status == http.StatusRequestEntityTooLarge {
			reason = "too_large"
		}
		s.engine.Refused(stream, reason, events)
		s.decodeError(w, err)
		return
	}
	accepted, err := b.Commit(r.Context())
	if err != nil {
		s.engineError(w, stream, err, n)
		return
	}
	writeJSON(w, http.StatusAccepted, ingestResponse{Accepted: accepted, Shed: b.Shed()})
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
	case errors.Is(err, runtime.ErrBusy):
		// ErrBusy is counted by the engine.
		d := s.engine.RetryAfter(stream)
		secs := int(math.Ceil(d.Seconds()))
		w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
		writeError(w, http.StatusTooManyRequests, apiError{Error: "queues are full: " + err.Error() + "; nothing of this request was accepted, retry later", RetryAfterMs: d.Milliseconds()})
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
	buf, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		s.decodeError(w, err)
		return
	}
	defer bodyBufs.Put(buf)
	// The version before predicting: the predictions saw at least it.
	resp := predictResponse{Job: job.Name(), ModelVersion: pr.Version()}
	_, err = decodeEvents(buf.Bytes(), r.Header.Get("Content-Type"), s.cfg.MaxEventBytes, func(v *fastjson.Value, line int) error {
		p, err := pr.Predict(v, line)
		if err != nil {
			return err
		}
		resp.Predictions = append(resp.Predictions, p)
		return nil
	})
	if err != nil {
		s.decodeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}
