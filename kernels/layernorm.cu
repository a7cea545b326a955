/*
 * layernorm.cu - LayerNorm over the last dimension (Ba et al. 2016) and its
 * backward, the twins of cpu_layernorm and cpu_layernorm_backward; and the
 * post-norm residual r = x + Drop(y), out = LayerNorm(r) (paper section
 * 5.4) fused into one kernel, its backward's dropout into LayerNorm's, the
 * twins of cpu_residual_layernorm and its backward.
 */
#include "kernels.h"

/*
 * LayerNorm of row xr [d] into o (and, o16 not NULL, rounded to bf16 into
 * o16), the mean and rstd of one block's row (mean, then the variance about
 * it: two passes, as the CPU). Every thread of the block calls it.
 */
__device__ __forceinline__ void
layernorm_row(float *o, __nv_bfloat16 *o16, float *mean, float *rstd, const float *xr, const float *gamma,
			  const float *beta, int d, float eps, float *part)
{
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
	{
		float		v = (xr[j] - m) * rs * gamma[j] + beta[j];

		o[j] = v;
		if (o16 != NULL)
			o16[j] = __float2bfloat16_rn(v);
	}
	if (threadIdx.x == 0)
	{
		*mean = m;
		*rstd = rs;
	}
}

/* One block per row; out16 (NULL: none) the bf16 copy of out. */
__global__ void
layernorm_kernel(float *out, __nv_bfloat16 *out16, float *mean, float *rstd, const float *x, const float *gamma,
				 const float *beta, int d, float eps)
{
	__shared__ float part[33];
	size_t		row = blockIdx.x;

	layernorm_row(out + row * d, out16 != NULL ? out16 + row * d : NULL, mean + row, rstd + row, x + row * d,
				  gamma, beta, d, eps, part);
}

/*
 * The post-norm residual, one block per row: r = x + Drop(y), dropout's
 * element e = row * d + j kept when uniform(seed, stream_id, e) >= p (as
 * dropout_kernel: a thread per Philox block of 4 elements, 16-byte
 * accesses where d is a multiple of 4), keep_mask (NULL: not wanted) as
 * dropout's; then LayerNorm(r) as layernorm_kernel, reading back the row
 * the block wrote. The same bits as dropout, add and layernorm in turn.
 * out16 (NULL: none): the bf16 copy of out.
 */
__global__ void
residual_layernorm_kernel(float *out, __nv_bfloat16 *out16, float *mean, float *rstd, float *r, const float *x,
						  const float *y,
						  const float *gamma, const float *beta, int d, float eps, float p, uint64_t seed,
						  uint64_t stream_id, uint8_t *keep_mask)
{
	__shared__ float part[33];
	size_t		row = blockIdx.x,
				row0 = row * d,
				last = (row0 + d - 1) / 4;
	float		keep_scale = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;

	for (size_t blk = row0 / 4 + threadIdx.x; blk <= last; blk += blockDim.x)
	{
		uint32_t	w[4] = {0, 0, 0, 0};
		float		sum[4];

		if (p > 0.0f)
			device_philox(seed, stream_id, blk, w);
		if (d % 4 == 0)			/* the block is 4 elements of this row, 16-byte aligned */
		{
			size_t		e = blk * 4;
			float4		xv = load4(x + e),
						yv = load4(y + e);
			float		xs[4] = {xv.x, xv.y, xv.z, xv.w},
						ys[4] = {yv.x, yv.y, yv.z, yv.w};
			uint32_t	bits = 0;

UNROLL
			for (int k = 0; k < 4; k++)
			{
				bool		keep = p <= 0.0f || tf_word_uniform(w[k]) >= p;

				sum[k] = xs[k] + (keep ? ys[k] * keep_scale : 0.0f);
				bits |= (uint32_t) keep << (8 * k);
			}
			store4(r + e, sum);
			if (keep_mask != NULL)
				*(uint32_t *) (keep_mask + e) = bits;	/* bytes in memory order: little-endian */
			continue;
		}
		for (int k = 0; k < 4; k++)
		{
			size_t		e = blk * 4 + k;
			bool		keep = p <= 0.0f || tf_word_uniform(w[k]) >= p;

			if (e < row0 || e >= row0 + d)
				continue;
			r[e] = x[e] + (keep ? y[e] * keep_scale : 0.0f);
			if (keep_mask != NULL)
				keep_mask[e] = keep;
		}
	}
	__syncthreads();			/* the row of r is the block's to read */
	layernorm_row(out + row0, out16 != NULL ? out16 + row0 : NULL, mean + row, rstd + row, r + row0, gamma, beta,
				  d, eps, part);
}

