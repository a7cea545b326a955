/*
 * gather.cu - strided row gather (beam reordering of key/value caches and
 * writes into them).
 */
#include "kernels.h"

/* Out of place: every (row, element) independent. */
__global__ void
gather_kernel(float *dst, size_t dst_stride, const float *src, size_t src_stride, const int32_t *rows, int n,
			  size_t count)
{
	size_t		total = (size_t) n * count;

	for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t) gridDim.x * blockDim.x)
	{
		size_t		r = i / count,
					j = i % count;
		size_t		from = rows != NULL ? (size_t) rows[r] : r;

		dst[r * dst_stride + j] = src[from * src_stride + j];
	}
}

/*
 * In place (rows increasing, rows[i] >= i): row i may be the source of an
 * earlier row, so rows go in order, one block, a barrier between rows.
 */
__global__ void
gather_in_place_kernel(float *x, size_t stride, const int32_t *rows, int n, size_t count)
{
	for (int r = 0; r < n; r++)
	{
		if (rows[r] != r)
			for (size_t j = threadIdx.x; j < count; j += blockDim.x)
				x[(size_t) r * stride + j] = x[(size_t) rows[r] * stride + j];
		__syncthreads();
	}
}

void
k_gather(float *dst, size_t dst_stride, const float *src, size_t src_stride, const int32_t *rows, int n,
		 size_t count, cudaStream_t stream)
{
	if (n <= 0 || count == 0)
		return;
	if (dst == src)
		LAUNCH(gather_in_place_kernel, 1, 1024, 0, stream)(dst, dst_stride, rows, n, count);
	else
		LAUNCH(gather_kernel, blocks_for((size_t) n * count, BLOCK), BLOCK, 0, stream)(dst, dst_stride, src,
																						 src_stride, rows, n, count);
}
