package api

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"

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
// already, 409 when the name is taken by another spec, 400 for a bad spec,
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
	created, err := s.engine.PutJob(spec)
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
	switch err := s.engine.DeleteJob(name); {
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

// Paging of a model's weights.
const (
	defaultWeightsLimit = 100
	maxWeightsLimit     = 10000
)

// modelPage is the body of GET /v1/jobs/{job}/model: with weights, one
// page of them, largest magnitude first.
type modelPage struct {
	runtime.ModelView
	// Offset is where this page starts in the ordered weights.
	Offset int `json:"offset,omitempty"`
	// Next is the URL of the next page; absent on the last one.
	Next string `json:"next,omitempty"`
	// NextOffset is the offset of the next page; absent on the last one.
	NextOffset int `json:"next_offset,omitempty"`
}

// model serves GET /v1/jobs/{job}/model[?weights=true&limit=N&offset=M].
// Weights come in pages of limit (default 100, at most 10,000) from
// offset, ordered by magnitude then slot; each page is its own snapshot,
// so on a model still learning a weight may move across a page boundary.
func (s *Server) model(w http.ResponseWriter, r *http.Request) {
	j, ok := s.lookupJob(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	weights := false
	if v := q.Get("weights"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, apiError{Error: "weights must be true or false", Field: "weights"})
			return
		}
		weights = b
	}
	limit, ok := intParam(w, q, "limit", defaultWeightsLimit, 1, maxWeightsLimit)
	if !ok {
		return
	}
	offset, ok := intParam(w, q, "offset", 0, 0, math.MaxInt32)
	if !ok {
		return
	}
	m, err := j.Model(weights, offset+limit)
	if err != nil {
		writeError(w, http.StatusBadRequest, apiError{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, pageWeights(m, r.URL, weights, offset, limit))
}

// pageWeights cuts the page [offset, offset+limit) out of the weights of
// m (which holds the first offset+limit) and links the next page.
func pageWeights(m runtime.ModelView, u *url.URL, weights bool, offset, limit int) modelPage {
	p := modelPage{ModelView: m}
	if !weights {
		return p
	}
	p.Offset = offset
	p.Weights = m.Weights[min(offset, len(m.Weights)):]
	if next := offset + limit; next < m.NonZero {
		q := u.Query()
		q.Set("offset", strconv.Itoa(next))
		q.Set("limit", strconv.Itoa(limit))
		p.NextOffset = next
		p.Next = u.Path + "?" + q.Encode()
	}
	return p
}

// topK serves GET /v1/jobs/{job}/topk[?k=20&window=current|last|all].
func (s *Server) topK(w http.ResponseWriter, r *http.Request) {
	j, ok := s.lookupJob(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	k, ok := intParam(w, q, "k", 0, 1, math.MaxInt32)
	if !ok {
		return
	}
	t, err := j.TopK(windowParam(q.Get("window")), k)
	if err != nil {
		synopsisError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

// distinct serves GET /v1/jobs/{job}/distinct[?window=current|last|all].
func (s *Server) distinct(w http.ResponseWriter, r *http.Request) {
	j, ok := s.lookupJob(w, r)
	if !ok {
		return
	}
	c, err := j.Distinct(windowParam(r.URL.Query().Get("window")))
	if err != nil {
		synopsisError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// matches serves GET /v1/jobs/{job}/matches[?limit=20&window=current|last|all].
func (s *Server) matches(w http.ResponseWriter, r *http.Request) {
	j, ok := s.lookupJob(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	limit, ok := intParam(w, q, "limit", 20, 0, 1000)
	if !ok {
		return
	}
	m, err := j.Matches(windowParam(q.Get("window")), limit)
	if err != nil {
		synopsisError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, m)
}

// intParam reads an optional integer query parameter in [lo, hi]; on a bad
// value it answers 400 and reports false.
func intParam(w http.ResponseWriter, q url.Values, name string, def, lo, hi int) (int, bool) {
	v := q.Get(name)
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		writeError(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("%s must be an integer in [%d, %d], got %q", name, lo, hi, v), Field: name})
		return 0, false
	}
	return n, true
}

func windowParam(v string) string {
	if v == "" {
		return runtime.WindowCurrent
	}
	return v
}

func synopsisError(w http.ResponseWriter, err error) {
	field := ""
	if errors.Is(err, runtime.ErrBadWindow) {
		field = "window"
	}
	writeError(w, http.StatusBadRequest, apiError{Error: err.Error(), Field: field})
}
