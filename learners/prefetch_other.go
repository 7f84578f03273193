//go:build !amd64

package learners

import "unsafe"

// prefetchLines is a no-op where there is no prefetch instruction wired in.
func prefetchLines(state, entries unsafe.Pointer, feats []Feature, mask uint64, shift uint64) {}

// prefetchEntrySlots is a no-op where there is no prefetch instruction wired in.
func prefetchEntrySlots(state, entries unsafe.Pointer, used []uint32) {}
