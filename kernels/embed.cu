/*
 * embed.cu - token embeddings times sqrt(d) plus sinusoidal positions
 * (paper sections 3.4, 3.5) with their dropout (section 5.4), and their
 * backward into the shared embedding.
 */
#include "kernels.h"

/*
 * One thread per Philox block of four elements (dropout.cu's): the
 * embedding, then at p > 0 dropout_kernel's product and mask; out16 (NULL:
 * none) the bf16 copy of out.
 */
__global__ void
embed_kernel(float *out, __nv_bfloat16 *out16, const int32_t *ids, const int32_t *positions, const float *embedding,
			 const float *pe, int rows, int d, float scale, float p, uint64_t seed, uint64_t stream_id,
			 uint8_t *keep_mask)
{
	size_t		n = (size_t) rows * d,
				blocks = (n + 3) / 4;
	float		keep_scale = 1.0f / (1.0f - p);

	for (size_t blk = (size_t) blockIdx.x * blockDim.x + threadIdx.x; blk < blocks;
		 blk += (size_t) gridDim.x * blockDim.x)
	{
		uint32_t	w[4];

		if (p > 0.0f)
			device_philox(seed, stream_id, blk, w);
		for (int k = 0; k < 4; k++)
		{
			size_t		e = blk * 4 + k,
						r = e / d,
						j = e % d;
			float		v;

			if (e >= n)
				break;
			/* rounded product, then sum: nvcc would fuse them into one FMA, which rounds once and
			 * so differs from the CPU backend's bits (and dropout's test is bitwise) */
			v = __fadd_rn(__fmul_rn(embedding[(size_t) ids[r] * d + j], scale), pe[(size_t) positions[r] * d + j]);
			if (p > 0.0f)
			{
				bool		keep = tf_word_uniform(w[k]) >= p;

				v = keep ? v * keep_scale : 0.0f;
				if (keep_mask != NULL)
					keep_mask[e] = keep;
			}
			out[e] = v;
			if (out16 != NULL)
				out16[e] = __float2bfloat16_rn(v);
		}
	}
}

/*
 * One warp per (id, chunk of 32 columns), lanes on consecutive columns: the
 * id's rows (groups, tf_group_by_id) in increasing order, so repeated ids
 * add up without atomics and in the CPU backend's order. The row numbers
 * come 32 at a time, one per lane, and go round by shuffles; rows from
 * `rows` on are dout2's. 4 warps a block. A full set of 32 rows is loaded
 * before any of it is added (32 loads in flight, the sums' order unchanged):
 * with a load and its add a row at a time behind the column test, a frequent
 * id's rows were one dependent chain of memory latencies (the H200: 1.29 ms a
 * step, 2% of DRAM bandwidth; docs/gpus.md). Lanes past d read column d - 1
 * and write nothing.
 */
#define EMBED_WARPS 4

/* Column col of gradient row r: dout's rows first, dout2's from rows_first on ([rows, d] each). */
static __device__ __forceinline__ float
gradient_at(const float *dout, int rows_first, const float *dout2, int r, int d, int col)
{
	return (r < rows_first ? dout + (size_t) r * d : dout2 + (size_t) (r - rows_first) * d)[col];
}

__global__ void
embed_backward_kernel(float *dembedding, const float *dout, int rows_first, const float *dout2, const int32_t *groups,
					  int unique, int d, float scale)
{
	const int32_t *start = groups,
			   *id = groups + unique + 1,
			   *rows = id + unique;
	int			chunks = (d + 31) / 32,
				lane = threadIdx.x % 32;

	for (long w = (long) blockIdx.x * EMBED_WARPS + threadIdx.x / 32; w < (long) unique * chunks;
		 w += (long) gridDim.x * EMBED_WARPS)
	{
		int			u = (int) (w / chunks),
					c = (int) (w % chunks) * 32 + lane,
					col = c < d ? c : d - 1,
					end = start[u + 1];
		float	   *de = dembedding + (size_t) id[u] * d + col;
		float		acc = *de;

		for (int i0 = start[u]; i0 < end; i0 += 32)
		{
			int			mine = i0 + lane < end ? rows[i0 + lane] : 0;

			if (i0 + 32 <= end)
			{
				float		v[32];

				UNROLL
				for (int t = 0; t < 32; t++)
				{
					int			r = __shfl_sync(0xffffffffu, mine, t);

					v[t] = gradient_at(dout, rows_first, dout2, r, d, col);
				}
				UNROLL
				for (int t = 0; t < 32; t++)
					acc += scale * v[t];
			}
			else
				for (int t = 0; i0 + t < end; t++)
				{
					int			r = __shfl_sync(0xffffffffu, mine, t);

					acc += scale * gradient_at(dout, rows_first, dout2, r, d, col);
				}
		}
		if (c < d)
			*de = acc;
	}
}

void
k_embed(float *out, __nv_bfloat16 *out16, const int32_t *ids, const int32_t *positions, const float *embedding,
		const float *pe, int rows, int d, float scale, float p, uint64_t seed, uint64_t stream_id,
		uint8_t *keep_mask, cudaStream_t stream)
{
	LAUNCH(embed_kernel, blocks_for(((size_t) rows * d + 3) / 4, BLOCK), BLOCK, 0, stream)
		(out, out16, ids, positions, embedding, pe, rows, d, scale, p, seed, stream_id, keep_mask);
}

void
k_embed_backward(float *dembedding, const float *dout, int rows, const float *dout2, const int32_t *groups,
				 int unique, int d, float scale, cudaStream_t stream)
{
	size_t		warps = (size_t) unique * ((d + 31) / 32);

	if (warps > 0)
		LAUNCH(embed_backward_kernel, blocks_for(warps, EMBED_WARPS), EMBED_WARPS * 32, 0, stream)
			(dembedding, dout, rows, dout2, groups, unique, d, scale);
}
