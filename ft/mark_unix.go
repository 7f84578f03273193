//go:build unix

package ft

import (
	"os"
	"syscall"
)

// mapMark maps the first markLen bytes of f, shared with the file: a store
// into them is in the operating system's page cache at once, as a write
// would be, without a system call per request.
func mapMark(f *os.File) ([]byte, error) {
	return syscall.Mmap(int(f.Fd()), 0, markLen, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
}

func unmapMark(b []byte) error { return syscall.Munmap(b) }
