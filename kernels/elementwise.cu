/*
 * elementwise.cu - residual add, scaling, bias rows and their column sums,
 * ReLU and its backward: the CUDA twins of the elementwise ops of
 * src/backend_cpu.c.
 */
#include "kernels.h"

/* Rows of one partial column sum: column blocks x row chunks, summed in row order. */
#define ROW_CHUNK 256

__global__ void
add_kernel(float *out, const float *a, const float *b, size_t n)
{
	for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
		out[i] = a[i] + b[i];
}

__global__ void
scale_kernel(float *x, size_t n, float s)
{
	for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
		x[i] *= s;
}

__global__ void
bias_rows_kernel(float *out, const float *bias, int rows, int cols)
{
	size_t		n = (size_t) rows * cols;

	for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
		out[i] = bias[i % cols];
}

/* One thread per column: dbias[c] += sum over rows in order (deterministic). */
__global__ void
bias_backward_kernel(float *dbias, const float *dout, int rows, int cols)
{
	int			c = blockIdx.x * blockDim.x + threadIdx.x;
	float		s = 0.0f;

	if (c >= cols)
		return;
	for (int r = 0; r < rows; r++)
		s += dout[(size_t) r * cols + c];
	dbias[c] += s;
}

__global__ void
relu_kernel(float *out, const float *x, size_t n)
{
	for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
		out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void
relu_backward_kernel(float *dx, const float *dout, const float *x, size_t n)
{
	for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
		dx[i] = x[i] > 0.0f ? dout[i] : 0.0f;
}

void
k_add(float *out, const float *a, const float *b, size_t n, cudaStream_t stream)
{
	LAUNCH(add_kernel, blocks_for(n, BLOCK), BLOCK, 0, stream)(out, a, b, n);
}

void
k_scale(float *x, size_t n, float s, cudaStream_t stream)
{
	LAUNCH(scale_kernel, blocks_for(n, BLOCK), BLOCK, 0, stream)(x, n, s);
}

void
k_bias_rows(float *out, const float *bias, int rows, int cols, cudaStream_t stream)
{
	LAUNCH(bias_rows_kernel, blocks_for((size_t) rows * cols, BLOCK), BLOCK, 0, stream)(out, bias, rows, cols);
}

void
k_bias_backward(float *dbias, const float *dout, int rows, int cols, cudaStream_t stream)
{
	LAUNCH(bias_backward_kernel, blocks_for(cols, BLOCK), BLOCK, 0, stream)(dbias, dout, rows, cols);
}

void
k_relu(float *out, const float *x, size_t n, cudaStream_t stream)
{
	LAUNCH(relu_kernel, blocks_for(n, BLOCK), BLOCK, 0, stream)(out, x, n);
}

void
k_relu_backward(float *dx, const float *dout, const float *x, size_t n, cudaStream_t stream)
{
	LAUNCH(relu_backward_kernel, blocks_for(n, BLOCK), BLOCK, 0, stream)(dx, dout, x, n);
}
