/*
 * cpu_matmul.h - the CPU backend's products with fixed weights through oneDNN
 * (cpu_matmul.c): the `linear` and `embed_int8` operations of backend.h and
 * what the backend keeps for them.
 */
#ifndef ATTENTION_CPU_MATMUL_H
#define ATTENTION_CPU_MATMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "pool.h"

typedef struct CpuMatmul CpuMatmul;

/* oneDNN's CPU engine and stream, an empty primitive cache; NULL when out of memory or oneDNN fails. */
CpuMatmul  *cpu_matmul_create(void);

/* Releases the primitives, the engine and the scratch (NULL is ignored). */
void		cpu_matmul_free(CpuMatmul *mm);

/*
 * The largest int8 weight magnitude whose products never saturate on this
 * CPU: 127 where oneDNN computes u8 x s8 with VNNI (vpdpbusd sums into 32
 * bits), 63 elsewhere (AVX2 and AVX-512 without VNNI sum pairs of u8 x s8
 * products into 16 bits with saturation: 2 * 255 * 127 > 32767 but
 * 2 * 255 * 63 < 32767). oneDNN's ISA, so ONEDNN_MAX_CPU_ISA lowers it.
 */
int			cpu_matmul_int8_weight_max(void);

/*
 * y[rows, out] = x[rows, in] W^T + bias (bias [out] or NULL), W [out, in]
 * row-major (nn.Linear), on up to `threads` threads of `pool` (the same
 * bits on any number). TF_WEIGHTS_FP32: w is
 * float. TF_WEIGHTS_INT8: w is int8 and W[n, :] = scales[n] * w[n, :];
 * each row of x is quantized to int8 (symmetric: sx = max |x[r, :]| / 127,
 * round to nearest even), the int32 sums are exact and
 * y[r, n] = sx[r] * scales[n] * sum_k xq[r, k] w[n, k] + bias[n].
 * false with a message when oneDNN fails (out of memory); y is then undefined.
 */
bool		cpu_matmul_linear(CpuMatmul *mm, TfPool *pool, int threads, TfWeightType type, float *y,
							  const float *x, const void *w, const float *scales, const float *bias, int rows,
							  int in, int out, char *err, size_t errlen);

#endif
