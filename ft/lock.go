package ft

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// LockFile is the name of the lock file LockDir keeps in a data directory.
// A job name cannot start with a dot, so no job's directory can be it.
const LockFile = ".lock"

// ErrLocked is wrapped by the error of LockDir when another process holds
// the directory.
var ErrLocked = errors.New("ft: data directory in use")

// LockedError is LockDir's error when another process holds the directory.
// It wraps ErrLocked.
type LockedError struct {
	Dir string
	PID int // the holder's process id as it wrote it; 0 if unreadable
}

func (e *LockedError) Error() string {
	holder := "another process (PID unreadable)"
	if e.PID > 0 {
		holder = "process " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("ft: data directory %s is in use by %s: two processes writing one directory would corrupt each other's backups and item logs", e.Dir, holder)
}

// Unwrap returns ErrLocked.
func (e *LockedError) Unwrap() error { return ErrLocked }

// LockDir creates dir if needed and takes an exclusive lock on it for this
// process: an flock(2) on dir/.lock, into which it writes its PID. A second
// LockDir on the same directory, from any process (this one included),
// fails with a *LockedError naming the holder's PID. The lock belongs to
// the open file, so it dies with the process: kill -9 never leaves a stale
// lock, and the file left behind means nothing by itself. unlock
// releases it (the file stays).
func LockDir(dir string) (unlock func() error, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("ft: lock: %w", err)
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("ft: lock: %w", err)
	}
	held, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("ft: lock %s: %w", path, err)
	}
	if held {
		pid := readPID(f)
		f.Close()
		return nil, &LockedError{Dir: dir, PID: pid}
	}
	if err := writePID(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("ft: lock %s: %w", path, err)
	}
	return func() error {
		// Closing the file releases the flock.
		return f.Close()
	}, nil
}

func readPID(f *os.File) int {
	var b [32]byte
	n, _ := f.ReadAt(b[:], 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil {
		return 0
	}
	return pid
}

func writePID(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return err
}
