/*
 * attention_mma.cu - the tiled attention kernels of bf16 mixed precision on
 * tensor cores: every product inside attention (Q K^T, P V and, backward,
 * dctx V^T, dS K, P^T dctx, dS^T Q) through the wmma API (mma.sync) on bf16
 * operands, accumulating in fp32. The twins of cpu_attention and
 * cpu_attention_backward under docs/gpus.md's bf16 rules: Q, K, V, dctx,
 * the dropped-out probabilities P~ and dS are rounded to bf16 where a
 * product reads them; the softmax statistics, P itself and everything
 * elementwise stay fp32. The forward's P~ is exp(S - m) with m the row's
 * final max, so its rounding does not depend on the order keys are visited:
 * two passes over the keys (the max, then the rest).
 *
 * Geometry as attention.cu's tiled kernels: one block per (sentence x
 * head, TILE_ROWS rows), MMA_WARPS warps of 16 rows each; the head's slices
 * the block reads for every row in shared memory as bf16, rows padded to
 * T 16-column tiles + 8 (the 16 bytes of padding move consecutive rows to
 * other banks), zero past d_k and past the last row. A warp works on chunks
 * of 16 keys (queries, for dK/dV): an fp32 chunk of scores goes through
 * shared memory, where lane pair (2 r, 2 r + 1) owns row r's columns 0-7
 * and 8-15 for the softmax, masks and dropout (chunk_col; a fragment's
 * element mapping is unspecified: nothing reads one by position). Row sums over keys are
 * per lane then across the pair: a fixed order, no atomics. Dropout keeps
 * the Philox masks of the CPU backend, a lane drawing its 8 columns' keep
 * bits at once (device_keep8: 3 Philox blocks, not 8).
 *
 * Where attention_short.cu serves the call's head width, its kernels take
 * the pairs of at most SHORT_ROWS queries and keys and these leave them
 * (skip_short: the block returns at once); the launchers below start both.
 */
#include "attention.cuh"

#if CUEMU
#include "emu/wmma_emu.h"
#else
#include <mma.h>
#endif

using namespace nvcuda;

#define MMA_WARPS 4
#define CHUNK_LD 20				/* fp32 chunk [16, 16] in shared rows of 20 floats */
#define HALF_LD 24				/* bf16 chunk [16, 16] in shared rows of 24 */
#define FULL_MASK 0xffffffffu
/*
 * Blocks per SM the register allocation must allow (__launch_bounds__):
 * at heads of up to 64, 4 for the forward (at most 128 registers a thread)
 * and 3 for the backward's two (170; dQ spills at 128); at 128, what fits
 * without spilling.
 */
#define MMA_MIN_BLOCKS(T) ((T) <= 4 ? 4 : 2)
#define MMA_BACKWARD_MIN_BLOCKS(T) ((T) <= 4 ? 3 : 1)

/* Dynamic shared memory as the kernels declare it: wmma needs its tiles 32-byte aligned. */
struct __align__(32) Shared32
{
	float4		v[2];
};

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> FragB;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> FragBT;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> FragC;

/*
 * The chunk column of lane's c-th element (c = 0..7): lane pair (2 r, 2 r +
 * 1) owns row r, columns 0-7 and 8-15, each lane visiting its 8 in an order
 * rotated by row, so that the 32 lanes' c-th accesses to an fp32 chunk
 * (rows of CHUNK_LD) fall in 32 distinct banks.
 */
__device__ __forceinline__ int
chunk_col(int c, int lane)
{
	int			r = lane / 2;

	return lane % 2 * 8 + ((c + r + (r >> 3) * 4) & 7);
}

/*
 * A lane's 8 keep bits of dropout (device_keep8) from draw index on: bit c
 * for the draw of its row's chunk column half * 8 + c. All kept without
 * dropout.
 */
__device__ __forceinline__ uint32_t
row_keep(uint64_t seed, uint64_t stream, uint64_t index, float dropout)
{
	return dropout > 0.0f ? device_keep8(seed, stream, index, dropout) : 0xffu;
}

