//go:build race

package api

// raceEnabled: the race detector is on (sync.Pool then drops some of what
// it is given, on purpose).
const raceEnabled = true
