/*
 * embed.cu - token embeddings times sqrt(d) plus sinusoidal positions
 * (paper sections 3.4, 3.5) and their backward into the shared embedding.
 */
#include "kernels.h"

__global__ void
embed_kernel(float *out, const int32_t *ids, const int32_t *positions, const float *embedding, const float *pe,
			 int rows, int d, float scale)
{
	size_t		n = (size_t) rows * d;

	for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
	{
		size_t		r = i / d,
					j = i % d;

		out[i] = embedding[(size_t) ids[r] * d + j] * scale + pe[(size_t) positions[r] * d + j];
	}
}

/*
 * One thread per column, rows in order: repeated ids add up without atomics
 * and in the CPU backend's order.
 */
__global__ void
embed_backward_kernel(float *dembedding, const float *dout, const int32_t *ids, int rows, int d, float scale)
{
	int			c = blockIdx.x * blockDim.x + threadIdx.x;

	if (c >= d)
		return;
	for (int r = 0; r < rows; r++)
		dembedding[(size_t) ids[r] * d + c] += scale * dout[(size_t) r * d + c];
}

void
k_embed(float *out, const int32_t *ids, const int32_t *positions, const float *embedding, const float *pe,
		int rows, int d, float scale, cudaStream_t stream)
{
	LAUNCH(embed_kernel, blocks_for((size_t) rows * d, BLOCK), BLOCK, 0, stream)(out, ids, positions, embedding,
																				   pe, rows, d, scale);
}

void
k_embed_backward(float *dembedding, const float *dout, const int32_t *ids, int rows, int d, float scale,
				 cudaStream_t stream)
{
	LAUNCH(embed_backward_kernel, blocks_for(d, 64), 64, 0, stream)(dembedding, dout, ids, rows, d, scale);
}
