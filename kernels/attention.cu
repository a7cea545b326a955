/*
 * attention.cu - scaled dot-product attention (paper eq. 1) over packed
 * sentences of different lengths, all heads, causal masking and dropout on
 * the probabilities with the CPU backend's bits; and its backward. The
 * twins of cpu_attention and cpu_attention_backward.
 *
 * Two families. The tiled kernels (below) serve training and encoding: one
 * block per (sentence x head, tile of 64 rows), the head's slices in shared
 * memory, an online softmax that keeps each row's log-sum-exp and never
 * writes the probabilities; the backward recomputes them from it. The
 * per-row kernels (first) serve what the tiled ones do not: key/value
 * caches (decoding), sentences whose slices exceed shared memory, and the
 * forward that keeps the probabilities for inspection. One block per
 * (sentence x head, row); a row of scores in dynamic shared memory. The
 * forward: 4 warps, the query row in shared memory, its scores a warp per
 * key (lanes on consecutive columns of the key's row); the backward's: as
 * many threads as the longest row of keys or d_k needs (row_threads).
 */
#include "attention.cuh"

#include <atomic>

#define ATT_THREADS 128
#define ATT_MAX_SHARED (48 * 1024)

/* Floats of the per-row forward's query row in shared memory: d_k, rounded up to 4 (the scores after it stay 16-byte aligned). */
__host__ __device__ __forceinline__ int
query_floats(int dk)
{
	return (dk + 3) & ~3;
}

/* ctx16 (NULL: none): ctx's bf16 copy, [query rows, num_heads * dk] as ctx. */
template <class KV>
__global__ void
attention_kernel(float *ctx, __nv_bfloat16 *ctx16, float *lse, float *probs, const float *q, int ldq, const KV *k,
				 const KV *v, int ldk,
				 const int32_t *q_start, const int32_t *k_start, const int64_t *p_start, const int32_t *k_len,
				 int num_heads, int dk, bool causal, float dropout, uint64_t seed, uint64_t stream, bool bf16_kv)
{
	DYNAMIC_SHARED(float, sm);
	__shared__ float part[33];
	float	   *qs = sm,		/* the query row, as the products read it */
			   *row = sm + query_floats(dk);
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
	__nv_bfloat16 *cr16 = ctx16 != NULL ? ctx16 + (a.q0 + i) * d + h * dk : NULL;
	size_t		p0 = a.p_off + (size_t) i * a.lk;
	int			visible;

	if (i >= a.lq)				/* the whole block leaves together */
		return;
	if (a.lk == 0)
	{
		for (int c = threadIdx.x; c < dk; c += blockDim.x)
		{
			cr[c] = 0.0f;
			if (cr16 != NULL)
				cr16[c] = __float2bfloat16_rn(0.0f);
		}
		if (lse != NULL && threadIdx.x == 0)
			lse[(a.q0 + i) * num_heads + h] = -INFINITY;
		return;
	}
	visible = causal && i + 1 < a.lk ? i + 1 : a.lk;
	for (int c = threadIdx.x; c < dk; c += blockDim.x)
		qs[c] = kv_value(qr[c], bf16_kv);
	__syncthreads();
	for (int j = threadIdx.x / 32; j < visible; j += blockDim.x / 32)	/* a warp per key: its row read coalesced */
	{
		const KV   *kr = k + (a.k0 + j) * ldk + h * dk;
		float		dot = 0.0f;

		for (int c = threadIdx.x % 32; c < dk; c += 32)
			dot += qs[c] * kv_value(kr[c], bf16_kv);
		dot = warp_reduce(dot, SumOp()) * scale;	/* every lane has it */
		if (threadIdx.x % 32 == 0)
			row[j] = dot;
		mx = fmaxf(mx, dot);
	}
	mx = block_max(mx, part);	/* its barrier publishes row */
	for (int j = threadIdx.x; j < visible; j += blockDim.x)
	{
		row[j] = expf(row[j] - mx);
		sum += row[j];
	}
	sum = block_sum(sum, part);
	if (lse != NULL && threadIdx.x == 0)
		lse[(a.q0 + i) * num_heads + h] = mx + logf(sum);
	for (int j = threadIdx.x; j < a.lk; j += blockDim.x)
	{
		float		p = j < visible ? (bf16_kv ? row[j] : row[j] / sum) : 0.0f;

		if (probs != NULL)
			probs[p0 + j] = bf16_kv ? p / sum : p;
		if (dropout > 0.0f)
			p = device_uniform(seed, stream, p0 + j) >= dropout ? p * keep_scale : 0.0f;
		row[j] = kv_value(p, bf16_kv);	/* bf16: P~ = bf16(exp(S - max) dropped out), divided by the sum last */
	}
	__syncthreads();
	for (int c = threadIdx.x; c < dk; c += blockDim.x)
	{
		float		acc = 0.0f;

		for (int j = 0; j < visible; j++)
			acc += row[j] * kv_value(v[(a.k0 + j) * ldk + h * dk + c], bf16_kv);
		cr[c] = bf16_kv ? acc / sum : acc;
		if (cr16 != NULL)
			cr16[c] = __float2bfloat16_rn(cr[c]);
	}
}

