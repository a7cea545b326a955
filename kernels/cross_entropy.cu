/*
 * cross_entropy.cu - label-smoothed cross-entropy over the whole vocabulary
 * (PyTorch's definition) with its gradient in place, the fixed-order sum
 * of row losses, and the per-row top-k log-probabilities of beam search:
 * the twins of cpu_cross_entropy, cpu_accumulate and cpu_log_softmax_topk.
 */
#include <limits.h>

#include "kernels.h"

/* A logit as the loss reads it: fp32 (rounded to bf16 and back with `round`), or a bf16 one widened. */
__device__ __forceinline__ float
logit(const float *x, int j, bool round)
{
	return round ? __bfloat162float(__float2bfloat16_rn(x[j])) : x[j];
}
__device__ __forceinline__ float
logit(const __nv_bfloat16 *x, int j, bool)
{
	return __bfloat162float(x[j]);
}

/* The logits' gradient g at j: into fp32 x and its bf16 copy x16 (NULL: none), or into bf16 x. */
__device__ __forceinline__ void
put_gradient(float *x, __nv_bfloat16 *x16, int j, float g)
{
	x[j] = g;
	if (x16 != NULL)
		x16[j] = __float2bfloat16_rn(g);
}
__device__ __forceinline__ void
put_gradient(__nv_bfloat16 *x, __nv_bfloat16 *, int j, float g)
{
	x[j] = __float2bfloat16_rn(g);
}

/*
 * One block per row of logits (T float, read rounded to bf16 with
 * `round`; or T bf16: a product's rounded output). One read of the row
 * gives each thread an online max and sum of exp(x - max) over its logits,
 * 4 a step so that their loads and exponentials are independent (the sum
 * rescaled when the max grows; FlashAttention's softmax) and the
 * sum of the logits; the block combines them (the max first, then each
 * thread's sum rescaled to it, in a fixed tree). With gradient a second
 * pass writes softmax - q in place (for float logits its bf16 copy into
 * logits16 as well; NULL: none; row stride ld as well).
 */
template <typename T>
__global__ void
cross_entropy_kernel(T *logits, __nv_bfloat16 *logits16, bool round, bool gradient, const int32_t *labels,
					 int vocab, int ld, int pad_id, float label_smoothing, double *row_loss)
{
	__shared__ float part[33];
	size_t		r = blockIdx.x;
	T		   *x = logits + r * ld;
	__nv_bfloat16 *x16 = logits16 != NULL ? logits16 + r * ld : NULL;
	int			label = labels[r],
				step = blockDim.x,
				j;
	float		mx = -INFINITY,
				sum = 0.0f,
				sum_x = 0.0f,
				row_max,
				label_logit;

	if (label == pad_id)
	{
		if (gradient)
			for (j = threadIdx.x; j < vocab; j += step)
				put_gradient(x, x16, j, 0.0f);
		if (threadIdx.x == 0)
			row_loss[r] = 0.0;
		return;
	}
	label_logit = logit(x, label, round);	/* read by every thread before any write (barriers follow) */
	j = threadIdx.x;
	for (; j + 3 * step < vocab; j += 4 * step)
	{
		float		v[4],
					m;

UNROLL
		for (int k = 0; k < 4; k++)
			v[k] = logit(x, j + k * step, round);
		m = fmaxf(fmaxf(v[0], v[1]), fmaxf(v[2], v[3]));
		if (m > mx)
		{
			sum *= expf(mx - m);	/* 0 * exp(-inf) = 0 at the first */
			mx = m;
		}
UNROLL
		for (int k = 0; k < 4; k++)
		{
			sum += expf(v[k] - mx);
			sum_x += v[k];
		}
	}
	for (; j < vocab; j += step)
	{
		float		v = logit(x, j, round);

		if (v > mx)
		{
			sum = sum * expf(mx - v) + 1.0f;	/* 0 * exp(-inf) = 0 at the first */
			mx = v;
		}
		else
			sum += expf(v - mx);
		sum_x += v;
	}
	row_max = block_max(mx, part);
	sum = block_sum(mx == -INFINITY ? 0.0f : sum * expf(mx - row_max), part);
	sum_x = block_sum(sum_x, part);
	if (threadIdx.x == 0)
		row_loss[r] = (double) row_max + log((double) sum) - (1.0 - label_smoothing) * label_logit -
			(double) label_smoothing * sum_x / vocab;
	if (!gradient)
		return;

	float		inv = 1.0f / sum,
				smooth = label_smoothing / vocab;

	j = threadIdx.x;
	for (; j + 3 * step < vocab; j += 4 * step)
	{
		float		v[4];

UNROLL
		for (int k = 0; k < 4; k++)
			v[k] = logit(x, j + k * step, round);
UNROLL
		for (int k = 0; k < 4; k++)
		{
			float		g = expf(v[k] - row_max) * inv - smooth;

			if (j + k * step == label)
				g -= 1.0f - label_smoothing;
			put_gradient(x, x16, j + k * step, g);
		}
	}
	for (; j < vocab; j += step)
	{
		float		g = expf(logit(x, j, round) - row_max) * inv - smooth;

		if (j == label)
			g -= 1.0f - label_smoothing;
		put_gradient(x, x16, j, g);
	}
}