/*
 * LayerNorm's backward (post-norm's with its dropout), a block per chunk of
 * LAYERNORM_CHUNK_ROWS rows: a warp per row sums dxhat = dout gamma and
 * dxhat xhat (xhat = (x - mean) rstd) over the row, their means a and b;
 * then a thread per column walks the chunk's rows in order, writing dx =
 * rstd (dxhat - a - xhat b) and, with dy not NULL, dy = dropout_backward(dx)
 * (keep_mask's elements times keep_scale) and its bf16 copy into dy16 (NULL:
 * none), and sums dout xhat and dout into its column of the chunk's row of
 * pg [chunks, d] and pb [chunks, d] (dgamma's and dbeta's partials, which
 * layernorm_dparams_totals_kernel sums in chunk order). The second reads of
 * the chunk's dout and x hit the cache; dx may be dout. A chunk a block and
 * a fixed number of rows a chunk keep the grid proportional to the rows.
 */
__global__ void
layernorm_backward_kernel(float *dx, float *dy, __nv_bfloat16 *dy16, float *pg, float *pb, const float *dout,
						  const float *x, const float *mean, const float *rstd, const float *gamma, int rows,
						  int d, const uint8_t *keep_mask, float keep_scale)
{
	__shared__ float sm[LAYERNORM_CHUNK_ROWS],
				srs[LAYERNORM_CHUNK_ROWS],
				sa[LAYERNORM_CHUNK_ROWS],
				sb[LAYERNORM_CHUNK_ROWS];
	int			lane = threadIdx.x % 32,
				warp = threadIdx.x / 32,
				warps = blockDim.x / 32;
	size_t		r0 = (size_t) blockIdx.x * LAYERNORM_CHUNK_ROWS;
	int			n = rows - r0 < LAYERNORM_CHUNK_ROWS ? (int) (rows - r0) : LAYERNORM_CHUNK_ROWS;

	for (int i = warp; i < n; i += warps)
	{
		size_t		row = r0 + i;
		const float *xr = x + row * d,
				   *g = dout + row * d;
		float		m = mean[row],
					rs = rstd[row],
					a = 0.0f,
					b = 0.0f;

		for (int j = lane; j < d; j += 32)
		{
			float		dxhat = g[j] * gamma[j];

			a += dxhat;
			b += dxhat * (xr[j] - m) * rs;
		}
		a = warp_reduce(a, SumOp());
		b = warp_reduce(b, SumOp());
		if (lane == 0)
		{
			sm[i] = m;
			srs[i] = rs;
			sa[i] = a / d;
			sb[i] = b / d;
		}
	}
	__syncthreads();
	for (int j = threadIdx.x; j < d; j += blockDim.x)
	{
		float		gj = gamma[j],
					ag = 0.0f,
					ab = 0.0f;

		for (int i = 0; i < n; i++)
		{
			size_t		e = (r0 + i) * d + j;
			float		g = dout[e],
						xhat = (x[e] - sm[i]) * srs[i],
						v = srs[i] * (g * gj - sa[i] - xhat * sb[i]);

			dx[e] = v;
			if (dy != NULL)
			{
				float		h = keep_mask == NULL || keep_mask[e] ? v * keep_scale : 0.0f;

				dy[e] = h;
				if (dy16 != NULL)
					dy16[e] = __float2bfloat16_rn(h);
			}
			ag += g * xhat;
			ab += g;
		}
		pg[(size_t) blockIdx.x * d + j] = ag;
		pb[(size_t) blockIdx.x * d + j] = ab;
	}
}

/* Warps of a block of layernorm_dparams_totals_kernel. */
#define TOTAL_WARPS 32