/*
 * Query side: for query i, P = exp(S - lse) again (into pws, for the key
 * side), dPd = dctx V^T through the dropout mask, dS = P (dPd - D) /
 * sqrt(d_k) into dscores (both in the probabilities' layout), and dQ =
 * dS K. D = sum(dPd P) / sum(P), as the CPU backend's: the rows of dS then
 * sum to 0 whatever the lse's rounding.
 */
__global__ void
attention_dq_kernel(float *dq, float *dscores, float *pws, const float *dctx, const float *lse, const float *q,
					const float *k, const float *v, int ldq, int ldk, const int32_t *q_start,
					const int32_t *k_start, const int64_t *p_start, int num_heads, int dk, bool causal,
					float dropout, uint64_t seed, uint64_t stream, bool bf16_kv)
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
				dot = 0.0f,
				total = 0.0f,
				l;
	const float *qr = q + (a.q0 + i) * ldq + h * dk;
	const float *dc = dctx + (a.q0 + i) * d + h * dk;
	float	   *dqr = dq + (a.q0 + i) * ldq + h * dk;
	size_t		p0 = a.p_off + (size_t) i * a.lk;
	int			visible;

	if (i >= a.lq)
		return;
	if (a.lk == 0)
	{
		for (int c = threadIdx.x; c < dk; c += blockDim.x)
			dqr[c] = 0.0f;
		return;
	}
	l = lse[(a.q0 + i) * num_heads + h];
	visible = causal && i + 1 < a.lk ? i + 1 : a.lk;
	for (int j = threadIdx.x; j < a.lk; j += blockDim.x)
	{
		const float *kr = k + (a.k0 + j) * ldk + h * dk;
		const float *vr = v + (a.k0 + j) * ldk + h * dk;
		float		s = 0.0f,
					g = 0.0f,
					p = 0.0f;

		if (j < visible)
		{
			for (int c = 0; c < dk; c++)
				s += kv_value(qr[c], bf16_kv) * kv_value(kr[c], bf16_kv);
			p = expf(s * scale - l);
		}
		for (int c = 0; c < dk; c++)
			g += kv_value(dc[c], bf16_kv) * kv_value(vr[c], bf16_kv);
		if (dropout > 0.0f)
			g = device_uniform(seed, stream, p0 + j) >= dropout ? g * keep_scale : 0.0f;
		row[j] = g;
		pws[p0 + j] = p;
		dot += g * p;
		total += p;
	}
	dot = block_sum(dot, part);
	dot /= block_sum(total, part);
	for (int j = threadIdx.x; j < a.lk; j += blockDim.x)
	{
		row[j] = pws[p0 + j] * (row[j] - dot) * scale;
		dscores[p0 + j] = row[j];
	}
	__syncthreads();
	for (int c = threadIdx.x; c < dk; c += blockDim.x)
	{
		float		acc = 0.0f;

		for (int j = 0; j < a.lk; j++)
			acc += kv_value(row[j], bf16_kv) * kv_value(k[(a.k0 + j) * ldk + h * dk + c], bf16_kv);
		dqr[c] = acc;
	}
}

/*
 * Key side: for key j, dV = Pd^T dctx and dK = dS^T Q, summed over queries in
 * order (P from pws); bf16: each factor rounded (docs/gpus.md's bf16 rules).
 */
__global__ void
attention_dkv_kernel(float *dkey, float *dvalue, const float *dscores, const float *dctx, const float *pws,
					 const float *q, int ldq, int ldk, const int32_t *q_start, const int32_t *k_start,
					 const int64_t *p_start, int num_heads, int dk, float dropout, uint64_t seed, uint64_t stream,
					 bool bf16)
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
			float		p = pws[e];

			if (dropout > 0.0f)
				p = device_uniform(seed, stream, e) >= dropout ? p * keep_scale : 0.0f;
			gv += kv_value(p, bf16) * kv_value(dctx[(a.q0 + i) * d + h * dk + c], bf16);
			gk += kv_value(dscores[e], bf16) * kv_value(q[(a.q0 + i) * ldq + h * dk + c], bf16);
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
 * floats (lanes on consecutive keys then hit distinct banks). Each warp
 * takes GROUP rows at a time and holds their sums in registers, so a key or
 * value a lane loads from shared memory serves GROUP rows, and the GROUP
 * rows' own values come as one 16-byte broadcast (shared memory, not the
 * arithmetic, bounds these kernels: docs/gpus.md). Every dot product sums
 * its d_k terms in order, as the per-row kernels do. Causal tiles load and
 * visit only the keys their rows see. Used where the slices fit
 * (tile_*_shared).
 */
