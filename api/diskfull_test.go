package api

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// smallDisk mounts a tmpfs of size (e.g. "8m") on a new directory and
// returns it. Where mounting is refused (not root, no CAP_SYS_ADMIN) the
// test is skipped, except under CI, which runs as root: there it fails.
func smallDisk(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("mount tmpfs (CI runs as root): %v", err)
		}
		t.Skipf("a disk-full test needs to mount a tmpfs, refused here: %v", err)
	}
	// Registered after TempDir's removal: runs before it.
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fillDisk writes a file into dir until the file system is full, and
// returns a func that removes it.
func fillDisk(t *testing.T, dir string) (free func()) {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	// What is left is less than a chunk: take it to the last byte.
	for _, err := f.Write(chunk[:1]); err == nil; _, err = f.Write(chunk[:1]) {
	}
	return func() {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
}

// readyz returns the status of /readyz and its body.
func (ts *testServer) readyz() (int, map[string]any) {
	code, _, body := ts.do("GET", "/readyz", "", nil)
	return code, body
}

// On a full disk a job in mode exact refuses requests with 507 and
// Retry-After, processes none of their events, and /readyz says why; as
// soon as space returns, requests are taken again, without a restart.
func TestDiskFullExact(t *testing.T) {
	dir := smallDisk(t, "16m")
	ts := newNode(t, dir, &syncBuffer{})
	ts.api.disk = &diskProbe{dir: dir, log: ts.api.log}
	if err := ts.engine.Start(nil); err != nil {
		t.Fatal(err)
	}
	ts.putJob("hh", `{"kind":"heavy_hitters","input":"s","partitions":2,"params":{"field":"u"},"ft":{"mode":"exact"}}`)
	body := items(1000, "x")
	if code, out := ts.post("s", body); code != http.StatusAccepted {
		t.Fatalf("before the disk fills: %d %v", code, out)
	}
	free := fillDisk(t, dir)
	for i := range 5 {
		code, h, out := ts.do("POST", "/v1/streams/s/events", "application/x-ndjson", []byte(body))
		if code != http.StatusInsufficientStorage || h.Get("Retry-After") == "" || !strings.Contains(out["error"].(string), "durable (no space left on device)") {
			t.Fatalf("request %d on a full disk: %d %v %v", i, code, h, out)
		}
	}
	waitFor(t, "/readyz to say the disk is full", 10*time.Second, func() bool {
		code, out := ts.readyz()
		return code == http.StatusServiceUnavailable && strings.Contains(out["reason"].(string), "no space left")
	})
	free()
	if code, out := ts.post("s", body); code != http.StatusAccepted {
		t.Fatalf("once space returned: %d %v", code, out)
	}
	waitFor(t, "/readyz to be ready again", 10*time.Second, func() bool { code, _ := ts.readyz(); return code == http.StatusOK })
	st := ts.waitProcessed("hh")
	if st.Accepted != 2000 || st.Processed != 2000 {
		t.Fatalf("accepted %d, processed %d: want the 2,000 acknowledged events, none of the refused ones", st.Accepted, st.Processed)
	}
	if got := ts.topTotal("hh"); got != 2000 {
		t.Fatalf("the state counts %v events, want 2,000", got)
	}
	// A crash: the item logs, with what the full disk left in them,
	// recover the 2,000 acknowledged events and none of the refused ones.
	// Skipped for now: this in-process "crash" (the HTTP server closed,
	// the engine left running) leaves the first engine alive, and since
	// idle partitions back their state up, its backups trim the item logs
	// while the second engine replays them: about half the runs then miss
	// records (they pass when the first engine has gone quiet first). A
	// real kill -9 leaves no such engine; the test needs one that halts.
	if os.Getenv("MLSTREAM_DISKFULL_CRASH") == "" {
		t.Skip("the in-process crash leaves the first engine trimming the item logs the second replays; set MLSTREAM_DISKFULL_CRASH=1 to run it")
	}
	ts.http.Close()
	n2 := startNode(t, dir, nil, &syncBuffer{})
	j, err := n2.engine.Job("hh")
	if err != nil {
		t.Fatal(err)
	}
	if got := n2.topTotal("hh"); got != 2000 {
		t.Fatalf("after a crash the state counts %v events, want 2,000 (recovery %+v)", got, j.Recovery())
	}
	// The refused events are never reported as lost: as unacknowledged
	// where the item logs are replayed over them, or not at all where a
	// backup written after them (an idle partition backs its state up)
	// already covers their sequence numbers.
	if rep := j.Recovery(); rep == nil || rep.Lost != 0 || rep.Unacknowledged > 5000 {
		t.Fatalf("recovery after the crash: %+v, want 0 lost and at most the 5,000 refused unacknowledged", rep)
	}
}

// On a full disk a job in mode approx whose backups fail refuses events
// with 429 and Retry-After instead of acknowledging events it would lose
// past its bound; once space returns, it takes them again.
func TestDiskFullApproxPushesBack(t *testing.T) {
	dir := smallDisk(t, "16m")
	ts := newNode(t, dir, &syncBuffer{})
	if err := ts.engine.Start(nil); err != nil {
		t.Fatal(err)
	}
	ts.putJob("hh", `{"kind":"heavy_hitters","input":"s","partitions":1,"params":{"field":"u"},
		"ft":{"mode":"approx","max_divergence":50,"max_pending":100000,"max_unacked":100}}`)
	body := items(200, "x")
	if code, out := ts.post("s", body); code != http.StatusAccepted {
		t.Fatalf("before the disk fills: %d %v", code, out)
	}
	ts.waitProcessed("hh")
	free := fillDisk(t, dir)
	// The first backup on the full disk fails; from then on nothing is
	// acknowledged.
	refused := false
	for i := 0; i < 50 && !refused; i++ {
		code, h, out := ts.do("POST", "/v1/streams/s/events", "application/x-ndjson", []byte(body))
		switch code {
		case http.StatusAccepted:
			ts.waitProcessed("hh")
		case http.StatusTooManyRequests:
			if h.Get("Retry-After") == "" || !strings.Contains(out["error"].(string), "backups are failing") {
				t.Fatalf("the push-back: %v %v", h, out)
			}
			refused = true
		default:
			t.Fatalf("request %d on a full disk: %d %v", i, code, out)
		}
	}
	if !refused {
		t.Fatal("50 requests on a full disk were all acknowledged while the job's backups failed")
	}
	for i := range 3 {
		if code, out := ts.post("s", body); code != http.StatusTooManyRequests {
			t.Fatalf("request %d after the push-back began: %d %v", i, code, out)
		}
	}
	free()
	waitFor(t, "ingest to resume once space returned", 20*time.Second, func() bool {
		code, _ := ts.post("s", body)
		return code == http.StatusAccepted
	})
}
