/*
 * cpu_matmul.c - products with fixed weights on the CPU through oneDNN's
 * matmul (cpu_matmul.h): fp32, and int8 with per-row weight scales and
 * activations quantized per row on the fly.
 *
 * A product is cut into fixed blocks of output columns (chosen by its
 * shape alone, so the bits never depend on the thread count), each
 * computed by oneDNN on one thread of the backend's pool (pool.h) with its
 * own stream; oneDNN's OpenMP build runs single-threaded there (the pool
 * sets every thread's OpenMP count to one), so no OpenMP team ever spins.
 * Weights are read where they lie, as a [in, out] matrix in oneDNN's "ba"
 * layout, which is the nn.Linear layout [out, in] row-major, so the model
 * holds one copy of each weight (the int8 embedding serves both the lookup
 * and the output projection) and nothing is reordered at load.
 *
 * fp32: one primitive per (in, block width, out, bias) with the row count
 * a run-time dimension, writing y in place. oneDNN 2.6 computes these with
 * its JIT GEMM on plain layouts, packing panels inside each call; left to
 * choose ("any") it asks for the plain transpose ("ab"), which measures the
 * same at 128 rows, up to 1.3x faster at 4-64 rows of one product and 2-5x
 * slower at one row (bench/cpu_matmul.c).
 *
 * int8: each block's int32 sums go to a dense buffer of its thread, and
 * the rescale (column scale, row scale, bias) writes y. Where oneDNN runs
 * AMX, the rows are also cut, into tiles of 64 and one tile for each power
 * of two in the rest (100 = 64 + 32 + 4), each (tile, block) a primitive
 * with a fixed row count: with run-time rows (or a strided destination,
 * or output scales) oneDNN 2.6 takes its JIT GEMM, whose AMX kernels run
 * with a scalar pass over every sum after them ("AMX igemm kernels don't
 * support row & col sums yet", gemm_driver.cpp), 2-4x the time of the
 * brgemm kernels that fixed rows select (bench/results/int8_brgemm-*).
 * Elsewhere (VNNI, AVX2) run-time primitives stay, on tiles of 256 rows
 * that bound the sums' buffer: there the JIT GEMM measured as fast as
 * brgemm from 4 rows on and 2.4x faster at one row (its matrix-vector
 * kernel). Integer sums are exact, so tiles and blocks change no bit.
 */
#define _POSIX_C_SOURCE 200809L
#include "cpu_matmul.h"

#include <dnnl.h>
#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* an int8 weight shape takes up to 2 widths for each of 7 tile heights: 14 */
#define MAX_PRIMITIVES 256
/*
 * Multiply-adds per block at least (fp32, int8), and blocks per product
 * (per int8 tile) at most: every block is a oneDNN call of its own (a few microseconds), and
 * int8 computes four times as fast, so its blocks are larger. Measured on
 * decoding of the small model at beam 4 (bench/decode, 2 threads, this VM,
 * against the OpenMP build): fp32 one sentence at a time 0.90x with blocks
 * of 2^20, 0.92x with 2^17; int8 0.84x with 2^17, 0.95x with 2^19
 * (bench/results/decode_pool-vm-20261128-*.txt); with int8 tiles (AMX),
 * 2^20 and 2^21 were no faster at batch 1 or 32.
 */
#define LINEAR_BLOCK_WORK_FP32 (1 << 17)
#define LINEAR_BLOCK_WORK_INT8 (1 << 19)
#define LINEAR_BLOCKS 16
/*
 * int8 row tiles on AMX CPUs: this many rows, then one tile per bit of the
 * rest; elsewhere run-time tiles of INT8_RUNTIME_ROWS and the rest, which
 * bound the per-thread sums buffer. Groups of tiles a product has at most.
 */
#define INT8_TILE_ROWS 64
#define INT8_RUNTIME_ROWS 256
#define MAX_TILE_GROUPS 7
_Static_assert(INT8_TILE_ROWS == 1 << (MAX_TILE_GROUPS - 1), "one group of full tiles, one per bit of the rest");
/* Quantized rows per chunk: about 16,384 elements. */
#define QUANTIZE_GRAIN_ELEMENTS 16384

typedef struct Primitive
{
	TfWeightType type;
	int64_t		rows;			/* DNNL_RUNTIME_DIM_VAL, or an int8 tile's fixed row count */
	int			in,
				cols,
				out;
	bool		bias;
	dnnl_primitive_t prim;
	dnnl_memory_desc_t scratch_md;	/* the scratchpad it asks for (user mode: one per thread) */
	size_t		scratch_bytes;
} Primitive;