#define TILE_WARPS 4
#define GROUP 4
#define TILE_MIN_BLOCKS 4		/* the forward's blocks resident per SM: registers capped at 128 */
#define TILE_MAX_SHARED (200 * 1024)

/* Rows [r0, r0 + n) of a head's slice (row stride ld, d_k columns) into shared rows of dk + 1. */
template <class T>
__device__ __forceinline__ void
load_slice(float *dst, const T *src, size_t r0, int n, int ld, int h, int dk)
{
	for (int e = threadIdx.x; e < n * dk; e += blockDim.x)
	{
		int			r = e / dk,
					c = e % dk;

		dst[r * (dk + 1) + c] = src[(r0 + r) * ld + (size_t) h * dk + c];
	}
}

/*
 * A warp's GROUP rows (rows of d_k from row r0 on, stride ld; `rows` of
 * them real) into dst [GROUP, dk4], zero past d_k and past `rows`.
 */
__device__ __forceinline__ void
load_group(float *dst, const float *src, size_t r0, int rows, int ld, int h, int dk, int dk4, int lane)
{
	for (int e = lane; e < GROUP * dk4; e += 32)
	{
		int			r = e / dk4,
					c = e % dk4;

		dst[e] = r < rows && c < dk ? src[(r0 + r) * ld + (size_t) h * dk + c] : 0.0f;
	}
}

/* Element r of a float4 (r a constant after unrolling). */
__device__ __forceinline__ float
lane4(const float4 &v, int r)
{
	return r == 0 ? v.x : r == 1 ? v.y : r == 2 ? v.z : v.w;
}

/*
 * The dot products of one shared slice row x (padded, d_k used) with the
 * GROUP rows of g [GROUP, dk4], added to sum[GROUP] in column order.
 */
__device__ __forceinline__ void
dot_group(float sum[GROUP], const float *x, const float *g, int dk, int dk4)
{
	for (int c = 0; c < dk4; c += 4)
	{
		float		x0 = x[c],
					x1 = c + 1 < dk ? x[c + 1] : 0.0f,
					x2 = c + 2 < dk ? x[c + 2] : 0.0f,
					x3 = c + 3 < dk ? x[c + 3] : 0.0f;

UNROLL
		for (int r = 0; r < GROUP; r++)
		{
			float4		y = load4(g + r * dk4 + c);

			sum[r] += x0 * y.x;
			sum[r] += x1 * y.y;
			sum[r] += x2 * y.z;
			sum[r] += x3 * y.w;
		}
	}
}

/* d_k rounded up to a multiple of 4 (the width of a group row) */
__host__ __device__ __forceinline__ int
width4(int dk)
{
	return (dk + 3) & ~3;
}

/*
 * Floats of one warp's buffers in a tiled kernel: two [GROUP, dk4] row
 * groups and `per_row` values for each of GROUP rows (a multiple of 4: the
 * next warp's buffers stay 16-byte aligned). The kernels lay out shared
 * memory with it and the host sizes it with it.
 */
__host__ __device__ __forceinline__ int
warp_floats(int dk4, int per_row)
{
	return 2 * GROUP * dk4 + GROUP * per_row;
}

/*
 * Forward of query rows [tile * TILE_ROWS, ...) of sentence b, head h:
 * ctx and the rows' log-sum-exp, by an online softmax (running max m and
 * sum l over 32 keys at a time, earlier terms rescaled by exp(m_old -
 * m_new); FlashAttention). A warp's shared memory: its GROUP query rows,
 * their context accumulators (lane c owns columns c, c + 32, ...) and the
 * chunk's weights [32 keys, GROUP].
 */
