/*
 * backend_cpu.c - the CPU backend (backend.h): OpenBLAS's sgemm (blas.h) for the
 * matrix products of training, oneDNN (cpu_matmul.c) for inference's
 * products with fixed weights (fp32 and int8), plain C for the rest, all
 * spread over the backend's threads by its pool (pool.h), with OpenBLAS
 * and oneDNN single-threaded inside each chunk.
 *
 * Determinism: every loop is cut into chunks fixed by its shape alone (the
 * grains below), products into fixed blocks of C with the whole of K in
 * each, and every reduction keeps one partial per chunk (or per column
 * block) summed in a fixed order: the same call gives the same bits on
 * any number of threads.
 */
#define _DEFAULT_SOURCE			/* MAP_ANONYMOUS */
#define _POSIX_C_SOURCE 200809L
#include "backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "activation.h"
#include "bf16.h"
#include "blas.h"
#include "cpu_bf16.h"
#include "cpu_matmul.h"
#include "dispatch.h"
#include "pool.h"
#include "rng.h"
#include "transformer.h"

/* OpenBLAS (blas.h), loaded before the first CPU backend is made */
static const TfBlas *blas;

/* Columns per block in column-parallel reductions (bias, LayerNorm, embedding grads). */
#define COLUMN_BLOCK 64

/*
 * Elements per chunk of element-wise loops, and the work (elements) a chunk
 * of row loops aims at: a decoding step's vectors (beam x d_model) stay on
 * one thread, where waking another costs more than the loop (CTranslate2
 * runs loops under 32,768 elements serially for the same reason).
 */
#define ELEMENT_GRAIN 16384
/* Elements per partial of sum_squares (fixed: the partials are summed in their order). */
#define SUM_GRAIN 65536
/* Multiply-adds a chunk of attention pairs aims at. */
#define ATTENTION_GRAIN (1 << 18)

/*
 * exp(x) for x <= 88.7 (x below -87.3 gives ~1e-38), relative error ~2e-7: Cody-Waite
 * range reduction x = n ln2 + r, |r| <= ln2/2, and a degree-6 Taylor polynomial
 * for e^r. Branch-free so that loops over it vectorize.
 */
static inline float
fast_expf(float x)
{
	float		n,
				r,
				p;
	int32_t		bits;
	union
	{
		float		f;
		int32_t		i;
	}			u;

	x = x > -87.3f ? x : -87.3f;
	n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;	/* round to nearest: 1.5 * 2^23 */
	r = x - n * 0.693145752f - n * 1.42860677e-6f;
	p = 1.0f + r * (1.0f + r * (0.5f + r * (1.66666672e-1f + r * (4.16666679e-2f +
			r * (8.33333377e-3f + r * 1.38888892e-3f)))));
	bits = ((int32_t) n + 127) << 23;
	u.i = bits;
	return p * u.f;
}

/* Backend state: threads, scratch memory for attention, reduction partials. */
typedef struct CpuState
{
	int			threads;
	TfPool	   *pool;
	float	   *scratch;		/* 2 * threads * scratch_per_thread floats */
	size_t		scratch_per_thread;
	double	   *partials;		/* one per chunk of sum_squares */
	size_t		partials_capacity;
	CpuMatmul  *matmul;			/* oneDNN products (linear) */
	/* bf16 mixed precision (cpu_set_precision) */
	TfPrecision precision;
	const float *weights;		/* the master weights [num_weights] given to set_precision */
	size_t		num_weights;
	uint16_t   *weights16;		/* their bf16 copy where the CPU multiplies bf16 natively, else NULL */
	CpuBf16    *bf16;			/* oneDNN's bf16 products, where native; else NULL */
	void	   *operand[2];		/* gemm's operands rounded (bf16 bits where native, else floats) */
	size_t		operand_capacity[2];
	float	   *attention16;	/* attention's q, k, v and dctx rounded, packed [rows, d] each */
	size_t		attention16_capacity;
	/*
	 * The bf16 bits of the last training cross_entropy's gradient (native
	 * bf16 only), which the logits' two backward products read instead of
	 * rounding [rows, vocab] each: gradient16 [gradient16_rows, ld], the
	 * rows past gradient_rows zero (a product's K padding). It is current
	 * (gradient not NULL) from cross_entropy's return until any operation
	 * but a product that does not write into it and bias_backward.
	 */
	const float *gradient;
	bool		keep_gradient16;	/* inside a product or bias_backward, which only read it */
	int			gradient_rows,
				gradient16_rows,
				gradient_cols,
				gradient_ld;
	uint16_t   *gradient16;
	size_t		gradient16_capacity;
	char		error[TF_ERRLEN];	/* the first error since the last status call, or "" */
} CpuState;

/* fn over [0, n) in chunks of grain on the backend's threads (pool.h). */
static void
par_for(TfBackend *be, long n, long grain, TfPoolFn fn, void *arg)
{
	CpuState   *st = be->state;

	if (!st->keep_gradient16)
		st->gradient = NULL;
	tf_pool_for(st->pool, st->threads, n, grain, fn, arg);
}

/* Ends the cross-entropy gradient's bf16 copy (an operation that does not go through par_for). */
static void
gradient16_end(TfBackend *be)
{
	((CpuState *) be->state)->gradient = NULL;
}

/* Rows per chunk of a loop over rows of `cols` elements. */
static long
row_grain(long cols)
{
	return cols >= ELEMENT_GRAIN ? 1 : ELEMENT_GRAIN / (cols > 0 ? cols : 1);
}

/*
 * Zeroed memory straight from mmap (a 64-byte header keeps the size), so
 * that a freed arena goes back to the system whatever malloc's tuning.
 */
#define ALLOC_HEADER 64

static void *
cpu_alloc(TfBackend *be, size_t bytes)
{
	size_t		total = bytes + ALLOC_HEADER;
	char	   *p;

	p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	*(size_t *) p = total;
	be->bytes += (int64_t) bytes;
	return p + ALLOC_HEADER;
}

static void
cpu_free(TfBackend *be, void *ptr)
{
	char	   *p;

	if (ptr == NULL)
		return;
	p = (char *) ptr - ALLOC_HEADER;
	be->bytes -= (int64_t) (*(size_t *) p - ALLOC_HEADER);
	munmap(p, *(size_t *) p);
}

static void
cpu_copy(TfBackend *be, void *dst, const void *src, size_t bytes)
{
	gradient16_end(be);
	memcpy(dst, src, bytes);
}

static void
cpu_zero(TfBackend *be, float *x, size_t n)
{
	gradient16_end(be);
	memset(x, 0, n * sizeof(float));
}

static void
cpu_copy_floats(TfBackend *be, float *dst, const float *src, size_t n)
{
	gradient16_end(be);
	memcpy(dst, src, n * sizeof(float));
}

/* Multiply-adds under which a product runs as one block on one thread. */
#define GEMM_SERIAL_WORK (1 << 20)
/* Strips a product is cut into where its size allows (work for up to as many threads). */
#define GEMM_BLOCKS 8

/* A product C = alpha op(A) op(B) + beta C cut into bm x bn blocks of C, row-block major. */
typedef struct GemmArgs
{
	bool		trans_a,
				trans_b;
	int			m,
				n,
				k,
				lda,
				ldb,
				ldc,
				bm,
				bn,
				blocks_n;
	float		alpha,
				beta;
	const float *a,
			   *b;
	float	   *c;
} GemmArgs;

static void
gemm_chunk(void *arg, long begin, long end, int worker)
{
	const GemmArgs *g = arg;
	long		blk;

	(void) worker;
	for (blk = begin; blk < end; blk++)
	{
		int			m0 = (int) (blk / g->blocks_n) * g->bm;
		int			n0 = (int) (blk % g->blocks_n) * g->bn;
		int			mc = g->m - m0 < g->bm ? g->m - m0 : g->bm;
		int			nc = g->n - n0 < g->bn ? g->n - n0 : g->bn;
		const float *a = g->trans_a ? g->a + m0 : g->a + (size_t) m0 * g->lda;
		const float *b = g->trans_b ? g->b + (size_t) n0 * g->ldb : g->b + n0;
		float	   *c = g->c + (size_t) m0 * g->ldc + n0;

		/*
		 * Up to four rows (a decoding step of one sentence and its beams): sgemm
		 * would pack the whole of B for them, costing more than the product
		 * (measured: 5x slower greedy decoding); sgemv streams B once per row.
		 */
		if (g->m <= 4)
		{
			int			i;

			for (i = 0; i < mc; i++)
				blas->sgemv(CblasRowMajor, g->trans_b ? CblasNoTrans : CblasTrans, g->trans_b ? nc : g->k,
							g->trans_b ? g->k : nc, g->alpha, b, g->ldb,
							g->trans_a ? a + i : a + (size_t) i * g->lda, g->trans_a ? g->lda : 1,
							g->beta, c + (size_t) i * g->ldc, 1);
			continue;
		}
		blas->sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans, g->trans_b ? CblasTrans : CblasNoTrans,
					mc, nc, g->k, g->alpha, a, g->lda, b, g->ldb, g->beta, c, g->ldc);
	}
}

/*
 * C's blocks, the whole K in each (so no sum is split): a product is cut
 * along one side only, into GEMM_BLOCKS strips (of at least 64 rows or 128
 * columns), across the longer of M and N: each strip's call packs the other
 * operand anew, so the smaller one is the one packed again. Measured with
 * bench/train_step small on 2 threads (this VM, medians of 3 alternating):
 * 256 x 512 blocks spent 15% of a step packing operands against 6% for
 * whole products on OpenBLAS's own threads; 16 strips 4,555 tokens/s, 8
 * strips 4,744, the OpenMP build 4,711. One block under GEMM_SERIAL_WORK.
 * Chosen by the shape alone, never by the thread count (OpenBLAS picks
 * other kernels for small products).
 */
