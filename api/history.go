package api

import (
	"net/http"

	"github.com/mlstream/mlstream/runtime"
)

// jobHistory is the body of GET /v1/jobs/{job}/history.
type jobHistory struct {
	Job        string `json:"job"`
	IntervalMs int64  `json:"interval_ms"`
	// Series names the values of each point's kind array (kinds with
	// series of their own: logreg, distinct, join).
	Series []string               `json:"series,omitempty"`
	Points []runtime.HistoryPoint `json:"points"`
}

// getHistory serves GET /v1/jobs/{job}/history: the job's last minutes of
// stats (runtime.HistoryLen points, one a second, oldest first), so a page
// opened late draws them at once; 404 for an unknown job.
func (s *Server) getHistory(w http.ResponseWriter, r *http.Request) {
	j, ok := s.lookupJob(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, jobHistory{Job: j.Name(), IntervalMs: runtime.HistoryInterval.Milliseconds(), Series: j.HistorySeries(), Points: j.History()})
}
