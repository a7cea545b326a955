/*
 * bf16.h - bfloat16 rounding on the host: the CPU backend's mixed precision
 * (docs/gpus.md#bf16-mixed-precision), the same rounding as CUDA's
 * __float2bfloat16_rn.
 *
 * Round to nearest, ties to even, in integer arithmetic: subnormal inputs
 * and results are kept (vcvtneps2bf16 flushes them to zero), NaN stays a
 * quiet NaN, values above the largest bf16 become infinity. Branch-free,
 * so loops over it vectorize.
 */
#ifndef ATTENTION_BF16_H
#define ATTENTION_BF16_H

#include <stdint.h>
#include <string.h>

/* The bf16 bits of x (the high 16 bits of the rounded float). */
static inline uint16_t
tf_bf16_bits(float x)
{
	uint32_t	u;

	memcpy(&u, &x, sizeof(u));
	/* a select, not a branch: NaN keeps its high bits, made quiet */
	return (uint16_t) ((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x0040u : (u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* x rounded to bf16 and widened back to float (exact). */
static inline float
tf_bf16_round(float x)
{
	uint32_t	u = (uint32_t) tf_bf16_bits(x) << 16;
	float		y;

	memcpy(&y, &u, sizeof(y));
	return y;
}

#endif