static void
gemm_fp32(TfBackend *be, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
		  const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
	GemmArgs	g = {trans_a, trans_b, m, n, k, lda, ldb, ldc, m, n, 1, alpha, beta, a, b, c};
	long		blocks = 1;

	if (m <= 0 || n <= 0)
		return;
	if ((double) m * n * k >= GEMM_SERIAL_WORK)
	{
		if (m > n && m > 4)
		{
			g.bm = (m + GEMM_BLOCKS - 1) / GEMM_BLOCKS;
			g.bm = g.bm < 64 ? 64 : (g.bm + 15) / 16 * 16;
		}
		else
		{
			g.bn = (n + GEMM_BLOCKS - 1) / GEMM_BLOCKS;
			g.bn = g.bn < 128 ? 128 : (g.bn + 15) / 16 * 16;
		}
		g.bm = g.bm < m ? g.bm : m;
		g.bn = g.bn < n ? g.bn : n;
		g.blocks_n = (n + g.bn - 1) / g.bn;
		blocks = (long) ((m + g.bm - 1) / g.bm) * g.blocks_n;
	}
	par_for(be, blocks, 1, gemm_chunk, &g);
}

/* Keeps the first error since the last status call. */
static void
cpu_error(CpuState *st, const char *msg)
{
	if (st->error[0] == '\0')
		snprintf(st->error, sizeof(st->error), "%s", msg);
}

/*
 * A bf16 product's K, where both operands are rounded into scratch: rounded
 * up to this multiple with zeros (which add nothing), so that the weight
 * gradients' products, whose K is a batch's token count, take few shapes
 * (cpu_bf16.c makes a oneDNN primitive per shape).
 */
#define BF16_K_MULTIPLE 128

/* One operand rounded to bf16: src [rows, cols] (row stride ld) into dst [out_rows, out_cols], zero-padded. */
typedef struct RoundArgs
{
	const float *src;
	void	   *dst;
	int			rows,
				cols,
				ld,
				out_cols;
	bool		bits;			/* dst holds bf16 bits (oneDNN's operands), else the rounded floats */
} RoundArgs;

TF_CLONES static void
round_chunk(void *arg, long begin, long end, int worker)
{
	const RoundArgs *r = arg;
	long		i;
	int			j;

	(void) worker;
	for (i = begin; i < end; i++)
	{
		const float *s = r->src + (size_t) i * r->ld;
		int			cols = i < r->rows ? r->cols : 0;

		if (r->bits)
		{
			uint16_t   *d = (uint16_t *) r->dst + (size_t) i * r->out_cols;

			for (j = 0; j < cols; j++)
				d[j] = tf_bf16_bits(s[j]);
			memset(d + cols, 0, (size_t) (r->out_cols - cols) * sizeof(uint16_t));
		}
		else
		{
			float	   *d = (float *) r->dst + (size_t) i * r->out_cols;

			for (j = 0; j < cols; j++)
				d[j] = tf_bf16_round(s[j]);
			memset(d + cols, 0, (size_t) (r->out_cols - cols) * sizeof(float));
		}
	}
}

/* True when x points into the weights whose bf16 copy the backend keeps. */
static bool
in_weights16(const CpuState *st, const float *x)
{
	return st->weights16 != NULL && x >= st->weights && x < st->weights + st->num_weights;
}

/*
 * True when the operand [rows, cols] at x (row stride ld), zero-padded to
 * [out_rows, out_cols], lies in the cross-entropy gradient's bf16 copy.
 */
static bool
in_gradient16(const CpuState *st, const float *x, int rows, int cols, int ld, int out_rows, int out_cols)
{
	size_t		off;

	if (st->gradient == NULL || x < st->gradient || ld != st->gradient_ld || out_cols != cols)
		return false;
	off = (size_t) (x - st->gradient);
	return off / ld + rows <= (size_t) st->gradient_rows && off / ld + out_rows <= (size_t) st->gradient16_rows &&
		off % ld + cols <= (size_t) st->gradient_cols;
}

/* Ends the gradient copy's currency when [x, x + n) overlaps the gradient (something writes there). */
static void
gradient16_written(CpuState *st, const float *x, size_t n)
{
	if (st->gradient != NULL && x < st->gradient + (size_t) st->gradient_rows * st->gradient_ld &&
		st->gradient < x + n)
		st->gradient = NULL;
}

/*
 * A bf16 product's operand stored as [rows, cols] (row stride ld): its
 * place in the weights' copy, or x rounded into the backend's operand
 * slot and zero-padded to [out_rows, out_cols]. *ld_out receives its row
 * stride. NULL when out of memory.
 */
static const void *
operand16(TfBackend *be, int slot, const float *x, int rows, int cols, int ld, int out_rows, int out_cols,
		  int *ld_out)
{
	CpuState   *st = be->state;
	bool		bits = st->bf16 != NULL;
	RoundArgs	r = {x, NULL, rows, cols, ld, out_cols, bits};

	if (in_weights16(st, x))
	{
		*ld_out = ld;
		return st->weights16 + (x - st->weights);
	}
	if (in_gradient16(st, x, rows, cols, ld, out_rows, out_cols))
	{
		*ld_out = ld;
		return st->gradient16 + (x - st->gradient);
	}
	if (!cpu_scratch_grow(&st->operand[slot], &st->operand_capacity[slot],
			  (size_t) out_rows * out_cols * (bits ? sizeof(uint16_t) : sizeof(float))))
		return NULL;
	r.dst = st->operand[slot];
	par_for(be, out_rows, row_grain(out_cols), round_chunk, &r);
	*ld_out = out_cols;
	return r.dst;
}

/*
 * A product under the bf16 rules (docs/gpus.md#bf16-mixed-precision): both
 * operands rounded to bf16, sums in fp32. Where the CPU multiplies bf16
 * natively, oneDNN's bf16 matmul (cpu_bf16.c) on the weights' bf16 copy
 * and operands rounded into scratch; elsewhere the rounded values widened
 * back to floats through OpenBLAS, whose fp32 products of them are exact
 * (8-bit significands) and sum in fp32: the same rules.
 */
static void
gemm_bf16(TfBackend *be, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
		  const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
	CpuState   *st = be->state;
	int			kp = k,
				lda16,
				ldb16;
	const void *a16,
			   *b16;
	char		err[TF_ERRLEN];

	if (m <= 0 || n <= 0 || k <= 0)
	{
		gemm_fp32(be, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);	/* reads no operand */
		return;
	}
	if (!in_weights16(st, a) && !in_weights16(st, b))
		kp = (k + BF16_K_MULTIPLE - 1) / BF16_K_MULTIPLE * BF16_K_MULTIPLE;
	a16 = trans_a ? operand16(be, 0, a, k, m, lda, kp, m, &lda16) : operand16(be, 0, a, m, k, lda, m, kp, &lda16);
	b16 = trans_b ? operand16(be, 1, b, n, k, ldb, n, kp, &ldb16) : operand16(be, 1, b, k, n, ldb, kp, n, &ldb16);
	if (a16 == NULL || b16 == NULL)
	{
		snprintf(err, sizeof(err), "out of memory for the bf16 operands of a %d x %d x %d product", m, n, k);
		cpu_error(st, err);
		return;
	}
	if (st->bf16 == NULL)
		gemm_fp32(be, trans_a, trans_b, m, n, kp, alpha, a16, lda16, b16, ldb16, beta, c, ldc);
	else if (!cpu_bf16_gemm(st->bf16, st->pool, st->threads, trans_a, trans_b, m, n, kp, alpha, a16, lda16, b16,
							ldb16, beta, c, ldc, err, sizeof(err)))
		cpu_error(st, err);
}