struct CpuMatmul
{
	dnnl_engine_t engine;
	dnnl_stream_t streams[TF_POOL_MAX_THREADS];	/* one per pool thread, made when first wanted */
	void	   *scratch[TF_POOL_MAX_THREADS];	/* one scratchpad per pool thread */
	size_t		scratch_capacity[TF_POOL_MAX_THREADS];
	int32_t    *acc[TF_POOL_MAX_THREADS];	/* int8: one block's sums per pool thread */
	size_t		acc_capacity[TF_POOL_MAX_THREADS];	/* in elements */
	Primitive	prims[MAX_PRIMITIVES];
	int			num_prims;
	bool		int8_tiles;		/* int8 in row tiles with fixed-row primitives (AMX CPUs) */
	int8_t	   *xq;				/* quantized activations [rows, in] */
	float	   *xs;				/* their row scales [rows] */
	size_t		xq_capacity,
				xs_capacity;
};

/* A memory descriptor [rows, cols] of type dt in layout tag; false when oneDNN refuses it. */
static bool
md2(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, dnnl_data_type_t dt, dnnl_format_tag_t tag)
{
	dnnl_dims_t dims = {rows, cols};

	return dnnl_memory_desc_init_by_tag(md, 2, dims, dt, tag) == dnnl_success;
}

CpuMatmul *
cpu_matmul_create(void)
{
	CpuMatmul  *mm = calloc(1, sizeof(CpuMatmul));

	if (mm == NULL)
		return NULL;
	if (dnnl_engine_create(&mm->engine, dnnl_cpu, 0) != dnnl_success)
	{
		free(mm);
		return NULL;
	}
	mm->int8_tiles = (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx;
	return mm;
}

void
cpu_matmul_free(CpuMatmul *mm)
{
	int			i;

	if (mm == NULL)
		return;
	for (i = 0; i < mm->num_prims; i++)
		dnnl_primitive_destroy(mm->prims[i].prim);
	for (i = 0; i < TF_POOL_MAX_THREADS; i++)
	{
		if (mm->streams[i] != NULL)
			dnnl_stream_destroy(mm->streams[i]);
		free(mm->scratch[i]);
		free(mm->acc[i]);
	}
	dnnl_engine_destroy(mm->engine);
	free(mm->xq);
	free(mm->xs);
	free(mm);
}

int
cpu_matmul_int8_weight_max(void)
{
	dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();

	/* ISA values are bit sets: avx512_core_bf16 and the AMX ones contain avx512_core_vnni's bits */
	return (isa & dnnl_cpu_isa_avx512_core_vnni) == dnnl_cpu_isa_avx512_core_vnni ? 127 : 63;
}

/*
 * A [rows, cols] destination of type dt whose rows are `ld` apart (rows may
 * be DNNL_RUNTIME_DIM_VAL); false when oneDNN refuses it.
 */
static bool
md_dst(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, int64_t ld, dnnl_data_type_t dt)
{
	dnnl_dims_t dims = {rows, cols};
	dnnl_dims_t strides = {ld, 1};

	return dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides) == dnnl_success;
}

/* Empties the primitive cache when fewer than `room` places are left (before a call looks any up). */
static void
make_room(CpuMatmul *mm, int room)
{
	int			i;

	if (mm->num_prims + room <= MAX_PRIMITIVES)
		return;
	/* more shapes than any model has: start over */
	for (i = 0; i < mm->num_prims; i++)
		dnnl_primitive_destroy(mm->prims[i].prim);
	mm->num_prims = 0;
}

/*
 * The cached primitive for a block of `cols` output columns of a product
 * with `out` in all and `rows` rows (DNNL_RUNTIME_DIM_VAL: set at each
 * call), created now if new (make_room first: never evicts); NULL when
 * oneDNN fails. fp32: f32 rows `out` apart, the bias fused when asked.
 * int8: dense int32 sums, no bias, no scales. Primitives run on several
 * threads at once, so each takes its scratchpad from its caller (user
 * mode): oneDNN's own is per thread only in some builds.
 */
