/*
 * attention.cu - scaled dot-product attention (paper eq. 1) over packed
 * sentences of different lengths, all heads, causal masking and dropout on
 * the probabilities with the CPU backend's bits; and its backward. The
 * twins of cpu_attention and cpu_attention_backward.
 *
 * One block per (sentence x head, query row) for the forward and the
 * query-side backward; one per (sentence x head, key row) for the key side;
 * as many threads as the longest row of keys or d_k needs (row_threads).
 * A row of scores lives in dynamic shared memory (max_k floats).
 */
#include "kernels.h"

#define ATT_THREADS 128
#define ATT_MAX_SHARED (48 * 1024)

/*
 * A key or value element as attention reads it: rounded to bf16 in mixed
 * precision; a bf16 cache's element is that already.
 */
__device__ __forceinline__ float
kv_value(float x, bool bf16_kv)
{
	return bf16_kv ? __bfloat162float(__float2bfloat16_rn(x)) : x;
}
__device__ __forceinline__ float
kv_value(__nv_bfloat16 x, bool bf16_kv)
{
	(void) bf16_kv;
	return __bfloat162float(x);
}

/* Sentence b's geometry for head h (the arrays are device memory). */
struct Pair
{
	int			lq,
				lk;
	size_t		q0,
				k0;
	size_t		p_off;			/* first probability of this head */
};

__device__ __forceinline__ Pair
pair_of(const int32_t *q_start, const int32_t *k_start, const int64_t *p_start, const int32_t *k_len, int b, int h)
{
	Pair		a;

	a.q0 = (size_t) q_start[b];
	a.k0 = (size_t) k_start[b];
	a.lq = q_start[b + 1] - q_start[b];
	a.lk = k_len != NULL ? k_len[b] : k_start[b + 1] - k_start[b];
	a.p_off = (size_t) p_start[b] + (size_t) h * a.lq * a.lk;
	return a;
}

template <class KV>
__global__ void
attention_kernel(float *ctx, float *probs, const float *q, int ldq, const KV *k, const KV *v, int ldk,
				 const int32_t *q_start, const int32_t *k_start, const int64_t *p_start, const int32_t *k_len,
				 int num_heads, int dk, bool causal, float dropout, uint64_t seed, uint64_t stream, bool bf16_kv)
{
	DYNAMIC_SHARED(float, row);
	__shared__ float part[33];
	int			b = blockIdx.x / num_heads,
				h = blockIdx.x % num_heads,
				i = blockIdx.y,
				d = num_heads * dk;
	Pair		a = pair_of(q_start, k_start, p_start, k_len, b, h);
	float		scale = 1.0f / sqrtf((float) dk),
				keep_scale = dropout > 0.0f ? 1.0f / (1.0f - dropout) : 1.0f,
				mx = -INFINITY,
				sum = 0.0f;
	const float *qr = q + (a.q0 + i) * ldq + h * dk;
	float	   *cr = ctx + (a.q0 + i) * d + h * dk;
	size_t		p0 = a.p_off + (size_t) i * a.lk;
	int			visible;

	if (i >= a.lq)				/* the whole block leaves together */
		return;
	if (a.lk == 0)
	{
		for (int c = threadIdx.x; c < dk; c += blockDim.x)
			cr[c] = 0.0f;
		return;
	}
	visible = causal && i + 1 < a.lk ? i + 1 : a.lk;
	for (int j = threadIdx.x; j < visible; j += blockDim.x)
	{
		const KV   *kr = k + (a.k0 + j) * ldk + h * dk;
		float		dot = 0.0f;

		for (int c = 0; c < dk; c++)
			dot += qr[c] * kv_value(kr[c], bf16_kv);
		row[j] = dot * scale;
		mx = fmaxf(mx, row[j]);
	}
	mx = block_max(mx, part);
	for (int j = threadIdx.x; j < visible; j += blockDim.x)
	{
		row[j] = expf(row[j] - mx);
		sum += row[j];
	}
	sum = block_sum(sum, part);
	for (int j = threadIdx.x; j < a.lk; j += blockDim.x)
	{
		float		p = j < visible ? row[j] / sum : 0.0f;

		probs[p0 + j] = p;
		if (dropout > 0.0f)
			p = device_uniform(seed, stream, p0 + j) >= dropout ? p * keep_scale : 0.0f;
		row[j] = p;
	}
	__syncthreads();
	for (int c = threadIdx.x; c < dk; c += blockDim.x)
	{
		float		acc = 0.0f;

		for (int j = 0; j < visible; j++)
			acc += row[j] * kv_value(v[(a.k0 + j) * ldk + h * dk + c], bf16_kv);
		cr[c] = acc;
	}
}

