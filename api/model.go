package api

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"

	"github.com/mlstream/mlstream/runtime"
	"github.com/valyala/fastjson"
)

// modelMediaType is the Content-Type of a binary exported model.
const modelMediaType = "application/octet-stream"

// exportModel answers GET /v1/jobs/{job}/model/export[?format=json]: the
// job's model in its kind's binary format, or readable JSON. Read scope.
func (s *Server) exportModel(w http.ResponseWriter, r *http.Request) {
	j, mio, ok := s.modelJob(w, r)
	if !ok {
		return
	}
	format := r.URL.Query().Get("format")
	var buf bytes.Buffer
	if err := mio.ExportModel(&buf, format); err != nil {
		s.modelError(w, j, "export", err)
		return
	}
	if format == "json" {
		w.Header().Set("Content-Type", "application/json")
	} else {
		w.Header().Set("Content-Type", modelMediaType)
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", j.Name()+".mlsmodel"))
	}
	_, _ = w.Write(buf.Bytes())
}

// importModel answers PUT /v1/jobs/{job}/model with a binary export as the
// body (Content-Type application/octet-stream): the job goes on learning
// from that model. It answers the job's status. Admin scope.
func (s *Server) importModel(w http.ResponseWriter, r *http.Request) {
	j, mio, ok := s.modelJob(w, r)
	if !ok {
		return
	}
	if !isMediaType(r.Header.Get("Content-Type"), modelMediaType) {
		writeError(w, http.StatusUnsupportedMediaType, apiError{Error: "send the binary export (GET .../model/export) as " + modelMediaType, Field: "Content-Type"})
		return
	}
	stop := bodyDeadline(w)
	err := mio.ImportModel(r.Body)
	stop()
	if err != nil {
		s.modelError(w, j, "import", err)
		return
	}
	s.log.Info("model imported", "job", j.Name())
	writeJSON(w, http.StatusOK, j.Status(false))
}

// modelJob looks up the job and its model capability.
func (s *Server) modelJob(w http.ResponseWriter, r *http.Request) (*runtime.Job, runtime.ModelIO, bool) {
	j, ok := s.lookupJob(w, r)
	if !ok {
		return nil, nil, false
	}
	mio, err := j.ModelIO()
	if err != nil {
		writeError(w, http.StatusBadRequest, apiError{Error: err.Error()})
		return nil, nil, false
	}
	return j, mio, true
}

// modelError answers a refused export or import: 400 naming the field for
// a model that does not fit (or a body too large), 409 for a job that is
// stopping, 500 otherwise. Refused imports are logged.
func (s *Server) modelError(w http.ResponseWriter, j *runtime.Job, op string, err error) {
	var me *runtime.ModelError
	var mbe *http.MaxBytesError
	status, body := http.StatusInternalServerError, apiError{Error: err.Error()}
	switch {
	case errors.As(err, &me):
		status, body.Field = http.StatusBadRequest, me.Field
	case errors.As(err, &mbe):
		status = http.StatusBadRequest
	case errors.Is(err, runtime.ErrStopping):
		status = http.StatusConflict
	}
	s.log.Warn("model "+op+" refused", "job", j.Name(), "status", status, "err", err)
	writeError(w, status, body)
}

// explainResponse is the body of POST /v1/jobs/{job}/explain.
type explainResponse struct {
	Job          string `json:"job"`
	ModelVersion uint64 `json:"model_version"`
	Explanations []any  `json:"explanations"`
}

// explain answers POST /v1/jobs/{job}/explain: each event's prediction
// taken apart by feature (bias, each feature's weight × value, margin,
// probability), nothing learned. Read scope, the limits of predict.
func (s *Server) explain(w http.ResponseWriter, r *http.Request) {
	j, ok := s.lookupJob(w, r)
	if !ok {
		return
	}
	ex, err := j.Explainer()
	if err != nil {
		writeError(w, http.StatusBadRequest, apiError{Error: err.Error()})
		return
	}
	resp := explainResponse{Job: j.Name(), Explanations: []any{}}
	if pr, err := j.Predictor(); err == nil {
		resp.ModelVersion = pr.Version()
	}
	ok = s.eachEvent(w, r, func(v *fastjson.Value, line int) error {
		e, err := ex.Explain(v, line)
		resp.Explanations = append(resp.Explanations, e)
		return err
	})
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, resp)
}
