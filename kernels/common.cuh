/*
 * common.cuh - what every kernel file of the CUDA backend shares: the
 * emulation header (real CUDA under nvcc, the CPU emulation under g++),
 * block-wide reductions and the launch-checking helpers.
 *
 * Every kernel here is deterministic: no floating-point atomics, every sum
 * over threads in a fixed tree order, so a run is bitwise repeatable and
 * equal in every fiber order under emulation.
 */
#ifndef ATTENTION_KERNELS_COMMON_CUH
#define ATTENTION_KERNELS_COMMON_CUH

#include <stddef.h>
#include <stdint.h>

#include "emu/cuda_emu.h"

extern "C" {
#include "rng.h"
}

#ifdef CUEMU_CENSUS
#define CENSUS_PHILOX() cuemu::census::count_philox()
#else
#define CENSUS_PHILOX() ((void) 0)
#endif

/* Threads per block of the row-wise kernels (a multiple of 32). */
#define BLOCK 256

/*
 * The 16 bytes at p (16-byte aligned) in one load or store: ld.v4 and
 * st.v4 on a GPU. g++ would cut a float4 into four 4-byte accesses (four
 * warp instructions to the census): there, one access of a 16-byte vector.
 */
#ifdef __CUDACC__
__device__ __forceinline__ float4
load4(const float *p)
{
	return *(const float4 *) p;
}
__device__ __forceinline__ void
store4(float *p, const float v[4])
{
	*(float4 *) p = make_float4(v[0], v[1], v[2], v[3]);
}
#else
typedef float emu_float4 __attribute__((vector_size(16)));