__global__ void __launch_bounds__(TILE_WARPS * 32, TILE_MIN_BLOCKS)
attention_tile_kernel(float *ctx, float *lse, const float *q, int ldq, const float *k, const float *v, int ldk,
					  const int32_t *q_start, const int32_t *k_start, const int64_t *p_start, int num_heads,
					  int dk, bool causal, float dropout, uint64_t seed, uint64_t stream)
{
	DYNAMIC_SHARED(float4, sm4);
	Tile		t = tile_of(q_start, k_start, p_start, num_heads, false);
	Pair		a = t.a;
	int			h = t.h,
				lane = threadIdx.x % 32,
				warp = threadIdx.x / 32,
				d = num_heads * dk,
				dk4 = width4(dk),
				seen = causal ? min(a.lk, t.r1) : a.lk;	/* keys any row of the tile sees */
	float	   *qs = (float *) sm4 + warp * warp_floats(dk4, 32),
			   *acc = qs + GROUP * dk4,
			   *w = acc + GROUP * dk4,
			   *ks = (float *) sm4 + TILE_WARPS * warp_floats(dk4, 32),
			   *vs = ks + (size_t) seen * (dk + 1);
	float		scale = 1.0f / sqrtf((float) dk),
				keep_scale = dropout > 0.0f ? 1.0f / (1.0f - dropout) : 1.0f;

	if (t.r0 >= t.r1)			/* the whole block leaves together */
		return;
	load_slice(ks, k, a.k0, seen, ldk, h, dk);
	load_slice(vs, v, a.k0, seen, ldk, h, dk);
	__syncthreads();
	for (int g = t.r0 + warp * GROUP; g < t.r1; g += TILE_WARPS * GROUP)
	{
		int			rows = min(GROUP, t.r1 - g),
					vis[GROUP],
					most = 0;
		float		m[GROUP],
					l[GROUP];

UNROLL
		for (int r = 0; r < GROUP; r++)
		{
			int			i = g + r;

			vis[r] = r >= rows ? 0 : causal && i + 1 < a.lk ? i + 1 : a.lk;
			most = max(most, vis[r]);
			m[r] = -INFINITY;
			l[r] = 0.0f;
		}
		if (most == 0)			/* no keys: zero contexts, as the CPU backend's */
		{
			for (int e = lane; e < rows * dk; e += 32)
				ctx[(a.q0 + g + e / dk) * d + h * dk + e % dk] = 0.0f;
			if (lse != NULL && lane < rows)
				lse[(a.q0 + g + lane) * num_heads + h] = -INFINITY;
			continue;
		}
		load_group(qs, q, a.q0 + g, rows, ldq, h, dk, dk4, lane);
		for (int e = lane; e < GROUP * dk4; e += 32)
			acc[e] = 0.0f;
		__syncwarp();
		for (int j0 = 0; j0 < most; j0 += 32)
		{
			int			j = j0 + lane,
						n = min(32, most - j0);
			float		s[GROUP] = {0.0f},
						rescale[GROUP],
						e[GROUP];

			if (j < most)
				dot_group(s, ks + (size_t) j * (dk + 1), qs, dk, dk4);
UNROLL
			for (int r = 0; r < GROUP; r++)
			{
				e[r] = 0.0f;
				rescale[r] = 1.0f;
				if (j0 < vis[r])	/* the same for every lane */
				{
					float		sr = j < vis[r] ? s[r] * scale : -INFINITY,
								m_new = fmaxf(m[r], warp_reduce(sr, MaxOp()));

					rescale[r] = expf(m[r] - m_new);
					e[r] = j < vis[r] ? expf(sr - m_new) : 0.0f;
					l[r] = l[r] * rescale[r] + warp_reduce(e[r], SumOp());
					if (dropout > 0.0f && j < vis[r])
						e[r] = device_uniform(seed, stream, a.p_off + (size_t) (g + r) * a.lk + j) >= dropout ?
							e[r] * keep_scale : 0.0f;
					m[r] = m_new;
				}
			}
			store4(w + lane * GROUP, e);
			__syncwarp();
			for (int c = lane; c < dk; c += 32)
			{
				float		sum[GROUP] = {0.0f};

				for (int u = 0; u < n; u++)
				{
					float4		wu = load4(w + u * GROUP);
					float		vv = vs[(size_t) (j0 + u) * (dk + 1) + c];

UNROLL
					for (int r = 0; r < GROUP; r++)
						sum[r] += lane4(wu, r) * vv;
				}
UNROLL
				for (int r = 0; r < GROUP; r++)
					acc[r * dk4 + c] = acc[r * dk4 + c] * rescale[r] + sum[r];
			}
			__syncwarp();		/* w is the next chunk's */
		}
UNROLL
		for (int r = 0; r < GROUP; r++)
			if (r < rows)
			{
				for (int c = lane; c < dk; c += 32)
					ctx[(a.q0 + g + r) * d + h * dk + c] = acc[r * dk4 + c] / l[r];
				if (lse != NULL && lane == 0)
					lse[(a.q0 + g + r) * num_heads + h] = m[r] + logf(l[r]);
			}
		__syncwarp();			/* qs and acc are the next group's */
	}
}

/*
 * Query side of the backward for query rows [tile * TILE_ROWS, ...): P =
 * exp(S - lse) recomputed, dPd = dctx V^T through the dropout mask, D =
 * sum(dPd P) / sum(P) (as attention_dq_kernel's; into dsum [query rows,
 * num_heads], for the key side), dS = P (dPd - D) / sqrt(d_k), dQ = dS K.
 * A warp's shared memory: its GROUP query and dctx rows, then P and dS of
 * the rows' keys [keys, GROUP].
 */
