/*
 * cpu_bf16.c - bf16 matrix products on the CPU through oneDNN's matmul
 * (cpu_bf16.h).
 *
 * oneDNN 2.6 computes bf16 x bf16 -> f32 with its brgemm kernels (AMX
 * tiles or AVX512_BF16 dot products) only for primitives whose dimensions
 * are all known when they are made; with run-time dimensions it falls back
 * to its JIT GEMM, 1.5-3x slower on the training step's shapes (measured
 * on this VM's AMX CPU, 128-512 rows of the small model's products; the
 * impl string reads "brg:avx512_core_amx_bf16" against "gemm:jit").
 * Likewise a run-time output scale. So every primitive is made for one
 * block shape and kept, and the shapes a product uses are bounded: C is
 * cut into strips of bm rows (bm from N and K alone), the rows left over
 * into one strip of a multiple of 16 rows and a tail of under 16, which is
 * computed as 16 rows from a zero-padded copy of its A rows into a
 * scratch C; where N is wide and the strips few, the columns too. A
 * product whose alpha is not 1 or whose beta is neither 0 nor 1 writes
 * each block into scratch and combines it with C there. Each block is one
 * oneDNN call on one pool thread with that thread's stream and scratchpad;
 * oneDNN's OpenMP build then runs single-threaded (the primitives are made
 * with an OpenMP count of one, as in cpu_matmul.c).
 */
#define _POSIX_C_SOURCE 200809L
#include "cpu_bf16.h"

#include <dnnl.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Primitives kept; more shapes than that start the cache over. */
#define MAX_PRIMITIVES 256
/* Rows of the tail block, and the multiple the strip before it is cut to. */
#define TAIL_ROWS 16
/* Multiply-adds a strip aims at (about 30 us at this VM's AMX rate), and its row bounds. */
#define STRIP_WORK (1 << 23)
#define STRIP_MIN_ROWS 64
#define STRIP_MAX_ROWS 512
/* Blocks below which wide products are cut into columns too (of whole 64-column groups). */
#define MIN_BLOCKS 4

typedef struct Prim
{
	int			m,
				n,
				k,
				lda,
				ldb,
				ldc;
	bool		trans_a,
				trans_b,
				sum;			/* C += the product (a sum post-op), else C = the product */
	dnnl_primitive_t prim;
	dnnl_memory_desc_t scratch_md;
	size_t		scratch_bytes;
} Prim;

struct CpuBf16
{
	dnnl_engine_t engine;
	dnnl_stream_t streams[TF_POOL_MAX_THREADS];
	void	   *scratch[TF_POOL_MAX_THREADS];	/* oneDNN's scratchpad (user mode) */
	size_t		scratch_capacity[TF_POOL_MAX_THREADS];
	uint16_t   *a_tail[TF_POOL_MAX_THREADS];	/* [TAIL_ROWS, k]: a tail's A rows, zero-padded */
	size_t		a_tail_capacity[TF_POOL_MAX_THREADS];
	float	   *c_block[TF_POOL_MAX_THREADS];	/* a block's product before it is combined with C */
	size_t		c_block_capacity[TF_POOL_MAX_THREADS];
	Prim		prims[MAX_PRIMITIVES];
	int			num_prims;
};