__device__ __forceinline__ float4
load4(const float *p)
{
	emu_float4	v = *(const emu_float4 *) p;

	return make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void
store4(float *p, const float v[4])
{
	*(emu_float4 *) p = emu_float4{v[0], v[1], v[2], v[3]};
}
#endif

/*
 * Unrolls the loop that follows (over a compile-time count), in nvcc and in
 * g++ alike; UNROLL_BY_4 unrolls a loop of any count by 4; NO_UNROLL keeps
 * it a loop (registers before instruction-level parallelism).
 */
#ifdef __CUDACC__
#define UNROLL _Pragma("unroll")
#define UNROLL_BY_4 _Pragma("unroll 4")
#define NO_UNROLL _Pragma("unroll 1")
#else
#define UNROLL _Pragma("GCC unroll 8")
#define UNROLL_BY_4 _Pragma("GCC unroll 4")
#define NO_UNROLL _Pragma("GCC unroll 1")
#endif

/*
 * Column sums over many rows run in two passes (rows cut into at most
 * MAX_CHUNKS chunks summed in row order, then the chunks in order): enough
 * parallelism for a GPU, the same sums in every run. `workspace` floats of
 * scratch hold the per-chunk partials.
 */
#define MAX_CHUNKS 256

/* Chunks of a two-pass column sum of `rows` x `cols` with `parts` partial arrays in `workspace` floats. */
static inline int
column_chunks(int rows, int cols, int parts, size_t workspace)
{
	size_t		fit = workspace / ((size_t) cols * parts);
	int			chunks = rows < MAX_CHUNKS ? rows : MAX_CHUNKS;

	if ((size_t) chunks > fit)
		chunks = (int) fit;
	return chunks > 0 ? chunks : 1;
}

/* Blocks for n elements at `threads` per block, capped for grid-stride loops. */
static inline unsigned
blocks_for(size_t n, unsigned threads)
{
	size_t		b = (n + threads - 1) / threads;

	return (unsigned) (b == 0 ? 1 : b > 65535 ? 65535 : b);
}

/*
 * Threads per block for a kernel whose threads stride over `width` elements
 * of a row: width rounded up to whole warps, between one warp and `most`
 * (a multiple of 32). Short rows (small d_model, short sentences) then leave
 * no warps idle, on a GPU and in the emulator alike.
 */
static inline unsigned
row_threads(int width, unsigned most)
{
	unsigned	t = width > 0 ? ((unsigned) width + 31u) / 32u * 32u : 32u;

	return t < most ? t : most;
}

/* The two reductions of the kernels. */
struct SumOp
{
	template <class T> __device__ __forceinline__ T operator() (T a, T b) const { return a + b; }
};
struct MaxOp
{
	__device__ __forceinline__ float operator() (float a, float b) const { return fmaxf(a, b); }
};

/* op over the warp (every lane gets the result). */
template <class T, class Op>
__device__ __forceinline__ T
warp_reduce(T v, Op op)
{
	for (int o = 16; o > 0; o >>= 1)
		v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/*
 * op over the block (blockDim.x a multiple of 32, at most 1024); every
 * thread gets the result. `part` is __shared__ scratch of 33 T; every
 * thread of the block must call it (it holds barriers). identity: op's
 * neutral value, for the lanes past the block's warps.
 */
template <class T, class Op>
__device__ __forceinline__ T
block_reduce(T v, T *part, Op op, T identity)
{
	int			lane = threadIdx.x & 31,
				warp = threadIdx.x >> 5;

	v = warp_reduce(v, op);
	if (lane == 0)
		part[warp] = v;
	__syncthreads();
	if (warp == 0)
	{
		T			t = lane < (int) (blockDim.x >> 5) ? part[lane] : identity;

		t = warp_reduce(t, op);
		if (lane == 0)
			part[32] = t;
	}
	__syncthreads();
	v = part[32];
	__syncthreads();			/* part may be reused at once */
	return v;
}

__device__ __forceinline__ float
block_sum(float v, float *part)
{
	return block_reduce(v, part, SumOp(), 0.0f);
}

__device__ __forceinline__ double
block_sum_double(double v, double *part)
{
	return block_reduce(v, part, SumOp(), 0.0);
}

__device__ __forceinline__ float
block_max(float v, float *part)
{
	return block_reduce(v, part, MaxOp(), -INFINITY);
}

/*
 * Philox4x32-10 block blk of a dropout stream (src/rng.h): words 4 blk ..
 * 4 blk + 3 of the stream. The census build counts each call (census.h:
 * philox=; priced at about 80 instructions a lane, bench/gpu_census.py).
 */
__device__ __forceinline__ void
device_philox(uint64_t seed, uint64_t stream, uint64_t blk, uint32_t w[4])
{
	CENSUS_PHILOX();
	tf_philox((uint32_t) blk, (uint32_t) (blk >> 32), (uint32_t) stream, (uint32_t) (stream >> 32),
			  (uint32_t) seed, (uint32_t) (seed >> 32), w);
}

/* tf_random_uniform of src/rng.c on the device: word index % 4 of Philox on counter index / 4. */
__device__ __forceinline__ float
device_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
	uint32_t	w[4];

	device_philox(seed, stream, index >> 2, w);
	return tf_word_uniform(w[index & 3]);
}

/*
 * Dropout's keep bits of the 8 consecutive draws index .. index + 7: bit c
 * set when device_uniform(seed, stream, index + c) >= p, the same draws bit
 * for bit, from the 3 Philox blocks that hold them (2 when index is a
 * multiple of 4) where device_uniform computes one a draw.
 */
__device__ __forceinline__ uint32_t
device_keep8(uint64_t seed, uint64_t stream, uint64_t index, float p)
{
	int			skip = (int) (index & 3);	/* words of the first block before index */
	uint32_t	keep = 0;

UNROLL
	for (int b = 0; b < 3; b++)
	{
		uint32_t	w[4];

		if (b == 2 && skip == 0)
			break;
		device_philox(seed, stream, (index >> 2) + b, w);
UNROLL
		for (int k = 0; k < 4; k++)
		{
			int			c = 4 * b + k - skip;

			if (c >= 0 && c < 8 && tf_word_uniform(w[k]) >= p)
				keep |= 1u << c;
		}
	}
	return keep;
}

#endif