__global__ void
attention_dq_tile_kernel(float *dq, float *dsum, const float *dctx, const float *lse, const float *q,
						 const float *k, const float *v, int ldq, int ldk, const int32_t *q_start,
						 const int32_t *k_start, const int64_t *p_start, int num_heads, int dk, bool causal,
						 float dropout, uint64_t seed, uint64_t stream)
{
	DYNAMIC_SHARED(float4, sm4);
	Tile		t = tile_of(q_start, k_start, p_start, num_heads, false);
	Pair		a = t.a;
	int			h = t.h,
				lane = threadIdx.x % 32,
				warp = threadIdx.x / 32,
				d = num_heads * dk,
				dk4 = width4(dk),
				seen = causal ? min(a.lk, t.r1) : a.lk;
	float	   *qs = (float *) sm4 + warp * warp_floats(dk4, 2 * seen),
			   *dc = qs + GROUP * dk4,
			   *pr = dc + GROUP * dk4,
			   *sr = pr + GROUP * seen,
			   *ks = (float *) sm4 + TILE_WARPS * warp_floats(dk4, 2 * seen),
			   *vs = ks + (size_t) seen * (dk + 1);
	float		scale = 1.0f / sqrtf((float) dk),
				keep_scale = dropout > 0.0f ? 1.0f / (1.0f - dropout) : 1.0f;

	if (t.r0 >= t.r1)
		return;
	load_slice(ks, k, a.k0, seen, ldk, h, dk);
	load_slice(vs, v, a.k0, seen, ldk, h, dk);
	__syncthreads();
	for (int g = t.r0 + warp * GROUP; g < t.r1; g += TILE_WARPS * GROUP)
	{
		int			rows = min(GROUP, t.r1 - g),
					vis[GROUP],
					most = 0;
		float		l[GROUP],
					dot[GROUP] = {0.0f},
					total[GROUP] = {0.0f};

UNROLL
		for (int r = 0; r < GROUP; r++)
		{
			int			i = g + r;

			vis[r] = r >= rows ? 0 : causal && i + 1 < a.lk ? i + 1 : a.lk;
			most = max(most, vis[r]);
			l[r] = r < rows ? lse[(a.q0 + i) * num_heads + h] : 0.0f;
		}
		load_group(qs, q, a.q0 + g, rows, ldq, h, dk, dk4, lane);
		load_group(dc, dctx, a.q0 + g, rows, d, h, dk, dk4, lane);
		__syncwarp();
		for (int j = lane; j < most; j += 32)
		{
			float		sc[GROUP] = {0.0f},
						gv[GROUP] = {0.0f},
						p[GROUP];

			dot_group(sc, ks + (size_t) j * (dk + 1), qs, dk, dk4);
			dot_group(gv, vs + (size_t) j * (dk + 1), dc, dk, dk4);
UNROLL
			for (int r = 0; r < GROUP; r++)
			{
				p[r] = 0.0f;
				if (j < vis[r])
				{
					p[r] = expf(sc[r] * scale - l[r]);
					if (dropout > 0.0f)
						gv[r] = device_uniform(seed, stream, a.p_off + (size_t) (g + r) * a.lk + j) >= dropout ?
							gv[r] * keep_scale : 0.0f;
				}
				else
					gv[r] = 0.0f;
				dot[r] += gv[r] * p[r];
				total[r] += p[r];
			}
			store4(pr + j * GROUP, p);
			store4(sr + j * GROUP, gv);
		}
UNROLL
		for (int r = 0; r < GROUP; r++)
			if (r < rows)		/* the same for every lane */
			{
				float		sum_p = warp_reduce(total[r], SumOp()),
							sum_gp = warp_reduce(dot[r], SumOp());

				dot[r] = sum_p > 0.0f ? sum_gp / sum_p : 0.0f;	/* no keys (an empty source): 0, not 0 / 0 */
				if (lane == 0)
					dsum[(a.q0 + g + r) * num_heads + h] = dot[r];
			}
		for (int j = lane; j < most; j += 32)
		{
			float4		p4 = load4(pr + j * GROUP),
						g4 = load4(sr + j * GROUP);
			float		ds[GROUP];

UNROLL
			for (int r = 0; r < GROUP; r++)
				ds[r] = lane4(p4, r) * (lane4(g4, r) - dot[r]) * scale;
			store4(sr + j * GROUP, ds);
		}
		__syncwarp();
		for (int c = lane; c < dk; c += 32)
		{
			float		acc[GROUP] = {0.0f};

			for (int j = 0; j < most; j++)
			{
				float4		s4 = load4(sr + j * GROUP);
				float		kk = ks[(size_t) j * (dk + 1) + c];

UNROLL
				for (int r = 0; r < GROUP; r++)
					acc[r] += lane4(s4, r) * kk;
			}
UNROLL
			for (int r = 0; r < GROUP; r++)
				if (r < rows)
					dq[(a.q0 + g + r) * ldq + h * dk + c] = acc[r];
		}
		__syncwarp();			/* the rows are the next group's */
	}
}