/*
 * chunk [16, 16] (fp32, rows of CHUNK_LD) = a [16, 16 T] times b^T, where b
 * holds 16 rows of 16 T columns (row stride ld) read as a column-major B
 * (element (k, n) at b[n * ld + k]): 16 rows' dot products with 16 others.
 * Ends with __syncwarp: every lane may read the chunk.
 */
template <int T>
__device__ __forceinline__ void
dots(float *chunk, const FragA (&a)[T], const __nv_bfloat16 *b, int ld)
{
	FragC		s;

	wmma::fill_fragment(s, 0.0f);
UNROLL
	for (int t = 0; t < T; t++)
	{
		FragBT		bt;

		wmma::load_matrix_sync(bt, b + 16 * t, ld);
		wmma::mma_sync(s, a[t], bt, s);
	}
	wmma::store_matrix_sync(chunk, s, CHUNK_LD, wmma::mem_row_major);
	__syncwarp();
}

/*
 * dots with a read from shared memory (16 rows of 16 T columns, row stride
 * ld) tile by tile: fewer registers than fragments held across chunks.
 */
template <int T>
__device__ __forceinline__ void
dots_shared(float *chunk, const __nv_bfloat16 *a, const __nv_bfloat16 *b, int ld)
{
	FragC		s;

	wmma::fill_fragment(s, 0.0f);
UNROLL
	for (int t = 0; t < T; t++)
	{
		FragA		at;
		FragBT		bt;

		wmma::load_matrix_sync(at, a + 16 * t, ld);
		wmma::load_matrix_sync(bt, b + 16 * t, ld);
		wmma::mma_sync(s, at, bt, s);
	}
	wmma::store_matrix_sync(chunk, s, CHUNK_LD, wmma::mem_row_major);
	__syncwarp();
}

/*
 * acc[t] += a (16 x 16 bf16 in shared rows of HALF_LD) times rows [16, 16 T]
 * of b (row stride ld), tile by tile.
 */
template <int T>
__device__ __forceinline__ void
accumulate(FragC (&acc)[T], const __nv_bfloat16 *a, const __nv_bfloat16 *b, int ld)
{
	FragA		fa;

	wmma::load_matrix_sync(fa, a, HALF_LD);
UNROLL
	for (int t = 0; t < T; t++)
	{
		FragB		fb;

		wmma::load_matrix_sync(fb, b + 16 * t, ld);
		wmma::mma_sync(acc[t], fa, fb, acc[t]);
	}
}

/*
 * Writes acc / divisor to rows [row0, row0 + rows) of out (row stride ldo,
 * head h's d_k columns), and its bf16 copy to out16 (NULL: none; the same
 * layout), through chunk; lane pair r holds row r's divisor (0: the row is
 * written 0). Lanes write 16 consecutive columns of a row each
 * instruction, two rows a warp (coalesced).
 */
template <int T>
__device__ __forceinline__ void
write_rows(float *out, __nv_bfloat16 *out16, size_t row0, int rows, int ldo, int h, int dk, FragC (&acc)[T],
		   float *chunk, float divisor)
{
	int			lane = threadIdx.x % 32;

UNROLL
	for (int t = 0; t < T; t++)
	{
		wmma::store_matrix_sync(chunk, acc[t], CHUNK_LD, wmma::mem_row_major);
		__syncwarp();
		for (int e = lane; e < 256; e += 32)
		{
			int			r = e / 16,
						col = 16 * t + e % 16;
			float		div = __shfl_sync(FULL_MASK, divisor, 2 * r);

			if (r < rows && col < dk)
			{
				size_t		at = (row0 + r) * ldo + (size_t) h * dk + col;
				float		value = div != 0.0f ? chunk[r * CHUNK_LD + e % 16] / div : 0.0f;

				out[at] = value;
				if (out16 != NULL)
					out16[at] = __float2bfloat16_rn(value);
			}
		}
		__syncwarp();			/* chunk is the next tile's */
	}
}

/* Bytes of a forward warp's buffers: its query rows (bf16), a score chunk (fp32), a probability chunk (bf16). */
__host__ __device__ __forceinline__ size_t
forward_warp_bytes(int tiles)
{
	return (size_t) 16 * slice_ld(tiles) * 2 + 16 * CHUNK_LD * 4 + 16 * HALF_LD * 2;
}

