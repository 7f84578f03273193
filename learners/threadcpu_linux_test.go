package learners_test

import "syscall"

// threadCPU is the CPU time of the calling OS thread, in seconds (0 if
// unknown): on a shared machine it leaves out the time the thread waited
// for a core, which wall time counts.
func threadCPU() float64 {
	var ru syscall.Rusage
	const rusageThread = 1 // RUSAGE_THREAD
	if syscall.Getrusage(rusageThread, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
