package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/mlstream/mlstream/runtime"
)

// lookupJob finds the {job} of the route or answers 404.
func (s *Server) lookupJob(w http.ResponseWriter, r *http.Request) (*runtime.Job, bool) {
	name := chi.URLParam(r, "job")
	j, err := s.engine.Job(name)
	if err != nil {
		writeError(w, http.StatusNotFound, apiError{Error: fmt.Sprintf("no job %q", name)})
		return nil, false
	}
	return j, true
}

type jobList struct {
	Jobs []runtime.JobStatus `json:"jobs"`
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	out := jobList{Jobs: []runtime.JobStatus{}}
	for _, j := range s.engine.Jobs() {
		out.Jobs = append(out.Jobs, j.Status(false))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	if j, ok := s.lookupJob(w, r); ok {
		writeJSON(w, http.StatusOK, j.Status(false))
	}
}

// putJob declares a job: 201 when created, 200 when an identical job runs
// already or when the spec differs only in partitions (the job is
// rescaled: see patchJob for its errors), 409 when the name is taken by
// another spec, 400 for a bad spec,
// 507 past the memory budget or the job limit, 500 when the job could not
// be recorded.
func (s *Server) putJob(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "job")
	buf, err := readBody(w, r, 1<<20)
	if err != nil {
		s.decodeError(w, err)
		return
	}
	defer releaseBody(buf)
	spec, err := runtime.DecodeSpec(buf.Bytes())
	if err != nil {
		specError(w, err)
		return
	}
	if spec.Name == "" {
		spec.Name = name
	}
	if spec.Name != name {
		writeError(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("name %q in the body differs from %q in the path", spec.Name, name), Field: "name"})
		return
	}
	created, err := s.jobs.PutJob(spec)
	var be *runtime.BudgetError
	switch {
	case err == nil:
	case errors.As(err, &be):
		writeJSON(w, http.StatusInsufficientStorage, budgetError{
			apiError:      apiError{Error: err.Error(), Field: be.Estimate.Field},
			EstimateBytes: be.Estimate.Total(), BudgetBytes: be.Budget, InUseBytes: be.InUse,
		})
		return
	case errors.Is(err, runtime.ErrTooManyJobs):
		writeError(w, http.StatusInsufficientStorage, apiError{Error: err.Error()})
		return
	case errors.Is(err, runtime.ErrJobRecord):
		writeError(w, http.StatusInternalServerError, apiError{Error: err.Error()})
		return
	case errors.Is(err, runtime.ErrJobExists):
		writeError(w, http.StatusConflict, apiError{Error: err.Error()})
		return
	case errors.Is(err, runtime.ErrClosed):
		writeError(w, http.StatusServiceUnavailable, apiError{Error: err.Error()})
		return
	case errors.Is(err, runtime.ErrRescaleClustered), errors.Is(err, runtime.ErrRescaling), errors.Is(err, runtime.ErrRescalePaused),
		errors.Is(err, runtime.ErrNotSupported), errors.Is(err, runtime.ErrRescaleFailed):
		// A spec that differs only in partitions rescales the job.
		rescaleError(w, name, err)
		return
	default:
		specError(w, err)
		return
	}
	j, err := s.engine.Job(name)
	if err != nil { // deleted meanwhile
		writeError(w, http.StatusConflict, apiError{Error: err.Error()})
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, j.Status(false))
}

// budgetError is the body of a 507 for the memory budget.
type budgetError struct {
	apiError
	EstimateBytes int64 `json:"estimate_bytes"`
	BudgetBytes   int64 `json:"budget_bytes"`
	InUseBytes    int64 `json:"in_use_bytes"`
}

func specError(w http.ResponseWriter, err error) {
	var se *runtime.SpecError
	if errors.As(err, &se) {
		msg := se.Msg
		if se.Field != "" {
			msg = se.Field + ": " + se.Msg
		}
		writeError(w, http.StatusBadRequest, apiError{Error: "invalid job spec: " + msg, Field: se.Field})
		return
	}
	writeError(w, http.StatusBadRequest, apiError{Error: "invalid job spec: " + err.Error()})
}

func (s *Server) deleteJob(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "job")
	switch err := s.jobs.DeleteJob(name); {
	case errors.Is(err, runtime.ErrJobRecord):
		// Stopped and its data removed, but it comes back at the next start.
		writeError(w, http.StatusInternalServerError, apiError{Error: err.Error()})
		return
	case err != nil:
		writeError(w, http.StatusNotFound, apiError{Error: fmt.Sprintf("no job %q", name)})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"deleted": name})
}

// query serves GET /v1/jobs/{job}/query/{name}?...: a named query of the
// job's kind (runtime.Query). 404 for a job or a query that does not
// exist, 400 naming a bad or unknown query parameter.
func (s *Server) query(w http.ResponseWriter, r *http.Request) {
	s.runQuery(w, r, chi.URLParam(r, "name"), http.StatusNotFound)
}

// queryAlias serves one of the query URLs older than the generic route
// (/model, /topk, /distinct, /matches): the same query, and 400, as
// always, when the job's kind does not have it.
func (s *Server) queryAlias(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { s.runQuery(w, r, name, http.StatusBadRequest) }
}

func (s *Server) runQuery(w http.ResponseWriter, r *http.Request, name string, unknown int) {
	j, ok := s.lookupJob(w, r)
	if !ok {
		return
	}
	out, err := j.Query(name, r.URL.Query(), r.URL.Path)
	var qe *runtime.QueryError
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, out)
	case errors.As(err, &qe):
		writeError(w, http.StatusBadRequest, apiError{Error: qe.Msg, Field: qe.Field})
	case errors.Is(err, runtime.ErrUnknownQuery):
		writeError(w, unknown, apiError{Error: err.Error()})
	default:
		writeError(w, http.StatusBadRequest, apiError{Error: err.Error()})
	}
}