static void
cpu_gemm(TfBackend *be, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
		 const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
	CpuState   *st = be->state;

	if (m > 0 && n > 0)
		gradient16_written(st, c, (size_t) (m - 1) * ldc + n);
	st->keep_gradient16 = true;
	if (st->precision == TF_BF16)
		gemm_bf16(be, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
	else
		gemm_fp32(be, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
	st->keep_gradient16 = false;
}

static void cpu_bias_rows(TfBackend *be, float *out, const float *bias, int rows, int cols, int ld);

/*
 * fp32 products of one row and of 9 to 64 rows go to OpenBLAS (sgemv,
 * sgemm), the others to oneDNN: its GEMM with weights in the nn.Linear
 * layout slows down 5-8x from 16 rows on, and OpenBLAS's sgemv is a little
 * faster for one row (bench/cpu_matmul, 512 -> 2048, microseconds: 1 row
 * 36 / sgemv 30; 8 rows 98 / sgemm 366; 32 rows 658 / 465; 128 rows 977 /
 * 1296).
 */
#define FP32_BLAS_MIN_ROWS 9
#define FP32_BLAS_MAX_ROWS 64

static void
cpu_linear(TfBackend *be, TfWeightType type, float *y, const float *x, const void *w, const float *scales,
		   const float *bias, int rows, int in, int out)
{
	CpuState   *st = be->state;
	char		err[TF_ERRLEN];

	gradient16_end(be);
	/* in bf16 fp32 weights go through gemm, which applies the rules */
	if (type == TF_WEIGHTS_FP32 &&
		(st->precision == TF_BF16 || rows == 1 || (rows >= FP32_BLAS_MIN_ROWS && rows <= FP32_BLAS_MAX_ROWS)))
	{
		if (bias != NULL)
			cpu_bias_rows(be, y, bias, rows, out, out);
		cpu_gemm(be, false, true, rows, out, in, 1.0f, x, in, w, in, bias != NULL ? 1.0f : 0.0f, y, out);
		return;
	}
	if (!cpu_matmul_linear(st->matmul, st->pool, st->threads, type, y, x, w, scales, bias, rows, in, out, err,
						   sizeof(err)) &&
		st->error[0] == '\0')
		snprintf(st->error, sizeof(st->error), "%s", err);
}

/*
 * The arguments of the simple loops below (each names what it reads): out
 * and x the row or element arrays, and the shape.
 */
typedef struct LoopArgs
{
	float	   *out;
	const float *x,
			   *y,
			   *z;
	const int32_t *ids,
			   *positions;
	const void *table;
	int			rows,
				rows2,
				cols,
				ld;
	float		scale,
				p;
	TfActivation f;
	const uint8_t *mask;
	uint8_t    *keep_mask;
	uint64_t	seed,
				stream;
} LoopArgs;

TF_CLONES static void
bias_rows_chunk(void *arg, long begin, long end, int worker)
{
	const LoopArgs *l = arg;
	long		r;

	(void) worker;
	for (r = begin; r < end; r++)
		memcpy(l->out + (size_t) r * l->ld, l->x, (size_t) l->cols * sizeof(float));
}

static void
cpu_bias_rows(TfBackend *be, float *out, const float *bias, int rows, int cols, int ld)
{
	LoopArgs	l = {.out = out, .x = bias, .cols = cols, .ld = ld};

	par_for(be, rows, row_grain(cols), bias_rows_chunk, &l);
}

TF_CLONES static void
bias_backward_chunk(void *arg, long begin, long end, int worker)
{
	const LoopArgs *l = arg;
	long		blk;

	(void) worker;
	for (blk = begin; blk < end; blk++)
	{
		int			c0 = (int) blk * COLUMN_BLOCK;
		int			c1 = c0 + COLUMN_BLOCK < l->cols ? c0 + COLUMN_BLOCK : l->cols;
		float		acc[COLUMN_BLOCK] = {0};
		int			r,
					c;

		for (r = 0; r < l->rows; r++)
			for (c = c0; c < c1; c++)
				acc[c - c0] += l->x[(size_t) r * l->ld + c];
		for (c = c0; c < c1; c++)
			l->out[c] += l->scale * acc[c - c0];
	}
}

static void
cpu_bias_backward(TfBackend *be, float *dbias, const float *dout, int rows, int cols, int ld, float scale)
{
	CpuState   *st = be->state;
	LoopArgs	l = {.out = dbias, .x = dout, .rows = rows, .cols = cols, .ld = ld, .scale = scale};

	gradient16_written(st, dbias, (size_t) cols);
	st->keep_gradient16 = true;
	par_for(be, (cols + COLUMN_BLOCK - 1) / COLUMN_BLOCK, 1, bias_backward_chunk, &l);
	st->keep_gradient16 = false;
}

void
tf_positional_encoding(float *pe, int positions, int d)
{
	int			pos,
				j;

	for (pos = 0; pos < positions; pos++)
		for (j = 0; j < d; j++)
		{
			double		angle = pos / pow(10000.0, (double) (j - j % 2) / d);

			pe[(size_t) pos * d + j] = (float) (j % 2 == 0 ? sin(angle) : cos(angle));
		}
}

void
tf_positional_encoding_fairseq(float *pe, int positions, int d, int first)
{
	int			half = d / 2,
				pos,
				i;
	float		step = (float) -(log(10000.0) / (half - 1));

	for (pos = 0; pos < positions; pos++)
		for (i = 0; i < half; i++)
		{
			/* as PyTorch computes them there: the frequency and the angle in float32 */
			float		freq = expf((float) i * step);
			float		angle = (float) (pos + first) * freq;

			pe[(size_t) pos * d + i] = sinf(angle);
			pe[(size_t) pos * d + half + i] = cosf(angle);
		}
}

static void cpu_dropout(TfBackend *be, float *out, const float *x, size_t n, float p, uint64_t seed,
						uint64_t stream, uint8_t *keep_mask);

TF_CLONES static void
embed_chunk(void *arg, long begin, long end, int worker)
{
	const LoopArgs *l = arg;
	int			d = l->cols;
	long		r;

	(void) worker;
	for (r = begin; r < end; r++)
	{
		const float *e = (const float *) l->table + (size_t) l->ids[r] * d;
		const float *pos = l->x + (size_t) l->positions[r] * d;
		float	   *o = l->out + (size_t) r * d;
		int			j;

		for (j = 0; j < d; j++)
			o[j] = e[j] * l->scale + pos[j];
	}
}

/* The embeddings, then dropout in place: two passes. */
static void
cpu_embed(TfBackend *be, float *out, const int32_t *ids, const int32_t *positions, const float *embedding,
		  const float *pe, int rows, int d, float scale, float p, uint64_t seed, uint64_t stream,
		  uint8_t *keep_mask)
{
	LoopArgs	l = {.out = out, .x = pe, .ids = ids, .positions = positions, .table = embedding, .cols = d,
	.scale = scale};

	par_for(be, rows, row_grain(d), embed_chunk, &l);
	cpu_dropout(be, out, out, (size_t) rows * d, p, seed, stream, keep_mask);
}

static void
embed_int8_chunk(void *arg, long begin, long end, int worker)
{
	const LoopArgs *l = arg;
	int			d = l->cols;
	long		r;

	(void) worker;
	for (r = begin; r < end; r++)
	{
		const int8_t *e = (const int8_t *) l->table + (size_t) l->ids[r] * d;
		const float *p = l->x + (size_t) l->positions[r] * d;
		float	   *o = l->out + (size_t) r * d;
		float		s = l->y[l->ids[r]] * l->scale;
		int			j;

		for (j = 0; j < d; j++)
			o[j] = (float) e[j] * s + p[j];
	}
}

static void
cpu_embed_int8(TfBackend *be, float *out, const int32_t *ids, const int32_t *positions, const int8_t *embedding,
			   const float *escale, const float *pe, int rows, int d, float scale)
{
	LoopArgs	l = {.out = out, .x = pe, .y = escale, .ids = ids, .positions = positions, .table = embedding,
	.cols = d, .scale = scale};

	par_for(be, rows, row_grain(d), embed_int8_chunk, &l);
}

/* Column blocks: each chunk owns some columns of every row, in row order. */
TF_CLONES static void
embed_backward_chunk(void *arg, long begin, long end, int worker)
{
	const LoopArgs *l = arg;
	int			d = l->cols,
				rows = l->rows;
	long		blk;

	(void) worker;
	for (blk = begin; blk < end; blk++)
	{
		int			c0 = (int) blk * COLUMN_BLOCK;
		int			c1 = c0 + COLUMN_BLOCK < d ? c0 + COLUMN_BLOCK : d;
		int			r,
					c;

		for (r = 0; r < rows + l->rows2; r++)
		{
			float	   *de = l->out + (size_t) l->ids[r] * d;
			const float *g = r < rows ? l->x + (size_t) r * d : l->y + (size_t) (r - rows) * d;

			for (c = c0; c < c1; c++)
				de[c] += l->scale * g[c];
		}
	}
}

static void
cpu_embed_backward(TfBackend *be, float *dembedding, const float *dout, int rows, const float *dout2, int rows2,
				   const int32_t *ids, const int32_t *groups, int unique, int d, float scale)
{
	LoopArgs	l = {.out = dembedding, .x = dout, .y = dout2, .ids = ids, .rows = rows, .rows2 = rows2, .cols = d,
	.scale = scale};

	(void) groups;
	(void) unique;
	par_for(be, (d + COLUMN_BLOCK - 1) / COLUMN_BLOCK, 1, embed_backward_chunk, &l);
}

/* One Philox block gives the words of 4 consecutive elements (tf_random_u32). */
TF_CLONES static void
dropout_chunk(void *arg, long begin, long end, int worker)
{
	const LoopArgs *l = arg;
	float		keep_scale = 1.0f / (1.0f - l->p);
	uint32_t	s0 = (uint32_t) l->stream,
				s1 = (uint32_t) (l->stream >> 32),
				k0 = (uint32_t) l->seed,
				k1 = (uint32_t) (l->seed >> 32);
	long		blk;

	(void) worker;
	for (blk = begin; blk < end; blk++)
	{
		uint32_t	w[4];
		int			k;

		tf_philox((uint32_t) blk, (uint32_t) ((uint64_t) blk >> 32), s0, s1, k0, k1, w);
		for (k = 0; k < 4; k++)
		{
			size_t		e = (size_t) blk * 4 + k;
			bool		keep = tf_word_uniform(w[k]) >= l->p;

			l->out[e] = keep ? l->x[e] * keep_scale : 0.0f;
			if (l->keep_mask != NULL)
				l->keep_mask[e] = keep;
		}
	}
}

static void
cpu_dropout(TfBackend *be, float *out, const float *x, size_t n, float p, uint64_t seed, uint64_t stream,
			uint8_t *keep_mask)
{
	long		full = (long) (n / 4);
	float		keep_scale = 1.0f / (1.0f - p);
	LoopArgs	l = {.out = out, .x = x, .p = p, .seed = seed, .stream = stream, .keep_mask = keep_mask};
	size_t		i;

	if (p <= 0.0f)
	{
		if (out != x)
			memcpy(out, x, n * sizeof(float));
		return;
	}
	par_for(be, full, ELEMENT_GRAIN / 4, dropout_chunk, &l);
	for (i = (size_t) full * 4; i < n; i++)
	{
		bool		keep = tf_random_uniform(seed, stream, i) >= p;

		out[i] = keep ? x[i] * keep_scale : 0.0f;
		if (keep_mask != NULL)
			keep_mask[i] = keep;
	}
}

TF_CLONES static void
dropout_backward_chunk(void *arg, long begin, long end, int worker)
{
	const LoopArgs *l = arg;
	float		keep_scale = 1.0f / (1.0f - l->p);
	long		i;

	(void) worker;
#pragma omp simd
	for (i = begin; i < end; i++)
		l->out[i] = l->mask[i] ? l->x[i] * keep_scale : 0.0f;
}

static void
cpu_dropout_backward(TfBackend *be, float *dx, const float *dout, size_t n, float p, const uint8_t *keep_mask)
{
	LoopArgs	l = {.out = dx, .x = dout, .p = p, .mask = keep_mask};

	if (p <= 0.0f)
	{
		if (dx != dout)
			memcpy(dx, dout, n * sizeof(float));
		return;
	}
	par_for(be, (long) n, ELEMENT_GRAIN, dropout_backward_chunk, &l);
}

TF_CLONES static void
add_chunk(void *arg, long begin, long end, int worker)
{
	const LoopArgs *l = arg;
	long		i;

	(void) worker;
	for (i = begin; i < end; i++)
		l->out[i] = l->x[i] + l->y[i];
}

static void
cpu_add(TfBackend *be, float *out, const float *a, const float *b, size_t n)
{
	LoopArgs	l = {.out = out, .x = a, .y = b};

	par_for(be, (long) n, ELEMENT_GRAIN, add_chunk, &l);
}

TF_CLONES static void
activation_chunk(void *arg, long begin, long end, int worker)
{
	const LoopArgs *l = arg;
	long		i;

	(void) worker;
	if (l->f == TF_RELU)
		for (i = begin; i < end; i++)
			l->out[i] = l->x[i] > 0.0f ? l->x[i] : 0.0f;
	else
		for (i = begin; i < end; i++)
			l->out[i] = tf_activation_value(l->f, l->x[i]);
}

static void
cpu_activation(TfBackend *be, TfActivation f, float *out, const float *x, size_t n)
{
	LoopArgs	l = {.out = out, .x = x, .f = f};

	par_for(be, (long) n, ELEMENT_GRAIN, activation_chunk, &l);
}

/* dx = dout * f'(x): out dx, x dout, y x. */
TF_CLONES static void
activation_backward_chunk(void *arg, long begin, long end, int worker)
{
	const LoopArgs *l = arg;
	long		i;

	(void) worker;
	if (l->f == TF_RELU)
		for (i = begin; i < end; i++)
			l->out[i] = l->y[i] > 0.0f ? l->x[i] : 0.0f;
	else
		for (i = begin; i < end; i++)
			l->out[i] = l->x[i] * tf_activation_slope(l->f, l->y[i]);
}

static void
cpu_activation_backward(TfBackend *be, TfActivation f, float *dx, const float *dout, const float *x, size_t n)
{
	LoopArgs	l = {.out = dx, .x = dout, .y = x, .f = f};

	par_for(be, (long) n, ELEMENT_GRAIN, activation_backward_chunk, &l);
}

/* LayerNorm's arguments, forward and backward. */
typedef struct NormArgs
{
	float	   *out,
			   *mean,
			   *rstd,
			   *dgamma,
			   *dbeta;
	const float *x,
			   *dout,
			   *gamma,
			   *beta,
			   *mean_in,
			   *rstd_in;
	int			rows,
				d;
	float		eps;
} NormArgs;

TF_CLONES static void
layernorm_chunk(void *arg, long begin, long end, int worker)
{
	const NormArgs *a = arg;
	int			d = a->d;
	long		r;

	(void) worker;
	for (r = begin; r < end; r++)
	{
		const float *xr = a->x + (size_t) r * d;
		float	   *o = a->out + (size_t) r * d;
		double		s = 0.0,
					ss = 0.0;
		float		m,
					rs;
		int			j;

#pragma omp simd reduction(+:s)
		for (j = 0; j < d; j++)
			s += xr[j];
		m = (float) (s / d);
#pragma omp simd reduction(+:ss)
		for (j = 0; j < d; j++)
		{
			double		t = xr[j] - m;

			ss += t * t;
		}
		rs = (float) (1.0 / sqrt(ss / d + a->eps));
#pragma omp simd
		for (j = 0; j < d; j++)
			o[j] = (xr[j] - m) * rs * a->gamma[j] + a->beta[j];
		a->mean[r] = m;
		a->rstd[r] = rs;
	}
}

static void
cpu_layernorm(TfBackend *be, float *out, float *mean, float *rstd, const float *x,
			  const float *gamma, const float *beta, int rows, int d, float eps)
{
	NormArgs	a = {.out = out, .mean = mean, .rstd = rstd, .x = x, .gamma = gamma, .beta = beta, .rows = rows,
	.d = d, .eps = eps};

	par_for(be, rows, row_grain(d), layernorm_chunk, &a);
}

/* dx row by row. */
TF_CLONES static void
layernorm_backward_rows(void *arg, long begin, long end, int worker)
{
	const NormArgs *a = arg;
	int			d = a->d;
	const float *mean = a->mean_in,
			   *rstd = a->rstd_in,
			   *gamma = a->gamma;
	long		r;

	(void) worker;
	for (r = begin; r < end; r++)
	{
		const float *xr = a->x + (size_t) r * d;
		const float *g = a->dout + (size_t) r * d;
		float	   *o = a->out + (size_t) r * d;
		double		sum_dxhat = 0.0,
					sum_dxhat_xhat = 0.0;
		float		ca,
					cb;
		int			j;

#pragma omp simd reduction(+:sum_dxhat, sum_dxhat_xhat)
		for (j = 0; j < d; j++)
		{
			float		xhat = (xr[j] - mean[r]) * rstd[r];
			float		dxhat = g[j] * gamma[j];

			sum_dxhat += dxhat;
			sum_dxhat_xhat += (double) dxhat * xhat;
		}
		ca = (float) (sum_dxhat / d);
		cb = (float) (sum_dxhat_xhat / d);
#pragma omp simd
		for (j = 0; j < d; j++)
		{
			float		xhat = (xr[j] - mean[r]) * rstd[r];

			o[j] = rstd[r] * (g[j] * gamma[j] - ca - xhat * cb);
		}
	}
}

/* dgamma and dbeta by column blocks, every row in order. */
TF_CLONES static void
layernorm_backward_columns(void *arg, long begin, long end, int worker)
{
	const NormArgs *a = arg;
	int			d = a->d;
	long		blk;

	(void) worker;
	for (blk = begin; blk < end; blk++)
	{
		int			c0 = (int) blk * COLUMN_BLOCK;
		int			c1 = c0 + COLUMN_BLOCK < d ? c0 + COLUMN_BLOCK : d;
		float		ag[COLUMN_BLOCK] = {0},
					ab[COLUMN_BLOCK] = {0};
		int			rr,
					c;

		for (rr = 0; rr < a->rows; rr++)
		{
			const float *xr = a->x + (size_t) rr * d;
			const float *g = a->dout + (size_t) rr * d;

			for (c = c0; c < c1; c++)
			{
				ag[c - c0] += g[c] * (xr[c] - a->mean_in[rr]) * a->rstd_in[rr];
				ab[c - c0] += g[c];
			}
		}
		for (c = c0; c < c1; c++)
		{
			a->dgamma[c] += ag[c - c0];
			a->dbeta[c] += ab[c - c0];
		}
	}
}

static void
cpu_layernorm_backward(TfBackend *be, float *dx, float *dgamma, float *dbeta, const float *dout,
					   const float *x, const float *mean, const float *rstd, const float *gamma,
					   int rows, int d)
{
	NormArgs	a = {.out = dx, .dgamma = dgamma, .dbeta = dbeta, .x = x, .dout = dout, .gamma = gamma,
	.mean_in = mean, .rstd_in = rstd, .rows = rows, .d = d};

	par_for(be, rows, row_grain(d), layernorm_backward_rows, &a);
	par_for(be, (d + COLUMN_BLOCK - 1) / COLUMN_BLOCK, 1, layernorm_backward_columns, &a);
}

/* The post-norm residual as dropout, add and layernorm in turn (backend.h). */
static void
cpu_residual_layernorm(TfBackend *be, float *out, float *mean, float *rstd, float *r, const float *x,
					   const float *y, const float *gamma, const float *beta, int rows, int d, float eps, float p,
					   uint64_t seed, uint64_t stream, uint8_t *keep_mask)
{
	size_t		n = (size_t) rows * d;

	if (p > 0.0f)
	{
		cpu_dropout(be, r, y, n, p, seed, stream, keep_mask);
		cpu_add(be, r, x, r, n);
	}
	else
		cpu_add(be, r, x, y, n);	/* dropout would be a copy: decoding's sub-layers */
	cpu_layernorm(be, out, mean, rstd, r, gamma, beta, rows, d, eps);
}

static void
cpu_residual_layernorm_backward(TfBackend *be, float *dr, float *dy, float *dgamma, float *dbeta,
								const float *dout, const float *r, const float *mean, const float *rstd,
								const float *gamma, int rows, int d, float p, const uint8_t *keep_mask)
{
	cpu_layernorm_backward(be, dr, dgamma, dbeta, dout, r, mean, rstd, gamma, rows, d);
	cpu_dropout_backward(be, dy, dr, (size_t) rows * d, p, keep_mask);
}

/* The backwards above add their dgamma and dbeta at once: nothing waits. */
static void
cpu_layernorm_backward_finish(TfBackend *be)
{
	(void) be;
}

/* Grows the attention scratch to two planes of `per_thread` floats per thread; false when out of memory. */
static bool
cpu_reserve(TfBackend *be, size_t per_thread, size_t row_stats, size_t operand)
{
	CpuState   *st = be->state;
	float	   *s;

	(void) row_stats;			/* the backward recomputes per (sentence, head) plane */
	(void) operand;				/* products read fp32 */
	if (per_thread <= st->scratch_per_thread)
		return true;
	s = realloc(st->scratch, 2 * per_thread * st->threads * sizeof(float));
	if (s == NULL)
		return false;
	st->scratch = s;
	st->scratch_per_thread = per_thread;
	return true;
}

/* True when attention-probability element e survives attention dropout. */
static inline bool
kept(const TfAttentionShape *sh, size_t e)
{
	return sh->dropout <= 0.0f || tf_random_uniform(sh->seed, sh->stream, e) >= sh->dropout;
}

/* One (sentence, head) pair of an attention call. */
typedef struct AttnPair
{
	int			lq,
				lk;				/* query and key counts */
	size_t		q_row,
				k_row;			/* first query / key row */
	size_t		p_off;			/* first probability of this head */
} AttnPair;

static inline AttnPair
attn_pair(const TfAttentionShape *sh, int pair)
{
	int			b = pair / sh->num_heads;
	int			h = pair % sh->num_heads;
	AttnPair	a;

	a.q_row = (size_t) sh->q_start[b];
	a.k_row = (size_t) sh->k_start[b];
	a.lq = sh->q_start[b + 1] - sh->q_start[b];
	a.lk = sh->k_len != NULL ? sh->k_len[b] : sh->k_start[b + 1] - sh->k_start[b];
	a.p_off = (size_t) sh->p_start[b] + (size_t) h * a.lq * a.lk;
	return a;
}

/*
 * Attention of one query (a decoding step) without BLAS calls, which cost
 * more than the arithmetic at these sizes: p = softmax(q K^T * scale) over
 * lk keys, ctx = p V, *lse = the scores' log-sum-exp (lse NULL: not
 * wanted). q and ctx [dk]; K and V rows of stride ldk; p [lk].
 */
static void
attention_one_query(float *ctx, float *p, float *lse, const float *q, const float *k, const float *v, int ldk,
					int lk, int dk, float scale)
{
	float		mx = -INFINITY;
	double		sum = 0.0;
	int			j,
				c;

	for (j = 0; j < lk; j++)
	{
		const float *kr = k + (size_t) j * ldk;
		float		dot = 0.0f;

#pragma omp simd reduction(+:dot)
		for (c = 0; c < dk; c++)
			dot += q[c] * kr[c];
		p[j] = dot * scale;
		mx = p[j] > mx ? p[j] : mx;
	}
	for (j = 0; j < lk; j++)
	{
		p[j] = expf(p[j] - mx);
		sum += p[j];
	}
	if (lse != NULL)
		*lse = mx + (float) log(sum);
	memset(ctx, 0, dk * sizeof(float));
	for (j = 0; j < lk; j++)
	{
		const float *vr = v + (size_t) j * ldk;
		float		w = (float) (p[j] / sum);

		p[j] = w;
#pragma omp simd
		for (c = 0; c < dk; c++)
			ctx[c] += w * vr[c];
	}
}

/* Keys query row i of a pair sees: all, or 0..i when causal. */
static inline int
visible_keys(const TfAttentionShape *sh, const AttnPair *a, int i)
{
	return sh->causal && i + 1 < a->lk ? i + 1 : a->lk;
}

/*
 * The pair's scaled scores S = Q K^T * scale [lq, lk] into p. Query rows
 * of stride ldq, key rows of stride ldk.
 */
static void
pair_scores(float *p, const AttnPair *a, const float *qb, int ldq, const float *kb, int ldk, int dk, float scale)
{
	blas->sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, a->lq, a->lk, dk,
				scale, qb, ldq, kb, ldk, 0.0f, p, a->lk);
}

/* An attention call's arguments (forward and backward). */
typedef struct AttnArgs
{
	const CpuState *st;
	const TfAttentionShape *sh;
	float	   *ctx,
			   *lse,
			   *probs,
			   *dq,
			   *dk,
			   *dv;
	const float *q,
			   *k,
			   *v,
			   *dctx,
			   *lse_in;
	int			ldq,			/* of q and dq */
				ldk,			/* of k, v, dk and dv */
				ldq_in,			/* of the q and dctx read (d where bf16 rounded them into a copy) */
				ldk_in;			/* of the k and v read */
	bool		bf16;			/* docs/gpus.md's bf16 rules: q, k, v and dctx are rounded copies */
} AttnArgs;

/*
 * Pairs per chunk: whole sentences (all their heads), as many as make
 * about ATTENTION_GRAIN multiply-adds of Q K^T and P V, from the shape alone.
 */
static long
attention_grain(const TfAttentionShape *sh)
{
	double		work = 0.0;
	long		sentences;
	int			b;

	for (b = 0; b < sh->batch; b++)
	{
		int			lq = sh->q_start[b + 1] - sh->q_start[b];
		int			lk = sh->k_len != NULL ? sh->k_len[b] : sh->k_start[b + 1] - sh->k_start[b];

		work += 2.0 * lq * lk * sh->head_dim * sh->num_heads;
	}
	sentences = work <= ATTENTION_GRAIN ? sh->batch : (long) (sh->batch * (ATTENTION_GRAIN / work));
	return (long) sh->num_heads * (sentences > 1 ? sentences : 1);
}

/*
 * In bf16, points aa's q, k, v (and dctx, when set) at copies rounded to
 * bf16, packed [rows, d]: every product inside attention then reads its
 * operands so (docs/gpus.md#bf16-mixed-precision). false when out of memory
 * (the error kept for status).
 */
static bool
attention_rounded(TfBackend *be, AttnArgs *aa)
{
	CpuState   *st = be->state;
	const TfAttentionShape *sh = aa->sh;
	int			d = sh->num_heads * sh->head_dim,
				q_rows = sh->q_start[sh->batch],
				k_rows = 0,
				b;
	float	   *copy;
	RoundArgs	r = {.cols = d, .out_cols = d};

	aa->bf16 = st->precision == TF_BF16;
	if (!aa->bf16)
		return true;
	for (b = 0; b < sh->batch; b++)
	{
		int			end = sh->k_len != NULL ? sh->k_start[b] + sh->k_len[b] : sh->k_start[b + 1];

		k_rows = end > k_rows ? end : k_rows;
	}
	if (!cpu_scratch_grow((void **) &st->attention16, &st->attention16_capacity,
			  ((size_t) 2 * q_rows + 2 * k_rows) * d * sizeof(float)))
	{
		cpu_error(st, "out of memory for attention's bf16 operands");
		return false;
	}
	copy = st->attention16;
	r.src = aa->q, r.dst = copy, r.rows = q_rows, r.ld = aa->ldq;
	par_for(be, q_rows, row_grain(d), round_chunk, &r);
	aa->q = copy, copy += (size_t) q_rows * d;
	if (aa->dctx != NULL)
	{
		r.src = aa->dctx, r.dst = copy, r.ld = d;
		par_for(be, q_rows, row_grain(d), round_chunk, &r);
		aa->dctx = copy, copy += (size_t) q_rows * d;
	}
	r.src = aa->k, r.dst = copy, r.rows = k_rows, r.ld = aa->ldk;
	par_for(be, k_rows, row_grain(d), round_chunk, &r);
	aa->k = copy, copy += (size_t) k_rows * d;
	r.src = aa->v, r.dst = copy;
	par_for(be, k_rows, row_grain(d), round_chunk, &r);
	aa->v = copy;
	aa->ldq_in = d;
	aa->ldk_in = d;
	return true;
}

static void
attention_chunk(void *arg, long begin, long end, int worker)
{
	const AttnArgs *aa = arg;
	const CpuState *st = aa->st;
	const TfAttentionShape *sh = aa->sh;
	int			dk = sh->head_dim;
	int			d = sh->num_heads * dk;
	float		scale = 1.0f / sqrtf((float) dk);
	const float *q = aa->q,
			   *k = aa->k,
			   *v = aa->v;
	float	   *ctx = aa->ctx,
			   *lse = aa->lse,
			   *probs = aa->probs;
	int			ldq = aa->ldq_in,
				ldk = aa->ldk_in;
	long		pair;

	for (pair = begin; pair < end; pair++)
	{
		AttnPair	a = attn_pair(sh, pair);
		int			h = pair % sh->num_heads;
		const float *qb = q + a.q_row * ldq + h * dk;
		const float *kb = k + a.k_row * ldk + h * dk;
		const float *vb = v + a.k_row * ldk + h * dk;
		float	   *cb = ctx + a.q_row * d + h * dk;
		float	   *plane = st->scratch + (size_t) worker * 2 * st->scratch_per_thread;
		float	   *p = probs != NULL ? probs + a.p_off : plane;
		float	   *pd = plane + st->scratch_per_thread;
		float	   *lb = lse != NULL ? lse + a.q_row * sh->num_heads + h : NULL;
		size_t		n = (size_t) a.lq * a.lk;
		int			i,
					j;

		if (a.lq == 0)
			continue;
		if (a.lk == 0)
		{
			for (i = 0; i < a.lq; i++)
			{
				memset(cb + (size_t) i * d, 0, dk * sizeof(float));
				if (lb != NULL)
					lb[(size_t) i * sh->num_heads] = -INFINITY;
			}
			continue;
		}
		if (a.lq == 1 && sh->dropout <= 0.0f && !aa->bf16)
		{
			attention_one_query(cb, p, lb, qb, kb, vb, ldk, a.lk, dk, scale);
			continue;
		}
		pair_scores(p, &a, qb, ldq, kb, ldk, dk, scale);
		for (i = 0; i < a.lq; i++)
		{
			float	   *row = p + (size_t) i * a.lk;
			int			visible = visible_keys(sh, &a, i);
			float		mx = -INFINITY;
			double		sum = 0.0;

			for (j = 0; j < visible; j++)
				mx = row[j] > mx ? row[j] : mx;
			for (j = 0; j < visible; j++)
			{
				row[j] = expf(row[j] - mx);
				sum += row[j];
			}
			if (!aa->bf16)		/* bf16: P~ = exp(S - max) goes into the product, divided by the sum last */
				for (j = 0; j < visible; j++)
					row[j] = (float) (row[j] / sum);
			for (j = visible; j < a.lk; j++)
				row[j] = 0.0f;
			if (lb != NULL)
				lb[(size_t) i * sh->num_heads] = mx + (float) log(sum);
		}
		if (sh->dropout > 0.0f || aa->bf16)
		{
			size_t		e;
			float		keep_scale = sh->dropout > 0.0f ? 1.0f / (1.0f - sh->dropout) : 1.0f;

			for (e = 0; e < n; e++)
				pd[e] = kept(sh, a.p_off + e) ? p[e] * keep_scale : 0.0f;
			if (aa->bf16)
				for (e = 0; e < n; e++)
					pd[e] = tf_bf16_round(pd[e]);
		}
		blas->sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, a.lq, dk, a.lk,
					1.0f, sh->dropout > 0.0f || aa->bf16 ? pd : p, a.lk, vb, ldk, 0.0f, cb, d);
		if (aa->bf16)
			for (i = 0; i < a.lq; i++)
			{
				float	   *row = p + (size_t) i * a.lk;
				double		sum = 0.0;

				for (j = 0; j < visible_keys(sh, &a, i); j++)	/* the sum again, in the same order */
					sum += row[j];
				for (j = 0; j < dk; j++)
					cb[(size_t) i * d + j] = (float) (cb[(size_t) i * d + j] / sum);
				for (j = 0; j < a.lk; j++)	/* the probabilities kept, as in fp32 */
					row[j] = (float) (row[j] / sum);
			}
	}
}