static Primitive *
primitive(CpuMatmul *mm, TfWeightType type, int64_t rows, int in, int cols, int out, bool bias)
{
	bool		int8 = type == TF_WEIGHTS_INT8;
	dnnl_data_type_t dt = int8 ? dnnl_s8 : dnnl_f32;
	dnnl_memory_desc_t src,
				wei,
				dst,
				bmd;
	dnnl_matmul_desc_t desc;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_primitive_desc_t pd = NULL;
	dnnl_primitive_t prim = NULL;
	Primitive  *p;
	int			i;

	for (i = 0; i < mm->num_prims; i++)
	{
		p = &mm->prims[i];
		if (p->type == type && p->rows == rows && p->in == in && p->cols == cols && p->out == out &&
			p->bias == bias)
			return p;
	}
	if (mm->num_prims == MAX_PRIMITIVES)
		return NULL;
	if (!md2(&src, rows, in, dt, dnnl_ab) || !md2(&wei, in, cols, dt, dnnl_ba) ||
		!(int8 ? md2(&dst, rows, cols, dnnl_s32, dnnl_ab) : md_dst(&dst, rows, cols, out, dnnl_f32)) ||
		(bias && !md2(&bmd, 1, cols, dnnl_f32, dnnl_ab)) ||
		dnnl_matmul_desc_init(&desc, &src, &wei, bias ? &bmd : NULL, &dst) != dnnl_success ||
		dnnl_primitive_attr_create(&attr) != dnnl_success)
		return NULL;
	if (dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success ||
		dnnl_primitive_desc_create(&pd, &desc, attr, mm->engine, NULL) != dnnl_success ||
		dnnl_primitive_create(&prim, pd) != dnnl_success)
	{
		if (pd != NULL)
			dnnl_primitive_desc_destroy(pd);
		dnnl_primitive_attr_destroy(attr);
		return NULL;
	}
	p = &mm->prims[mm->num_prims++];
	{
		const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);

		p->scratch_bytes = smd != NULL ? dnnl_memory_desc_get_size(smd) : 0;
		if (smd != NULL)
			p->scratch_md = *smd;
	}
	dnnl_primitive_desc_destroy(pd);
	dnnl_primitive_attr_destroy(attr);
	p->type = type;
	p->rows = rows;
	p->in = in;
	p->cols = cols;
	p->out = out;
	p->bias = bias;
	p->prim = prim;
	return p;
}

/*
 * Tiles of `rows` rows each (fp32: one tile of all rows), from row0, cut
 * into blocks of `cols` output columns (the last may be narrower): the
 * work units [unit0, unit0 + tiles * blocks).
 */
typedef struct TileGroup
{
	int			row0,
				rows,
				tiles,
				cols;
	long		blocks,
				unit0;
	const Primitive *prim_full,
			   *prim_last;
} TileGroup;

/* One product's arguments, shared by its chunks. */
typedef struct LinearArgs
{
	CpuMatmul  *mm;
	TfWeightType type;
	float	   *y;
	const float *x;
	const void *w;
	const float *scales,
			   *bias;
	int			rows,
				in,
				out;
	TileGroup	groups[MAX_TILE_GROUPS];
	int			num_groups;
	_Atomic bool failed;
} LinearArgs;

/*
 * Row-wise symmetric quantization of x [rows, in] into mm->xq with scales
 * mm->xs, rows [begin, end). Round to nearest even by adding and
 * subtracting 1.5 * 2^23 (exact for |v| <= 127), which vectorizes where
 * lrintf would not; the maximum by comparison, which vectorizes where
 * fmaxf (a libm call without -ffinite-math-only) does not, and ignores a
 * NaN as fmaxf does.
 */
static void
quantize_chunk(void *arg, long begin, long end, int worker)
{
	const LinearArgs *la = arg;
	CpuMatmul  *mm = la->mm;
	int			in = la->in;
	long		r;

	(void) worker;
	for (r = begin; r < end; r++)
	{
		const float *xr = la->x + (size_t) r * in;
		int8_t	   *q = mm->xq + (size_t) r * in;
		float		amax = 0.0f,
					inv;
		int			k;

		for (k = 0; k < in; k++)
			amax = fabsf(xr[k]) > amax ? fabsf(xr[k]) : amax;
		inv = amax > 0.0f ? 127.0f / amax : 0.0f;
		for (k = 0; k < in; k++)
			q[k] = (int8_t) (int) ((xr[k] * inv + 12582912.0f) - 12582912.0f);
		mm->xs[r] = amax / 127.0f;
	}
}

