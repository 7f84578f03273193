package api

import (
	_ "embed"
	"net/http"
)

// openAPISpec is the OpenAPI 3 description of the routes of New. The
// tests validate every request and response they make against it, and
// fail when a route of the router is missing from it.
//
//go:embed openapi.json
var openAPISpec []byte

// serveOpenAPI serves GET /v1/openapi.json. It needs no token, like
// /healthz: the description holds nothing secret, and a client reads it
// to learn how to authenticate.
func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPISpec)
}
