/*
 * attention_short.cu - bf16 attention for sentences: a (sentence, head)
 * pair of at most SHORT_ROWS queries and keys and d_k at most 64, one block
 * each, its products on tensor cores in registers (mma.cuh). Under the bf16
 * rules of docs/gpus.md, as attention_mma.cu's tiled kernels, which serve
 * the longer pairs of the same call (they skip these):
 * - forward, one Q K^T: a warp's 16 query rows hold the scores of all their
 *   keys (at most 64: 8 C tiles) in registers, so the row max m is exact
 *   before any exponent; P~ = bf16(exp(S - m)) through the dropout mask goes
 *   from the score registers into P V as A fragments, and ctx = (P~ V) / l,
 *   lse = m + log l with l the sum of the exponents before dropout;
 * - backward, one kernel and five products (S = Q K^T, dPd = dctx V^T, dQ =
 *   dS K, dV = P~^T dctx, dK = dS^T Q) where the tiled kernels take nine:
 *   a warp's query rows hold S and dPd whole, so D = sum(dPd P) / sum(P)
 *   (the rules' exact form) needs no pass of its own; their bf16 P~ and dS
 *   go to shared memory, and after one barrier each warp sums its 16 keys'
 *   dK and dV over every query, in a fixed order (no atomics).
 * K and V (and the backward's Q and dctx) are read once from global memory
 * into shared memory (fp32, rounded to bf16 as the rules round them; 16
 * bytes a load where aligned: load_bf16), the forward's query rows straight
 * into A fragments. A block has SHORT_WARPS
 * warps, each taking every SHORT_WARPS-th group of 16 rows: a sentence of
 * 21-41 tokens keeps 2 warps busy, no block works on padding beyond a
 * 16-row group. Row sums over a row's keys are per lane, then across the 4
 * lanes of its group in a fixed order.
 */
#include "attention.cuh"
#include "mma.cuh"

#define SHORT_WARPS 2
#define FULL_MASK 0xffffffffu
#define KEY_TILES (SHORT_ROWS / 8)	/* C tiles of 8 keys in a row of scores */

/* Dynamic shared memory as the kernels declare it: 16-byte rows. */
struct __align__(16) Shared16
{
	float4		v;
};

/* The shared row of up to SHORT_ROWS keys' bf16 (slices of d_k: slice_ld). */
#define KEY_ROW (SHORT_ROWS + 8)

/*
 * The keys query i (of a sentence of lq queries, lk keys) sees: none past
 * the sentence's queries, i + 1 when causal.
 */
__device__ __forceinline__ int
visible(int i, int lq, int lk, bool causal)
{
	return i >= lq ? 0 : causal && i + 1 < lk ? i + 1 : lk;
}

/*
 * The dropout keep bits of the scores a lane holds: KEY_TILES C tiles of
 * query rows i and i + 8 (its group's rows), draw p_off + row * lk + key as
 * the CPU backend's. Lane t of a group draws tiles t and t + 4 of both rows
 * (device_keep8: a tile row's 8 draws at once) and the group's 4 lanes
 * exchange their words: 4 shuffles instead of 4 times the Philox work.
 * words[s] holds lane s's draws: byte (tile / 4) * 2 + half for C tile
 * `tile` (tile % 4 == s) and row i + 8 half, bit c for the tile's column
 * c. All kept without dropout.
 */
struct Keep
{
	uint32_t	words[4];
};

__device__ __forceinline__ Keep
draw_keep(uint64_t seed, uint64_t stream, size_t p_off, int lk, int i, float dropout)
{
	int			lane = threadIdx.x % 32,
				t = lane % 4;
	uint32_t	mine = 0;
	Keep		k;

	if (!(dropout > 0.0f))
	{
		for (int s = 0; s < 4; s++)
			k.words[s] = 0xffffffffu;
		return k;
	}
UNROLL
	for (int w = 0; w < 2; w++)
UNROLL
		for (int half = 0; half < 2; half++)
		{
			int			tile = t + 4 * w;

			mine |= device_keep8(seed, stream, p_off + (size_t) (i + 8 * half) * lk + 8 * tile, dropout) << (8 * (w * 2 + half));
		}
UNROLL
	for (int s = 0; s < 4; s++)
		k.words[s] = __shfl_sync(FULL_MASK, mine, (lane & ~3) | s);
	return k;
}

