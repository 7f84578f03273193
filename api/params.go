package api

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// knownParams refuses a request whose URL has a query parameter the route
// does not take, with a 400 naming it, as unknown fields in bodies are
// refused: a misspelt parameter is never silently ignored. (The kinds'
// queries check theirs in runtime, per query.)
func knownParams(allowed ...string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for name := range r.URL.Query() {
				if !slices.Contains(allowed, name) {
					known := "it takes none"
					if len(allowed) > 0 {
						known = "known: " + strings.Join(allowed, ", ")
					}
					writeError(w, http.StatusBadRequest, apiError{
						Error: fmt.Sprintf("unknown query parameter %q for %s %s; %s", name, r.Method, r.URL.Path, known),
						Field: name,
					})
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}
