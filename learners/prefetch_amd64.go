package learners

import "unsafe"

// prefetchLines asks the CPU to bring into cache, without waiting, the
// global state slot and the delta home entry of each feature (see
// prefetch_amd64.s). Addresses are computed as Learn computes them; an
// address is a hint, never dereferenced.
//
//go:noescape
func prefetchLines(state, entries unsafe.Pointer, feats []Feature, mask uint64, shift uint64)

// prefetchEntrySlots asks the CPU to bring into cache the global state
// slot of each delta entry whose index is in used (the slots a Sync is
// about to merge into). The entries must be occupied.
//
//go:noescape
func prefetchEntrySlots(state, entries unsafe.Pointer, used []uint32)
