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

#include <atomic>

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

/*
 * The tiled kernels: one block per (sentence x head, tile of TILE_ROWS query
 * rows, or key rows for dK/dV), TILE_WARPS warps; the head's slices the tile
 * reads for every row (keys and values; queries and context gradients for
 * dK/dV) are loaded once into dynamic shared memory, rows padded to d_k + 1
 * floats (lanes on consecutive keys then hit distinct banks), and each warp
 * takes one row at a time. Used where the slices fit (tiled_shared); the
 * kernels above serve longer sentences and key/value caches.
 */
#define TILE_ROWS 64
#define TILE_WARPS 4
#define TILE_MAX_SHARED (200 * 1024)

/* Rows [r0, r0 + n) of a head's slice (row stride ld, d_k columns) into shared rows of dk + 1. */
template <class T>
__device__ __forceinline__ void
load_slice(float *dst, const T *src, size_t r0, int n, int ld, int h, int dk, bool bf16)
{
	for (int e = threadIdx.x; e < n * dk; e += blockDim.x)
	{
		int			r = e / dk,
					c = e % dk;

		dst[r * (dk + 1) + c] = kv_value(src[(r0 + r) * ld + (size_t) h * dk + c], bf16);
	}
}

/* A tiled kernel's block: its sentence's geometry for its head, its rows [r0, r1) of `rows`. */
struct Tile
{
	Pair		a;
	int			h,
				r0,
				r1;
};

__device__ __forceinline__ Tile
tile_of(const int32_t *q_start, const int32_t *k_start, const int64_t *p_start, int num_heads, bool key_rows)
{
	Tile		t;
	int			b = blockIdx.x / num_heads;

	t.h = blockIdx.x % num_heads;
	t.a = pair_of(q_start, k_start, p_start, NULL, b, t.h);
	t.r0 = blockIdx.y * TILE_ROWS;
	t.r1 = min(key_rows ? t.a.lk : t.a.lq, t.r0 + TILE_ROWS);
	return t;
}

/* Forward: ctx and probs of query rows [tile * TILE_ROWS, ...) of sentence b, head h. */
__global__ void
attention_tile_kernel(float *ctx, float *probs, const float *q, int ldq, const float *k, const float *v, int ldk,
					  const int32_t *q_start, const int32_t *k_start, const int64_t *p_start, int num_heads,
					  int dk, bool causal, float dropout, uint64_t seed, uint64_t stream, bool bf16_kv)
{
	DYNAMIC_SHARED(float, sm);
	Tile		t = tile_of(q_start, k_start, p_start, num_heads, false);
	Pair		a = t.a;
	int			h = t.h,
				lane = threadIdx.x % 32,
				warp = threadIdx.x / 32,
				d = num_heads * dk;
	float	   *ks = sm,
			   *vs = ks + (size_t) a.lk * (dk + 1),
			   *qs = vs + (size_t) a.lk * (dk + 1) + warp * (dk + a.lk),
			   *row = qs + dk;
	float		scale = 1.0f / sqrtf((float) dk),
				keep_scale = dropout > 0.0f ? 1.0f / (1.0f - dropout) : 1.0f;

	if (t.r0 >= t.r1)			/* the whole block leaves together */
		return;
	load_slice(ks, k, a.k0, a.lk, ldk, h, dk, bf16_kv);
	load_slice(vs, v, a.k0, a.lk, ldk, h, dk, bf16_kv);
	__syncthreads();
	for (int i = t.r0 + warp; i < t.r1; i += TILE_WARPS)
	{
		float	   *cr = ctx + (a.q0 + i) * d + h * dk;
		size_t		p0 = a.p_off + (size_t) i * a.lk;
		int			visible = causal && i + 1 < a.lk ? i + 1 : a.lk;
		float		mx = -INFINITY,
					sum = 0.0f;

		for (int c = lane; c < dk; c += 32)
			qs[c] = q[(a.q0 + i) * ldq + h * dk + c];
		__syncwarp();
		for (int j = lane; j < visible; j += 32)
		{
			float		dot = 0.0f;

			for (int c = 0; c < dk; c++)
				dot += qs[c] * ks[j * (dk + 1) + c];
			row[j] = dot * scale;
			mx = fmaxf(mx, row[j]);
		}
		mx = warp_reduce(mx, MaxOp());
		for (int j = lane; j < visible; j += 32)
		{
			row[j] = expf(row[j] - mx);
			sum += row[j];
		}
		sum = warp_reduce(sum, SumOp());
		for (int j = lane; j < a.lk; j += 32)
		{
			float		p = j < visible ? row[j] / sum : 0.0f;

			probs[p0 + j] = p;
			if (dropout > 0.0f)
				p = device_uniform(seed, stream, p0 + j) >= dropout ? p * keep_scale : 0.0f;
			row[j] = p;
		}
		__syncwarp();
		for (int c = lane; c < dk; c += 32)
		{
			float		acc = 0.0f;

			for (int j = 0; j < visible; j++)
				acc += row[j] * vs[j * (dk + 1) + c];
			cr[c] = acc;
		}
		__syncwarp();			/* qs and row are the next row's */
	}
}