/* Grows the activation scratch for rows x in; false when out of memory. */
static bool
reserve(CpuMatmul *mm, int rows, int in)
{
	size_t		q = (size_t) rows * in;

	if (q > mm->xq_capacity)
	{
		int8_t	   *p = realloc(mm->xq, q);

		if (p == NULL)
			return false;
		mm->xq = p;
		mm->xq_capacity = q;
	}
	if ((size_t) rows > mm->xs_capacity)
	{
		float	   *p = realloc(mm->xs, rows * sizeof(float));

		if (p == NULL)
			return false;
		mm->xs = p;
		mm->xs_capacity = rows;
	}
	return true;
}

/*
 * y[r0 .. r0 + rows, n0 .. n0 + cols] = acc * scales[n] * xs[r] + bias[n]
 * from a tile's dense int32 sums acc [rows, cols]: the column scale first,
 * as oneDNN's output scales had it.
 */
static void
rescale_tile(const LinearArgs *la, const int32_t *acc, int r0, int rows, int n0, int cols)
{
	const float *scales = la->scales + n0;
	int			r,
				n;

	for (r = 0; r < rows; r++)
	{
		const int32_t *ar = acc + (size_t) r * cols;
		float	   *yr = la->y + (size_t) (r0 + r) * la->out + n0;
		float		s = la->mm->xs[r0 + r];

		if (la->bias != NULL)
			for (n = 0; n < cols; n++)
				yr[n] = (float) ar[n] * scales[n] * s + la->bias[n0 + n];
		else
			for (n = 0; n < cols; n++)
				yr[n] = (float) ar[n] * scales[n] * s;
	}
}

/* Work units [begin, end): one (tile, block) each, oneDNN's product, then (int8) the rescale. */
static void
linear_chunk(void *arg, long begin, long end, int worker)
{
	LinearArgs *la = arg;
	CpuMatmul  *mm = la->mm;
	bool		int8 = la->type == TF_WEIGHTS_INT8;
	dnnl_data_type_t dt = int8 ? dnnl_s8 : dnnl_f32;
	size_t		wsize = int8 ? 1 : sizeof(float);
	long		u;

	for (u = begin; u < end; u++)
	{
		const TileGroup *g = &la->groups[0];
		long		local;
		int			r0,
					n0,
					cols;
		dnnl_memory_desc_t src_md,
					wei_md,
					dst_md,
					vec_md;
		const Primitive *prim;
		dnnl_memory_t mem[5] = {NULL, NULL, NULL, NULL, NULL};
		dnnl_exec_arg_t args[5];
		int			nargs = 3,
					i;
		bool		ok;

		while (u >= g->unit0 + g->tiles * g->blocks)
			g++;
		local = u - g->unit0;
		r0 = g->row0 + (int) (local / g->blocks) * g->rows;
		n0 = (int) (local % g->blocks) * g->cols;
		cols = la->out - n0 < g->cols ? la->out - n0 : g->cols;
		prim = cols == g->cols ? g->prim_full : g->prim_last;
		ok = md2(&src_md, g->rows, la->in, dt, dnnl_ab) && md2(&wei_md, la->in, cols, dt, dnnl_ba) &&
			(int8 ? md2(&dst_md, g->rows, cols, dnnl_s32, dnnl_ab) :
			 md_dst(&dst_md, g->rows, cols, la->out, dnnl_f32)) &&
			dnnl_memory_create(&mem[0], &src_md, mm->engine,
							   int8 ? (void *) (mm->xq + (size_t) r0 * la->in) :
							   (void *) (la->x + (size_t) r0 * la->in)) == dnnl_success &&
			dnnl_memory_create(&mem[1], &wei_md, mm->engine,
							   (void *) ((const char *) la->w + (size_t) n0 * la->in * wsize)) == dnnl_success &&
			dnnl_memory_create(&mem[2], &dst_md, mm->engine,
							   int8 ? (void *) mm->acc[worker] :
							   (void *) (la->y + (size_t) r0 * la->out + n0)) == dnnl_success;
		args[0] = (dnnl_exec_arg_t) {DNNL_ARG_SRC, mem[0]};
		args[1] = (dnnl_exec_arg_t) {DNNL_ARG_WEIGHTS, mem[1]};
		args[2] = (dnnl_exec_arg_t) {DNNL_ARG_DST, mem[2]};
		if (ok && !int8 && la->bias != NULL)
		{
			ok = md2(&vec_md, 1, cols, dnnl_f32, dnnl_ab) &&
				dnnl_memory_create(&mem[3], &vec_md, mm->engine, (void *) (la->bias + n0)) == dnnl_success;
			args[nargs++] = (dnnl_exec_arg_t) {DNNL_ARG_BIAS, mem[3]};
		}
		if (ok && prim->scratch_bytes > 0)
		{
			ok = dnnl_memory_create(&mem[4], &prim->scratch_md, mm->engine, mm->scratch[worker]) == dnnl_success;
			args[nargs++] = (dnnl_exec_arg_t) {DNNL_ARG_SCRATCHPAD, mem[4]};
		}
		if (ok)
			ok = dnnl_primitive_execute(prim->prim, mm->streams[worker], nargs, args) == dnnl_success &&
				dnnl_stream_wait(mm->streams[worker]) == dnnl_success;
		for (i = 0; i < 5; i++)
			if (mem[i] != NULL)
				dnnl_memory_destroy(mem[i]);
		if (!ok)
		{
			atomic_store(&la->failed, true);
			continue;
		}
		if (int8)
			rescale_tile(la, mm->acc[worker], r0, g->rows, n0, cols);
	}
}

