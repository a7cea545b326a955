/*
 * embed.cu - token embeddings times sqrt(d) plus sinusoidal positions
 * (paper sections 3.4, 3.5) and their backward into the shared embedding.
 */
#include "kernels.h"

/* out16 (NULL: none): the bf16 copy of out. */
__global__ void
embed_kernel(float *out, __nv_bfloat16 *out16, const int32_t *ids, const int32_t *positions, const float *embedding,
			 const float *pe, int rows, int d, float scale)
{
	size_t		n = (size_t) rows * d;

	for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
	{
		size_t		r = i / d,
					j = i % d;

		float		v = embedding[(size_t) ids[r] * d + j] * scale + pe[(size_t) positions[r] * d + j];

		out[i] = v;
		if (out16 != NULL)
			out16[i] = __float2bfloat16_rn(v);
	}
}

/*
 * One warp per (id, chunk of 32 columns), lanes on consecutive columns: the
 * id's rows (groups, tf_group_by_id) in increasing order, so repeated ids
 * add up without atomics and in the CPU backend's order. The row numbers
 * come 32 at a time, one per lane, and go round by shuffles; rows from
 * `rows` on are dout2's. 4 warps a block.
 */
#define EMBED_WARPS 4

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
					end = start[u + 1];
		float	   *de = dembedding + (size_t) id[u] * d + c;
		float		acc = c < d ? *de : 0.0f;

		for (int i0 = start[u]; i0 < end; i0 += 32)
		{
			int			mine = i0 + lane < end ? rows[i0 + lane] : 0;

			for (int t = 0; t < 32 && i0 + t < end; t++)
			{
				int			r = __shfl_sync(0xffffffffu, mine, t);
				const float *g = r < rows_first ? dout + (size_t) r * d : dout2 + (size_t) (r - rows_first) * d;

				if (c < d)
					acc += scale * g[c];
			}
		}
		if (c < d)
			*de = acc;
	}
}

void
k_embed(float *out, __nv_bfloat16 *out16, const int32_t *ids, const int32_t *positions, const float *embedding,
		const float *pe, int rows, int d, float scale, cudaStream_t stream)
{
	LAUNCH(embed_kernel, blocks_for((size_t) rows * d, BLOCK), BLOCK, 0, stream)(out, out16, ids, positions,
																				   embedding, pe, rows, d, scale);
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
