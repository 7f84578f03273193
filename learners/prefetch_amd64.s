#include "textflag.h"

// func prefetchLines(state, entries unsafe.Pointer, feats []Feature, mask uint64, shift uint64)
//
// For each feature: PREFETCHT0 of its global slot (state + (hash&mask)*32)
// and of its delta entry's home (entries + ((hash&mask)*hashMul >> shift)*32).
TEXT ·prefetchLines(SB), NOSPLIT, $0-56
	MOVQ state+0(FP), AX
	MOVQ entries+8(FP), BX
	MOVQ feats_base+16(FP), SI
	MOVQ feats_len+24(FP), R9
	MOVQ mask+40(FP), DX
	MOVQ shift+48(FP), CX
	MOVQ $0x9E3779B97F4A7C15, R10
loop:
	TESTQ R9, R9
	JZ    done
	MOVQ  (SI), R11
	ANDQ  DX, R11
	MOVQ  R11, R12
	SHLQ  $5, R12
	PREFETCHT0 (AX)(R12*1)
	IMULQ R10, R11
	SHRQ  CX, R11
	SHLQ  $5, R11
	PREFETCHT0 (BX)(R11*1)
	ADDQ  $16, SI
	DECQ  R9
	JMP   loop
done:
	RET

// func prefetchEntrySlots(state, entries unsafe.Pointer, used []uint32)
//
// For each delta entry index in used: PREFETCHT0 of the global slot it
// merges into (state + (entries[i].key-1)*32).
TEXT ·prefetchEntrySlots(SB), NOSPLIT, $0-40
	MOVQ state+0(FP), AX
	MOVQ entries+8(FP), BX
	MOVQ used_base+16(FP), SI
	MOVQ used_len+24(FP), R9
eloop:
	TESTQ R9, R9
	JZ    edone
	MOVL  (SI), R11
	SHLQ  $5, R11
	MOVQ  (BX)(R11*1), R12
	DECQ  R12
	SHLQ  $5, R12
	PREFETCHT0 (AX)(R12*1)
	ADDQ  $4, SI
	DECQ  R9
	JMP   eloop
edone:
	RET