/*
 * Forward of query rows [tile * TILE_ROWS, ...) of sentence b, head h: ctx
 * = (sum_j P~_j V_j) / l and lse = m + log l, where for each row m is the
 * max of its scaled scores S = Q K^T / sqrt(d_k) over the keys it sees, l =
 * sum_j exp(S_j - m) and P~_j = bf16(exp(S_j - m), dropped out and scaled).
 * Pass 1: S chunk by chunk, the row max; pass 2: S again, l, P~ and the
 * products with V. Rows that see no key: ctx 0, lse -inf.
 */
template <int T>
__global__ void __launch_bounds__(MMA_WARPS * 32, MMA_MIN_BLOCKS(T))
attention_mma_kernel(float *ctx, __nv_bfloat16 *ctx16, float *lse, const float *q, int ldq, const float *k,
					 const float *v, int ldk, const int32_t *q_start, const int32_t *k_start, const int64_t *p_start,
					 int num_heads, int dk, bool causal, float dropout, uint64_t seed, uint64_t stream,
					 bool skip_short)
{
	DYNAMIC_SHARED(Shared32, smem);
	Tile		t = tile_of(q_start, k_start, p_start, num_heads, false);
	Pair		a = t.a;
	const int	ld = slice_ld(T);
	int			lane = threadIdx.x % 32,
				warp = threadIdx.x / 32,
				r = lane / 2,
				half = lane % 2,
				seen = causal ? min(a.lk, t.r1) : a.lk,	/* keys any row of the tile sees */
				g = t.r0 + warp * 16;
	__nv_bfloat16 *ks = (__nv_bfloat16 *) smem,
			   *vs = ks + (size_t) up16(seen) * ld,
			   *qs = (__nv_bfloat16 *) ((char *) (vs + (size_t) up16(seen) * ld) + warp * forward_warp_bytes(T));
	float	   *sb = (float *) (qs + 16 * ld);
	__nv_bfloat16 *pb = (__nv_bfloat16 *) (sb + 16 * CHUNK_LD);
	float		scale = 1.0f / sqrtf((float) dk),
				keep_scale = dropout > 0.0f ? 1.0f / (1.0f - dropout) : 1.0f,
				m = -INFINITY,
				l = 0.0f;
	FragA		qa[T];
	FragC		acc[T];

	if (t.r0 >= t.r1 || (skip_short && short_pair(a.lq, a.lk)))	/* the whole block leaves together */
		return;
	load_bf16(ks, T, k, a.k0, seen, up16(seen), ldk, t.h, dk, threadIdx.x, blockDim.x);
	load_bf16(vs, T, v, a.k0, seen, up16(seen), ldk, t.h, dk, threadIdx.x, blockDim.x);
	__syncthreads();
	if (g >= t.r1)				/* no barrier follows: a warp without rows may leave */
		return;

	int			rows = min(16, t.r1 - g),
				i = g + r,
				vis = r >= rows ? 0 : causal && i + 1 < a.lk ? i + 1 : a.lk,
				most = causal ? min(a.lk, g + rows) : a.lk;	/* keys any row of the warp sees */

	load_bf16(qs, T, q, a.q0 + g, rows, 16, ldq, t.h, dk, lane, 32);
	__syncwarp();
UNROLL
	for (int u = 0; u < T; u++)
	{
		wmma::load_matrix_sync(qa[u], qs + 16 * u, ld);
		wmma::fill_fragment(acc[u], 0.0f);
	}
	for (int j0 = 0; j0 < most; j0 += 16)
	{
		dots(sb, qa, ks + (size_t) j0 * ld, ld);
		NO_UNROLL
		for (int c = 0; c < 8; c++)
		{
			int			col = chunk_col(c, lane);

			if (j0 + col < vis)
				m = fmaxf(m, sb[r * CHUNK_LD + col] * scale);
		}
		__syncwarp();			/* sb is the next chunk's */
	}
	m = fmaxf(m, __shfl_xor_sync(FULL_MASK, m, 1));
	for (int j0 = 0; j0 < most; j0 += 16)
	{
		uint32_t	keep = row_keep(seed, stream, a.p_off + (size_t) i * a.lk + j0 + half * 8, dropout);

		dots(sb, qa, ks + (size_t) j0 * ld, ld);
		NO_UNROLL
		for (int c = 0; c < 8; c++)
		{
			int			col = chunk_col(c, lane),
						j = j0 + col;
			float		p = 0.0f;

			if (j < vis)
			{
				p = expf(sb[r * CHUNK_LD + col] * scale - m);
				l += p;
				if (dropout > 0.0f)
					p = keep >> (col % 8) & 1 ? p * keep_scale : 0.0f;
			}
			pb[r * HALF_LD + col] = __float2bfloat16_rn(p);
		}
		__syncwarp();
		accumulate(acc, pb, vs + (size_t) j0 * ld, ld);
	}
	l += __shfl_xor_sync(FULL_MASK, l, 1);
	write_rows(ctx, ctx16, a.q0 + g, rows, num_heads * dk, t.h, dk, acc, sb, l);
	if (lse != NULL && half == 0 && r < rows)
		lse[(a.q0 + i) * num_heads + t.h] = l > 0.0f ? m + logf(l) : -INFINITY;
}

