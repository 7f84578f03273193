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
func (s *Server) pauseJob(w http.ResponseWriter, r *http.Request) { s.setPaused(w, r, true) }

// resumeJob lets a paused job process again. Admin scope.
func (s *Server) resumeJob(w http.ResponseWriter, r *http.Request) { s.setPaused(w, r, false) }

func (s *Server) setPaused(w http.ResponseWriter, r *http.Request, paused bool) {
	j, ok := s.lookupJob(w, r)
	if !ok {
		return
	}
	if paused {
		j.Pause()
	} else {
		j.Resume()
	}
	writeJSON(w, http.StatusOK, pauseResponse{Job: j.Name(), Paused: paused})
}
