/*
 * cpu_bf16.h - bf16 matrix products on the CPU through oneDNN (cpu_bf16.c):
 * the products of the CPU backend's mixed precision
 * (docs/gpus.md#bf16-mixed-precision), where the CPU multiplies bf16
 * natively (AVX512_BF16, AMX).
 */
#ifndef ATTENTION_CPU_BF16_H
#define ATTENTION_CPU_BF16_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool.h"

typedef struct CpuBf16 CpuBf16;

/*
 * True when oneDNN multiplies bf16 with the CPU's own instructions here
 * (its effective ISA includes avx512_core_bf16: AVX512_BF16 or AMX);
 * ONEDNN_MAX_CPU_ISA lowers it. Elsewhere oneDNN would emulate bf16 more
 * slowly than fp32, and the backend widens the rounded operands to fp32.
 */
bool		cpu_bf16_native(void);

/* oneDNN's CPU engine and an empty primitive cache; NULL when out of memory or oneDNN fails. */
CpuBf16    *cpu_bf16_create(void);

/* Releases the primitives, streams, scratch and engine (NULL is ignored). */
void		cpu_bf16_free(CpuBf16 *g);

/*
 * C[m, n] = alpha op(A) op(B) + beta C, A and B bf16 bit patterns (the
 * values the rules rounded), sums in fp32, C fp32; row-major, op(X) = X or
 * X^T, leading dimensions in elements. Cut into blocks of C by the shape
 * alone, each with the whole of K, each one oneDNN call on one thread of
 * `pool` (up to `threads`): the same bits on any number of threads. Where
 * beta is 0, C is only written. false with a message when oneDNN fails or
 * memory runs out; C is then undefined.
 */
bool		cpu_bf16_gemm(CpuBf16 *g, TfPool *pool, int threads, bool trans_a, bool trans_b, int m, int n, int k,
						  float alpha, const uint16_t *a, int lda, const uint16_t *b, int ldb, float beta,
						  float *c, int ldc, char *err, size_t errlen);

/*
 * Grows the scratch buffer *buf (realloc'd, contents kept) to hold at least
 * bytes, *capacity its size; false when out of memory (*buf unchanged).
 * The CPU backend's scratch buffers too.
 */
bool		cpu_scratch_grow(void **buf, size_t *capacity, size_t bytes);

#endif