/*
 * Query side: for query i, dPd = dctx V^T through the dropout mask, dS =
 * P (dPd - sum(dPd P)) / sqrt(d_k) into dscores (the probabilities'
 * layout), and dQ = dS K.
 */
__global__ void
attention_dq_kernel(float *dq, float *dscores, const float *dctx, const float *probs, const float *k,
					const float *v, int ldq, int ldk, const int32_t *q_start, const int32_t *k_start,
					const int64_t *p_start, int num_heads, int dk, float dropout, uint64_t seed, uint64_t stream,
					bool bf16_kv)
{
	DYNAMIC_SHARED(float, row);
	__shared__ float part[33];
	int			b = blockIdx.x / num_heads,
				h = blockIdx.x % num_heads,
				i = blockIdx.y,
				d = num_heads * dk;
	Pair		a = pair_of(q_start, k_start, p_start, NULL, b, h);
	float		scale = 1.0f / sqrtf((float) dk),
				keep_scale = dropout > 0.0f ? 1.0f / (1.0f - dropout) : 1.0f,
				dot = 0.0f;
	const float *dc = dctx + (a.q0 + i) * d + h * dk;
	float	   *dqr = dq + (a.q0 + i) * ldq + h * dk;
	size_t		p0 = a.p_off + (size_t) i * a.lk;

	if (i >= a.lq)
		return;
	if (a.lk == 0)
	{
		for (int c = threadIdx.x; c < dk; c += blockDim.x)
			dqr[c] = 0.0f;
		return;
	}
	for (int j = threadIdx.x; j < a.lk; j += blockDim.x)
	{
		const float *vr = v + (a.k0 + j) * ldk + h * dk;
		float		g = 0.0f;

		for (int c = 0; c < dk; c++)
			g += dc[c] * kv_value(vr[c], bf16_kv);
		if (dropout > 0.0f)
			g = device_uniform(seed, stream, p0 + j) >= dropout ? g * keep_scale : 0.0f;
		row[j] = g;
		dot += g * probs[p0 + j];
	}
	dot = block_sum(dot, part);
	for (int j = threadIdx.x; j < a.lk; j += blockDim.x)
	{
		row[j] = probs[p0 + j] * (row[j] - dot) * scale;
		dscores[p0 + j] = row[j];
	}
	__syncthreads();
	for (int c = threadIdx.x; c < dk; c += blockDim.x)
	{
		float		acc = 0.0f;

		for (int j = 0; j < a.lk; j++)
			acc += row[j] * kv_value(k[(a.k0 + j) * ldk + h * dk + c], bf16_kv);
		dqr[c] = acc;
	}
}

/* Key side: for key j, dV = Pd^T dctx and dK = dS^T Q, summed over queries in order. */
__global__ void
attention_dkv_kernel(float *dkey, float *dvalue, const float *dscores, const float *dctx, const float *probs,
					 const float *q, int ldq, int ldk, const int32_t *q_start, const int32_t *k_start,
					 const int64_t *p_start, int num_heads, int dk, float dropout, uint64_t seed, uint64_t stream)
{
	int			b = blockIdx.x / num_heads,
				h = blockIdx.x % num_heads,
				j = blockIdx.y,
				d = num_heads * dk;
	Pair		a = pair_of(q_start, k_start, p_start, NULL, b, h);
	float		keep_scale = dropout > 0.0f ? 1.0f / (1.0f - dropout) : 1.0f;

	if (j >= a.lk)
		return;
	for (int c = threadIdx.x; c < dk; c += blockDim.x)
	{
		float		gk = 0.0f,
					gv = 0.0f;

		for (int i = 0; i < a.lq; i++)
		{
			size_t		e = a.p_off + (size_t) i * a.lk + j;
			float		p = probs[e];

			if (dropout > 0.0f)
				p = device_uniform(seed, stream, e) >= dropout ? p * keep_scale : 0.0f;
			gv += p * dctx[(a.q0 + i) * d + h * dk + c];
			gk += dscores[e] * q[(a.q0 + i) * ldq + h * dk + c];
		}
		dkey[(a.k0 + j) * ldk + h * dk + c] = gk;
		dvalue[(a.k0 + j) * ldk + h * dk + c] = gv;
	}
}

