#include "textflag.h"

// func addPair(p *uint64, da, db float64) (skipped uint64)
//
// Adds da to the float64 at p[0] and db to the one at p[1] in one LOCK
// CMPXCHG16B (p 16-byte aligned): a sum that is not finite leaves its word
// as it was and counts in skipped.
TEXT ·addPair(SB), NOSPLIT, $0-32
	MOVQ  p+0(FP), DI
	MOVSD da+8(FP), X2
	MOVSD db+16(FP), X3
	MOVQ  $0x7FF0000000000000, R10
	MOVQ  0(DI), AX
	MOVQ  8(DI), DX
ploop:
	XORQ  R11, R11
	MOVQ  AX, X0
	ADDSD X2, X0
	MOVQ  X0, BX
	MOVQ  BX, R8
	ANDQ  R10, R8
	CMPQ  R8, R10
	JNE   afinite
	MOVQ  AX, BX
	INCQ  R11
afinite:
	MOVQ  DX, X1
	ADDSD X3, X1
	MOVQ  X1, CX
	MOVQ  CX, R8
	ANDQ  R10, R8
	CMPQ  R8, R10
	JNE   bfinite
	MOVQ  DX, CX
	INCQ  R11
bfinite:
	LOCK
	CMPXCHG16B (DI)
	JNE   ploop
	MOVQ  R11, skipped+24(FP)
	RET
