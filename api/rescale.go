package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/mlstream/mlstream/runtime"
)

// maxPatchBytes bounds a PATCH body: {"partitions": n} is a few bytes.
const maxPatchBytes = 4 << 10

// rescaleBody is the body of PATCH /v1/jobs/{job}.
type rescaleBody struct {
	Partitions *int `json:"partitions"`
}

// patchJob serves PATCH /v1/jobs/{job} with {"partitions": n}: the running
// job is rescaled to n partitions (runtime.Engine.Rescale) and its status
// answered, 200. 400 for a bad body or a count out of range (field
// partitions), 404 for an unknown job, 409 when the job cannot be
// rescaled (paused, a kind that cannot move its state, ft mode none in
// cluster mode, another rescale under way), 413
// past 4 KiB, 503 when the rescale did not happen in time (the job goes on
// with its partitions; Retry-After) or the server shuts down, 507 past the
// memory budget.
func (s *Server) patchJob(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "job")
	buf, err := readBody(w, r, maxPatchBytes)
	if err != nil {
		s.decodeError(w, err)
		return
	}
	defer releaseBody(buf)
	n, bad := decodeRescale(buf.Bytes())
	if bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	if _, err := s.jobs.Rescale(r.Context(), name, n, "api"); err != nil {
		rescaleError(w, name, err)
		return
	}
	j, err := s.engine.Job(name)
	if err != nil { // deleted meanwhile
		writeError(w, http.StatusNotFound, apiError{Error: fmt.Sprintf("no job %q", name)})
		return
	}
	writeJSON(w, http.StatusOK, j.Status(false))
}

// decodeRescale reads {"partitions": n}, refusing anything else with the
// field named.
func decodeRescale(body []byte) (int, *apiError) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var b rescaleBody
	if err := dec.Decode(&b); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te):
			return 0, &apiError{Error: fmt.Sprintf("%s must be an integer, got a JSON %s", te.Field, te.Value), Field: te.Field}
		default:
			return 0, &apiError{Error: `the body must be {"partitions": n}: ` + err.Error(), Field: unknownField(err)}
		}
	}
	if dec.More() {
		return 0, &apiError{Error: `the body must be one JSON object {"partitions": n}`}
	}
	if b.Partitions == nil {
		return 0, &apiError{Error: `partitions is required: {"partitions": n}`, Field: "partitions"}
	}
	return *b.Partitions, nil
}

// unknownField is the field encoding/json's DisallowUnknownFields error
// names, "" for another error.
func unknownField(err error) string {
	var f string
	if _, scanErr := fmt.Sscanf(err.Error(), "json: unknown field %q", &f); scanErr == nil {
		return f
	}
	return ""
}

// rescaleError answers a failed rescale.
func rescaleError(w http.ResponseWriter, name string, err error) {
	var se *runtime.SpecError
	var be *runtime.BudgetError
	switch {
	case errors.Is(err, runtime.ErrUnknownJob):
		writeError(w, http.StatusNotFound, apiError{Error: fmt.Sprintf("no job %q", name)})
	case errors.As(err, &se):
		writeError(w, http.StatusBadRequest, apiError{Error: err.Error(), Field: se.Field})
	case errors.As(err, &be):
		writeJSON(w, http.StatusInsufficientStorage, budgetError{
			apiError:      apiError{Error: err.Error(), Field: "partitions"},
			EstimateBytes: be.Estimate.Total(), BudgetBytes: be.Budget, InUseBytes: be.InUse,
		})
	case errors.Is(err, runtime.ErrRescaleClustered), errors.Is(err, runtime.ErrRescaling), errors.Is(err, runtime.ErrRescalePaused), errors.Is(err, runtime.ErrNotSupported):
		writeError(w, http.StatusConflict, apiError{Error: err.Error(), Field: "partitions"})
	case errors.Is(err, runtime.ErrRescaleFailed):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, apiError{Error: err.Error(), RetryAfterMs: 1000})
	case errors.Is(err, runtime.ErrClosed):
		writeError(w, http.StatusServiceUnavailable, apiError{Error: err.Error()})
	default:
		writeError(w, http.StatusInternalServerError, apiError{Error: err.Error()})
	}
}