static void
cpu_attention(TfBackend *be, float *ctx, float *lse, float *probs, const float *q, int ldq,
			  const float *k, const float *v, int ldk, const TfAttentionShape *sh)
{
	AttnArgs	aa = {.st = be->state, .sh = sh, .ctx = ctx, .lse = lse, .probs = probs, .q = q, .k = k, .v = v,
	.ldq = ldq, .ldk = ldk, .ldq_in = ldq, .ldk_in = ldk};

	if (attention_rounded(be, &aa))
		par_for(be, (long) sh->batch * sh->num_heads, attention_grain(sh), attention_chunk, &aa);
}

static void
attention_backward_chunk(void *arg, long begin, long end, int worker)
{
	const AttnArgs *aa = arg;
	const CpuState *st = aa->st;
	const TfAttentionShape *sh = aa->sh;
	int			hd = sh->head_dim;
	int			d = sh->num_heads * hd;
	float		scale = 1.0f / sqrtf((float) hd);
	float		keep_scale = sh->dropout > 0.0f ? 1.0f / (1.0f - sh->dropout) : 1.0f;
	const float *q = aa->q,
			   *k = aa->k,
			   *v = aa->v,
			   *dctx = aa->dctx,
			   *lse = aa->lse_in;
	float	   *dq = aa->dq,
			   *dk = aa->dk,
			   *dv = aa->dv;
	int			ldq = aa->ldq,
				ldk = aa->ldk;
	long		pair;

	for (pair = begin; pair < end; pair++)
	{
		AttnPair	a = attn_pair(sh, pair);
		int			h = pair % sh->num_heads;
		size_t		qoff = a.q_row * ldq + h * hd;
		size_t		koff = a.k_row * ldk + h * hd;
		const float *qb = q + a.q_row * aa->ldq_in + h * hd;	/* what is read: q, k and v or their copies */
		const float *kb = k + a.k_row * aa->ldk_in + h * hd;
		const float *vb = v + a.k_row * aa->ldk_in + h * hd;
		const float *dc = dctx + a.q_row * d + h * hd;
		const float *lb = lse + a.q_row * sh->num_heads + h;
		float	   *p = st->scratch + (size_t) worker * 2 * st->scratch_per_thread;
		float	   *dp = p + st->scratch_per_thread;	/* first the dropped-out P, then dP */
		size_t		n = (size_t) a.lq * a.lk;
		int			i,
					j;
		size_t		e;

		if (a.lk == 0)
		{
			for (i = 0; i < a.lq; i++)
				memset(dq + qoff + (size_t) i * ldq, 0, hd * sizeof(float));
			continue;
		}
		if (a.lq == 0)
		{
			for (j = 0; j < a.lk; j++)
			{
				memset(dk + koff + (size_t) j * ldk, 0, hd * sizeof(float));
				memset(dv + koff + (size_t) j * ldk, 0, hd * sizeof(float));
			}
			continue;
		}
		/* the probabilities again: P = exp(S - lse) where the query sees the key */
		pair_scores(p, &a, qb, aa->ldq_in, kb, aa->ldk_in, hd, scale);
		for (i = 0; i < a.lq; i++)
		{
			float	   *row = p + (size_t) i * a.lk;
			float		l = lb[(size_t) i * sh->num_heads];
			int			visible = visible_keys(sh, &a, i);

			for (j = 0; j < visible; j++)
				row[j] = expf(row[j] - l);
			for (j = visible; j < a.lk; j++)
				row[j] = 0.0f;
		}
		/* the dropped-out probabilities, from the generator */
		for (e = 0; e < n; e++)
			dp[e] = kept(sh, a.p_off + e) ? p[e] * keep_scale : 0.0f;
		if (aa->bf16)
			for (e = 0; e < n; e++)
				dp[e] = tf_bf16_round(dp[e]);
		/* dV = Pd^T dctx */
		blas->sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, a.lk, hd, a.lq,
					1.0f, dp, a.lk, dc, d, 0.0f, dv + koff, ldk);
		/* dPd = dctx V^T, then through the dropout mask */
		blas->sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, a.lq, a.lk, hd,
					1.0f, dc, d, vb, aa->ldk_in, 0.0f, dp, a.lk);
		if (sh->dropout > 0.0f)
			for (e = 0; e < n; e++)
				dp[e] = kept(sh, a.p_off + e) ? dp[e] * keep_scale : 0.0f;
		/*
		 * softmax backward: dS = P * (dP - sum(dP * P)), times the 1/sqrt(d_k)
		 * scale. The recomputed row sums to 1 only to the lse's rounding, and
		 * the rows of dS must sum to 0 (softmax is shift-invariant; a residue
		 * reaches dK amplified): sum(dP * P) / sum(P).
		 */
		for (i = 0; i < a.lq; i++)
		{
			const float *prow = p + (size_t) i * a.lk;
			float	   *drow = dp + (size_t) i * a.lk;
			double		dot = 0.0,
						total = 0.0;

			for (j = 0; j < a.lk; j++)
			{
				dot += (double) drow[j] * prow[j];
				total += prow[j];
			}
			dot /= total;
			for (j = 0; j < a.lk; j++)
				drow[j] = prow[j] * (drow[j] - (float) dot) * scale;
		}
		if (aa->bf16)
			for (e = 0; e < n; e++)
				dp[e] = tf_bf16_round(dp[e]);
		/* dQ = dS K, dK = dS^T Q */
		blas->sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, a.lq, hd, a.lk,
					1.0f, dp, a.lk, kb, aa->ldk_in, 0.0f, dq + qoff, ldq);
		blas->sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, a.lk, hd, a.lq,
					1.0f, dp, a.lk, qb, aa->ldq_in, 0.0f, dk + koff, ldk);
	}
}