/* Query side of the backward for query rows [tile * TILE_ROWS, ...): as attention_dq_kernel. */
__global__ void
attention_dq_tile_kernel(float *dq, float *dscores, const float *dctx, const float *probs, const float *k,
						 const float *v, int ldq, int ldk, const int32_t *q_start, const int32_t *k_start,
						 const int64_t *p_start, int num_heads, int dk, float dropout, uint64_t seed, uint64_t stream,
						 bool bf16_kv)
{
	DYNAMIC_SHARED(float, sm);
	Tile		t = tile_of(q_start, k_start, p_start, num_heads, false);
	Pair		a = t.a;
	int			h = t.h,
				lane = threadIdx.x % 32,
				warp = threadIdx.x / 32,
				d = num_heads * dk;
	float	   *ks = sm,
			   *vs = ks + (size_t) a.lk * (dk + 1),
			   *dc = vs + (size_t) a.lk * (dk + 1) + warp * (dk + a.lk),
			   *row = dc + dk;
	float		scale = 1.0f / sqrtf((float) dk),
				keep_scale = dropout > 0.0f ? 1.0f / (1.0f - dropout) : 1.0f;

	if (t.r0 >= t.r1)
		return;
	load_slice(ks, k, a.k0, a.lk, ldk, h, dk, bf16_kv);
	load_slice(vs, v, a.k0, a.lk, ldk, h, dk, bf16_kv);
	__syncthreads();
	for (int i = t.r0 + warp; i < t.r1; i += TILE_WARPS)
	{
		float	   *dqr = dq + (a.q0 + i) * ldq + h * dk;
		size_t		p0 = a.p_off + (size_t) i * a.lk;
		float		dot = 0.0f;

		for (int c = lane; c < dk; c += 32)
			dc[c] = dctx[(a.q0 + i) * d + h * dk + c];
		__syncwarp();
		for (int j = lane; j < a.lk; j += 32)
		{
			float		g = 0.0f;

			for (int c = 0; c < dk; c++)
				g += dc[c] * vs[j * (dk + 1) + c];
			if (dropout > 0.0f)
				g = device_uniform(seed, stream, p0 + j) >= dropout ? g * keep_scale : 0.0f;
			row[j] = g;
			dot += g * probs[p0 + j];
		}
		dot = warp_reduce(dot, SumOp());
		for (int j = lane; j < a.lk; j += 32)
		{
			row[j] = probs[p0 + j] * (row[j] - dot) * scale;
			dscores[p0 + j] = row[j];
		}
		__syncwarp();
		for (int c = lane; c < dk; c += 32)
		{
			float		acc = 0.0f;

			for (int j = 0; j < a.lk; j++)
				acc += row[j] * ks[j * (dk + 1) + c];
			dqr[c] = acc;
		}
		__syncwarp();
	}
}

/*
 * Key side for key rows [tile * TILE_ROWS, ...): as attention_dkv_kernel,
 * queries and dctx in shared memory; each warp copies its key's column of
 * (dropped-out) probabilities and score gradients to shared memory first.
 */