/* Whether element e (0-3) of C tile `tile` of a lane is kept (Keep above). */
__device__ __forceinline__ bool
keep_bit(const Keep &k, int tile, int e)
{
	int			t = threadIdx.x % 32 % 4,
				col = 2 * t + e % 2;

	return k.words[tile % 4] >> (8 * ((tile / 4) * 2 + e / 2) + col) & 1;
}

/*
 * c += the 16 rows of A fragments a (16 T columns) times keys [8 n, 8 n +
 * 8) of rows ([keys, 16 T], row stride ld): one C tile of scores.
 */
template <int T>
__device__ __forceinline__ void
key_tile(float (&c)[4], const uint32_t (&a)[T][4], const __nv_bfloat16 *rows, int n, int ld)
{
UNROLL
	for (int kt = 0; kt < T; kt++)
	{
		uint32_t	b[2];

		load_b(b, rows + (size_t) 8 * n * ld + 16 * kt, ld);
		mma16816(c, a[kt], b);
	}
}

/*
 * acc (2 T C tiles over d_k) += the 16 rows' values s of the first `tiles`
 * 16-key tiles (C tiles, rounded to bf16 as A fragments) times those keys'
 * rows ([keys, 16 T], row stride ld): P~ V, dS K.
 */
template <int T>
__device__ __forceinline__ void
times_rows(float (&acc)[2 * T][4], const float (&s)[KEY_TILES][4], int tiles, const __nv_bfloat16 *rows, int ld)
{
UNROLL
	for (int kk = 0; kk < KEY_TILES / 2; kk++)
		if (kk < tiles)
		{
			uint32_t	a[4];

			pack_a(a, s[2 * kk], s[2 * kk + 1]);
UNROLL
			for (int c = 0; c < 2 * T; c++)
			{
				uint32_t	b[2];

				load_b_rows(b, rows + (size_t) 16 * kk * ld + 8 * c, ld);
				mma16816(acc[c], a, b);
			}
		}
}

/*
 * Writes rows [g0, g0 + 16) of a C-tile accumulator (2 T tiles of 8
 * columns, divided by the row's divisor; 0 where it is 0) to out (row
 * stride ldo, head h's d_k columns, from row0), rows below n only, and its
 * bf16 copy to out16 (NULL: none).
 */
template <int T>
__device__ __forceinline__ void
write_tiles(float *out, __nv_bfloat16 *out16, size_t row0, int g0, int n, int ldo, int h, int dk,
			const float (&acc)[2 * T][4], const float (&divisor)[2])
{
	int			lane = threadIdx.x % 32,
				g = lane / 4,
				t = lane % 4;

UNROLL
	for (int c = 0; c < 2 * T; c++)
UNROLL
		for (int e = 0; e < 4; e++)
		{
			int			r = g0 + g + 8 * (e / 2),
						col = 8 * c + 2 * t + e % 2;

			if (r < n && col < dk)
			{
				size_t		at = (row0 + r) * ldo + (size_t) h * dk + col;
				float		div = divisor[e / 2],
							value = div != 0.0f ? acc[c][e] / div : 0.0f;

				out[at] = value;
				if (out16 != NULL)
					out16[at] = __float2bfloat16_rn(value);
			}
		}
}

/* Bytes of the forward's shared memory: K and V [keys, 16 T]. */
__host__ __device__ __forceinline__ size_t
short_forward_bytes(int tiles, int keys)
{
	return (size_t) 2 * up16(keys) * slice_ld(tiles) * 2;
}