/*
 * For backward i = blockIdx.y of t: dgamma += the sum of its pg [chunks, d]
 * over the chunks, dbeta of its pb's (pb follows pg). A block per 32
 * columns, a lane per column; warp w sums chunks w, w + TOTAL_WARPS, ... in
 * order, then warp 0 the warps' sums in order (a fixed order; the chunks'
 * chain a thread walks is TOTAL_WARPS times shorter than one thread per
 * column's). One launch serves every backward since the last, and its
 * grid has their blocks side by side.
 */
__global__ void
layernorm_dparams_totals_kernel(LayerNormTotals t)
{
	__shared__ float sg[TOTAL_WARPS][32],
				sb[TOTAL_WARPS][32];
	int			i = blockIdx.y,
				d = t.d[i],
				chunks = t.chunks[i],
				lane = threadIdx.x % 32,
				warp = threadIdx.x / 32,
				c = blockIdx.x * 32 + lane;
	const float *pg = t.partials[i],
			   *pb = pg + (size_t) chunks * d;
	float		ag = 0.0f,
				ab = 0.0f;

	for (int k = warp; c < d && k < chunks; k += TOTAL_WARPS)
	{
		ag += pg[(size_t) k * d + c];
		ab += pb[(size_t) k * d + c];
	}
	sg[warp][lane] = ag;
	sb[warp][lane] = ab;
	__syncthreads();
	if (warp != 0 || c >= d)
		return;
	ag = ab = 0.0f;
	for (int w = 0; w < TOTAL_WARPS; w++)
	{
		ag += sg[w][lane];
		ab += sb[w][lane];
	}
	t.dgamma[i][c] += ag;
	t.dbeta[i][c] += ab;
}

void
k_layernorm(float *out, __nv_bfloat16 *out16, float *mean, float *rstd, const float *x, const float *gamma,
			const float *beta, int rows, int d, float eps, cudaStream_t stream)
{
	if (rows > 0)
		LAUNCH(layernorm_kernel, rows, row_threads(d, BLOCK), 0, stream)(out, out16, mean, rstd, x, gamma, beta, d,
																		 eps);
}

void
k_residual_layernorm(float *out, __nv_bfloat16 *out16, float *mean, float *rstd, float *r, const float *x,
					 const float *y, const float *gamma, const float *beta, int rows, int d, float eps, float p,
					 uint64_t seed, uint64_t stream_id, uint8_t *keep_mask, cudaStream_t stream)
{
	if (rows > 0)
		LAUNCH(residual_layernorm_kernel, rows, row_threads(d, BLOCK), 0, stream)	/* layernorm_kernel's sums */
			(out, out16, mean, rstd, r, x, y, gamma, beta, d, eps, p, seed, stream_id, keep_mask);
}

void
k_layernorm_backward(float *dx, const float *dout, const float *x, const float *mean, const float *rstd,
					 const float *gamma, int rows, int d, float *partials, cudaStream_t stream)
{
	if (rows > 0)
		LAUNCH(layernorm_backward_kernel, k_layernorm_chunks(rows), BLOCK, 0, stream)
			(dx, (float *) NULL, (__nv_bfloat16 *) NULL, partials, partials + (size_t) k_layernorm_chunks(rows) * d,
			 dout, x, mean, rstd, gamma, rows, d, (const uint8_t *) NULL, 1.0f);
}

void
k_residual_layernorm_backward(float *dr, float *dy, __nv_bfloat16 *dy16, const float *dout, const float *r,
							  const float *mean, const float *rstd, const float *gamma, int rows, int d, float p,
							  const uint8_t *keep_mask, float *partials, cudaStream_t stream)
{
	if (rows > 0)
		LAUNCH(layernorm_backward_kernel, k_layernorm_chunks(rows), BLOCK, 0, stream)
			(dr, dy, dy16, partials, partials + (size_t) k_layernorm_chunks(rows) * d, dout, r, mean, rstd, gamma,
			 rows, d, p > 0.0f ? keep_mask : (const uint8_t *) NULL, p > 0.0f ? 1.0f / (1.0f - p) : 1.0f);
}

void
k_layernorm_dparams_totals(const LayerNormTotals *t, int max_d, cudaStream_t stream)
{
	LAUNCH(layernorm_dparams_totals_kernel, dim3((unsigned) ((max_d + 31) / 32), (unsigned) t->n),
		   TOTAL_WARPS * 32, 0, stream)(*t);
}
