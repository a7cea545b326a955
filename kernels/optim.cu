/*
 * optim.cu - Adam as PyTorch computes it (Kingma & Ba 2015) and the sum of
 * squares behind the global gradient norm, the twins of cpu_adam and
 * cpu_sum_squares.
 */
#include "kernels.h"

/*
 * Blocks of the first pass of sum_squares, 8 of 256 threads for each of an
 * H100's 132 SMs (their partial sums are then added in order).
 */
#define SUMSQ_BLOCKS 1024

/* params16 (NULL: none): the bf16 copy of params, refreshed. */
__global__ void
adam_kernel(float *params, __nv_bfloat16 *params16, float *grads, float *m, float *v, size_t n, float grad_scale,
			float lr, float beta1, float beta2, float eps, float bc1, float bc2)
{
	float		step_size = lr / bc1,
				sqrt_bc2 = sqrtf(bc2);

	for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
	{
		float		g = grads[i] * grad_scale,
					mi = beta1 * m[i] + (1.0f - beta1) * g,
					vi = beta2 * v[i] + (1.0f - beta2) * g * g,
					p = params[i] - step_size * mi / (sqrtf(vi) / sqrt_bc2 + eps);

		m[i] = mi;
		v[i] = vi;
		params[i] = p;
		if (params16 != NULL)
			params16[i] = __float2bfloat16_rn(p);
		grads[i] = 0.0f;
	}
}

/* Pass 1: block b sums the squares of its grid-stride share into partials[b]. */
__global__ void
sum_squares_kernel(const float *x, size_t n, double *partials)
{
	__shared__ double part[33];
	double		s = 0.0;

	for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
		s += (double) x[i] * x[i];
	s = block_sum_double(s, part);
	if (threadIdx.x == 0)
		partials[blockIdx.x] = s;
}

size_t
k_sum_squares_partials(void)
{
	return SUMSQ_BLOCKS;
}

void
k_sum_squares(const float *x, size_t n, double *out, double *partials, cudaStream_t stream)
{
	/* pass 2: the partials added in order (cross_entropy.cu's fixed-order sum) onto a zeroed total */
	LAUNCH(sum_squares_kernel, SUMSQ_BLOCKS, BLOCK, 0, stream)(x, n, partials);
	cudaMemsetAsync(out, 0, sizeof(double), stream);
	k_accumulate(out, partials, SUMSQ_BLOCKS, stream);
}

void
k_adam(float *params, __nv_bfloat16 *params16, float *grads, float *m, float *v, size_t n, float grad_scale,
	   float lr, float beta1, float beta2, float eps, float bc1, float bc2, cudaStream_t stream)
{
	LAUNCH(adam_kernel, blocks_for(n, BLOCK), BLOCK, 0, stream)(params, params16, grads, m, v, n, grad_scale, lr,
																  beta1, beta2, eps, bc1, bc2);
}