/*
 * Forward of sentence blockIdx.x / num_heads, head blockIdx.x % num_heads,
 * when short (else nothing: the tiled kernels' pair); the dynamic shared
 * memory holds the call's longest short pair (short_forward_bytes).
 */
template <int T>
__global__ void __launch_bounds__(SHORT_WARPS * 32)
attention_short_kernel(float *ctx, __nv_bfloat16 *ctx16, float *lse, const float *q, int ldq, const float *k,
					   const float *v, int ldk, const int32_t *q_start, const int32_t *k_start,
					   const int64_t *p_start, int num_heads, int dk, bool causal, float dropout, uint64_t seed,
					   uint64_t stream)
{
	DYNAMIC_SHARED(Shared16, smem);
	int			h = blockIdx.x % num_heads;
	Pair		a = pair_of(q_start, k_start, p_start, NULL, blockIdx.x / num_heads, h);
	const int	ld = slice_ld(T);
	int			lane = threadIdx.x % 32,
				warp = threadIdx.x / 32,
				g = lane / 4,
				t = lane % 4,
				tiles16 = up16(a.lk) / 16;	/* 16-key tiles with a key */
	__nv_bfloat16 *ks = (__nv_bfloat16 *) smem,
			   *vs = ks + (size_t) up16(a.lk) * ld;
	float		scale = 1.0f / sqrtf((float) dk),
				keep_scale = dropout > 0.0f ? 1.0f / (1.0f - dropout) : 1.0f;

	if (!short_pair(a.lq, a.lk) || a.lq == 0)	/* the whole block leaves together */
		return;
	load_bf16(ks, T, k, a.k0, a.lk, up16(a.lk), ldk, h, dk, threadIdx.x, blockDim.x);
	load_bf16(vs, T, v, a.k0, a.lk, up16(a.lk), ldk, h, dk, threadIdx.x, blockDim.x);
	__syncthreads();
	for (int g0 = warp * 16; g0 < a.lq; g0 += SHORT_WARPS * 16)
	{
		uint32_t	qa[T][4];
		float		s[KEY_TILES][4],
					acc[2 * T][4],
					m[2] = {-INFINITY, -INFINITY},
					l[2] = {0.0f, 0.0f};
		int			vis[2] = {visible(g0 + g, a.lq, a.lk, causal), visible(g0 + g + 8, a.lq, a.lk, causal)};
		Keep		keep = draw_keep(seed, stream, a.p_off, a.lk, g0 + g, dropout);

		/* the group's query rows, rounded to bf16, as A fragments (zero past the sentence and d_k) */
UNROLL
		for (int kt = 0; kt < T; kt++)
UNROLL
			for (int x = 0; x < 4; x++)
			{
				int			r = g0 + g + 8 * (x % 2),
							c = 16 * kt + 8 * (x / 2) + 2 * t;
				const float *row = q + (a.q0 + r) * ldq + (size_t) h * dk;

				qa[kt][x] = pack_bf16(r < a.lq && c < dk ? row[c] : 0.0f, r < a.lq && c + 1 < dk ? row[c + 1] : 0.0f);
			}
		/* S = Q K^T, every key at once; the row max of the scaled scores it sees */
UNROLL
		for (int n = 0; n < KEY_TILES; n++)
		{
UNROLL
			for (int e = 0; e < 4; e++)
				s[n][e] = 0.0f;
			if (n < 2 * tiles16)
				key_tile<T>(s[n], qa, ks, n, ld);
UNROLL
			for (int e = 0; e < 4; e++)
				if (8 * n + 2 * t + e % 2 < vis[e / 2])
					m[e / 2] = fmaxf(m[e / 2], s[n][e] * scale);
		}
UNROLL
		for (int x = 0; x < 2; x++)
		{
			m[x] = fmaxf(m[x], __shfl_xor_sync(FULL_MASK, m[x], 1));
			m[x] = fmaxf(m[x], __shfl_xor_sync(FULL_MASK, m[x], 2));
		}
		/* P~ = exp(S - m) through the mask, straight into P~ V */
UNROLL
		for (int c = 0; c < 2 * T; c++)
UNROLL
			for (int e = 0; e < 4; e++)
				acc[c][e] = 0.0f;
UNROLL
		for (int n = 0; n < KEY_TILES; n++)
UNROLL
			for (int e = 0; e < 4; e++)
			{
				float		p = 0.0f;

				if (8 * n + 2 * t + e % 2 < vis[e / 2])
				{
					p = expf(s[n][e] * scale - m[e / 2]);
					l[e / 2] += p;
					if (dropout > 0.0f)
						p = keep_bit(keep, n, e) ? p * keep_scale : 0.0f;
				}
				s[n][e] = p;
			}
		times_rows<T>(acc, s, tiles16, vs, ld);
UNROLL
		for (int x = 0; x < 2; x++)
		{
			l[x] += __shfl_xor_sync(FULL_MASK, l[x], 1);
			l[x] += __shfl_xor_sync(FULL_MASK, l[x], 2);
		}
		write_tiles<T>(ctx, ctx16, a.q0, g0, a.lq, num_heads * dk, h, dk, acc, l);
		if (lse != NULL && t == 0)
UNROLL
			for (int x = 0; x < 2; x++)
				if (g0 + g + 8 * x < a.lq)
					lse[(a.q0 + g0 + g + 8 * x) * num_heads + h] = l[x] > 0.0f ? m[x] + logf(l[x]) : -INFINITY;
	}
}

