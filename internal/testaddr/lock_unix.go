//go:build unix

package testaddr

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive lock on the file at path without waiting. A
// lock is held by its open file, so a second reservation in this process
// is refused as another process's would be; the kernel drops it when the
// process ends, however it ends.
func lockFile(path string) (unlock func(), ok bool) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o644)
	if err != nil {
		return nil, false
	}
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		f.Close()
		return nil, false
	}
	return func() { f.Close() }, true
}