/*
 * The block width for tiles of `rows` rows: whole 64-column groups,
 * out / LINEAR_BLOCKS wide, doubled until one block holds min_work
 * multiply-adds; a function of the shape alone.
 */
static int
block_width(int rows, int in, int out, double min_work)
{
	int			cols = (int) (((out + LINEAR_BLOCKS - 1) / LINEAR_BLOCKS + 63) / 64 * 64);

	while (cols < out && (double) rows * in * cols < min_work)
		cols *= 2;
	return cols < out ? cols : out;
}

/*
 * Fills la->groups, each with its width and primitives: fp32 one group of
 * all rows (run-time primitives); int8 on AMX CPUs tiles of INT8_TILE_ROWS
 * then one per set bit of the rest, largest first (fixed-row primitives);
 * int8 elsewhere tiles of INT8_RUNTIME_ROWS and the rest (run-time
 * primitives). false when oneDNN fails.
 */
static bool
plan_tiles(LinearArgs *la, bool int8)
{
	CpuMatmul  *mm = la->mm;
	double		min_work = int8 ? LINEAR_BLOCK_WORK_INT8 : LINEAR_BLOCK_WORK_FP32;
	long		units = 0;
	int			row0 = 0,
				tile = INT8_TILE_ROWS,
				g;

	la->num_groups = 0;
	if (!int8)
		la->groups[la->num_groups++] = (TileGroup) {.row0 = 0, .rows = la->rows, .tiles = 1};
	else if (!mm->int8_tiles)
	{
		if (la->rows >= INT8_RUNTIME_ROWS)
			la->groups[la->num_groups++] = (TileGroup) {.row0 = 0, .rows = INT8_RUNTIME_ROWS,
			.tiles = la->rows / INT8_RUNTIME_ROWS};
		row0 = la->rows / INT8_RUNTIME_ROWS * INT8_RUNTIME_ROWS;
		if (row0 < la->rows)
			la->groups[la->num_groups++] = (TileGroup) {.row0 = row0, .rows = la->rows - row0, .tiles = 1};
	}
	else
		for (; tile > 0; tile /= 2)
		{
			int			tiles = tile == INT8_TILE_ROWS ? (la->rows - row0) / tile : (la->rows - row0) >= tile;

			if (tiles == 0)
				continue;
			la->groups[la->num_groups++] = (TileGroup) {.row0 = row0, .rows = tile, .tiles = tiles};
			row0 += tiles * tile;
		}
	/* every group's two primitives fit beside each other */
	make_room(mm, 2 * la->num_groups);
	for (g = 0; g < la->num_groups; g++)
	{
		TileGroup  *t = &la->groups[g];
		int64_t		prim_rows = int8 && mm->int8_tiles ? t->rows : DNNL_RUNTIME_DIM_VAL;
		bool		bias = !int8 && la->bias != NULL;

		t->cols = block_width(t->rows, la->in, la->out, min_work);
		t->blocks = (la->out + t->cols - 1) / t->cols;
		t->unit0 = units;
		units += t->tiles * t->blocks;
		t->prim_full = primitive(mm, la->type, prim_rows, la->in, t->cols, la->out, bias);
		t->prim_last = la->out % t->cols == 0 ? t->prim_full :
			primitive(mm, la->type, prim_rows, la->in, la->out % t->cols, la->out, bias);
		if (t->prim_full == NULL || t->prim_last == NULL)
			return false;
	}
	return true;
}

