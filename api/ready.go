package api

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"
)

// diskProbe checks that the data directory takes writes, for /readyz: a
// service that cannot write it refuses every event of a job with fault
// tolerance, and must not be sent traffic as if it were healthy.
type diskProbe struct {
	dir string
	log *slog.Logger

	mu   sync.Mutex
	at   time.Time // of the last probe
	last error
}

// probeEvery spaces the probes: /readyz may be polled often.
const probeEvery = time.Second

// probeBytes is written and synced by each probe: a page, the least a
// file system allocates, so a full disk fails it.
const probeBytes = 4096

// check returns why the directory cannot be written, or nil.
func (p *diskProbe) check() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := time.Now(); now.Sub(p.at) >= probeEvery {
		err := p.write()
		if (err == nil) != (p.last == nil) {
			if err != nil {
				p.log.Error("the data directory cannot be written: /readyz says not ready", "dir", p.dir, "err", err)
			} else {
				p.log.Info("the data directory takes writes again: /readyz says ready", "dir", p.dir)
			}
		}
		p.at, p.last = now, err
	}
	return p.last
}

func (p *diskProbe) write() error {
	f, err := os.CreateTemp(p.dir, ".readyz-probe-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(make([]byte, probeBytes))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readyz answers 200 once the server is ready and its data directory
// takes writes, else 503 saying why.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if !s.ready.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "starting"})
		return
	}
	if err := s.disk.check(); err != nil {
		// Without the path: /readyz needs no token.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready",
			"reason": fmt.Sprintf("the data directory cannot be written: %v; events of jobs with fault tolerance are refused until it can", err)})
		return
	}
	if c, ok := s.cfg.Cluster.(staleNode); ok {
		if reason, behind, stale := c.Stale(); stale {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "stale", "reason": reason, "behind_ms": behind.Milliseconds()})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