/*
 * Key side for key rows [tile * TILE_ROWS, ...): for GROUP keys at a time,
 * their columns of P and dS recomputed from the queries' lse and D (dsum,
 * from the query side), then dV = Pd^T dctx and dK = dS^T Q, summed over
 * the queries that see each key, in order. Shared memory: the sentence's
 * queries and dctx rows, their lse and D, and per warp its GROUP key and
 * value rows and the columns [queries, GROUP].
 */
__global__ void
attention_dkv_tile_kernel(float *dkey, float *dvalue, const float *dsum, const float *dctx, const float *lse,
						  const float *q, const float *k, const float *v, int ldq, int ldk,
						  const int32_t *q_start, const int32_t *k_start, const int64_t *p_start, int num_heads,
						  int dk, bool causal, float dropout, uint64_t seed, uint64_t stream)
{
	DYNAMIC_SHARED(float4, sm4);
	Tile		t = tile_of(q_start, k_start, p_start, num_heads, true);
	Pair		a = t.a;
	int			h = t.h,
				lane = threadIdx.x % 32,
				warp = threadIdx.x / 32,
				d = num_heads * dk,
				dk4 = width4(dk),
				first = causal ? min(t.r0, a.lq) : 0;	/* the first query that sees the tile's keys */
	int			lq = a.lq - first;
	float	   *kr = (float *) sm4 + warp * warp_floats(dk4, 2 * lq),
			   *vr = kr + GROUP * dk4,
			   *pc = vr + GROUP * dk4,
			   *sc = pc + GROUP * lq,
			   *qs = (float *) sm4 + TILE_WARPS * warp_floats(dk4, 2 * lq),
			   *ds = qs + (size_t) lq * (dk + 1),
			   *ls = ds + (size_t) lq * (dk + 1),
			   *Ds = ls + lq;
	float		scale = 1.0f / sqrtf((float) dk),
				keep_scale = dropout > 0.0f ? 1.0f / (1.0f - dropout) : 1.0f;

	if (t.r0 >= t.r1)
		return;
	load_slice(qs, q, a.q0 + first, lq, ldq, h, dk);
	load_slice(ds, dctx, a.q0 + first, lq, d, h, dk);
	for (int i = threadIdx.x; i < lq; i += blockDim.x)
	{
		ls[i] = lse[(a.q0 + first + i) * num_heads + h];
		Ds[i] = dsum[(a.q0 + first + i) * num_heads + h];
	}
	__syncthreads();
	for (int g = t.r0 + warp * GROUP; g < t.r1; g += TILE_WARPS * GROUP)
	{
		int			keys = min(GROUP, t.r1 - g),
					i0[GROUP];	/* queries before key j do not see it (causal) */

UNROLL
		for (int r = 0; r < GROUP; r++)
			i0[r] = r >= keys ? lq : causal ? min(g + r, a.lq) - first : 0;
		load_group(kr, k, a.k0 + g, keys, ldk, h, dk, dk4, lane);
		load_group(vr, v, a.k0 + g, keys, ldk, h, dk, dk4, lane);
		__syncwarp();
		for (int i = i0[0] + lane; i < lq; i += 32)
		{
			float		sq[GROUP] = {0.0f},
						gq[GROUP] = {0.0f};

			dot_group(sq, qs + (size_t) i * (dk + 1), kr, dk, dk4);
			dot_group(gq, ds + (size_t) i * (dk + 1), vr, dk, dk4);
			float		pd[GROUP],
						sd[GROUP];

UNROLL
			for (int r = 0; r < GROUP; r++)
			{
				pd[r] = sd[r] = 0.0f;
				if (i >= i0[r])
				{
					size_t		e = a.p_off + (size_t) (first + i) * a.lk + g + r;
					float		p = expf(sq[r] * scale - ls[i]);
					bool		keep = dropout <= 0.0f || device_uniform(seed, stream, e) >= dropout;

					pd[r] = keep ? p * keep_scale : 0.0f;
					sd[r] = p * ((keep ? gq[r] * keep_scale : 0.0f) - Ds[i]) * scale;
				}
			}
			store4(pc + i * GROUP, pd);
			store4(sc + i * GROUP, sd);
		}
		__syncwarp();
		for (int c = lane; c < dk; c += 32)
		{
			float		gk[GROUP] = {0.0f},
						gv[GROUP] = {0.0f};

			for (int i = i0[0]; i < lq; i++)
			{
				float4		p4 = load4(pc + i * GROUP),
							s4 = load4(sc + i * GROUP);
				float		dd = ds[(size_t) i * (dk + 1) + c],
							qq = qs[(size_t) i * (dk + 1) + c];

UNROLL
				for (int r = 0; r < GROUP; r++)
				{
					gv[r] += lane4(p4, r) * dd;
					gk[r] += lane4(s4, r) * qq;
				}
			}
UNROLL
			for (int r = 0; r < GROUP; r++)
				if (r < keys)
				{
					dkey[(a.k0 + g + r) * ldk + h * dk + c] = gk[r];
					dvalue[(a.k0 + g + r) * ldk + h * dk + c] = gv[r];
				}
		}
		__syncwarp();			/* the rows and columns are the next group's */
	}
}

