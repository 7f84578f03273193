package ft

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLockHelperProcess is not a test: TestLockDirAcrossProcesses runs the
// test binary with it as a second process that holds a lock until killed.
func TestLockHelperProcess(t *testing.T) {
	dir := os.Getenv("FT_LOCK_HELPER_DIR")
	if dir == "" {
		t.Skip("helper process only")
	}
	if _, err := LockDir(dir); err != nil {
		os.Stdout.WriteString("error: " + err.Error() + "\n")
		os.Exit(2)
	}
	os.Stdout.WriteString("locked\n")
	select {} // until killed
}

// A second process on a locked directory is refused and told the holder's
// PID; kill -9 of the holder frees the directory at once.
func TestLockDirAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHelperProcess$")
	cmd.Env = append(os.Environ(), "FT_LOCK_HELPER_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	select {
	case l := <-line:
		if l != "locked\n" {
			t.Fatalf("helper: %q", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("helper did not lock")
	}

	_, err = LockDir(dir)
	var le *LockedError
	if !errors.As(err, &le) || !errors.Is(err, ErrLocked) || le.PID != cmd.Process.Pid {
		t.Fatalf("second lock: %v, want held by PID %d", err, cmd.Process.Pid)
	}
	if !strings.Contains(err.Error(), "process "+itoa(cmd.Process.Pid)) {
		t.Fatalf("error does not name the holder: %v", err)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	unlock, err := LockDir(dir)
	if err != nil {
		t.Fatalf("after kill -9 of the holder: %v", err)
	}
	if pid := readLockPID(t, dir); pid != itoa(os.Getpid()) {
		t.Fatalf("the lock file holds %q, want our PID %d", pid, os.Getpid())
	}
	// Within one process a second lock is refused too, and unlock frees it.
	if _, err := LockDir(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock in the same process: %v", err)
	}
	if err := unlock(); err != nil {
		t.Fatal(err)
	}
	unlock, err = LockDir(dir)
	if err != nil {
		t.Fatalf("after unlock: %v", err)
	}
	unlock()
}

func readLockPID(t *testing.T, dir string) string {
	b, err := os.ReadFile(dir + "/" + LockFile)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func itoa(n int) string { return strconv.Itoa(n) }
