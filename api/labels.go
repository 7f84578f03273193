package api

import (
	"fmt"
	"net/http"

	"github.com/mlstream/mlstream/runtime"
)

// Delayed labels: POST /v1/jobs/{job}/labels takes labels for predictions
// held by id (an unlabelled event or a prediction request that carried
// one), and predict queues the predictions it holds. Both go into the
// job's partition queues as records (runtime.NewJobBatch), routed by id.

// labelsResponse is the 202 body of POST /v1/jobs/{job}/labels.
type labelsResponse struct {
	Job      string `json:"job"`
	Accepted int    `json:"accepted"`
}

// labels answers POST /v1/jobs/{job}/labels: a JSON object, an array of
// them or NDJSON, each {"id": ..., "label": 0|1, "ts": optional}.
// Accepted labels are queued; their outcomes (joined, unknown, expired)
// are counted in the job's status, as the partitions meet them.
func (s *Server) labels(w http.ResponseWriter, r *http.Request) {
	job, ok := s.lookupJob(w, r)
	if !ok {
		return
	}
	_, accepted, ok := s.commitBody(w, r, batchRequest{
		stream: job.Spec().Input, what: fmt.Sprintf("job %q", job.Name()), unit: "labels",
		newBatch: func() (*runtime.Batch, error) { return s.engine.NewJobBatch(job.Name()) },
		add:      (*runtime.Batch).AddLabel,
	})
	if ok {
		writeJSON(w, http.StatusAccepted, labelsResponse{Job: job.Name(), Accepted: accepted})
	}
}

// holder queues the predictions of one predict request that wait for
// their labels.
type holder struct {
	s     *Server
	job   *runtime.Job
	h     runtime.Holding // nil: the job's predictor holds nothing
	batch *runtime.Batch  // made at the first held prediction
}

func (s *Server) newHolder(job *runtime.Job, pr runtime.Predictor) *holder {
	h, _ := pr.(runtime.Holding)
	return &holder{s: s, job: job, h: h}
}

// hold queues the last prediction if the predictor held it.
func (h *holder) hold() error {
	if h.h == nil {
		return nil
	}
	rec, ok := h.h.Held()
	if !ok {
		return nil
	}
	if h.batch == nil {
		b, err := h.s.engine.NewJobBatch(h.job.Name())
		if err != nil {
			return err
		}
		h.batch = b
	}
	h.batch.AddRecord(rec)
	return nil
}

// commit queues the held predictions; on an error the request is
// answered and commit returns false.
func (h *holder) commit(w http.ResponseWriter, r *http.Request) bool {
	if h.batch == nil {
		return true
	}
	// Held predictions are state the job keeps: as labels, they take a
	// token that may ingest.
	if !h.s.grants(r, ScopeIngest) {
		h.s.countRefusal("auth_scope")
		writeError(w, http.StatusForbidden, apiError{Error: "predictions with an id are held for their delayed labels, which needs a token with the scope \"ingest\"; predict without id with this token", Scope: string(ScopeIngest)})
		return false
	}
	if _, err := h.batch.Commit(r.Context()); err != nil {
		h.s.engineError(w, h.job.Spec().Input, err, h.batch.Len())
		return false
	}
	return true
}

// grants reports whether r's token grants scope need (always, without
// tokens configured).
func (s *Server) grants(r *http.Request, need Scope) bool {
	if s.cfg.Auth == nil {
		return true
	}
	tok, _ := requestToken(r)
	for _, sc := range s.cfg.Auth.lookup(tok) {
		if sc.grants(need) {
			return true
		}
	}
	return false
}
