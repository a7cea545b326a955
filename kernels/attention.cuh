/*
 * attention.cuh - what the attention kernels of attention.cu (SIMT, per row
 * and tiled) and attention_mma.cu (tiled on tensor cores) share: a
 * sentence's geometry for a head, a tiled block's rows, how keys and values
 * are read, and the tensor-core launchers attention.cu dispatches to.
 */
#ifndef ATTENTION_ATTENTION_CUH
#define ATTENTION_ATTENTION_CUH

#include "kernels.h"

#define TILE_ROWS 64			/* query rows (key rows for dK/dV) of a tiled block */

/*
 * A key or value element as attention reads it: rounded to bf16 in mixed
 * precision; a bf16 cache's element is that already.
 */
__device__ __forceinline__ float
kv_value(float x, bool bf16_kv)
{
	return bf16_kv ? __bfloat162float(__float2bfloat16_rn(x)) : x;
}
__device__ __forceinline__ float
kv_value(__nv_bfloat16 x, bool bf16_kv)
{
	(void) bf16_kv;
	return __bfloat162float(x);
}

/* Sentence b's geometry for head h (the arrays are device memory). */
struct Pair
{
	int			lq,
				lk;
	size_t		q0,
				k0;
	size_t		p_off;			/* first probability of this head */
};

__device__ __forceinline__ Pair
pair_of(const int32_t *q_start, const int32_t *k_start, const int64_t *p_start, const int32_t *k_len, int b, int h)
{
	Pair		a;

	a.q0 = (size_t) q_start[b];
	a.k0 = (size_t) k_start[b];
	a.lq = q_start[b + 1] - q_start[b];
	a.lk = k_len != NULL ? k_len[b] : k_start[b + 1] - k_start[b];
	a.p_off = (size_t) p_start[b] + (size_t) h * a.lq * a.lk;
	return a;
}

/* A tiled kernel's block: its sentence's geometry for its head, its rows [r0, r1) of `rows`. */
struct Tile
{
	Pair		a;
	int			h,
				r0,
				r1;
};

__device__ __forceinline__ Tile
tile_of(const int32_t *q_start, const int32_t *k_start, const int64_t *p_start, int num_heads, bool key_rows)
{
	Tile		t;
	int			b = blockIdx.x / num_heads;

	t.h = blockIdx.x % num_heads;
	t.a = pair_of(q_start, k_start, p_start, NULL, b, t.h);
	t.r0 = blockIdx.y * TILE_ROWS;
	t.r1 = min(key_rows ? t.a.lk : t.a.lq, t.r0 + TILE_ROWS);
	return t;
}

/* The shared row of a slice of T 16-column tiles, in bf16 elements (a multiple of 8: wmma's ldm; 16 bytes of padding move consecutive rows to other banks). */
__host__ __device__ __forceinline__ int
slice_ld(int tiles)
{
	return 16 * tiles + 8;
}

/* n rounded up to a multiple of 16 (rows of whole tiles). */
__host__ __device__ __forceinline__ int
up16(int n)
{
	return (n + 15) & ~15;
}

/*
 * Rows [r0, r0 + n) of a head's slice (row stride lds, d_k columns, head h)
 * into bf16 dst [padded, 16 T] (row stride slice_ld(T)), zero past n and
 * past d_k; threads `first`, `first + step`, ... share the work. Where
 * every row's slice starts 16 bytes aligned and d_k is a multiple of 4, a
 * thread takes 4 columns at a time (one 16-byte load, unrolled so that
 * several are in flight: these loads are what the kernels wait on most,
 * ncu on an H200), else one.
 */
__device__ __forceinline__ void
load_bf16(__nv_bfloat16 *dst, int tiles, const float *src, size_t r0, int n, int padded, int lds, int h, int dk,
		  int first, int step)
{
	int			width = 16 * tiles,
				ld = slice_ld(tiles);

	if (dk % 4 == 0 && lds % 4 == 0 && (uintptr_t) src % 16 == 0)
	{
		int			quads = width / 4;

UNROLL_BY_4
		for (int e = first; e < padded * quads; e += step)
		{
			int			r = e / quads,
						c = e % quads * 4;
			float4		f = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
			__nv_bfloat162 *o = (__nv_bfloat162 *) (dst + r * ld + c);

			if (r < n && c < dk)
				f = load4(src + (r0 + r) * lds + (size_t) h * dk + c);
			o[0] = __floats2bfloat162_rn(f.x, f.y);
			o[1] = __floats2bfloat162_rn(f.z, f.w);
		}
		return;
	}
	for (int e = first; e < padded * width; e += step)
	{
		int			r = e / width,
					c = e % width;

		dst[r * ld + c] = __float2bfloat16_rn(r < n && c < dk ? src[(r0 + r) * lds + (size_t) h * dk + c] : 0.0f);
	}
}

/*
 * attention_mma.cu: the tiled kernels on tensor cores, for bf16 mixed
 * precision (docs/gpus.md, "bf16 rules"). k_attention_mma_fits: whether
 * they serve this call (d_k at most MMA_MAX_HEAD_DIM and each kernel's
 * shared memory within `most` bytes); they write what the tiled kernels of
 * attention.cu write (dsum: [query rows, num_heads] workspace).
 */
#define MMA_MAX_HEAD_DIM 128

/*
 * attention_short.cu: the tensor-core kernels of a short pair (at most
 * SHORT_ROWS queries and keys), one block per (sentence, head), for heads
 * of d_k at most 64 (k_attention_short_serves); launched by
 * attention_mma.cu's launchers for every pair, they do the short ones and
 * the tiled kernels skip those. Same outputs as the tiled kernels; no
 * workspace. k_attention_short_bytes: the most dynamic shared memory they
 * take (bytes).
 */
#define SHORT_ROWS 64

__host__ __device__ __forceinline__ bool
short_pair(int lq, int lk)
{
	return lq <= SHORT_ROWS && lk <= SHORT_ROWS;
}
bool		k_attention_short_serves(const TfAttentionShape *sh);
size_t		k_attention_short_bytes(const TfAttentionShape *sh);
void		k_attention_short_set_limit(int most);
void		k_attention_short(float *ctx, __nv_bfloat16 *ctx16, float *lse, const float *q, int ldq, const float *k,
							  const float *v, int ldk, const TfAttentionShape *sh, cudaStream_t stream);
void		k_attention_short_backward(float *dq, float *dk, float *dv, __nv_bfloat16 *const copies[3],
									   const float *dctx, const float *lse, const float *q, int ldq, const float *k,
									   const float *v, int ldk, const TfAttentionShape *sh, cudaStream_t stream);
bool		k_attention_mma_fits(const TfAttentionShape *sh, size_t most);
void		k_attention_mma_set_limit(int most);
void		k_attention_mma(float *ctx, __nv_bfloat16 *ctx16, float *lse, const float *q, int ldq, const float *k,
							const float *v, int ldk, const TfAttentionShape *sh, cudaStream_t stream);
void		k_attention_mma_backward(float *dq, float *dk, float *dv, __nv_bfloat16 *const copies[3], float *dsum,
									 const float *dctx, const float *lse, const float *q, int ldq, const float *k,
									 const float *v, int ldk, const TfAttentionShape *sh, cudaStream_t stream);
#endif
