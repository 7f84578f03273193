package api

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
)

// contentSecurityPolicy lets the dashboard load its own scripts, styles
// and connections only: no inline script, no framing, no other origin.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// securityHeaders sets the browser-facing headers on every response.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

// recoverer turns a panic into a JSON 500 and one log line (the stack at
// debug level). http.ErrAbortHandler passes on: net/http then drops the
// connection quietly, as the handler asked.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.countRefusal("panic")
			s.log.Error("panic serving request", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v))
			s.log.Debug("panic stack", "method", r.Method, "path", r.URL.Path, "stack", string(debug.Stack()))
			writeError(w, http.StatusInternalServerError, apiError{Error: "internal error"})
		}()
		next.ServeHTTP(w, r)
	})
}

// bodyTypes are the media types a POST or PUT may carry (besides any
// "+json" type).
var bodyTypes = []string{"application/json", "application/x-ndjson", "application/ndjson", "application/jsonl"}

// jsonMediaType reports whether a Content-Type value names JSON or NDJSON.
func jsonMediaType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	for _, t := range bodyTypes {
		if mt == t {
			return true
		}
	}
	return strings.HasSuffix(mt, "+json")
}

// isMediaType reports whether Content-Type ct is of media type mt.
func isMediaType(ct, mt string) bool {
	got, _, err := mime.ParseMediaType(ct)
	return err == nil && got == mt
}

// checkContentType refuses a POST, PUT or PATCH that is not JSON or
// NDJSON (or, for a PUT, a binary model) with 415: a browser page of
// another origin can send text/plain or a form without asking first, but
// not JSON.
func (s *Server) checkContentType(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch:
		default:
			next.ServeHTTP(w, r)
			return
		}
		ct := r.Header.Get("Content-Type")
		// A PUT is never sent across origins without a preflight, so it
		// may carry a binary model.
		if (ct == "" && r.ContentLength == 0) || (ct != "" && jsonMediaType(ct)) || (r.Method == http.MethodPut && isMediaType(ct, modelMediaType)) {
			next.ServeHTTP(w, r)
			return
		}
		s.countRefusal("content_type")
		got := "no Content-Type"
		if ct != "" {
			got = fmt.Sprintf("Content-Type %q", ct)
		}
		writeError(w, http.StatusUnsupportedMediaType, apiError{
			Error: fmt.Sprintf("%s: send %s (or a +json type)", got, strings.Join(bodyTypes, ", ")),
			Field: "Content-Type",
		})
	})
}

// loopbackHost reports whether a Host header names this machine:
// localhost, *.localhost, 127.0.0.0/8 or ::1, with or without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	lower := strings.ToLower(host)
	if lower == "localhost" || strings.HasSuffix(lower, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkHost refuses, with Config.LoopbackHosts, requests whose Host is not
// a loopback name: a page on another site whose DNS name is rebound to
// 127.0.0.1 sends its own name as Host.
func (s *Server) checkHost(next http.Handler) http.Handler {
	if !s.cfg.LoopbackHosts {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if loopbackHost(r.Host) {
			next.ServeHTTP(w, r)
			return
		}
		s.countRefusal("host")
		writeError(w, http.StatusMisdirectedRequest, apiError{
			Error: fmt.Sprintf("Host %q is not a loopback name: this service listens on loopback without tokens and answers only localhost, *.localhost, 127.0.0.0/8 and [::1]", r.Host),
			Field: "Host",
		})
	})
}