/*
 * Dynamic shared memory for n floats, in bytes, rounded up to 16. ptxas
 * widens the tail of a loop over a shared row to one 16-byte load (LDS.128)
 * where the index is a multiple of 4, so the last load may reach past the
 * n-th float: compute-sanitizer's memcheck flagged it on an H200 when the
 * per-row kernels allocated exactly n.
 */
static size_t
shared_floats(size_t n)
{
	return (n > 0 ? (n + 3) / 4 * 4 : 4) * sizeof(float);
}

/* Dynamic shared memory (bytes) of the three tiled kernels for this call, at most rows of keys and queries. */
static size_t
tile_forward_shared(const TfAttentionShape *sh)
{
	return shared_floats(TILE_WARPS * (size_t) warp_floats(width4(sh->head_dim), 32) +
						 2 * (size_t) sh->max_k * (sh->head_dim + 1));
}
static size_t
tile_dq_shared(const TfAttentionShape *sh)
{
	return shared_floats(TILE_WARPS * (size_t) warp_floats(width4(sh->head_dim), 2 * sh->max_k) +
						 2 * (size_t) sh->max_k * (sh->head_dim + 1));
}
static size_t
tile_dkv_shared(const TfAttentionShape *sh)
{
	return shared_floats(TILE_WARPS * (size_t) warp_floats(width4(sh->head_dim), 2 * sh->max_q) +
						 2 * (size_t) sh->max_q * (sh->head_dim + 2));
}

/* Which kernels serve a call (kernel_path). */
typedef enum Path
{
	PER_ROW,					/* the per-row kernels */
	TILED,						/* fp32: the tiled kernels above */
	TILED_MMA					/* bf16: the tiled kernels on tensor cores (attention_mma.cu) */
} Path;

/*
 * The kernels for this call: a tiled family where its three kernels fit in
 * the shared memory a block of this device may opt in to (at most
 * TILE_MAX_SHARED; an A100 allows 163 KB, an H100 227 KB) and the forward
 * need not keep probabilities nor read a cache; the per-row kernels
 * otherwise (under bf16 they follow the same rules). The first time on a
 * device, lifts the tiled kernels' limit there.
 */