/* Bytes of a dQ warp's buffers: query and dctx rows (bf16), score and dPd chunks (fp32), a dS chunk (bf16). */
__host__ __device__ __forceinline__ size_t
dq_warp_bytes(int tiles)
{
	return (size_t) 2 * 16 * slice_ld(tiles) * 2 + 2 * 16 * CHUNK_LD * 4 + 16 * HALF_LD * 2;
}

/*
 * Query side of the backward for query rows [tile * TILE_ROWS, ...): P =
 * exp(S - lse), dPd = dctx V^T through the dropout mask, D = sum(dPd P) /
 * sum(P) (into dsum [query rows, num_heads], for the key side; as the CPU
 * backend's), dS = P (dPd - D) / sqrt(d_k), dQ = bf16(dS) K. Pass 1 sums D
 * chunk by chunk; pass 2 recomputes S and dPd for dS.
 */
template <int T>
__global__ void __launch_bounds__(MMA_WARPS * 32, MMA_BACKWARD_MIN_BLOCKS(T))
attention_dq_mma_kernel(float *dq, __nv_bfloat16 *dq16, float *dsum, const float *dctx, const float *lse,
						const float *q, const float *k, const float *v, int ldq, int ldk, const int32_t *q_start,
						const int32_t *k_start, const int64_t *p_start, int num_heads, int dk, bool causal,
						float dropout, uint64_t seed, uint64_t stream, bool skip_short)
{
	DYNAMIC_SHARED(Shared32, smem);
	Tile		t = tile_of(q_start, k_start, p_start, num_heads, false);
	Pair		a = t.a;
	const int	ld = slice_ld(T);
	int			lane = threadIdx.x % 32,
				warp = threadIdx.x / 32,
				r = lane / 2,
				half = lane % 2,
				d = num_heads * dk,
				seen = causal ? min(a.lk, t.r1) : a.lk,
				g = t.r0 + warp * 16;
	__nv_bfloat16 *ks = (__nv_bfloat16 *) smem,
			   *vs = ks + (size_t) up16(seen) * ld,
			   *qs = (__nv_bfloat16 *) ((char *) (vs + (size_t) up16(seen) * ld) + warp * dq_warp_bytes(T)),
			   *dcs = qs + 16 * ld;
	float	   *sb = (float *) (dcs + 16 * ld),
			   *gb = sb + 16 * CHUNK_LD;
	__nv_bfloat16 *db = (__nv_bfloat16 *) (gb + 16 * CHUNK_LD);
	float		scale = 1.0f / sqrtf((float) dk),
				keep_scale = dropout > 0.0f ? 1.0f / (1.0f - dropout) : 1.0f,
				dot = 0.0f,
				total = 0.0f;
	FragA		qa[T],
				da[T];
	FragC		acc[T];

	if (t.r0 >= t.r1 || (skip_short && short_pair(a.lq, a.lk)))
		return;
	load_bf16(ks, T, k, a.k0, seen, up16(seen), ldk, t.h, dk, threadIdx.x, blockDim.x);
	load_bf16(vs, T, v, a.k0, seen, up16(seen), ldk, t.h, dk, threadIdx.x, blockDim.x);
	__syncthreads();
	if (g >= t.r1)
		return;

	int			rows = min(16, t.r1 - g),
				i = g + r,
				vis = r >= rows ? 0 : causal && i + 1 < a.lk ? i + 1 : a.lk,
				most = causal ? min(a.lk, g + rows) : a.lk;
	float		lrow = r < rows ? lse[(a.q0 + i) * num_heads + t.h] : 0.0f;

	load_bf16(qs, T, q, a.q0 + g, rows, 16, ldq, t.h, dk, lane, 32);
	load_bf16(dcs, T, dctx, a.q0 + g, rows, 16, d, t.h, dk, lane, 32);
	__syncwarp();
UNROLL
	for (int u = 0; u < T; u++)
	{
		wmma::load_matrix_sync(qa[u], qs + 16 * u, ld);
		wmma::load_matrix_sync(da[u], dcs + 16 * u, ld);
		wmma::fill_fragment(acc[u], 0.0f);
	}
	for (int pass = 0; pass < 2; pass++)
	{
		float		D = 0.0f;

		if (pass == 1)
		{
			dot += __shfl_xor_sync(FULL_MASK, dot, 1);
			total += __shfl_xor_sync(FULL_MASK, total, 1);
			D = total > 0.0f ? dot / total : 0.0f;	/* no keys (an empty source): 0, not 0 / 0 */
			if (half == 0 && r < rows)
				dsum[(a.q0 + i) * num_heads + t.h] = D;
		}
		for (int j0 = 0; j0 < most; j0 += 16)
		{
			uint32_t	keep = row_keep(seed, stream, a.p_off + (size_t) i * a.lk + j0 + half * 8, dropout);

			dots(sb, qa, ks + (size_t) j0 * ld, ld);
			dots(gb, da, vs + (size_t) j0 * ld, ld);
			NO_UNROLL
			for (int c = 0; c < 8; c++)
			{
				int			col = chunk_col(c, lane),
							j = j0 + col;
				float		p = 0.0f,
							gv = 0.0f;

				if (j < vis)
				{
					p = expf(sb[r * CHUNK_LD + col] * scale - lrow);
					gv = gb[r * CHUNK_LD + col];
					if (dropout > 0.0f)
						gv = keep >> (col % 8) & 1 ? gv * keep_scale : 0.0f;
				}
				if (pass == 0)
				{
					dot += gv * p;
					total += p;
				}
				else
					db[r * HALF_LD + col] = __float2bfloat16_rn(p * (gv - D) * scale);
			}
			__syncwarp();		/* sb and gb are the next chunk's; db is complete */
			if (pass == 1)
				accumulate(acc, db, ks + (size_t) j0 * ld, ld);
		}
	}
	write_rows(dq, dq16, a.q0 + g, rows, ldq, t.h, dk, acc, sb, 1.0f);
}