/*
 * Bytes of the backward's shared memory: Q and dctx [queries, 16 T], K and
 * V [keys, 16 T], P~ and dS [queries, KEY_ROW].
 */
__host__ __device__ __forceinline__ size_t
short_backward_bytes(int tiles, int queries, int keys)
{
	return ((size_t) 2 * up16(queries) * slice_ld(tiles) + (size_t) 2 * up16(keys) * slice_ld(tiles) +
			(size_t) 2 * up16(queries) * KEY_ROW) * 2;
}

/*
 * Backward of a short pair (as attention_short_kernel's): P = exp(S - lse)
 * from the forward's log-sum-exp, dPd = dctx V^T through the dropout mask,
 * D = sum(dPd P) / sum(P), dS = P (dPd - D) / sqrt(d_k); dQ = bf16(dS) K,
 * dV = bf16(P~)^T dctx, dK = bf16(dS)^T Q.
 */
template <int T>
__global__ void __launch_bounds__(SHORT_WARPS * 32)
attention_short_backward_kernel(float *dq, float *dkey, float *dvalue, __nv_bfloat16 *dq16, __nv_bfloat16 *dkey16,
								__nv_bfloat16 *dvalue16, const float *dctx, const float *lse, const float *q,
								const float *k, const float *v, int ldq, int ldk, const int32_t *q_start,
								const int32_t *k_start, const int64_t *p_start, int num_heads, int dk, bool causal,
								float dropout, uint64_t seed, uint64_t stream)
{
	DYNAMIC_SHARED(Shared16, smem);
	int			h = blockIdx.x % num_heads;
	Pair		a = pair_of(q_start, k_start, p_start, NULL, blockIdx.x / num_heads, h);
	const int	ld = slice_ld(T);
	int			lane = threadIdx.x % 32,
				warp = threadIdx.x / 32,
				g = lane / 4,
				t = lane % 4,
				d = num_heads * dk,
				tiles16 = up16(a.lk) / 16,
				query_tiles = up16(a.lq) / 16;
	__nv_bfloat16 *qs = (__nv_bfloat16 *) smem,
			   *dcs = qs + (size_t) up16(a.lq) * ld,
			   *ks = dcs + (size_t) up16(a.lq) * ld,
			   *vs = ks + (size_t) up16(a.lk) * ld,
			   *ps = vs + (size_t) up16(a.lk) * ld,	/* P~ [query][key] */
			   *dss = ps + (size_t) up16(a.lq) * KEY_ROW;	/* dS [query][key] */
	float		scale = 1.0f / sqrtf((float) dk),
				keep_scale = dropout > 0.0f ? 1.0f / (1.0f - dropout) : 1.0f;

	if (!short_pair(a.lq, a.lk))	/* an empty target still writes its keys' zero dK and dV */
		return;
	load_bf16(qs, T, q, a.q0, a.lq, up16(a.lq), ldq, h, dk, threadIdx.x, blockDim.x);
	load_bf16(dcs, T, dctx, a.q0, a.lq, up16(a.lq), d, h, dk, threadIdx.x, blockDim.x);
	load_bf16(ks, T, k, a.k0, a.lk, up16(a.lk), ldk, h, dk, threadIdx.x, blockDim.x);
	load_bf16(vs, T, v, a.k0, a.lk, up16(a.lk), ldk, h, dk, threadIdx.x, blockDim.x);
	__syncthreads();
	/* the query side: a warp's 16 rows at a time */
	for (int g0 = warp * 16; g0 < a.lq; g0 += SHORT_WARPS * 16)
	{
		uint32_t	qa[T][4],
					da[T][4];
		float		s[KEY_TILES][4],
					gr[KEY_TILES][4],
					acc[2 * T][4],
					dot[2] = {0.0f, 0.0f},
					total[2] = {0.0f, 0.0f},
					D[2],
					lrow[2],
					one[2] = {1.0f, 1.0f};
		int			vis[2] = {visible(g0 + g, a.lq, a.lk, causal), visible(g0 + g + 8, a.lq, a.lk, causal)};
		Keep		keep = draw_keep(seed, stream, a.p_off, a.lk, g0 + g, dropout);

UNROLL
		for (int x = 0; x < 2; x++)
			lrow[x] = g0 + g + 8 * x < a.lq ? lse[(a.q0 + g0 + g + 8 * x) * num_heads + h] : 0.0f;
UNROLL
		for (int kt = 0; kt < T; kt++)
		{
			load_a(qa[kt], qs + (size_t) g0 * ld + 16 * kt, ld);
			load_a(da[kt], dcs + (size_t) g0 * ld + 16 * kt, ld);
		}
		/* S and dPd of every key; P, the dropout, the sums of D */
UNROLL
		for (int n = 0; n < KEY_TILES; n++)
		{
UNROLL
			for (int e = 0; e < 4; e++)
				s[n][e] = gr[n][e] = 0.0f;
			if (n < 2 * tiles16)
			{
				key_tile<T>(s[n], qa, ks, n, ld);
				key_tile<T>(gr[n], da, vs, n, ld);
			}
UNROLL
			for (int e = 0; e < 4; e++)
			{
				float		p = 0.0f,
							gv = 0.0f;

				if (8 * n + 2 * t + e % 2 < vis[e / 2])
				{
					bool		kept = dropout > 0.0f ? keep_bit(keep, n, e) : true;

					p = expf(s[n][e] * scale - lrow[e / 2]);
					gv = kept ? gr[n][e] * keep_scale : 0.0f;
					dot[e / 2] += gv * p;
					total[e / 2] += p;
					gr[n][e] = gv;
					s[n][e] = p;
				}
				else
					gr[n][e] = s[n][e] = 0.0f;
			}
		}
UNROLL
		for (int x = 0; x < 2; x++)
		{
			dot[x] += __shfl_xor_sync(FULL_MASK, dot[x], 1);
			dot[x] += __shfl_xor_sync(FULL_MASK, dot[x], 2);
			total[x] += __shfl_xor_sync(FULL_MASK, total[x], 1);
			total[x] += __shfl_xor_sync(FULL_MASK, total[x], 2);
			D[x] = total[x] > 0.0f ? dot[x] / total[x] : 0.0f;	/* no keys (an empty source): 0, not 0 / 0 */
		}
		/* dS and P~ to shared memory (bf16, the key side's), dQ = dS K from the registers */
UNROLL
		for (int c = 0; c < 2 * T; c++)
UNROLL
			for (int e = 0; e < 4; e++)
				acc[c][e] = 0.0f;
UNROLL
		for (int n = 0; n < KEY_TILES; n++)
			if (n < 2 * tiles16)
			{
UNROLL
				for (int x = 0; x < 2; x++)
				{
					size_t		at = (size_t) (g0 + g + 8 * x) * KEY_ROW + 8 * n + 2 * t;
					float		p0 = s[n][2 * x],
								p1 = s[n][2 * x + 1],
								kept0 = dropout > 0.0f ? (keep_bit(keep, n, 2 * x) ? keep_scale : 0.0f) : 1.0f,
								kept1 = dropout > 0.0f ? (keep_bit(keep, n, 2 * x + 1) ? keep_scale : 0.0f) : 1.0f;

					*(uint32_t *) (ps + at) = pack_bf16(p0 * kept0, p1 * kept1);
					s[n][2 * x] = p0 * (gr[n][2 * x] - D[x]) * scale;	/* dS, in place of P */
					s[n][2 * x + 1] = p1 * (gr[n][2 * x + 1] - D[x]) * scale;
					*(uint32_t *) (dss + at) = pack_bf16(s[n][2 * x], s[n][2 * x + 1]);
				}
			}
		times_rows<T>(acc, s, tiles16, ks, ld);
		write_tiles<T>(dq, dq16, a.q0, g0, a.lq, ldq, h, dk, acc, one);
	}
	__syncthreads();
	/* the key side: a warp's 16 keys at a time, summed over every query */
	for (int c0 = warp * 16; c0 < a.lk; c0 += SHORT_WARPS * 16)
	{
		float		acc_k[2 * T][4],
					acc_v[2 * T][4],
					one[2] = {1.0f, 1.0f};

UNROLL
		for (int c = 0; c < 2 * T; c++)
UNROLL
			for (int e = 0; e < 4; e++)
				acc_k[c][e] = acc_v[c][e] = 0.0f;
		NO_UNROLL
		for (int qq = 0; qq < query_tiles; qq++)
		{
			uint32_t	pa[4],
						sa[4];

			load_a_transposed(pa, ps + (size_t) 16 * qq * KEY_ROW + c0, KEY_ROW);
			load_a_transposed(sa, dss + (size_t) 16 * qq * KEY_ROW + c0, KEY_ROW);
UNROLL
			for (int c = 0; c < 2 * T; c++)
			{
				uint32_t	b[2];

				load_b_rows(b, dcs + (size_t) 16 * qq * ld + 8 * c, ld);
				mma16816(acc_v[c], pa, b);
				load_b_rows(b, qs + (size_t) 16 * qq * ld + 8 * c, ld);
				mma16816(acc_k[c], sa, b);
			}
		}
		write_tiles<T>(dkey, dkey16, a.k0, c0, a.lk, ldk, h, dk, acc_k, one);
		write_tiles<T>(dvalue, dvalue16, a.k0, c0, a.lk, ldk, h, dk, acc_v, one);
	}
}

