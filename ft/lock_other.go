//go:build !unix

package ft

import "os"

// tryLock has no flock to use on this platform: the PID is written but
// nothing stops a second process.
func tryLock(*os.File) (held bool, err error) { return false, nil }