/* Bytes of a dK/dV warp's buffers: key and value rows (bf16), two fp32 chunks, two bf16 chunks. */
__host__ __device__ __forceinline__ size_t
dkv_warp_bytes(int tiles)
{
	return (size_t) 2 * 16 * slice_ld(tiles) * 2 + 2 * 16 * CHUNK_LD * 4 + 2 * 16 * HALF_LD * 2 + 32;
}

/*
 * Key side for key rows [tile * TILE_ROWS, ...), 16 keys a warp: for each
 * chunk of 16 queries, S^T = K Q^T and dPd^T = V dctx^T, then P = exp(S -
 * lse) of the queries that see each key, Pd = P through the dropout mask,
 * dS = P (dPd - D) / sqrt(d_k) (D from dsum), and dV += bf16(Pd)^T dctx, dK
 * += bf16(dS)^T Q. Shared memory: the sentence's queries and dctx rows
 * from the first query that sees the tile's keys, their lse and D, then
 * the warps' buffers.
 */
template <int T>
__global__ void __launch_bounds__(MMA_WARPS * 32, MMA_BACKWARD_MIN_BLOCKS(T))
attention_dkv_mma_kernel(float *dkey, float *dvalue, __nv_bfloat16 *dkey16, __nv_bfloat16 *dvalue16,
						 const float *dsum, const float *dctx, const float *lse, const float *q, const float *k,
						 const float *v, int ldq, int ldk, const int32_t *q_start, const int32_t *k_start,
						 const int64_t *p_start, int num_heads, int dk, bool causal, float dropout, uint64_t seed,
						 uint64_t stream, bool skip_short)
{
	DYNAMIC_SHARED(Shared32, smem);
	Tile		t = tile_of(q_start, k_start, p_start, num_heads, true);
	Pair		a = t.a;
	const int	ld = slice_ld(T);
	int			lane = threadIdx.x % 32,
				warp = threadIdx.x / 32,
				r = lane / 2,
				half = lane % 2,
				d = num_heads * dk,
				first = causal ? min(t.r0, a.lq) : 0,	/* the first query that sees the tile's keys */
				lq = a.lq - first,
				g = t.r0 + warp * 16;
	__nv_bfloat16 *qs = (__nv_bfloat16 *) smem,
			   *dcs = qs + (size_t) up16(lq) * ld;
	float	   *ls = (float *) (dcs + (size_t) up16(lq) * ld),
			   *Ds = ls + up16(lq);
	__nv_bfloat16 *kr = (__nv_bfloat16 *) ((char *) (Ds + up16(lq)) + warp * dkv_warp_bytes(T)),
			   *vr = kr + 16 * ld;
	float	   *sb = (float *) (vr + 16 * ld),
			   *gb = sb + 16 * CHUNK_LD;
	__nv_bfloat16 *pb = (__nv_bfloat16 *) (gb + 16 * CHUNK_LD),
			   *db = pb + 16 * HALF_LD;
	uint8_t    *kb = (uint8_t *) (db + 16 * HALF_LD);	/* keep bits: [16 queries][2 bytes of 8 keys] */
	float		scale = 1.0f / sqrtf((float) dk),
				keep_scale = dropout > 0.0f ? 1.0f / (1.0f - dropout) : 1.0f;
	FragC		acc_k[T],
				acc_v[T];

	if (t.r0 >= t.r1 || (skip_short && short_pair(a.lq, a.lk)))
		return;
	load_bf16(qs, T, q, a.q0 + first, lq, up16(lq), ldq, t.h, dk, threadIdx.x, blockDim.x);
	load_bf16(dcs, T, dctx, a.q0 + first, lq, up16(lq), d, t.h, dk, threadIdx.x, blockDim.x);
	for (int i = threadIdx.x; i < lq; i += blockDim.x)
	{
		ls[i] = lse[(a.q0 + first + i) * num_heads + t.h];
		Ds[i] = dsum[(a.q0 + first + i) * num_heads + t.h];
	}
	__syncthreads();
	if (g >= t.r1)
		return;

	int			keys = min(16, t.r1 - g),
				j = g + r,				/* lane pair r's key */
				start = causal ? (min(g, a.lq) - first) & ~15 : 0;	/* queries before key g see none of the warp's */

	load_bf16(kr, T, k, a.k0 + g, keys, 16, ldk, t.h, dk, lane, 32);
	load_bf16(vr, T, v, a.k0 + g, keys, 16, ldk, t.h, dk, lane, 32);
	__syncwarp();
UNROLL
	for (int u = 0; u < T; u++)
	{
		wmma::fill_fragment(acc_k[u], 0.0f);
		wmma::fill_fragment(acc_v[u], 0.0f);
	}
	for (int i0 = start; i0 < lq; i0 += 16)
	{
		/* lane pair r draws query i0 + r's masks of the warp's 16 keys, read transposed below */
		kb[lane] = (uint8_t) row_keep(seed, stream, a.p_off + (size_t) (first + i0 + r) * a.lk + g + half * 8,
									   dropout);
		dots_shared<T>(sb, kr, qs + (size_t) i0 * ld, ld);
		dots_shared<T>(gb, vr, dcs + (size_t) i0 * ld, ld);
		NO_UNROLL
		for (int c = 0; c < 8; c++)
		{
			int			col = chunk_col(c, lane),
						i = i0 + col;	/* the query, from `first` */
			float		pd = 0.0f,
						sd = 0.0f;

			if (r < keys && i < lq && (!causal || first + i >= j))
			{
				float		p = expf(sb[r * CHUNK_LD + col] * scale - ls[i]);
				bool		keep = kb[2 * col + r / 8] >> (r % 8) & 1;

				pd = keep ? p * keep_scale : 0.0f;
				sd = p * ((keep ? gb[r * CHUNK_LD + col] * keep_scale : 0.0f) - Ds[i]) * scale;
			}
			pb[r * HALF_LD + col] = __float2bfloat16_rn(pd);
			db[r * HALF_LD + col] = __float2bfloat16_rn(sd);
		}
		__syncwarp();			/* sb and gb are the next chunk's; pb and db are complete */
		accumulate(acc_v, pb, dcs + (size_t) i0 * ld, ld);
		accumulate(acc_k, db, qs + (size_t) i0 * ld, ld);
	}
	write_rows(dkey, dkey16, a.k0 + g, keys, ldk, t.h, dk, acc_k, sb, 1.0f);
	write_rows(dvalue, dvalue16, a.k0 + g, keys, ldk, t.h, dk, acc_v, sb, 1.0f);
}