static void
cpu_attention_backward(TfBackend *be, float *dq, float *dk, float *dv, const float *dctx,
					   const float *lse, const float *q, int ldq, const float *k, const float *v,
					   int ldk, const TfAttentionShape *sh)
{
	AttnArgs	aa = {.st = be->state, .sh = sh, .dq = dq, .dk = dk, .dv = dv, .q = q, .k = k, .v = v,
	.dctx = dctx, .lse_in = lse, .ldq = ldq, .ldk = ldk, .ldq_in = ldq, .ldk_in = ldk};

	if (!attention_rounded(be, &aa))
		return;

	par_for(be, (long) sh->batch * sh->num_heads, attention_grain(sh), attention_backward_chunk, &aa);
}

/* Cross-entropy's arguments. */
typedef struct CrossEntropyArgs
{
	float	   *logits;
	bool		gradient;
	const int32_t *labels;
	int			vocab,
				ld,
				pad_id;
	float		label_smoothing;
	double	   *row_loss;
	bool		round16;		/* bf16 training: the logits are read rounded to bf16 */
	uint16_t   *gradient16;		/* and the gradient's bf16 bits written here too (ld apart); NULL: not */
} CrossEntropyArgs;

TF_CLONES static void
cross_entropy_chunk(void *arg, long begin, long end, int worker)
{
	const CrossEntropyArgs *ce = arg;
	float	   *logits = ce->logits;
	bool		gradient = ce->gradient;
	const int32_t *labels = ce->labels;
	int			vocab = ce->vocab,
				pad_id = ce->pad_id;
	float		label_smoothing = ce->label_smoothing;
	double	   *row_loss = ce->row_loss;
	long		r;

	(void) worker;
	for (r = begin; r < end; r++)
	{
		float	   *x = logits + (size_t) r * ce->ld;
		float		mx = -INFINITY;
		float		sum = 0.0f,
					sum_x = 0.0f,
					label_logit;
		int			j;

		if (labels[r] == pad_id)
		{
			if (gradient)
				memset(x, 0, (size_t) vocab * sizeof(float));
			if (ce->gradient16 != NULL)
				memset(ce->gradient16 + (size_t) r * ce->ld, 0, (size_t) vocab * sizeof(uint16_t));
			row_loss[r] = 0.0;
			continue;
		}
		if (ce->round16)
			for (j = 0; j < vocab; j++)
				x[j] = tf_bf16_round(x[j]);
		label_logit = x[labels[r]];
#pragma omp simd reduction(max:mx)
		for (j = 0; j < vocab; j++)
			mx = x[j] > mx ? x[j] : mx;
#pragma omp simd reduction(+:sum, sum_x)
		for (j = 0; j < vocab; j++)
		{
			float		e = fast_expf(x[j] - mx);

			sum_x += x[j];
			if (gradient)
				x[j] = e;		/* one exp per logit in all */
			sum += e;
		}
		row_loss[r] = (double) mx + log((double) sum) - (1.0 - label_smoothing) * label_logit -
			(double) label_smoothing * sum_x / vocab;
		if (gradient)
		{
			/* softmax - q, q = (1 - eps) onehot + eps / V */
			float		inv = 1.0f / sum,
						smooth = label_smoothing / vocab;

#pragma omp simd
			for (j = 0; j < vocab; j++)
				x[j] = x[j] * inv - smooth;
			x[labels[r]] -= 1.0f - label_smoothing;
		}
		if (ce->gradient16 != NULL)
		{
			uint16_t   *g = ce->gradient16 + (size_t) r * ce->ld;

			for (j = 0; j < vocab; j++)
				g[j] = tf_bf16_bits(x[j]);
		}
	}
}

