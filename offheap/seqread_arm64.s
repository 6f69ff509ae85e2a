#include "textflag.h"

// func LoadAfterLoads(p *uint64) uint64
TEXT ·LoadAfterLoads(SB), NOSPLIT, $0-16
	MOVD	p+0(FP), R0
	DMB	$0x9 // ISHLD: earlier loads complete before later loads and stores
	LDAR	(R0), R1
	MOVD	R1, ret+8(FP)
	RET