/*
 * Readies pool threads [0, threads) for la's primitives: a stream, a
 * scratchpad and (int8) a sums buffer each. Returns how many could be
 * readied (a prefix; 0 when not even the caller's).
 */
static int
ready_threads(LinearArgs *la, int threads)
{
	CpuMatmul  *mm = la->mm;
	size_t		scratch = 0,
				acc = 0;
	int			g,
				i;

	for (g = 0; g < la->num_groups; g++)
	{
		const TileGroup *t = &la->groups[g];

		scratch = t->prim_full->scratch_bytes > scratch ? t->prim_full->scratch_bytes : scratch;
		scratch = t->prim_last->scratch_bytes > scratch ? t->prim_last->scratch_bytes : scratch;
		if (la->type == TF_WEIGHTS_INT8 && (size_t) t->rows * t->cols > acc)
			acc = (size_t) t->rows * t->cols;
	}
	for (i = 0; i < threads; i++)
	{
		if (mm->streams[i] == NULL &&
			dnnl_stream_create(&mm->streams[i], mm->engine, dnnl_stream_default_flags) != dnnl_success)
			mm->streams[i] = NULL;
		if (mm->streams[i] != NULL && scratch > mm->scratch_capacity[i])
		{
			void	   *p = realloc(mm->scratch[i], scratch);

			if (p != NULL)
			{
				mm->scratch[i] = p;
				mm->scratch_capacity[i] = scratch;
			}
		}
		if (acc > mm->acc_capacity[i])
		{
			int32_t    *p = realloc(mm->acc[i], acc * sizeof(int32_t));

			if (p != NULL)
			{
				mm->acc[i] = p;
				mm->acc_capacity[i] = acc;
			}
		}
		/* threads whose stream or buffers could not be made stay out */
		if (mm->streams[i] == NULL || scratch > mm->scratch_capacity[i] || acc > mm->acc_capacity[i])
			return i;
	}
	return threads;
}

bool
cpu_matmul_linear(CpuMatmul *mm, TfPool *pool, int threads, TfWeightType type, float *y, const float *x,
				  const void *w, const float *scales, const float *bias, int rows, int in, int out, char *err,
				  size_t errlen)
{
	bool		int8 = type == TF_WEIGHTS_INT8;
	LinearArgs	la = {.mm = mm, .type = type, .y = y, .x = x, .w = w, .scales = scales, .bias = bias,
	.rows = rows, .in = in, .out = out};
	const TileGroup *last;
	long		units;

	if (rows < 0 || in <= 0 || out <= 0)
	{
		snprintf(err, errlen, "an %s product of %d x %d weights for %d rows has no shape", int8 ? "int8" : "fp32",
				 out, in, rows);
		return false;
	}
	if (rows == 0)
		return true;
	atomic_init(&la.failed, false);
	/*
	 * oneDNN fixes a primitive's thread count when it is made, from the
	 * calling thread's OpenMP count, and its OpenMP regions take it: one,
	 * here and on the pool's helpers, so no OpenMP team ever starts.
	 */
	omp_set_num_threads(1);
	if (!plan_tiles(&la, int8) || (int8 && !reserve(mm, rows, in)))
	{
		snprintf(err, errlen, "oneDNN could not prepare an %s product of %d x %d weights for %d rows (out of memory?)",
				 int8 ? "int8" : "fp32", out, in, rows);
		return false;
	}
	last = &la.groups[la.num_groups - 1];
	units = last->unit0 + last->tiles * last->blocks;
	if (threads > units)
		threads = (int) units;
	if (threads > TF_POOL_MAX_THREADS)
		threads = TF_POOL_MAX_THREADS;
	threads = ready_threads(&la, threads);
	if (threads == 0)
	{
		snprintf(err, errlen, "out of memory for the streams and buffers of an %s product of %d x %d weights for %d rows",
				 int8 ? "int8" : "fp32", out, in, rows);
		return false;
	}
	if (int8)
		tf_pool_for(pool, threads, rows, in >= QUANTIZE_GRAIN_ELEMENTS ? 1 : QUANTIZE_GRAIN_ELEMENTS / in,
					quantize_chunk, &la);
	tf_pool_for(pool, threads, units, 1, linear_chunk, &la);
	if (atomic_load(&la.failed))
	{
		snprintf(err, errlen, "oneDNN failed computing an %s product of %d x %d weights for %d rows",
				 int8 ? "int8" : "fp32", out, in, rows);
		return false;
	}
	return true;
}
