/*
 * gather.cu - strided row gather (beam reordering of key/value caches and
 * writes into them), on fp32 and on bf16 caches (cache_gather).
 */
#include "kernels.h"

/* An element converted on its way into a gather's destination (bf16: rounded to nearest even). */
__device__ __forceinline__ void
put(float *d, float x)
{
	*d = x;
}
__device__ __forceinline__ void
put(__nv_bfloat16 *d, float x)
{
	*d = __float2bfloat16_rn(x);
}
__device__ __forceinline__ void
put(__nv_bfloat16 *d, __nv_bfloat16 x)
{
	*d = x;
}

/* Out of place: every (row, element) independent. */
template <class D, class S>
__global__ void
gather_kernel(D *dst, size_t dst_stride, const S *src, size_t src_stride, const int32_t *rows, int n, size_t count)
{
	size_t		total = (size_t) n * count;

	for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t) gridDim.x * blockDim.x)
	{
		size_t		r = i / count,
					j = i % count;
		size_t		from = rows != NULL ? (size_t) rows[r] : r;

		put(&dst[r * dst_stride + j], src[from * src_stride + j]);
	}
}

/*
 * In place (rows increasing, rows[i] >= i): row i may be the source of an
 * earlier row, so rows go in order, one block, a barrier between rows.
 */
template <class T>
__global__ void
gather_in_place_kernel(T *x, size_t stride, const int32_t *rows, int n, size_t count)
{
	for (int r = 0; r < n; r++)
	{
		if (rows[r] != r)
			for (size_t j = threadIdx.x; j < count; j += blockDim.x)
				x[(size_t) r * stride + j] = x[(size_t) rows[r] * stride + j];
		__syncthreads();
	}
}

/* The launches of gather and cache_gather: elements D written from elements S (converted by put). */
template <class D, class S>
static void
launch_gather(D *dst, size_t dst_stride, const S *src, size_t src_stride, const int32_t *rows, int n, size_t count,
			  cudaStream_t stream)
{
	if (n <= 0 || count == 0)
		return;
	/* named kernels for the launch macro (a template's comma would split its argument) */
	void		(*gather_in_place) (D *, size_t, const int32_t *, int, size_t) = gather_in_place_kernel<D>;
	void		(*gather_rows) (D *, size_t, const S *, size_t, const int32_t *, int, size_t) = gather_kernel<D, S>;

	if ((const void *) dst == (const void *) src)
		LAUNCH(gather_in_place, 1, 1024, 0, stream)(dst, dst_stride, rows, n, count);
	else
		LAUNCH(gather_rows, blocks_for((size_t) n * count, BLOCK), BLOCK, 0, stream)(dst, dst_stride, src, src_stride,
																					 rows, n, count);
}

void
k_gather(float *dst, size_t dst_stride, const float *src, size_t src_stride, const int32_t *rows, int n,
		 size_t count, cudaStream_t stream)
{
	launch_gather(dst, dst_stride, src, src_stride, rows, n, count, stream);
}

void
k_gather_bf16(__nv_bfloat16 *dst, size_t dst_stride, const __nv_bfloat16 *src, size_t src_stride,
			  const int32_t *rows, int n, size_t count, cudaStream_t stream)
{
	launch_gather(dst, dst_stride, src, src_stride, rows, n, count, stream);
}

void
k_gather_to_bf16(__nv_bfloat16 *dst, size_t dst_stride, const float *src, size_t src_stride, const int32_t *rows,
				 int n, size_t count, cudaStream_t stream)
{
	launch_gather(dst, dst_stride, src, src_stride, rows, n, count, stream);
}