/* One block: *out += the sum of x. */
__global__ void
accumulate_kernel(double *out, const double *x, size_t n)
{
	__shared__ double part[33];
	double		s = 0.0;

	for (size_t i = threadIdx.x; i < n; i += blockDim.x)
		s += x[i];
	s = block_sum_double(s, part);
	if (threadIdx.x == 0)
		*out += s;
}

/* a ranks before b: a larger value, or an equal value and a smaller id. */
__device__ __forceinline__ bool
ranks_before(float av, int ai, float bv, int bi)
{
	return av > bv || (av == bv && ai < bi);
}

/* The best (value, id) of the warp, by ranks_before, into every lane's *v, *id. */
__device__ __forceinline__ void
warp_best(float *v, int *id)
{
	for (int o = 16; o > 0; o >>= 1)
	{
		float		ov = __shfl_xor_sync(0xffffffffu, *v, o);
		int			oi = __shfl_xor_sync(0xffffffffu, *id, o);

		if (ranks_before(ov, oi, *v, *id))
			*v = ov, *id = oi;
	}
}

/*
 * One block per row: log-sum-exp, then k rounds of a block-wide arg-max,
 * each over the elements ranked after the previous round's pick (value
 * descending, id ascending, as the CPU's insertion keeps them).
 */
__global__ void
log_softmax_topk_kernel(const float *logits, int vocab, int ld, int k, float *top_logp, int32_t *top_id,
						int skip_id, int eos_id, float *eos_logp)
{
	__shared__ float part[33];
	__shared__ float best_v[32];
	__shared__ int best_i[32];
	__shared__ float pick_v;
	__shared__ int pick_i;
	size_t		r = blockIdx.x;
	const float *x = logits + r * ld;
	int			lane = threadIdx.x & 31,
				warp = threadIdx.x >> 5;
	float		mx = -INFINITY,
				sum = 0.0f,
				lse,
				prev_v = INFINITY;
	int			prev_i = -1;

	for (int j = threadIdx.x; j < vocab; j += blockDim.x)
		mx = fmaxf(mx, x[j]);
	mx = block_max(mx, part);
	for (int j = threadIdx.x; j < vocab; j += blockDim.x)
		sum += expf(x[j] - mx);
	lse = mx + logf(block_sum(sum, part));
	for (int t = 0; t < k; t++)
	{
		float		bv = -INFINITY;
		int			bi = INT_MAX;

		for (int j = threadIdx.x; j < vocab; j += blockDim.x)
			if (j != skip_id && ranks_before(prev_v, prev_i, x[j], j) && ranks_before(x[j], j, bv, bi))
				bv = x[j], bi = j;
		warp_best(&bv, &bi);
		if (lane == 0)
			best_v[warp] = bv, best_i[warp] = bi;
		__syncthreads();
		if (warp == 0)
		{
			bv = lane < (int) (blockDim.x >> 5) ? best_v[lane] : -INFINITY;
			bi = lane < (int) (blockDim.x >> 5) ? best_i[lane] : INT_MAX;
			warp_best(&bv, &bi);
			if (lane == 0)
			{
				pick_v = bv;
				pick_i = bi;
				top_logp[r * k + t] = bv - lse;
				top_id[r * k + t] = bi;
			}
		}
		__syncthreads();
		prev_v = pick_v;
		prev_i = pick_i;
		__syncthreads();		/* pick_v is written again next round */
	}
	if (threadIdx.x == 0)
		eos_logp[r] = x[eos_id] - lse;
}

void
k_cross_entropy(float *logits, __nv_bfloat16 *logits16, bool round, bool gradient, const int32_t *labels, int rows,
				int vocab, int ld, int pad_id, float label_smoothing, double *row_loss, cudaStream_t stream)
{
	if (rows > 0)
		LAUNCH(cross_entropy_kernel<float>, rows, BLOCK, 0, stream)(logits, logits16, round, gradient, labels, vocab,
																	  ld, pad_id, label_smoothing, row_loss);
}

void
k_cross_entropy16(__nv_bfloat16 *logits, bool gradient, const int32_t *labels, int rows, int vocab, int ld,
				  int pad_id, float label_smoothing, double *row_loss, cudaStream_t stream)
{
	if (rows > 0)
		LAUNCH(cross_entropy_kernel<__nv_bfloat16>, rows, BLOCK, 0, stream)(logits, (__nv_bfloat16 *) NULL, false,
																			  gradient, labels, vocab, ld, pad_id,
																			  label_smoothing, row_loss);
}

void
k_accumulate(double *out, const double *x, size_t n, cudaStream_t stream)
{
	LAUNCH(accumulate_kernel, 1, BLOCK, 0, stream)(out, x, n);
}

void
k_log_softmax_topk(const float *logits, int rows, int vocab, int ld, int k, float *top_logp, int32_t *top_id,
				   int skip_id, int eos_id, float *eos_logp, cudaStream_t stream)
{
	if (rows > 0)
		LAUNCH(log_softmax_topk_kernel, rows, BLOCK, 0, stream)(logits, vocab, ld, k, top_logp, top_id, skip_id,
																  eos_id, eos_logp);
}