static void
cpu_cross_entropy(TfBackend *be, float *logits, bool gradient, const int32_t *labels, int rows,
				  int vocab, int ld, int pad_id, float label_smoothing, double *row_loss)
{
	CpuState   *st = be->state;
	CrossEntropyArgs ce = {logits, gradient, labels, vocab, ld, pad_id, label_smoothing, row_loss,
	gradient && st->precision == TF_BF16, NULL};
	int			padded = (rows + BF16_K_MULTIPLE - 1) / BF16_K_MULTIPLE * BF16_K_MULTIPLE;

	/* where oneDNN multiplies, the gradient's bits for the logits' two backward products */
	if (ce.round16 && st->bf16 != NULL && rows > 0 &&
		cpu_scratch_grow((void **) &st->gradient16, &st->gradient16_capacity, (size_t) padded * ld * sizeof(uint16_t)))
	{
		ce.gradient16 = st->gradient16;
		memset(st->gradient16 + (size_t) rows * ld, 0, (size_t) (padded - rows) * ld * sizeof(uint16_t));
	}
	par_for(be, rows, row_grain(vocab), cross_entropy_chunk, &ce);
	if (ce.gradient16 != NULL)
	{
		st->gradient = logits;
		st->gradient_rows = rows;
		st->gradient16_rows = padded;
		st->gradient_cols = vocab;
		st->gradient_ld = ld;
	}
}