bool
cpu_bf16_native(void)
{
	/* ISA values are bit sets: the AMX ones contain avx512_core_bf16's bits */
	return (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
}

CpuBf16 *
cpu_bf16_create(void)
{
	CpuBf16    *g = calloc(1, sizeof(CpuBf16));

	if (g == NULL)
		return NULL;
	if (dnnl_engine_create(&g->engine, dnnl_cpu, 0) != dnnl_success)
	{
		free(g);
		return NULL;
	}
	return g;
}

void
cpu_bf16_free(CpuBf16 *g)
{
	int			i;

	if (g == NULL)
		return;
	for (i = 0; i < g->num_prims; i++)
		dnnl_primitive_destroy(g->prims[i].prim);
	for (i = 0; i < TF_POOL_MAX_THREADS; i++)
	{
		if (g->streams[i] != NULL)
			dnnl_stream_destroy(g->streams[i]);
		free(g->scratch[i]);
		free(g->a_tail[i]);
		free(g->c_block[i]);
	}
	dnnl_engine_destroy(g->engine);
	free(g);
}

/* A [rows, cols] descriptor of type dt whose rows are ld apart, or (trans) whose columns are; false when refused. */
static bool
md(dnnl_memory_desc_t *d, int rows, int cols, int ld, bool trans, dnnl_data_type_t dt)
{
	dnnl_dims_t dims = {rows, cols};
	dnnl_dims_t strides = {trans ? 1 : ld, trans ? ld : 1};

	return dnnl_memory_desc_init_by_strides(d, 2, dims, dt, strides) == dnnl_success;
}

/* The kept primitive for this block shape, made now if new; NULL when oneDNN fails or the cache is full. */
static const Prim *
primitive(CpuBf16 *g, int m, int n, int k, bool trans_a, bool trans_b, int lda, int ldb, int ldc, bool sum)
{
	dnnl_memory_desc_t a,
				b,
				c;
	dnnl_matmul_desc_t desc;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_post_ops_t post = NULL;
	dnnl_primitive_desc_t pd = NULL;
	dnnl_primitive_t prim = NULL;
	const dnnl_memory_desc_t *smd;
	Prim	   *p;
	int			i;

	for (i = 0; i < g->num_prims; i++)
	{
		p = &g->prims[i];
		if (p->m == m && p->n == n && p->k == k && p->trans_a == trans_a && p->trans_b == trans_b &&
			p->lda == lda && p->ldb == ldb && p->ldc == ldc && p->sum == sum)
			return p;
	}
	if (g->num_prims == MAX_PRIMITIVES)
		return NULL;
	if (!md(&a, m, k, lda, trans_a, dnnl_bf16) || !md(&b, k, n, ldb, trans_b, dnnl_bf16) ||
		!md(&c, m, n, ldc, false, dnnl_f32) ||
		dnnl_matmul_desc_init(&desc, &a, &b, NULL, &c) != dnnl_success ||
		dnnl_primitive_attr_create(&attr) != dnnl_success)
		return NULL;
	if (dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success ||
		(sum && (dnnl_post_ops_create(&post) != dnnl_success || dnnl_post_ops_append_sum(post, 1.0f) != dnnl_success ||
				 dnnl_primitive_attr_set_post_ops(attr, post) != dnnl_success)) ||
		dnnl_primitive_desc_create(&pd, &desc, attr, g->engine, NULL) != dnnl_success ||
		dnnl_primitive_create(&prim, pd) != dnnl_success)
	{
		if (pd != NULL)
			dnnl_primitive_desc_destroy(pd);
		if (post != NULL)
			dnnl_post_ops_destroy(post);
		dnnl_primitive_attr_destroy(attr);
		return NULL;
	}
	p = &g->prims[g->num_prims++];
	*p = (Prim) {m, n, k, lda, ldb, ldc, trans_a, trans_b, sum, prim, {0}, 0};
	smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
	if (smd != NULL)
	{
		p->scratch_md = *smd;
		p->scratch_bytes = dnnl_memory_desc_get_size(smd);
	}
	dnnl_primitive_desc_destroy(pd);
	if (post != NULL)
		dnnl_post_ops_destroy(post);
	dnnl_primitive_attr_destroy(attr);
	return p;
}

/* Row kinds of a product's blocks: whole strips, the strip of whole 16-row groups left, the tail. */
enum
{
	ROWS_FULL, ROWS_MAIN, ROWS_TAIL, ROW_KINDS
};

/* One product, shared by its blocks. */
typedef struct Gemm
{
	CpuBf16    *g;
	bool		trans_a,
				trans_b,
				direct;			/* blocks other than the tail write C themselves */
	int			m,
				n,
				k,
				lda,
				ldb,
				ldc,
				bm,				/* rows of a whole strip */
				bn,				/* columns of a block; the last may be narrower */
				strips,			/* whole strips */
				main_rows,		/* rows of the ROWS_MAIN strip (0: none) */
				tail_rows,		/* rows of the tail (0: none) */
				blocks_n;
	float		alpha,
				beta;
	const uint16_t *a,
			   *b;
	float	   *c;
	const Prim *prims[ROW_KINDS][2];	/* [row kind][last column block] */
	_Atomic bool failed;
} Gemm;

/* Runs prim on A (lda), B (ldb) and C (ldc) as made, on pool thread `worker`. */
static bool
execute(CpuBf16 *g, const Prim *p, const uint16_t *a, const uint16_t *b, float *c, int worker)
{
	dnnl_memory_desc_t amd,
				bmd,
				cmd;
	dnnl_memory_t mem[4] = {NULL, NULL, NULL, NULL};
	dnnl_exec_arg_t args[4];
	int			nargs = 3,
				i;
	bool		ok;

	ok = md(&amd, p->m, p->k, p->lda, p->trans_a, dnnl_bf16) && md(&bmd, p->k, p->n, p->ldb, p->trans_b, dnnl_bf16) &&
		md(&cmd, p->m, p->n, p->ldc, false, dnnl_f32) &&
		dnnl_memory_create(&mem[0], &amd, g->engine, (void *) a) == dnnl_success &&
		dnnl_memory_create(&mem[1], &bmd, g->engine, (void *) b) == dnnl_success &&
		dnnl_memory_create(&mem[2], &cmd, g->engine, c) == dnnl_success;
	args[0] = (dnnl_exec_arg_t) {DNNL_ARG_SRC, mem[0]};
	args[1] = (dnnl_exec_arg_t) {DNNL_ARG_WEIGHTS, mem[1]};
	args[2] = (dnnl_exec_arg_t) {DNNL_ARG_DST, mem[2]};
	if (ok && p->scratch_bytes > 0)
	{
		ok = dnnl_memory_create(&mem[3], &p->scratch_md, g->engine, g->scratch[worker]) == dnnl_success;
		args[nargs++] = (dnnl_exec_arg_t) {DNNL_ARG_SCRATCHPAD, mem[3]};
	}
	if (ok)
		ok = dnnl_primitive_execute(p->prim, g->streams[worker], nargs, args) == dnnl_success &&
			dnnl_stream_wait(g->streams[worker]) == dnnl_success;
	for (i = 0; i < 4; i++)
		if (mem[i] != NULL)
			dnnl_memory_destroy(mem[i]);
	return ok;
}

/* C rows [rows, cols] (ldc) = alpha * block (its rows cols apart) + beta * C; C not read where beta is 0. */
static void
combine(float *c, int ldc, const float *block, int rows, int cols, float alpha, float beta)
{
	int			i,
				j;

	for (i = 0; i < rows; i++)
	{
		float	   *cr = c + (size_t) i * ldc;
		const float *br = block + (size_t) i * cols;

		if (beta == 0.0f)
			for (j = 0; j < cols; j++)
				cr[j] = alpha * br[j];
		else
			for (j = 0; j < cols; j++)
				cr[j] = alpha * br[j] + beta * cr[j];
	}
}

/* Blocks [begin, end) of C, strip-major. */
static void
gemm_chunk(void *arg, long begin, long end, int worker)
{
	Gemm	   *gm = arg;
	CpuBf16    *g = gm->g;
	long		blk;

	for (blk = begin; blk < end; blk++)
	{
		int			strip = (int) (blk / gm->blocks_n),
					col = (int) (blk % gm->blocks_n),
					n0 = col * gm->bn,
					nc = gm->n - n0 < gm->bn ? gm->n - n0 : gm->bn,
					m0 = strip * gm->bm,
					kind = strip < gm->strips ? ROWS_FULL : strip == gm->strips && gm->main_rows > 0 ? ROWS_MAIN : ROWS_TAIL,
					mc = kind == ROWS_FULL ? gm->bm : kind == ROWS_MAIN ? gm->main_rows : gm->tail_rows;
		const Prim *p = gm->prims[kind][col == gm->blocks_n - 1];
		const uint16_t *a = gm->trans_a ? gm->a + m0 : gm->a + (size_t) m0 * gm->lda;
		const uint16_t *b = gm->trans_b ? gm->b + (size_t) n0 * gm->ldb : gm->b + n0;
		float	   *c = gm->c + (size_t) m0 * gm->ldc + n0;
		bool		ok;

		if (kind == ROWS_TAIL)
		{
			uint16_t   *at = g->a_tail[worker];
			int			i,
						kk;

			m0 = gm->strips * gm->bm + gm->main_rows;
			a = gm->trans_a ? gm->a + m0 : gm->a + (size_t) m0 * gm->lda;
			c = gm->c + (size_t) m0 * gm->ldc + n0;
			memset(at, 0, (size_t) TAIL_ROWS * gm->k * sizeof(uint16_t));
			for (i = 0; i < mc; i++)
				for (kk = 0; kk < gm->k; kk++)
					at[(size_t) i * gm->k + kk] = gm->trans_a ? a[(size_t) kk * gm->lda + i] : a[(size_t) i * gm->lda + kk];
			a = at;
		}
		if (gm->direct && kind != ROWS_TAIL)
		{
			ok = execute(g, p, a, b, c, worker);
		}
		else
		{
			ok = execute(g, p, a, b, g->c_block[worker], worker);
			if (ok)
				combine(c, gm->ldc, g->c_block[worker], mc, nc, gm->alpha, gm->beta);
		}
		if (!ok)
			atomic_store(&gm->failed, true);
	}
}

bool
cpu_scratch_grow(void **buf, size_t *capacity, size_t bytes)
{
	void	   *p;

	if (bytes <= *capacity)
		return true;
	p = realloc(*buf, bytes);
	if (p == NULL)
		return false;
	*buf = p;
	*capacity = bytes;
	return true;
}

bool
cpu_bf16_gemm(CpuBf16 *g, TfPool *pool, int threads, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
			  const uint16_t *a, int lda, const uint16_t *b, int ldb, float beta, float *c, int ldc, char *err,
			  size_t errlen)
{
	Gemm		gm = {.g = g, .trans_a = trans_a, .trans_b = trans_b, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb,
	.ldc = ldc, .alpha = alpha, .beta = beta, .a = a, .b = b, .c = c};
	size_t		scratch = 0,
				block_floats;
	long		blocks;
	int			rest,
				kind,
				last,
				i;

	if (m <= 0 || n <= 0 || k <= 0)
	{
		snprintf(err, errlen, "bf16 product of %d x %d x %d: every dimension must be positive", m, n, k);
		return false;
	}
	gm.direct = alpha == 1.0f && (beta == 0.0f || beta == 1.0f);
	gm.bm = STRIP_MIN_ROWS;
	while (gm.bm < STRIP_MAX_ROWS && (double) gm.bm * n * k < STRIP_WORK)
		gm.bm *= 2;
	gm.strips = m / gm.bm;
	rest = m - gm.strips * gm.bm;
	gm.main_rows = rest / TAIL_ROWS * TAIL_ROWS;
	gm.tail_rows = rest - gm.main_rows;
	blocks = gm.strips + (gm.main_rows > 0) + (gm.tail_rows > 0);
	gm.bn = n;
	if (blocks < MIN_BLOCKS && n >= 128)
		gm.bn = ((n + MIN_BLOCKS - 1) / MIN_BLOCKS + 63) / 64 * 64;
	gm.blocks_n = (n + gm.bn - 1) / gm.bn;
	blocks *= gm.blocks_n;
	atomic_init(&gm.failed, false);

	/* the primitives, made on this thread with an OpenMP count of one */
	omp_set_num_threads(1);
	if (g->num_prims + 2 * ROW_KINDS > MAX_PRIMITIVES)
	{
		for (i = 0; i < g->num_prims; i++)
			dnnl_primitive_destroy(g->prims[i].prim);
		g->num_prims = 0;
	}
	for (kind = 0; kind < ROW_KINDS; kind++)
		for (last = 0; last < 2; last++)
		{
			int			rows = kind == ROWS_FULL ? gm.bm : kind == ROWS_MAIN ? gm.main_rows : TAIL_ROWS;
			int			cols = last ? n - (gm.blocks_n - 1) * gm.bn : gm.bn;
			bool		scratch_c = kind == ROWS_TAIL || !gm.direct;
			const Prim *p;

			gm.prims[kind][last] = NULL;
			if ((kind == ROWS_FULL && gm.strips == 0) || (kind == ROWS_MAIN && gm.main_rows == 0) ||
				(kind == ROWS_TAIL && gm.tail_rows == 0) || (!last && gm.blocks_n == 1))
				continue;
			p = primitive(g, rows, cols, k, kind == ROWS_TAIL ? false : trans_a, trans_b,
						  kind == ROWS_TAIL ? k : lda, ldb, scratch_c ? cols : ldc, !scratch_c && beta == 1.0f);
			if (p == NULL)
			{
				snprintf(err, errlen, "oneDNN could not prepare a bf16 product of %d x %d x %d (out of memory?)",
						 rows, cols, k);
				return false;
			}
			gm.prims[kind][last] = p;
			scratch = p->scratch_bytes > scratch ? p->scratch_bytes : scratch;
		}
	if (gm.blocks_n == 1)
		for (kind = 0; kind < ROW_KINDS; kind++)
			gm.prims[kind][0] = gm.prims[kind][1];

	/* each thread's stream and scratch, made here: a thread without them stays out */
	block_floats = (size_t) (gm.bm > TAIL_ROWS ? gm.bm : TAIL_ROWS) * gm.bn;
	if (threads > blocks)
		threads = (int) blocks;
	if (threads > TF_POOL_MAX_THREADS)
		threads = TF_POOL_MAX_THREADS;
	for (i = 0; i < threads; i++)
		if ((g->streams[i] == NULL &&
			 dnnl_stream_create(&g->streams[i], g->engine, dnnl_stream_default_flags) != dnnl_success) ||
			!cpu_scratch_grow(&g->scratch[i], &g->scratch_capacity[i], scratch) ||
			(gm.tail_rows > 0 &&
			 !cpu_scratch_grow((void **) &g->a_tail[i], &g->a_tail_capacity[i], (size_t) TAIL_ROWS * k * sizeof(uint16_t))) ||
			((gm.tail_rows > 0 || !gm.direct) &&
			 !cpu_scratch_grow((void **) &g->c_block[i], &g->c_block_capacity[i], block_floats * sizeof(float))))
			break;
	if (i == 0)
	{
		snprintf(err, errlen, "out of memory for a bf16 product of %d x %d x %d", m, n, k);
		return false;
	}
	threads = i;
	tf_pool_for(pool, threads, blocks, 1, gemm_chunk, &gm);
	if (atomic_load(&gm.failed))
	{
		snprintf(err, errlen, "oneDNN failed computing a bf16 product of %d x %d x %d", m, n, k);
		return false;
	}
	return true;
}
