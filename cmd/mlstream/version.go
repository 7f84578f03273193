package main

import (
	"fmt"
	"io"
	goruntime "runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// version is set at build time with -ldflags "-X main.version=...". When
// it is not, the main module's version from the build info is used (set
// by go install module@version).
var version = "dev"

// buildInfo says which build runs: `mlstream version` prints it and
// /metrics exports it as mlstream_build_info.
type buildInfo struct {
	version   string
	revision  string // vcs.revision; "" when the build was not stamped
	time      string // vcs.time, RFC 3339
	modified  bool   // vcs.modified: built from a tree with uncommitted changes
	goVersion string
}

// readBuildInfo reads the version and what the go command stamped into
// the binary (go build stamps the VCS state by default).
func readBuildInfo() buildInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return buildInfoOf(bi)
}

// buildInfoOf reads bi (nil: none, as in a binary built without module
// support).
func buildInfoOf(bi *debug.BuildInfo) buildInfo {
	b := buildInfo{version: version, goVersion: goruntime.Version()}
	if bi == nil {
		return b
	}
	if v := bi.Main.Version; b.version == "dev" && v != "" && v != "(devel)" {
		b.version = v
	}
	if bi.GoVersion != "" {
		b.goVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.revision = s.Value
		case "vcs.time":
			b.time = s.Value
		case "vcs.modified":
			b.modified = s.Value == "true"
		}
	}
	return b
}

// print writes what `mlstream version` shows:
//
//	mlstream v1.2.0
//	commit  0123abcd... (2026-11-30T10:00:00Z, modified)
//	go      go1.26.8
func (b buildInfo) print(w io.Writer) {
	fmt.Fprintln(w, "mlstream", b.version)
	commit := "unknown (not built from a VCS checkout)"
	if b.revision != "" {
		commit = b.revision
		if b.time != "" {
			commit += " (" + b.time
			if b.modified {
				commit += ", modified"
			}
			commit += ")"
		} else if b.modified {
			commit += " (modified)"
		}
	}
	fmt.Fprintln(w, "commit ", commit)
	fmt.Fprintln(w, "go     ", b.goVersion)
}

// collector is mlstream_build_info{version, revision, goversion} 1, the
// usual way to put a build's identity on dashboards.
func (b buildInfo) collector() prometheus.Collector {
	revision := b.revision
	if b.modified {
		revision += "-modified"
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "mlstream_build_info",
		Help:        "Always 1; the labels say which build runs (revision ends in -modified for a tree with uncommitted changes).",
		ConstLabels: prometheus.Labels{"version": b.version, "revision": revision, "goversion": b.goVersion},
	})
	g.Set(1)
	return g
}