/* The tiles of a head: d_k rounded up to 16, 32, 64 or 128 columns (the instantiations). */
static int
head_tiles(int dk)
{
	return dk <= 16 ? 1 : dk <= 32 ? 2 : dk <= 64 ? 4 : 8;
}

/* Dynamic shared memory (bytes) of the three kernels for this call. */
static size_t
mma_forward_shared(const TfAttentionShape *sh)
{
	int			tiles = head_tiles(sh->head_dim);

	return (size_t) 2 * up16(sh->max_k) * slice_ld(tiles) * 2 + MMA_WARPS * forward_warp_bytes(tiles);
}
static size_t
mma_dq_shared(const TfAttentionShape *sh)
{
	int			tiles = head_tiles(sh->head_dim);

	return (size_t) 2 * up16(sh->max_k) * slice_ld(tiles) * 2 + MMA_WARPS * dq_warp_bytes(tiles);
}
static size_t
mma_dkv_shared(const TfAttentionShape *sh)
{
	int			tiles = head_tiles(sh->head_dim);

	return (size_t) 2 * up16(sh->max_q) * slice_ld(tiles) * 2 + (size_t) 2 * up16(sh->max_q) * 4 +
		MMA_WARPS * dkv_warp_bytes(tiles);
}

bool
k_attention_mma_fits(const TfAttentionShape *sh, size_t most)
{
	return sh->head_dim <= MMA_MAX_HEAD_DIM && mma_forward_shared(sh) <= most && mma_dq_shared(sh) <= most &&
		mma_dkv_shared(sh) <= most && (!k_attention_short_serves(sh) || k_attention_short_bytes(sh) <= most);
}

