#include "textflag.h"

// func AddExclusive(p *uint64, d uint64)
TEXT ·AddExclusive(SB), NOSPLIT, $0-16
	MOVD	p+0(FP), R0
	MOVD	d+8(FP), R1
	MOVD	(R0), R2 // only the caller writes the word
	ADD	R1, R2, R2
	STLR	R2, (R0) // after every earlier load and store
	DMB	$0xa     // ISHST: before every later store
	RET

// func StoreExclusive(p *uint64, v uint64)
TEXT ·StoreExclusive(SB), NOSPLIT, $0-16
	MOVD	p+0(FP), R0
	MOVD	v+8(FP), R1
	STLR	R1, (R0)
	DMB	$0xa
	RET
