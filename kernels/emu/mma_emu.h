/*
 * mma_emu.h - PTX's warp-level mma.sync.aligned.m16n8k16.row.col.f32.bf16.
 * bf16.f32 for the emulation (cuda_emu.h), as kernels/mma.cuh issues it:
 * each lane's registers hold the elements the PTX ISA's "Matrix Fragments
 * for mma.m16n8k16 with floating point type" assigns them (group g = lane /
 * 4, t = lane % 4):
 *   A (16 x 16, row-major), four .b32 of two bf16 each, the lower column in
 *     the lower half: a0 (g, 2t..2t+1), a1 (g + 8, 2t..), a2 (g, 2t + 8..),
 *     a3 (g + 8, 2t + 8..);
 *   B (16 x 8, K x N), two .b32: b0 (rows 2t..2t+1, column g), b1 (rows
 *     2t + 8..2t + 9, column g);
 *   C and D (16 x 8 fp32): c0, c1 (g, 2t..2t+1), c2, c3 (g + 8, 2t..2t+1).
 * Code that puts an element in the wrong register gets a wrong product
 * here as on a GPU. The call is warp-collective (all 32 lanes, else the
 * emulator's fatal inconsistent warp op); each element sums its 16 products
 * in fp32 in an order of its own (the hardware's is unspecified) and then
 * adds C. The census build counts one product per warp (census.h: mma8=).
 */
#ifndef CUEMU_MMA_EMU_H
#define CUEMU_MMA_EMU_H

#include <cuda_bf16.h>

namespace cuemu {
namespace mma_emu {
/* A warp's operands of a product in flight, in its warp scratch (cuda_emu.h). */
struct Mma16816 { float a[16][16], b[16][8], c[16][8]; };
static_assert(sizeof(Mma16816) <= WARP_SCRATCH, "mma_emu: a warp's scratch holds one product");

/* The bf16 in the lower and the upper half of x, as floats. */
inline float bits_float(uint32_t x) { float f; memcpy(&f, &x, 4); return f; }
inline float lo(uint32_t x) { return bits_float(x << 16); }
inline float hi(uint32_t x) { return bits_float(x & 0xffff0000u); }

#ifdef CUEMU_CENSUS
inline void census_mma8(int lane) { if (lane == 0 && census::worker) census::worker->t.mma8++; }
#define CUEMU_MMA_QUIET __attribute__((no_sanitize_thread))
#else
inline void census_mma8(int) {}
#define CUEMU_MMA_QUIET
#endif

/* d += a b for the warp's m16n8k16 tile, in the registers the PTX ISA assigns each lane. */
CUEMU_MMA_QUIET inline void
m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2])
{
	int			thread = (int) (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)),
				lane = thread % 32,
				g = lane / 4,
				t = lane % 4;

	Mma16816   &m = *(Mma16816 *) (warp_scratch + (size_t) (thread / 32) * WARP_SCRATCH);

	for (int r = 0; r < 2; r++)	/* a0/a1 and a2/a3: rows g and g + 8 of the low and high column halves */
		for (int half = 0; half < 2; half++)
		{
			uint32_t	x = a[half * 2 + r];

			m.a[g + 8 * r][8 * half + 2 * t] = lo(x);
			m.a[g + 8 * r][8 * half + 2 * t + 1] = hi(x);
		}
	for (int half = 0; half < 2; half++)
	{
		m.b[8 * half + 2 * t][g] = lo(b[half]);
		m.b[8 * half + 2 * t + 1][g] = hi(b[half]);
	}
	for (int e = 0; e < 4; e++)
		m.c[g + 8 * (e / 2)][2 * t + e % 2] = d[e];
	__syncwarp();
	census_mma8(lane);

	float		out[4];

	for (int e = 0; e < 4; e++)
	{
		int			r = g + 8 * (e / 2),
					col = 2 * t + e % 2;
		float		s = 0.0f;

		for (int j = 0; j < 16; j++)
		{
			int			k = (j + 3 * r + col) % 16;	/* an order of its own per element */

			s += m.a[r][k] * m.b[k][col];
		}
		out[e] = s + m.c[r][col];
	}
	__syncwarp();				/* every lane has read the scratch before the next product writes it */
	for (int e = 0; e < 4; e++)
		d[e] = out[e];
}
}	/* namespace mma_emu */
}	/* namespace cuemu */
#endif