/* Whether a call may hold pairs longer than SHORT_ROWS (or d_k too wide for the short kernels): the tiled kernels' work. */
static bool
tiled_work(const TfAttentionShape *sh)
{
	return !k_attention_short_serves(sh) || sh->max_q > SHORT_ROWS || sh->max_k > SHORT_ROWS;
}

template <int T>
static void
set_limit(int most)
{
	cudaFuncSetAttribute((const void *) attention_mma_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
	cudaFuncSetAttribute((const void *) attention_dq_mma_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
	cudaFuncSetAttribute((const void *) attention_dkv_mma_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
}

void
k_attention_mma_set_limit(int most)
{
	set_limit<1>(most);
	set_limit<2>(most);
	set_limit<4>(most);
	set_limit<8>(most);
	k_attention_short_set_limit(most);
}

template <int T>
static void
forward(float *ctx, __nv_bfloat16 *ctx16, float *lse, const float *q, int ldq, const float *k, const float *v,
		int ldk, const TfAttentionShape *sh, cudaStream_t stream)
{
	LAUNCH(attention_mma_kernel<T>, dim3((unsigned) (sh->batch * sh->num_heads), (unsigned) ((sh->max_q + TILE_ROWS - 1) / TILE_ROWS)),
		   MMA_WARPS * 32, mma_forward_shared(sh), stream)
		(ctx, ctx16, lse, q, ldq, k, v, ldk, sh->q_start, sh->k_start, sh->p_start, sh->num_heads, sh->head_dim, sh->causal,
		 sh->dropout, sh->seed, sh->stream, k_attention_short_serves(sh));
}

void
k_attention_mma(float *ctx, __nv_bfloat16 *ctx16, float *lse, const float *q, int ldq, const float *k,
				const float *v, int ldk, const TfAttentionShape *sh, cudaStream_t stream)
{
	if (k_attention_short_serves(sh))
		k_attention_short(ctx, ctx16, lse, q, ldq, k, v, ldk, sh, stream);
	if (!tiled_work(sh))
		return;
	switch (head_tiles(sh->head_dim))
	{
		case 1:
			forward<1>(ctx, ctx16, lse, q, ldq, k, v, ldk, sh, stream);
			break;
		case 2:
			forward<2>(ctx, ctx16, lse, q, ldq, k, v, ldk, sh, stream);
			break;
		case 4:
			forward<4>(ctx, ctx16, lse, q, ldq, k, v, ldk, sh, stream);
			break;
		default:
			forward<8>(ctx, ctx16, lse, q, ldq, k, v, ldk, sh, stream);
	}
}

template <int T>
static void
backward(float *dq, float *dk, float *dv, __nv_bfloat16 *const copies[3], float *dsum, const float *dctx,
		 const float *lse, const float *q, int ldq, const float *k, const float *v, int ldk, const TfAttentionShape *sh,
		 cudaStream_t stream)
{
	unsigned	pairs = (unsigned) (sh->batch * sh->num_heads);

	if (sh->max_q > 0)
		LAUNCH(attention_dq_mma_kernel<T>, dim3(pairs, (unsigned) ((sh->max_q + TILE_ROWS - 1) / TILE_ROWS)),
			   MMA_WARPS * 32, mma_dq_shared(sh), stream)
			(dq, copies[0], dsum, dctx, lse, q, k, v, ldq, ldk, sh->q_start, sh->k_start, sh->p_start, sh->num_heads,
			 sh->head_dim, sh->causal, sh->dropout, sh->seed, sh->stream, k_attention_short_serves(sh));
	if (sh->max_k > 0)
		LAUNCH(attention_dkv_mma_kernel<T>, dim3(pairs, (unsigned) ((sh->max_k + TILE_ROWS - 1) / TILE_ROWS)),
			   MMA_WARPS * 32, mma_dkv_shared(sh), stream)
			(dk, dv, copies[1], copies[2], dsum, dctx, lse, q, k, v, ldq, ldk, sh->q_start, sh->k_start, sh->p_start, sh->num_heads,
			 sh->head_dim, sh->causal, sh->dropout, sh->seed, sh->stream, k_attention_short_serves(sh));
}

void
k_attention_mma_backward(float *dq, float *dk, float *dv, __nv_bfloat16 *const copies[3], float *dsum,
						 const float *dctx, const float *lse, const float *q, int ldq, const float *k, const float *v,
						 int ldk, const TfAttentionShape *sh, cudaStream_t stream)
{
	if (k_attention_short_serves(sh))
		k_attention_short_backward(dq, dk, dv, copies, dctx, lse, q, ldq, k, v, ldk, sh, stream);
	if (!tiled_work(sh))
		return;
	switch (head_tiles(sh->head_dim))
	{
		case 1:
			backward<1>(dq, dk, dv, copies, dsum, dctx, lse, q, ldq, k, v, ldk, sh, stream);
			break;
		case 2:
			backward<2>(dq, dk, dv, copies, dsum, dctx, lse, q, ldq, k, v, ldk, sh, stream);
			break;
		case 4:
			backward<4>(dq, dk, dv, copies, dsum, dctx, lse, q, ldq, k, v, ldk, sh, stream);
			break;
		default:
			backward<8>(dq, dk, dv, copies, dsum, dctx, lse, q, ldq, k, v, ldk, sh, stream);
	}
}
