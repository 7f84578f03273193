// Package web is mlstream's dashboard: static files embedded in the binary
// with go:embed, so no build step runs at run time and nothing is fetched
// from outside the service. The page (static/app.js) lives on the WebSocket
// feed /v1/ws, polls GET /v1/jobs and /metrics for what the feed lacks,
// draws each job's last minutes from GET /v1/jobs/{job}/history when it
// opens, and samples predictions and join matches with short subscriptions.
// It judges staleness on the server's clock, shows the health the service
// puts in each job status, keeps a token in sessionStorage and refuses an
// admin one. On a cluster node (its metrics carry the label node)
// static/cluster.js adds the Cluster panel from GET /v1/cluster and the
// feed's failover messages. Charts are uPlot, vendored in static/vendor
// with its licence (the README says how to update it). The browser tests
// are in cmd/mlstream/dashboard_test.go and dashboard_truth_test.go.
package web

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed static
var files embed.FS

// Handler serves the dashboard at / (index.html) and its assets. Any
// other path, directories included (no listings), goes to notFound.
func Handler(notFound http.Handler) http.Handler {
	sub, err := fs.Sub(files, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	fileServer := http.FileServer(http.FS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
		if name == "" || name == "index.html" {
			fileServer.ServeHTTP(w, r)
			return
		}
		if st, err := fs.Stat(sub, name); err != nil || st.IsDir() {
			notFound.ServeHTTP(w, r)
			return
		}
		fileServer.ServeHTTP(w, r)
	})
}
