package api

import (
	"net/http"
	"slices"
)

// whoAmI is GET /v1/whoami: the scopes of the request's token, so that a
// client can tell what it holds. The dashboard refuses to keep an admin
// token in a browser, where any script of the page could read it.
type whoAmI struct {
	// Auth is whether the service has tokens at all; without, every
	// request may do everything and Scopes is empty.
	Auth   bool    `json:"auth"`
	Scopes []Scope `json:"scopes"`
}

func (s *Server) whoami(w http.ResponseWriter, r *http.Request) {
	out := whoAmI{Scopes: []Scope{}}
	if s.cfg.Auth != nil {
		out.Auth = true
		if tok, ok := requestToken(r); ok {
			out.Scopes = s.cfg.Auth.lookup(tok)
			slices.Sort(out.Scopes)
			out.Scopes = slices.Compact(out.Scopes)
		}
	}
	writeJSON(w, http.StatusOK, out)
}
