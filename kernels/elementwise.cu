/*
 * elementwise.cu - residual add, bias rows and their column sums,
 * the feed-forward activations and their backward: the CUDA twins of the elementwise ops of
 * src/backend_cpu.c; and the rounding of fp32 to bf16 that mixed precision
 * feeds cuBLAS with (no CPU twin: the CPU backend computes in fp32 only).
 */
#include "kernels.h"

extern "C" {
#include "activation.h"
}

__global__ void
add_kernel(float *out, const float *a, const float *b, size_t n)
{
	for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
		out[i] = a[i] + b[i];
}

__global__ void
round_bf16_kernel(__nv_bfloat16 *out, const float *x, size_t n)
{
	for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
		out[i] = __float2bfloat16_rn(x[i]);
}

/*
 * The elementwise kernels' 4-wide forms (pointers 16-byte aligned): a
 * thread takes elements 4 i .. 4 i + 3 in 16-byte accesses; the last n % 4
 * elements go one each to the first threads of block 0 (tail_index).
 */
__device__ __forceinline__ size_t
tail_index(size_t n)
{
	size_t		t = n / 4 * 4 + threadIdx.x;

	return blockIdx.x == 0 && t < n ? t : SIZE_MAX;
}

/* v[0 .. 3] rounded to bf16 into p (8-byte aligned): two 4-byte stores. */
__device__ __forceinline__ void
store4_bf16(__nv_bfloat16 *p, const float v[4])
{
	__nv_bfloat162 *o = (__nv_bfloat162 *) p;

	o[0] = __floats2bfloat162_rn(v[0], v[1]);
	o[1] = __floats2bfloat162_rn(v[2], v[3]);
}

/* round_bf16_kernel 4 elements a thread (x 16-byte and out 8-byte aligned): one load, two stores. */
__global__ void
round_bf16_quads_kernel(__nv_bfloat16 *out, const float *x, size_t n)
{
	size_t		t = tail_index(n);

	for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n / 4; i += (size_t) gridDim.x * blockDim.x)
	{
		float4		f = load4(x + 4 * i);
		float		v[4] = {f.x, f.y, f.z, f.w};

		store4_bf16(out + 4 * i, v);
	}
	if (t != SIZE_MAX)
		out[t] = __float2bfloat16_rn(x[t]);
}

__global__ void
bias_rows_kernel(float *out, const float *bias, int rows, int cols, int ld)
{
	size_t		n = (size_t) rows * cols;

	for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
		out[i / cols * ld + i % cols] = bias[i % cols];
}

/* bias_rows_kernel 4 columns a thread (cols and ld multiples of 4, out and bias 16-byte aligned). */
__global__ void
bias_rows_quads_kernel(float *out, const float *bias, int rows, int cols, int ld)
{
	size_t		per = (size_t) cols / 4,
				n = (size_t) rows * per;

	for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
	{
		float4		b = load4(bias + i % per * 4);
		float		v[4] = {b.x, b.y, b.z, b.w};

		store4(out + i / per * ld + i % per * 4, v);
	}
}

/* Pass 1: partial[chunk, c] = sum of column c over the chunk's rows, in row order. */
__global__ void
column_partials_kernel(float *partial, const float *dout, int rows, int cols, int ld, int chunks)
{
	int			c = blockIdx.x * blockDim.x + threadIdx.x,
				chunk = blockIdx.y,
				per = (rows + chunks - 1) / chunks,
				r1 = (chunk + 1) * per < rows ? (chunk + 1) * per : rows;
	float		s = 0.0f;

	if (c >= cols)
		return;
	for (int r = chunk * per; r < r1; r++)
		s += dout[(size_t) r * ld + c];
	partial[(size_t) chunk * cols + c] = s;
}

/* Pass 2: dbias[c] += scale * the chunks' partials summed in order. */
__global__ void
column_total_kernel(float *dbias, const float *partial, int cols, int chunks, float scale)
{
	int			c = blockIdx.x * blockDim.x + threadIdx.x;
	float		s = 0.0f;

	if (c >= cols)
		return;
	for (int k = 0; k < chunks; k++)
		s += partial[(size_t) k * cols + c];
	dbias[c] += scale * s;
}

/* dout f'(x): ReLU's as a select (the CPU's), the others through tf_activation_slope. */
__device__ __forceinline__ float
activation_grad(TfActivation f, float dout, float x)
{
	return f == TF_RELU ? (x > 0.0f ? dout : 0.0f) : dout * tf_activation_slope(f, x);
}

/* Element i of an elementwise kernel's output: out[i] = v and, out16 not NULL, its bf16 copy. */
__device__ __forceinline__ void
store1(float *out, __nv_bfloat16 *out16, size_t i, float v)
{
	out[i] = v;
	if (out16 != NULL)
		out16[i] = __float2bfloat16_rn(v);
}

__global__ void
activation_kernel(TfActivation f, float *out, __nv_bfloat16 *out16, const float *x, size_t n)
{
	for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
		store1(out, out16, i, tf_activation_value(f, x[i]));
}