/* The tiles of a head the short kernels take: d_k rounded up to 16, 32 or 64 (0: longer, not theirs). */
static int
short_tiles(int dk)
{
	return dk <= 16 ? 1 : dk <= 32 ? 2 : dk <= 64 ? 4 : 0;
}

bool
k_attention_short_serves(const TfAttentionShape *sh)
{
	return short_tiles(sh->head_dim) > 0;
}

size_t
k_attention_short_bytes(const TfAttentionShape *sh)
{
	int			tiles = short_tiles(sh->head_dim),
				queries = sh->max_q < SHORT_ROWS ? sh->max_q : SHORT_ROWS,
				keys = sh->max_k < SHORT_ROWS ? sh->max_k : SHORT_ROWS;
	size_t		f = short_forward_bytes(tiles, keys),
				b = short_backward_bytes(tiles, queries, keys);

	return f > b ? f : b;
}

template <int T>
static void
set_limit(int most)
{
	cudaFuncSetAttribute((const void *) attention_short_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
	cudaFuncSetAttribute((const void *) attention_short_backward_kernel<T>,
						 cudaFuncAttributeMaxDynamicSharedMemorySize, most);
}

void
k_attention_short_set_limit(int most)
{
	set_limit<1>(most);
	set_limit<2>(most);
	set_limit<4>(most);
}

template <int T>
static void
forward(float *ctx, __nv_bfloat16 *ctx16, float *lse, const float *q, int ldq, const float *k, const float *v,
		int ldk, const TfAttentionShape *sh, cudaStream_t stream)
{
	int			keys = sh->max_k < SHORT_ROWS ? sh->max_k : SHORT_ROWS;

	LAUNCH(attention_short_kernel<T>, (unsigned) (sh->batch * sh->num_heads), SHORT_WARPS * 32,
		   short_forward_bytes(T, keys), stream)
		(ctx, ctx16, lse, q, ldq, k, v, ldk, sh->q_start, sh->k_start, sh->p_start, sh->num_heads, sh->head_dim,
		 sh->causal, sh->dropout, sh->seed, sh->stream);
}

void
k_attention_short(float *ctx, __nv_bfloat16 *ctx16, float *lse, const float *q, int ldq, const float *k,
				  const float *v, int ldk, const TfAttentionShape *sh, cudaStream_t stream)
{
	switch (short_tiles(sh->head_dim))
	{
		case 1:
			forward<1>(ctx, ctx16, lse, q, ldq, k, v, ldk, sh, stream);
			break;
		case 2:
			forward<2>(ctx, ctx16, lse, q, ldq, k, v, ldk, sh, stream);
			break;
		default:
			forward<4>(ctx, ctx16, lse, q, ldq, k, v, ldk, sh, stream);
	}
}

template <int T>
static void
backward(float *dq, float *dk, float *dv, __nv_bfloat16 *const copies[3], const float *dctx, const float *lse,
		 const float *q, int ldq, const float *k, const float *v, int ldk, const TfAttentionShape *sh,
		 cudaStream_t stream)
{
	int			queries = sh->max_q < SHORT_ROWS ? sh->max_q : SHORT_ROWS,
				keys = sh->max_k < SHORT_ROWS ? sh->max_k : SHORT_ROWS;

	LAUNCH(attention_short_backward_kernel<T>, (unsigned) (sh->batch * sh->num_heads), SHORT_WARPS * 32,
		   short_backward_bytes(T, queries, keys), stream)
		(dq, dk, dv, copies[0], copies[1], copies[2], dctx, lse, q, k, v, ldq, ldk, sh->q_start, sh->k_start,
		 sh->p_start, sh->num_heads, sh->head_dim, sh->causal, sh->dropout, sh->seed, sh->stream);
}

void
k_attention_short_backward(float *dq, float *dk, float *dv, __nv_bfloat16 *const copies[3], const float *dctx,
						   const float *lse, const float *q, int ldq, const float *k, const float *v, int ldk,
						   const TfAttentionShape *sh, cudaStream_t stream)
{
	switch (short_tiles(sh->head_dim))
	{
		case 1:
			backward<1>(dq, dk, dv, copies, dctx, lse, q, ldq, k, v, ldk, sh, stream);
			break;
		case 2:
			backward<2>(dq, dk, dv, copies, dctx, lse, q, ldq, k, v, ldk, sh, stream);
			break;
		default:
			backward<4>(dq, dk, dv, copies, dctx, lse, q, ldq, k, v, ldk, sh, stream);
	}
}
