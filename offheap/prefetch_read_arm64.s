#include "textflag.h"

// func PrefetchForRead(b []byte)
TEXT ·PrefetchForRead(SB), NOSPLIT, $0-24
	MOVD	b_base+0(FP), R0
	MOVD	b_len+8(FP), R1
	CBZ	R1, done
	ADD	R0, R1, R2 // the end
	AND	$~63, R0
loop:
	PRFM	(R0), PLDL1KEEP
	ADD	$64, R0
	CMP	R2, R0
	BLO	loop
done:
	RET

// func PrefetchWordsForRead(a, b, c, d *uint64)
TEXT ·PrefetchWordsForRead(SB), NOSPLIT, $0-32
	MOVD	a+0(FP), R0
	PRFM	(R0), PLDL1KEEP
	MOVD	b+8(FP), R0
	PRFM	(R0), PLDL1KEEP
	MOVD	c+16(FP), R0
	PRFM	(R0), PLDL1KEEP
	MOVD	d+24(FP), R0
	PRFM	(R0), PLDL1KEEP
	RET
