//go:build unix

package synopses

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time the process has used: on a shared machine a
// benchmark's CPU time per op is steadier than its wall time, which counts
// the time other processes hold the cores.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