static void
cpu_accumulate(TfBackend *be, double *out, const double *x, size_t n)
{
	double		total = 0.0;
	size_t		i;

	gradient16_end(be);
	for (i = 0; i < n; i++)
		total += x[i];
	*out += total;
}

/* Sum of squares' arguments: one partial per chunk of SUM_GRAIN elements. */
typedef struct SumArgs
{
	const float *x;
	double	   *partials;
} SumArgs;

TF_CLONES static void
sum_squares_chunk(void *arg, long begin, long end, int worker)
{
	const SumArgs *a = arg;
	double		local = 0.0;
	long		i;

	(void) worker;
	for (i = begin; i < end; i++)
		local += (double) a->x[i] * a->x[i];
	a->partials[begin / SUM_GRAIN] = local;
}

/*
 * The partials summed in chunk order, whoever ran them. Out of memory for
 * them: NaN, and the backend's status reports the error.
 */
static void
cpu_sum_squares(TfBackend *be, const float *x, size_t n, double *out)
{
	CpuState   *st = be->state;
	size_t		chunks = (n + SUM_GRAIN - 1) / SUM_GRAIN;
	SumArgs		a = {x, NULL};
	double		total = 0.0;
	size_t		c;

	if (chunks > st->partials_capacity)
	{
		double	   *p = realloc(st->partials, chunks * sizeof(double));

		if (p == NULL)
		{
			if (st->error[0] == '\0')
				snprintf(st->error, sizeof(st->error), "out of memory for %zu partial sums", chunks);
			*out = NAN;
			return;
		}
		st->partials = p;
		st->partials_capacity = chunks;
	}
	a.partials = st->partials;
	par_for(be, (long) n, SUM_GRAIN, sum_squares_chunk, &a);
	for (c = 0; c < chunks; c++)
		total += st->partials[c];
	*out = total;
}

/* Adam's arguments. */
typedef struct AdamArgs
{
	float	   *params,
			   *grads,
			   *m,
			   *v;
	float		grad_scale,
				step_size,
				beta1,
				beta2,
				eps,
				sqrt_bc2;
	uint16_t   *params16;		/* the weights' bf16 copy, refreshed in the same pass; NULL: none */
} AdamArgs;

TF_CLONES static void
adam_chunk(void *arg, long begin, long end, int worker)
{
	const AdamArgs *a = arg;
	float	   *params = a->params,
			   *grads = a->grads,
			   *m = a->m,
			   *v = a->v;
	long		i;

	(void) worker;
	for (i = begin; i < end; i++)
	{
		float		g = grads[i] * a->grad_scale;

		m[i] = a->beta1 * m[i] + (1.0f - a->beta1) * g;
		v[i] = a->beta2 * v[i] + (1.0f - a->beta2) * g * g;
		params[i] -= a->step_size * m[i] / (sqrtf(v[i]) / a->sqrt_bc2 + a->eps);
		grads[i] = 0.0f;
	}
	if (a->params16 != NULL)
		for (i = begin; i < end; i++)
			a->params16[i] = tf_bf16_bits(params[i]);
}

static void
cpu_adam(TfBackend *be, float *params, float *grads, float *m, float *v, size_t n, float grad_scale,
		 float lr, float beta1, float beta2, float eps, float bc1, float bc2)
{
	CpuState   *st = be->state;
	AdamArgs	a = {params, grads, m, v, grad_scale, lr / bc1, beta1, beta2, eps, sqrtf(bc2),
		st->weights16 != NULL && params == st->weights && n == st->num_weights ? st->weights16 : NULL};

	par_for(be, (long) n, ELEMENT_GRAIN, adam_chunk, &a);
}

/* Gather's arguments. */
typedef struct GatherArgs
{
	float	   *dst;
	size_t		dst_stride;
	const float *src;
	size_t		src_stride;
	const int32_t *rows;
	size_t		count;
} GatherArgs;

static void
gather_chunk(void *arg, long begin, long end, int worker)
{
	const GatherArgs *g = arg;
	long		i;

	(void) worker;
	for (i = begin; i < end; i++)
		memcpy(g->dst + (size_t) i * g->dst_stride,
			   g->src + (size_t) (g->rows != NULL ? g->rows[i] : i) * g->src_stride, g->count * sizeof(float));
}

static void
cpu_gather(TfBackend *be, float *dst, size_t dst_stride, const float *src, size_t src_stride,
		   const int32_t *rows, int n, size_t count)
{
	GatherArgs	g = {dst, dst_stride, src, src_stride, rows, count};
	int			i;

	gradient16_end(be);
	if (dst == src)
	{
		/* in place (rows increasing, rows[i] >= i): in order, so no source is overwritten first */
		for (i = 0; i < n; i++)
			if (rows[i] != i)
				memcpy(dst + (size_t) i * dst_stride, src + (size_t) rows[i] * src_stride, count * sizeof(float));
		return;
	}
	par_for(be, n, row_grain((long) count), gather_chunk, &g);
}

/* The CPU's caches are fp32: gather. */
static void
cpu_cache_gather(TfBackend *be, void *dst, size_t dst_stride, const void *src, size_t src_stride,
				 bool from_fp32, const int32_t *rows, int n, size_t count)
{
	(void) from_fp32;
	cpu_gather(be, dst, dst_stride, src, src_stride, rows, n, count);
}

/*
 * Eight floats (GCC/Clang vector extension: one AVX register where the code is
 * compiled for AVX, else two SSE halves), passed by address: by value their ABI
 * depends on the ISA the code is compiled for (-Wpsabi).
 */
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

/* fast_expf on eight lanes in place, the same arithmetic (so the same results). */
static inline void
fast_expf8(v8f *v)
{
	const v8f	lo = {-87.3f, -87.3f, -87.3f, -87.3f, -87.3f, -87.3f, -87.3f, -87.3f};
	v8f			x = *v;
	v8i			above = x > lo;
	v8f			n,
				r,
				p;
	v8i			bits;

	x = (v8f) (((v8i) x & above) | ((v8i) lo & ~above));
	n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;
	r = x - n * 0.693145752f - n * 1.42860677e-6f;
	p = 1.0f + r * (1.0f + r * (0.5f + r * (1.66666672e-1f + r * (4.16666679e-2f +
			r * (8.33333377e-3f + r * 1.38888892e-3f)))));
	bits = (__builtin_convertvector(n, v8i) + 127) << 23;
	*v = p * (v8f) bits;
}

