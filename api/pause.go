package api

import "net/http"

// pauseResponse is the body of POST /v1/jobs/{job}/pause and /resume.
type pauseResponse struct {
	Job    string `json:"job"`
	Paused bool   `json:"paused"`
}

// pauseJob holds a job's partitions before their next batch, for
// maintenance and for trying flow control: events still queue, and once
// the queues are full ingest answers 429. Admin scope.
func (s *Server) pauseJob(w http.ResponseWriter, r *http.Request) {
	j, ok := s.lookupJob(w, r)
	if !ok {
		return
	}
	j.Pause()
	writeJSON(w, http.StatusOK, pauseResponse{Job: j.Name(), Paused: true})
}

// resumeJob lets a paused job process again. Admin scope.
func (s *Server) resumeJob(w http.ResponseWriter, r *http.Request) {
	j, ok := s.lookupJob(w, r)
	if !ok {
		return
	}
	j.Resume()
	writeJSON(w, http.StatusOK, pauseResponse{Job: j.Name(), Paused: false})
}