__global__ void
attention_dkv_tile_kernel(float *dkey, float *dvalue, const float *dscores, const float *dctx, const float *probs,
						  const float *q, int ldq, int ldk, const int32_t *q_start, const int32_t *k_start,
						  const int64_t *p_start, int num_heads, int dk, float dropout, uint64_t seed,
						  uint64_t stream)
{
	DYNAMIC_SHARED(float, sm);
	Tile		t = tile_of(q_start, k_start, p_start, num_heads, true);
	Pair		a = t.a;
	int			h = t.h,
				lane = threadIdx.x % 32,
				warp = threadIdx.x / 32,
				d = num_heads * dk;
	float	   *qs = sm,
			   *ds = qs + (size_t) a.lq * (dk + 1),
			   *pcol = ds + (size_t) a.lq * (dk + 1) + warp * 2 * a.lq,
			   *scol = pcol + a.lq;
	float		keep_scale = dropout > 0.0f ? 1.0f / (1.0f - dropout) : 1.0f;

	if (t.r0 >= t.r1)
		return;
	load_slice(qs, q, a.q0, a.lq, ldq, h, dk, false);
	load_slice(ds, dctx, a.q0, a.lq, d, h, dk, false);
	__syncthreads();
	for (int j = t.r0 + warp; j < t.r1; j += TILE_WARPS)
	{
		for (int i = lane; i < a.lq; i += 32)
		{
			size_t		e = a.p_off + (size_t) i * a.lk + j;
			float		p = probs[e];

			if (dropout > 0.0f)
				p = device_uniform(seed, stream, e) >= dropout ? p * keep_scale : 0.0f;
			pcol[i] = p;
			scol[i] = dscores[e];
		}
		__syncwarp();
		for (int c = lane; c < dk; c += 32)
		{
			float		gk = 0.0f,
						gv = 0.0f;

			for (int i = 0; i < a.lq; i++)
			{
				gv += pcol[i] * ds[i * (dk + 1) + c];
				gk += scol[i] * qs[i * (dk + 1) + c];
			}
			dkey[(a.k0 + j) * ldk + h * dk + c] = gk;
			dvalue[(a.k0 + j) * ldk + h * dk + c] = gv;
		}
		__syncwarp();			/* pcol and scol are the next key's */
	}
}

/* Dynamic shared memory of the tiled kernels for this call (the largest of the three). */
static size_t
tiled_shared(const TfAttentionShape *sh)
{
	size_t		kv = (2 * (size_t) sh->max_k * (sh->head_dim + 1) + TILE_WARPS * (size_t) (sh->head_dim + sh->max_k)),
				qd = 2 * (size_t) sh->max_q * (sh->head_dim + 1) + TILE_WARPS * 2 * (size_t) sh->max_q;

	return (kv > qd ? kv : qd) * sizeof(float);
}

/* Whether the tiled kernels serve this call; the first time on a device, lifts their shared memory limit there. */
static bool
tiled(const TfAttentionShape *sh)
{
	static std::atomic<uint64_t> raised{0};	/* a bit per device */
	int			device = 0;

	if (sh->kv_cache || sh->k_len != NULL || tiled_shared(sh) > TILE_MAX_SHARED)
		return false;
	cudaGetDevice(&device);
	if (device < 64 && !(raised.load() >> device & 1))
	{
		cudaFuncSetAttribute((const void *) attention_tile_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, TILE_MAX_SHARED);
		cudaFuncSetAttribute((const void *) attention_dq_tile_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, TILE_MAX_SHARED);
		cudaFuncSetAttribute((const void *) attention_dkv_tile_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, TILE_MAX_SHARED);
		raised.fetch_or((uint64_t) 1 << device);
	}
	return true;
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
	if (tiled(sh))
	{
		LAUNCH(attention_tile_kernel, dim3((unsigned) (sh->batch * sh->num_heads), (unsigned) ((sh->max_q + TILE_ROWS - 1) / TILE_ROWS)),
			   TILE_WARPS * 32, tiled_shared(sh), stream)
			(ctx, probs, q, ldq, k, v, ldk, sh->q_start, sh->k_start, sh->p_start, sh->num_heads, sh->head_dim,
			 sh->causal, sh->dropout, sh->seed, sh->stream, bf16_kv);
		return;
	}
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
	if (tiled(sh))
	{
		if (sh->max_q > 0)
			LAUNCH(attention_dq_tile_kernel, dim3(pairs, (unsigned) ((sh->max_q + TILE_ROWS - 1) / TILE_ROWS)),
				   TILE_WARPS * 32, tiled_shared(sh), stream)
				(dq, dscores, dctx, probs, k, v, ldq, ldk, sh->q_start, sh->k_start, sh->p_start, sh->num_heads,
				 sh->head_dim, sh->dropout, sh->seed, sh->stream, bf16_kv);
		if (sh->max_k > 0)
			LAUNCH(attention_dkv_tile_kernel, dim3(pairs, (unsigned) ((sh->max_k + TILE_ROWS - 1) / TILE_ROWS)),
				   TILE_WARPS * 32, tiled_shared(sh), stream)
				(dk, dv, dscores, dctx, probs, q, ldq, ldk, sh->q_start, sh->k_start, sh->p_start, sh->num_heads,
				 sh->head_dim, sh->dropout, sh->seed, sh->stream);
		return;
	}
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
