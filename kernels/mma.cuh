/*
 * mma.cuh - one warp's bf16 tensor-core product in registers: PTX's
 * mma.sync.aligned.m16n8k16 (sm_80 and later; emu/mma_emu.h under the
 * emulation), and the loads that build its fragments from bf16 matrices
 * in shared memory. Fragment layouts are the PTX ISA's ("Matrix Fragments
 * for mma.m16n8k16 with floating point type"; group g = lane / 4, t = lane
 * % 4):
 *   A 16 x 16: a[0] (row g, columns 2t, 2t + 1), a[1] (row g + 8, same),
 *     a[2] (row g, columns 2t + 8, 2t + 9), a[3] (row g + 8, same);
 *   B 16 x 8: b[0] (rows 2t, 2t + 1, column g), b[1] (rows 2t + 8, 2t + 9);
 *   C 16 x 8 fp32: c[0], c[1] (row g, columns 2t, 2t + 1), c[2], c[3] (row
 *     g + 8, same).
 * Each .b32 holds two bf16, the lower row or column in its lower half. Two
 * C tiles side by side (columns 0-7 and 8-15 of 16 rows) are, packed to
 * bf16, exactly an A fragment (pack_a): a product's output feeds the next
 * product without leaving the registers (FlashAttention-2's use of the
 * layout).
 */
#ifndef ATTENTION_KERNELS_MMA_CUH
#define ATTENTION_KERNELS_MMA_CUH

#include <string.h>

#include "common.cuh"

#if CUEMU
#include "emu/mma_emu.h"
#endif

/* The two bf16 of lo and hi (round to nearest even) in one .b32, lo in the lower half. */
__device__ __forceinline__ uint32_t
pack_bf16(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
	uint32_t	u;

	memcpy(&u, &v, 4);
	return u;
}

/* Two bf16 of shared memory at p (4-byte aligned) in one 32-bit load. */
__device__ __forceinline__ uint32_t
load_pair(const __nv_bfloat16 *p)
{
	return *(const uint32_t *) p;
}

/* The bf16 at p and p[stride] in one .b32 (two 16-bit loads). */
__device__ __forceinline__ uint32_t
load_pair_strided(const __nv_bfloat16 *p, int stride)
{
	return (uint32_t) __bfloat16_as_ushort(p[0]) | (uint32_t) __bfloat16_as_ushort(p[stride]) << 16;
}

/* d += a b: one warp's m16n8k16 product, bf16 operands, fp32 accumulators; all 32 lanes call it. */
__device__ __forceinline__ void
mma16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
#if CUEMU
	cuemu::mma_emu::m16n8k16(d, a, b);
#else
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
				 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
				 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
				 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/* A from a row-major matrix: element (m, k) at p[m * ld + k] (ld even, p 4-byte aligned). */
__device__ __forceinline__ void
load_a(uint32_t (&a)[4], const __nv_bfloat16 *p, int ld)
{
	int			lane = threadIdx.x % 32,
				g = lane / 4,
				t = lane % 4;

	a[0] = load_pair(p + g * ld + 2 * t);
	a[1] = load_pair(p + (g + 8) * ld + 2 * t);
	a[2] = load_pair(p + g * ld + 2 * t + 8);
	a[3] = load_pair(p + (g + 8) * ld + 2 * t + 8);
}

/* A from its transpose: element (m, k) at p[k * ld + m]. */
__device__ __forceinline__ void
load_a_transposed(uint32_t (&a)[4], const __nv_bfloat16 *p, int ld)
{
	int			lane = threadIdx.x % 32,
				g = lane / 4,
				t = lane % 4;

	a[0] = load_pair_strided(p + 2 * t * ld + g, ld);
	a[1] = load_pair_strided(p + 2 * t * ld + g + 8, ld);
	a[2] = load_pair_strided(p + (2 * t + 8) * ld + g, ld);
	a[3] = load_pair_strided(p + (2 * t + 8) * ld + g + 8, ld);
}

/* B from column-major storage: element (k, n) at p[n * ld + k] (a row of the matrix whose transpose B is). */
__device__ __forceinline__ void
load_b(uint32_t (&b)[2], const __nv_bfloat16 *p, int ld)
{
	int			lane = threadIdx.x % 32,
				g = lane / 4,
				t = lane % 4;

	b[0] = load_pair(p + g * ld + 2 * t);
	b[1] = load_pair(p + g * ld + 2 * t + 8);
}

/* B from row-major storage: element (k, n) at p[k * ld + n]. */
__device__ __forceinline__ void
load_b_rows(uint32_t (&b)[2], const __nv_bfloat16 *p, int ld)
{
	int			lane = threadIdx.x % 32,
				g = lane / 4,
				t = lane % 4;

	b[0] = load_pair_strided(p + 2 * t * ld + g, ld);
	b[1] = load_pair_strided(p + (2 * t + 8) * ld + g, ld);
}

/* The A fragment of two C tiles side by side (left: columns 0-7, right: 8-15), rounded to bf16. */
__device__ __forceinline__ void
pack_a(uint32_t (&a)[4], const float (&left)[4], const float (&right)[4])
{
	a[0] = pack_bf16(left[0], left[1]);
	a[1] = pack_bf16(left[2], left[3]);
	a[2] = pack_bf16(right[0], right[1]);
	a[3] = pack_bf16(right[2], right[3]);
}
#endif
