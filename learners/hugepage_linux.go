package learners

import (
	"syscall"
	"unsafe"
)

// adviseHuge asks the kernel to back a large table (the global model state,
// 32 MiB at the default 20 hash bits) with transparent huge pages. Slots are
// hashed uniformly over the table, so with 4 KiB pages nearly every feature
// of an event lands on its own page and costs a TLB miss; 2 MiB pages remove
// most of them. It is a memory hint, not I/O: errors are ignored, and a
// "never" THP setting makes it a no-op. Cost: the table is backed eagerly in
// 2 MiB units instead of lazily per 4 KiB page.
func adviseHuge[T uint64 | float64](s []T) {
	const min = 4 << 20
	n := len(s) * 8
	if n < min {
		return
	}
	// Round inwards to 2 MiB boundaries, which is what THP can use.
	start := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	const huge = 2 << 20
	lo := (start + huge - 1) &^ (huge - 1)
	hi := (start + uintptr(n)) &^ (huge - 1)
	if hi <= lo {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&s[(lo-start)/8])), hi-lo)
	_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE)
}