/* Sum of exp(x[j] - mx) over n values, eight lanes at a time. */
static float
sum_exp(const float *x, int n, float mx)
{
	v8f			acc = {0.0f};
	float		sum = 0.0f;
	int			j,
				l;

	for (j = 0; j + 8 <= n; j += 8)
	{
		v8f			v;

		memcpy(&v, x + j, sizeof(v));
		v -= mx;
		fast_expf8(&v);
		acc += v;
	}
	for (; j < n; j++)
		sum += fast_expf(x[j] - mx);
	for (l = 0; l < 8; l++)
		sum += acc[l];
	return sum;
}

/* log_softmax_topk's arguments. */
typedef struct TopkArgs
{
	const float *logits;
	int			vocab,
				ld,
				k,
				skip_id,
				eos_id;
	float	   *top_logp,
			   *eos_logp;
	int32_t    *top_id;
} TopkArgs;

static void
topk_chunk(void *arg, long begin, long end, int worker)
{
	const TopkArgs *a = arg;
	const float *logits = a->logits;
	int			vocab = a->vocab,
				ld = a->ld,
				k = a->k,
				skip_id = a->skip_id,
				eos_id = a->eos_id;
	float	   *top_logp = a->top_logp,
			   *eos_logp = a->eos_logp;
	int32_t    *top_id = a->top_id;
	long		r;

	(void) worker;
	for (r = begin; r < end; r++)
	{
		const float *x = logits + (size_t) r * ld;
		float	   *tv = top_logp + (size_t) r * k;
		int32_t    *ti = top_id + (size_t) r * k;
		float		mx = -INFINITY;
		float		lse;
		int			filled = 0;
		int			j;

#pragma omp simd reduction(max:mx)
		for (j = 0; j < vocab; j++)
			mx = x[j] > mx ? x[j] : mx;
		lse = mx + logf(sum_exp(x, vocab, mx));
		/* insertion into a descending list; an equal value keeps the smaller id first */
		for (j = 0; j < vocab; j++)
		{
			int			p;

			if (j == skip_id || (filled == k && x[j] <= tv[k - 1]))
				continue;
			p = filled < k ? filled++ : k - 1;
			while (p > 0 && tv[p - 1] < x[j])
			{
				tv[p] = tv[p - 1];
				ti[p] = ti[p - 1];
				p--;
			}
			tv[p] = x[j];
			ti[p] = j;
		}
		for (j = 0; j < k; j++)
			tv[j] -= lse;
		eos_logp[r] = x[eos_id] - lse;
	}
}

static void
cpu_log_softmax_topk(TfBackend *be, const float *logits, int rows, int vocab, int ld, int k,
					 float *top_logp, int32_t *top_id, int skip_id, int eos_id, float *eos_logp)
{
	TopkArgs	a = {logits, vocab, ld, k, skip_id, eos_id, top_logp, eos_logp, top_id};

	par_for(be, rows, row_grain(vocab), topk_chunk, &a);
}

/* Grows the attention scratch for `threads` threads; false when out of memory. */
static bool
cpu_reserve_threads(CpuState *st, int threads)
{
	float	   *scratch;

	if (st->scratch_per_thread == 0)
		return true;
	scratch = realloc(st->scratch, 2 * st->scratch_per_thread * threads * sizeof(float));
	if (scratch == NULL)
		return false;
	st->scratch = scratch;
	return true;
}

/* The pool starts helpers when a call first wants them. Out of memory keeps the old count. */
static void
cpu_set_threads(TfBackend *be, int threads)
{
	CpuState   *st = be->state;

	if (threads < 1 || threads == st->threads)
		return;
	if (threads > TF_POOL_MAX_THREADS)
		threads = TF_POOL_MAX_THREADS;
	if (threads > st->threads && !cpu_reserve_threads(st, threads))
		return;
	st->threads = threads;
}

/* Rounds the weights into their bf16 copy, elements [begin, end). */
TF_CLONES static void
weights16_chunk(void *arg, long begin, long end, int worker)
{
	const CpuState *st = arg;
	long		i;

	(void) worker;
	for (i = begin; i < end; i++)
		st->weights16[i] = tf_bf16_bits(st->weights[i]);
}

/*
 * bf16 mixed precision (backend.h). Where the CPU multiplies bf16 natively
 * the weights get a bf16 copy, which oneDNN's products read; elsewhere
 * products round both operands at each call. Key/value caches stay fp32
 * (cache_bytes 4): attention rounds keys and values as it reads them,
 * which gives the values a bf16 cache would hold.
 */
static bool
cpu_set_precision(TfBackend *be, TfPrecision precision, const float *weights, size_t n)
{
	CpuState   *st = be->state;

	gradient16_end(be);
	if (precision != TF_BF16)
	{
		free(st->weights16);
		st->weights16 = NULL;
		st->weights = NULL;
		st->num_weights = 0;
		st->precision = TF_FP32;
		return true;
	}
	if (cpu_bf16_native() && st->bf16 == NULL && (st->bf16 = cpu_bf16_create()) == NULL)
		return false;
	if (st->bf16 != NULL && (st->weights16 == NULL || n != st->num_weights))
	{
		uint16_t   *w16 = realloc(st->weights16, (n > 0 ? n : 1) * sizeof(uint16_t));

		if (w16 == NULL)
			return false;
		st->weights16 = w16;
	}
	st->weights = weights;
	st->num_weights = n;
	st->precision = TF_BF16;
	if (st->weights16 != NULL)
		par_for(be, (long) n, ELEMENT_GRAIN, weights16_chunk, st);
	return true;
}

bool
tf_cpu_bf16_native(void)
{
	return cpu_bf16_native();
}

/* Releases the backend. */
static void
cpu_destroy(TfBackend *be)
{
	CpuState   *st = be->state;

	tf_pool_free(st->pool);
	cpu_matmul_free(st->matmul);
	cpu_bf16_free(st->bf16);
	free(st->weights16);
	free(st->operand[0]);
	free(st->operand[1]);
	free(st->attention16);
	free(st->gradient16);
	free(st->scratch);
	free(st->partials);
	free(st);
	free(be);
}

/*
 * Every CPU operation completes before it returns: nothing is ever pending;
 * the only errors are oneDNN's (linear).
 */
static int
cpu_status(TfBackend *be, char *err, size_t errlen)
{
	CpuState   *st = be->state;

	if (st->error[0] == '\0')
		return TF_OK;
	snprintf(err, errlen, "%s", st->error);
	st->error[0] = '\0';
	return TF_ERROR;
}

TfBackend *
tf_backend_cpu_create(int threads)
{
	TfBackend  *be = calloc(1, sizeof(TfBackend));
	CpuState   *st = calloc(1, sizeof(CpuState));

	if (threads < 1)
		threads = 1;
	if (threads > TF_POOL_MAX_THREADS)
		threads = TF_POOL_MAX_THREADS;
	if ((blas = tf_blas(NULL, 0)) == NULL || be == NULL || st == NULL || (st->pool = tf_pool_create()) == NULL ||
		(st->matmul = cpu_matmul_create()) == NULL)
	{
		if (st != NULL)
			tf_pool_free(st->pool);
		free(st);
		free(be);
		return NULL;
	}
	/* the pool spreads the products; OpenBLAS (process-wide) runs each block on its caller's thread */
	blas->set_num_threads(1);
	st->threads = threads;
	be->state = st;
	be->name = "cpu";
	be->host_memory = true;
	be->destroy = cpu_destroy;
	be->status = cpu_status;
	be->alloc = cpu_alloc;
	be->free = cpu_free;
	be->upload = cpu_copy;
	be->download = cpu_copy;
	be->zero = cpu_zero;
	be->copy = cpu_copy_floats;
	be->reserve = cpu_reserve;
	be->gemm = cpu_gemm;
	be->vocab_multiple = 1;
	be->bias_rows = cpu_bias_rows;
	be->bias_backward = cpu_bias_backward;
	be->embed = cpu_embed;
	be->embed_backward = cpu_embed_backward;
	be->dropout = cpu_dropout;
	be->dropout_backward = cpu_dropout_backward;
	be->add = cpu_add;
	be->activation = cpu_activation;
	be->activation_backward = cpu_activation_backward;
	be->layernorm = cpu_layernorm;
	be->layernorm_backward = cpu_layernorm_backward;
	be->residual_layernorm = cpu_residual_layernorm;
	be->residual_layernorm_backward = cpu_residual_layernorm_backward;
	be->layernorm_backward_finish = cpu_layernorm_backward_finish;
	be->attention = cpu_attention;
	be->attention_backward = cpu_attention_backward;
	be->cross_entropy = cpu_cross_entropy;
	be->accumulate = cpu_accumulate;
	be->sum_squares = cpu_sum_squares;
	be->adam = cpu_adam;
	be->gather = cpu_gather;
	be->cache_gather = cpu_cache_gather;
	be->cache_bytes = sizeof(float);
	be->log_softmax_topk = cpu_log_softmax_topk;
	be->set_threads = cpu_set_threads;
	be->set_precision = cpu_set_precision;
	be->linear = cpu_linear;
	be->embed_int8 = cpu_embed_int8;
	be->int8_weight_max = cpu_matmul_int8_weight_max();
	return be;
}
