/*
 * layernorm.cu - LayerNorm over the last dimension (Ba et al. 2016) and its
 * backward, the twins of cpu_layernorm and cpu_layernorm_backward.
 */
#include "kernels.h"

/* One block per row: mean, then the variance about it (two passes, as the CPU). */
__global__ void
layernorm_kernel(float *out, float *mean, float *rstd, const float *x, const float *gamma, const float *beta,
				 int d, float eps)
{
	__shared__ float part[33];
	const float *xr = x + (size_t) blockIdx.x * d;
	float	   *o = out + (size_t) blockIdx.x * d;
	float		s = 0.0f,
				ss = 0.0f,
				m,
				rs;

	for (int j = threadIdx.x; j < d; j += blockDim.x)
		s += xr[j];
	m = block_sum(s, part) / d;
	for (int j = threadIdx.x; j < d; j += blockDim.x)
	{
		float		t = xr[j] - m;

		ss += t * t;
	}
	rs = 1.0f / sqrtf(block_sum(ss, part) / d + eps);
	for (int j = threadIdx.x; j < d; j += blockDim.x)
		o[j] = (xr[j] - m) * rs * gamma[j] + beta[j];
	if (threadIdx.x == 0)
	{
		mean[blockIdx.x] = m;
		rstd[blockIdx.x] = rs;
	}
}

/* One block per row: dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)). */
__global__ void
layernorm_dx_kernel(float *dx, const float *dout, const float *x, const float *mean, const float *rstd,
					const float *gamma, int d)
{
	__shared__ float part[33];
	size_t		row = blockIdx.x;
	const float *xr = x + row * d,
			   *g = dout + row * d;
	float		m = mean[row],
				rs = rstd[row],
				a = 0.0f,
				b = 0.0f;

	for (int j = threadIdx.x; j < d; j += blockDim.x)
	{
		float		dxhat = g[j] * gamma[j];

		a += dxhat;
		b += dxhat * (xr[j] - m) * rs;
	}
	a = block_sum(a, part) / d;
	b = block_sum(b, part) / d;
	for (int j = threadIdx.x; j < d; j += blockDim.x)
		dx[row * d + j] = rs * (g[j] * gamma[j] - a - (xr[j] - m) * rs * b);
}

/*
 * Pass 1 of dgamma += sum dout * xhat and dbeta += sum dout: per chunk of
 * rows, in row order, into pg [chunks, d] and pb [chunks, d].
 */
__global__ void
layernorm_dparams_kernel(float *pg, float *pb, const float *dout, const float *x, const float *mean,
						 const float *rstd, int rows, int d, int chunks)
{
	int			c = blockIdx.x * blockDim.x + threadIdx.x,
				chunk = blockIdx.y,
				per = (rows + chunks - 1) / chunks,
				r1 = (chunk + 1) * per < rows ? (chunk + 1) * per : rows;
	float		ag = 0.0f,
				ab = 0.0f;

	if (c >= d)
		return;
	for (int r = chunk * per; r < r1; r++)
	{
		float		g = dout[(size_t) r * d + c];

		ag += g * (x[(size_t) r * d + c] - mean[r]) * rstd[r];
		ab += g;
	}
	pg[(size_t) chunk * d + c] = ag;
	pb[(size_t) chunk * d + c] = ab;
}

/* Pass 2: the chunks in order. */
__global__ void
layernorm_dparams_total_kernel(float *dgamma, float *dbeta, const float *pg, const float *pb, int d, int chunks)
{
	int			c = blockIdx.x * blockDim.x + threadIdx.x;
	float		ag = 0.0f,
				ab = 0.0f;

	if (c >= d)
		return;
	for (int k = 0; k < chunks; k++)
	{
		ag += pg[(size_t) k * d + c];
		ab += pb[(size_t) k * d + c];
	}
	dgamma[c] += ag;
	dbeta[c] += ab;
}

void
k_layernorm(float *out, float *mean, float *rstd, const float *x, const float *gamma, const float *beta,
			int rows, int d, float eps, cudaStream_t stream)
{
	if (rows > 0)
		LAUNCH(layernorm_kernel, rows, row_threads(d, BLOCK), 0, stream)(out, mean, rstd, x, gamma, beta, d, eps);
}

void
k_layernorm_backward(float *dx, float *dgamma, float *dbeta, const float *dout, const float *x,
					 const float *mean, const float *rstd, const float *gamma, int rows, int d, float *workspace,
					 size_t workspace_floats, cudaStream_t stream)
{
	int			chunks = column_chunks(rows, d, 2, workspace_floats);
	float	   *pg = workspace,
			   *pb = workspace + (size_t) chunks * d;

	if (rows <= 0)
		return;
	LAUNCH(layernorm_dx_kernel, rows, row_threads(d, BLOCK), 0, stream)(dx, dout, x, mean, rstd, gamma, d);
	LAUNCH(layernorm_dparams_kernel, dim3(blocks_for(d, 64), (unsigned) chunks), 64, 0, stream)
		(pg, pb, dout, x, mean, rstd, rows, d, chunks);
	LAUNCH(layernorm_dparams_total_kernel, blocks_for(d, BLOCK), BLOCK, 0, stream)(dgamma, dbeta, pg, pb, d, chunks);
}
