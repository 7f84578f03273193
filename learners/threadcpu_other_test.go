//go:build !linux

package learners_test

// threadCPU is unknown here: 0.
func threadCPU() float64 { return 0 }
