/*
 * dropout.cu - inverted dropout with the CPU backend's exact bits: element
 * i is kept when uniform(seed, stream, i) >= p, uniform from word i % 4 of
 * Philox4x32-10 on counter (i / 4, stream) (src/rng.h, shared).
 */
#include "kernels.h"

/* One thread per Philox block of four elements; out16 (NULL: none) the bf16 copy of out. */
__global__ void
dropout_kernel(float *out, __nv_bfloat16 *out16, const float *x, size_t n, float p, uint64_t seed,
			   uint64_t stream_id, uint8_t *keep_mask)
{
	size_t		blocks = (n + 3) / 4;
	float		keep_scale = 1.0f / (1.0f - p);

	for (size_t blk = (size_t) blockIdx.x * blockDim.x + threadIdx.x; blk < blocks;
		 blk += (size_t) gridDim.x * blockDim.x)
	{
		uint32_t	w[4];

		device_philox(seed, stream_id, blk, w);
		for (int k = 0; k < 4; k++)
		{
			size_t		e = blk * 4 + k;
			bool		keep;
			float		v;

			if (e >= n)
				break;
			keep = tf_word_uniform(w[k]) >= p;
			v = keep ? x[e] * keep_scale : 0.0f;
			out[e] = v;
			if (out16 != NULL)
				out16[e] = __float2bfloat16_rn(v);
			if (keep_mask != NULL)
				keep_mask[e] = keep;
		}
	}
}

/* dx16 (NULL: none): the bf16 copy of dx. */
__global__ void
dropout_backward_kernel(float *dx, __nv_bfloat16 *dx16, const float *dout, size_t n, float keep_scale,
						const uint8_t *keep_mask)
{
	for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
	{
		float		v = keep_mask[i] ? dout[i] * keep_scale : 0.0f;

		dx[i] = v;
		if (dx16 != NULL)
			dx16[i] = __float2bfloat16_rn(v);
	}
}

void
k_dropout(float *out, __nv_bfloat16 *out16, const float *x, size_t n, float p, uint64_t seed, uint64_t stream_id,
		  uint8_t *keep_mask, cudaStream_t stream)
{
	LAUNCH(dropout_kernel, blocks_for((n + 3) / 4, BLOCK), BLOCK, 0, stream)(out, out16, x, n, p, seed, stream_id,
																			   keep_mask);
}

void
k_dropout_backward(float *dx, __nv_bfloat16 *dx16, const float *dout, size_t n, float p, const uint8_t *keep_mask,
				   cudaStream_t stream)
{
	LAUNCH(dropout_backward_kernel, blocks_for(n, BLOCK), BLOCK, 0, stream)(dx, dx16, dout, n, 1.0f / (1.0f - p),
																			  keep_mask);
}