static Path
kernel_path(const TfAttentionShape *sh, const float *probs, bool bf16)
{
	static std::atomic<int> limit[64];	/* bytes per device, 0 until asked */
	int			device = 0,
				most = 0;

	if (probs != NULL || sh->kv_cache || sh->k_len != NULL)
		return PER_ROW;
	cudaGetDevice(&device);
	if (device >= 64)
		return PER_ROW;
	if ((most = limit[device].load()) == 0)
	{
		if (cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
			most = 48 * 1024;	/* what every device allows without opting in */
		most = most < TILE_MAX_SHARED ? most : TILE_MAX_SHARED;
		cudaFuncSetAttribute((const void *) attention_tile_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
		cudaFuncSetAttribute((const void *) attention_dq_tile_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
		cudaFuncSetAttribute((const void *) attention_dkv_tile_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
		k_attention_mma_set_limit(most);
		limit[device].store(most);
	}
	if (bf16)
		return k_attention_mma_fits(sh, (size_t) most) ? TILED_MMA : PER_ROW;
	return tile_forward_shared(sh) <= (size_t) most && tile_dq_shared(sh) <= (size_t) most &&
		tile_dkv_shared(sh) <= (size_t) most ? TILED : PER_ROW;
}

bool
k_attention_fits(const TfAttentionShape *sh)
{
	return shared_floats((size_t) sh->max_k + query_floats(sh->head_dim)) <= ATT_MAX_SHARED;
}

size_t
k_attention_workspace(const TfAttentionShape *sh, bool bf16_kv)
{
	if (kernel_path(sh, NULL, bf16_kv) != PER_ROW)
		return (size_t) sh->batch * sh->max_q * sh->num_heads;
	return 2 * (size_t) sh->p_total;
}

bool
k_attention(float *ctx, __nv_bfloat16 *ctx16, float *lse, float *probs, const float *q, int ldq, const float *k,
			const float *v, int ldk, const TfAttentionShape *sh, bool bf16_kv, cudaStream_t stream)
{
	dim3		grid((unsigned) (sh->batch * sh->num_heads), (unsigned) sh->max_q);
	unsigned	threads = ATT_THREADS;	/* 4 warps on the keys' scores */
	size_t		shared = shared_floats((size_t) sh->max_k + query_floats(sh->head_dim));
	Path		path;

	if (sh->batch == 0 || sh->max_q == 0)
		return false;
	path = kernel_path(sh, probs, bf16_kv);
	if (path == TILED_MMA)
	{
		k_attention_mma(ctx, ctx16, lse, q, ldq, k, v, ldk, sh, stream);
		return true;
	}
	if (path == TILED)
	{
		LAUNCH(attention_tile_kernel, dim3((unsigned) (sh->batch * sh->num_heads), (unsigned) ((sh->max_q + TILE_ROWS - 1) / TILE_ROWS)),
			   TILE_WARPS * 32, tile_forward_shared(sh), stream)
			(ctx, lse, q, ldq, k, v, ldk, sh->q_start, sh->k_start, sh->p_start, sh->num_heads, sh->head_dim,
			 sh->causal, sh->dropout, sh->seed, sh->stream);
		return false;
	}
	if (sh->kv_cache && bf16_kv)	/* a bf16 key/value cache (cache_gather) */
	{
		void		(*attention_bf16_cache) (float *, __nv_bfloat16 *, float *, float *, const float *, int,
											 const __nv_bfloat16 *, const __nv_bfloat16 *, int, const int32_t *,
											 const int32_t *, const int64_t *, const int32_t *, int, int, bool,
											 float, uint64_t, uint64_t, bool) = attention_kernel<__nv_bfloat16>;

		LAUNCH(attention_bf16_cache, grid, threads, shared, stream)
			(ctx, ctx16, lse, probs, q, ldq, (const __nv_bfloat16 *) k, (const __nv_bfloat16 *) v, ldk,
			 sh->q_start, sh->k_start, sh->p_start, sh->k_len, sh->num_heads, sh->head_dim, sh->causal,
			 sh->dropout, sh->seed, sh->stream, bf16_kv);
		return true;
	}
	LAUNCH(attention_kernel<float>, grid, threads, shared, stream)
		(ctx, ctx16, lse, probs, q, ldq, k, v, ldk, sh->q_start, sh->k_start, sh->p_start, sh->k_len,
		 sh->num_heads, sh->head_dim, sh->causal, sh->dropout, sh->seed, sh->stream, bf16_kv);
	return true;
}

bool
k_attention_backward(float *dq, float *dk, float *dv, __nv_bfloat16 *const copies[3], const float *dctx,
					 const float *lse, const float *q, int ldq, const float *k, const float *v, int ldk,
					 const TfAttentionShape *sh, bool bf16_kv, float *work, cudaStream_t stream)
{
	unsigned	pairs = (unsigned) (sh->batch * sh->num_heads);
	Path		path;

	if (sh->batch == 0)
		return false;
	path = kernel_path(sh, NULL, bf16_kv);
	if (path == TILED_MMA)
	{
		k_attention_mma_backward(dq, dk, dv, copies, work, dctx, lse, q, ldq, k, v, ldk, sh, stream);
		return true;
	}
	if (path == TILED)
	{
		if (sh->max_q > 0)
			LAUNCH(attention_dq_tile_kernel, dim3(pairs, (unsigned) ((sh->max_q + TILE_ROWS - 1) / TILE_ROWS)),
				   TILE_WARPS * 32, tile_dq_shared(sh), stream)
				(dq, work, dctx, lse, q, k, v, ldq, ldk, sh->q_start, sh->k_start, sh->p_start, sh->num_heads,
				 sh->head_dim, sh->causal, sh->dropout, sh->seed, sh->stream);
		if (sh->max_k > 0)
			LAUNCH(attention_dkv_tile_kernel, dim3(pairs, (unsigned) ((sh->max_k + TILE_ROWS - 1) / TILE_ROWS)),
				   TILE_WARPS * 32, tile_dkv_shared(sh), stream)
				(dk, dv, work, dctx, lse, q, k, v, ldq, ldk, sh->q_start, sh->k_start, sh->p_start, sh->num_heads,
				 sh->head_dim, sh->causal, sh->dropout, sh->seed, sh->stream);
		return false;
	}
	if (sh->max_q > 0)
		LAUNCH(attention_dq_kernel, dim3(pairs, (unsigned) sh->max_q),
			   row_threads(sh->max_k > sh->head_dim ? sh->max_k : sh->head_dim, ATT_THREADS),
			   shared_floats((size_t) sh->max_k), stream)
			(dq, work, work + sh->p_total, dctx, lse, q, k, v, ldq, ldk, sh->q_start, sh->k_start, sh->p_start,
			 sh->num_heads, sh->head_dim, sh->causal, sh->dropout, sh->seed, sh->stream, bf16_kv);
	if (sh->max_k > 0)
		LAUNCH(attention_dkv_kernel, dim3(pairs, (unsigned) sh->max_k), row_threads(sh->head_dim, ATT_THREADS), 0,
			   stream)
			(dk, dv, work, dctx, work + sh->p_total, q, ldq, ldk, sh->q_start, sh->k_start, sh->p_start,
			 sh->num_heads, sh->head_dim, sh->dropout, sh->seed, sh->stream, bf16_kv);
	return false;
}