bool
k_attention_fits(const TfAttentionShape *sh)
{
	return (size_t) sh->max_k * sizeof(float) <= ATT_MAX_SHARED;
}

void
k_attention(float *ctx, float *probs, const float *q, int ldq, const float *k, const float *v, int ldk,
			const TfAttentionShape *sh, bool bf16_kv, cudaStream_t stream)
{
	dim3		grid((unsigned) (sh->batch * sh->num_heads), (unsigned) sh->max_q);
	unsigned	threads = row_threads(sh->max_k > sh->head_dim ? sh->max_k : sh->head_dim, ATT_THREADS);
	size_t		shared = (size_t) (sh->max_k > 0 ? sh->max_k : 1) * sizeof(float);

	if (sh->batch == 0 || sh->max_q == 0)
		return;
	if (sh->kv_cache && bf16_kv)	/* a bf16 key/value cache (cache_gather) */
	{
		void		(*attention_bf16_cache) (float *, float *, const float *, int, const __nv_bfloat16 *,
											 const __nv_bfloat16 *, int, const int32_t *, const int32_t *,
											 const int64_t *, const int32_t *, int, int, bool, float, uint64_t,
											 uint64_t, bool) = attention_kernel<__nv_bfloat16>;

		LAUNCH(attention_bf16_cache, grid, threads, shared, stream)
			(ctx, probs, q, ldq, (const __nv_bfloat16 *) k, (const __nv_bfloat16 *) v, ldk, sh->q_start, sh->k_start,
			 sh->p_start, sh->k_len, sh->num_heads, sh->head_dim, sh->causal, sh->dropout, sh->seed, sh->stream,
			 bf16_kv);
		return;
	}
	LAUNCH(attention_kernel<float>, grid, threads, shared, stream)
		(ctx, probs, q, ldq, k, v, ldk, sh->q_start, sh->k_start, sh->p_start, sh->k_len, sh->num_heads,
		 sh->head_dim, sh->causal, sh->dropout, sh->seed, sh->stream, bf16_kv);
}

void
k_attention_backward(float *dq, float *dk, float *dv, const float *dctx, const float *probs, const float *q,
					 int ldq, const float *k, const float *v, int ldk, const TfAttentionShape *sh, bool bf16_kv,
					 float *dscores, cudaStream_t stream)
{
	unsigned	pairs = (unsigned) (sh->batch * sh->num_heads);

	if (sh->batch == 0)
		return;
	if (sh->max_q > 0)
		LAUNCH(attention_dq_kernel, dim3(pairs, (unsigned) sh->max_q),
			   row_threads(sh->max_k > sh->head_dim ? sh->max_k : sh->head_dim, ATT_THREADS),
			   (size_t) (sh->max_k > 0 ? sh->max_k : 1) * sizeof(float), stream)
			(dq, dscores, dctx, probs, k, v, ldq, ldk, sh->q_start, sh->k_start, sh->p_start, sh->num_heads,
			 sh->head_dim, sh->dropout, sh->seed, sh->stream, bf16_kv);
	if (sh->max_k > 0)
		LAUNCH(attention_dkv_kernel, dim3(pairs, (unsigned) sh->max_k), row_threads(sh->head_dim, ATT_THREADS), 0,
			   stream)
			(dk, dv, dscores, dctx, probs, q, ldq, ldk, sh->q_start, sh->k_start, sh->p_start, sh->num_heads,
			 sh->head_dim, sh->dropout, sh->seed, sh->stream);
}
