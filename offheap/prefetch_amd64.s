#include "textflag.h"

// func PrefetchForWrite(b []byte)
TEXT ·PrefetchForWrite(SB), NOSPLIT, $0-24
	MOVQ	b_base+0(FP), AX
	MOVQ	b_len+8(FP), CX
	TESTQ	CX, CX
	JEQ	done
	LEAQ	(AX)(CX*1), DX
	ANDQ	$~63, AX
loop:
	// PREFETCHW (AX), which the assembler has no mnemonic for. CPUs
	// without it (Intel before Broadwell) decode it as a NOP.
	BYTE	$0x0F; BYTE $0x0D; BYTE $0x08
	ADDQ	$64, AX
	CMPQ	AX, DX
	JB	loop
done:
	RET

// func PrefetchWords(read, write1, write2 *uint64)
TEXT ·PrefetchWords(SB), NOSPLIT, $0-24
	MOVQ	read+0(FP), AX
	MOVQ	write1+8(FP), BX
	MOVQ	write2+16(FP), CX
	PREFETCHT0	(AX)
	BYTE	$0x0F; BYTE $0x0D; BYTE $0x0B // PREFETCHW (BX)
	BYTE	$0x0F; BYTE $0x0D; BYTE $0x09 // PREFETCHW (CX)
	RET

// func PrefetchWordsForWrite(a, b *uint64)
TEXT ·PrefetchWordsForWrite(SB), NOSPLIT, $0-16
	MOVQ	a+0(FP), AX
	MOVQ	b+8(FP), BX
	BYTE	$0x0F; BYTE $0x0D; BYTE $0x08 // PREFETCHW (AX)
	BYTE	$0x0F; BYTE $0x0D; BYTE $0x0B // PREFETCHW (BX)
	RET

// func PrefetchForRead(b []byte)
TEXT ·PrefetchForRead(SB), NOSPLIT, $0-24
	MOVQ	b_base+0(FP), AX
	MOVQ	b_len+8(FP), CX
	TESTQ	CX, CX
	JEQ	readdone
	LEAQ	(AX)(CX*1), DX
	ANDQ	$~63, AX
readloop:
	PREFETCHT0	(AX)
	ADDQ	$64, AX
	CMPQ	AX, DX
	JB	readloop
readdone:
	RET

// func PrefetchWordsForRead(a, b, c, d *uint64)
TEXT ·PrefetchWordsForRead(SB), NOSPLIT, $0-32
	MOVQ	a+0(FP), AX
	PREFETCHT0	(AX)
	MOVQ	b+8(FP), AX
	PREFETCHT0	(AX)
	MOVQ	c+16(FP), AX
	PREFETCHT0	(AX)
	MOVQ	d+24(FP), AX
	PREFETCHT0	(AX)
	RET