__global__ void
activation_backward_kernel(TfActivation f, float *dx, __nv_bfloat16 *dx16, const float *dout, const float *x,
						   size_t n)
{
	for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
		store1(dx, dx16, i, activation_grad(f, dout[i], x[i]));
}

/* activation_kernel 4 elements a thread (tail_index; out16 8-byte aligned). */
__global__ void
activation_quads_kernel(TfActivation f, float *out, __nv_bfloat16 *out16, const float *x, size_t n)
{
	size_t		t = tail_index(n);

	for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n / 4; i += (size_t) gridDim.x * blockDim.x)
	{
		float4		v = load4(x + 4 * i);
		float		o[4] = {tf_activation_value(f, v.x), tf_activation_value(f, v.y), tf_activation_value(f, v.z),
							tf_activation_value(f, v.w)};

		store4(out + 4 * i, o);
		if (out16 != NULL)
			store4_bf16(out16 + 4 * i, o);
	}
	if (t != SIZE_MAX)
		store1(out, out16, t, tf_activation_value(f, x[t]));
}

/* activation_backward_kernel 4 elements a thread (tail_index; dx16 8-byte aligned). */
__global__ void
activation_backward_quads_kernel(TfActivation f, float *dx, __nv_bfloat16 *dx16, const float *dout, const float *x,
								 size_t n)
{
	size_t		t = tail_index(n);

	for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n / 4; i += (size_t) gridDim.x * blockDim.x)
	{
		float4		g = load4(dout + 4 * i),
					v = load4(x + 4 * i);
		float		o[4] = {activation_grad(f, g.x, v.x), activation_grad(f, g.y, v.y), activation_grad(f, g.z, v.z),
							activation_grad(f, g.w, v.w)};

		store4(dx + 4 * i, o);
		if (dx16 != NULL)
			store4_bf16(dx16 + 4 * i, o);
	}
	if (t != SIZE_MAX)
		store1(dx, dx16, t, activation_grad(f, dout[t], x[t]));
}

void
k_add(float *out, const float *a, const float *b, size_t n, cudaStream_t stream)
{
	LAUNCH(add_kernel, blocks_for(n, BLOCK), BLOCK, 0, stream)(out, a, b, n);
}

void
k_round_bf16(__nv_bfloat16 *out, const float *x, size_t n, cudaStream_t stream)
{
	if ((uintptr_t) x % 16 == 0 && (uintptr_t) out % 8 == 0)
		LAUNCH(round_bf16_quads_kernel, blocks_for(n / 4 + 1, BLOCK), BLOCK, 0, stream)(out, x, n);
	else
		LAUNCH(round_bf16_kernel, blocks_for(n, BLOCK), BLOCK, 0, stream)(out, x, n);
}

void
k_bias_rows(float *out, const float *bias, int rows, int cols, int ld, cudaStream_t stream)
{
	if ((cols | ld) % 4 == 0 && ((uintptr_t) out | (uintptr_t) bias) % 16 == 0)
		LAUNCH(bias_rows_quads_kernel, blocks_for((size_t) rows * cols / 4, BLOCK), BLOCK, 0, stream)
			(out, bias, rows, cols, ld);
	else
		LAUNCH(bias_rows_kernel, blocks_for((size_t) rows * cols, BLOCK), BLOCK, 0, stream)(out, bias, rows, cols, ld);
}

void
k_bias_backward(float *dbias, const float *dout, int rows, int cols, int ld, float scale, float *workspace,
				size_t workspace_floats, cudaStream_t stream)
{
	int			chunks = column_chunks(rows, cols, 1, workspace_floats);

	if (rows <= 0 || cols <= 0)
		return;
	LAUNCH(column_partials_kernel, dim3(blocks_for(cols, 64), (unsigned) chunks), 64, 0, stream)
		(workspace, dout, rows, cols, ld, chunks);
	LAUNCH(column_total_kernel, blocks_for(cols, BLOCK), BLOCK, 0, stream)(dbias, workspace, cols, chunks, scale);
}

void
k_activation(TfActivation f, float *out, __nv_bfloat16 *out16, const float *x, size_t n, cudaStream_t stream)
{
	if (((uintptr_t) out | (uintptr_t) x) % 16 == 0 && (uintptr_t) out16 % 8 == 0)
		LAUNCH(activation_quads_kernel, blocks_for(n / 4 + 1, BLOCK), BLOCK, 0, stream)(f, out, out16, x, n);
	else
		LAUNCH(activation_kernel, blocks_for(n, BLOCK), BLOCK, 0, stream)(f, out, out16, x, n);
}

void
k_activation_backward(TfActivation f, float *dx, __nv_bfloat16 *dx16, const float *dout, const float *x, size_t n,
					  cudaStream_t stream)
{
	if (((uintptr_t) dx | (uintptr_t) dout | (uintptr_t) x) % 16 == 0 && (uintptr_t) dx16 % 8 == 0)
		LAUNCH(activation_backward_quads_kernel, blocks_for(n / 4 + 1, BLOCK), BLOCK, 0, stream)
			(f, dx, dx16, dout, x, n);
	else
		LAUNCH(activation_backward_kernel, blocks_for(n, BLOCK), BLOCK, 0, stream)(f, dx, dx16, dout, x, n);
}
