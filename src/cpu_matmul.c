/*
 * cpu_matmul.c - products with fixed weights on the CPU through oneDNN's
 * matmul (cpu_matmul.h): fp32, and int8 with per-row weight scales and
 * activations quantized per row on the fly.
 *
 * One primitive per (weight type, in, out, bias, thread count), created on
 * first use with the row count a run-time dimension and kept: oneDNN
 * primitives are bound to the OpenMP thread count they were created under.
 * Weights are read where they lie, as a [in, out] matrix in oneDNN's "ba"
 * layout, which is the nn.Linear layout [out, in] row-major, so the model
 * holds one copy of each weight (the int8 embedding serves both the lookup
 * and the output projection) and nothing is reordered at load. oneDNN 2.6
 * computes these products with its JIT GEMM on plain layouts, packing
 * panels inside each call; left to choose ("any") it asks for the plain
 * transpose ("ab"), which measures the same at 128 rows, up to 1.3x faster
 * at 4-64 rows of one product and 2-5x slower at one row
 * (bench/cpu_matmul.c).
 */
#define _POSIX_C_SOURCE 200809L
#include "cpu_matmul.h"

#include <dnnl.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PRIMITIVES 64

typedef struct Primitive
{
	TfWeightType type;
	int			in,
				out,
				threads;
	bool		bias;
	dnnl_primitive_t prim;
} Primitive;

struct CpuMatmul
{
	dnnl_engine_t engine;
	dnnl_stream_t stream;
	Primitive	prims[MAX_PRIMITIVES];
	int			num_prims;
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
	if (dnnl_stream_create(&mm->stream, mm->engine, dnnl_stream_default_flags) != dnnl_success)
	{
		dnnl_engine_destroy(mm->engine);
		free(mm);
		return NULL;
	}
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
	dnnl_stream_destroy(mm->stream);
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

/* The cached primitive for a product, created now if new; NULL when oneDNN fails. */
static dnnl_primitive_t
primitive(CpuMatmul *mm, TfWeightType type, int in, int out, bool bias, int threads)
{
	dnnl_data_type_t dt = type == TF_WEIGHTS_INT8 ? dnnl_s8 : dnnl_f32;
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
		if (p->type == type && p->in == in && p->out == out && p->bias == bias && p->threads == threads)
			return p->prim;
	}
	if (!md2(&src, DNNL_RUNTIME_DIM_VAL, in, dt, dnnl_ab) || !md2(&wei, in, out, dt, dnnl_ba) ||
		!md2(&dst, DNNL_RUNTIME_DIM_VAL, out, dnnl_f32, dnnl_ab) ||
		(bias && !md2(&bmd, 1, out, dnnl_f32, dnnl_ab)) ||
		dnnl_matmul_desc_init(&desc, &src, &wei, bias ? &bmd : NULL, &dst) != dnnl_success ||
		dnnl_primitive_attr_create(&attr) != dnnl_success)
		return NULL;
	if (type == TF_WEIGHTS_INT8)
	{
		/* per output column (mask bit 1), given at each call */
		float		runtime = DNNL_RUNTIME_F32_VAL;

		if (dnnl_primitive_attr_set_output_scales(attr, 1, 1 << 1, &runtime) != dnnl_success)
			goto fail;
	}
	if (dnnl_primitive_desc_create(&pd, &desc, attr, mm->engine, NULL) != dnnl_success ||
		dnnl_primitive_create(&prim, pd) != dnnl_success)
		goto fail;
	dnnl_primitive_desc_destroy(pd);
	dnnl_primitive_attr_destroy(attr);
	if (mm->num_prims == MAX_PRIMITIVES)
	{
		/* more shapes than any model has: start over */
		for (i = 0; i < mm->num_prims; i++)
			dnnl_primitive_destroy(mm->prims[i].prim);
		mm->num_prims = 0;
	}
	p = &mm->prims[mm->num_prims++];
	p->type = type;
	p->in = in;
	p->out = out;
	p->bias = bias;
	p->threads = threads;
	p->prim = prim;
	return prim;

fail:
	if (pd != NULL)
		dnnl_primitive_desc_destroy(pd);
	dnnl_primitive_attr_destroy(attr);
	return NULL;
}

/*
 * Row-wise symmetric quantization of x [rows, in] into mm->xq with scales
 * mm->xs. Round to nearest even by adding and subtracting 1.5 * 2^23 (exact
 * for |v| <= 127), which vectorizes where lrintf would not.
 */
static void
quantize_rows(CpuMatmul *mm, const float *x, int rows, int in, int threads)
{
	int			r;

#pragma omp parallel for num_threads(threads) schedule(static)
	for (r = 0; r < rows; r++)
	{
		const float *xr = x + (size_t) r * in;
		int8_t	   *q = mm->xq + (size_t) r * in;
		float		amax = 0.0f,
					inv;
		int			k;

		for (k = 0; k < in; k++)
			amax = fmaxf(amax, fabsf(xr[k]));
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

bool
cpu_matmul_linear(CpuMatmul *mm, int threads, TfWeightType type, float *y, const float *x, const void *w,
				  const float *scales, const float *bias, int rows, int in, int out, char *err, size_t errlen)
{
	bool		int8 = type == TF_WEIGHTS_INT8;
	dnnl_data_type_t dt = int8 ? dnnl_s8 : dnnl_f32;
	/* int8: the bias is added with the row scales, after the product */
	dnnl_primitive_t prim = primitive(mm, type, in, out, !int8 && bias != NULL, threads);
	dnnl_memory_desc_t src_md,
				wei_md,
				dst_md,
				vec_md;
	dnnl_memory_t mem[4] = {NULL, NULL, NULL, NULL};
	dnnl_exec_arg_t args[4];
	int			nargs = 3,
				i;
	bool		ok;

	if (prim == NULL || (int8 && !reserve(mm, rows, in)))
	{
		snprintf(err, errlen, "oneDNN could not prepare a %s product of %d x %d weights for %d rows (out of memory?)",
				 int8 ? "int8" : "fp32", out, in, rows);
		return false;
	}
	if (int8)
		quantize_rows(mm, x, rows, in, threads);
	ok = md2(&src_md, rows, in, dt, dnnl_ab) && md2(&wei_md, in, out, dt, dnnl_ba) &&
		md2(&dst_md, rows, out, dnnl_f32, dnnl_ab) &&
		dnnl_memory_create(&mem[0], &src_md, mm->engine, int8 ? (void *) mm->xq : (void *) x) == dnnl_success &&
		dnnl_memory_create(&mem[1], &wei_md, mm->engine, (void *) w) == dnnl_success &&
		dnnl_memory_create(&mem[2], &dst_md, mm->engine, y) == dnnl_success;
	args[0] = (dnnl_exec_arg_t) {DNNL_ARG_SRC, mem[0]};
	args[1] = (dnnl_exec_arg_t) {DNNL_ARG_WEIGHTS, mem[1]};
	args[2] = (dnnl_exec_arg_t) {DNNL_ARG_DST, mem[2]};
	if (ok && int8)
	{
		dnnl_dims_t n = {out};

		ok = dnnl_memory_desc_init_by_tag(&vec_md, 1, n, dnnl_f32, dnnl_a) == dnnl_success &&
			dnnl_memory_create(&mem[3], &vec_md, mm->engine, (void *) scales) == dnnl_success;
		args[nargs++] = (dnnl_exec_arg_t) {DNNL_ARG_ATTR_OUTPUT_SCALES, mem[3]};
	}
	else if (ok && bias != NULL)
	{
		ok = md2(&vec_md, 1, out, dnnl_f32, dnnl_ab) &&
			dnnl_memory_create(&mem[3], &vec_md, mm->engine, (void *) bias) == dnnl_success;
		args[nargs++] = (dnnl_exec_arg_t) {DNNL_ARG_BIAS, mem[3]};
	}
	if (ok)
	{
		/* oneDNN's OpenMP regions take the calling thread's count */
		omp_set_num_threads(threads);
		ok = dnnl_primitive_execute(prim, mm->stream, nargs, args) == dnnl_success &&
			dnnl_stream_wait(mm->stream) == dnnl_success;
	}
	for (i = 0; i < 4; i++)
		if (mem[i] != NULL)
			dnnl_memory_destroy(mem[i]);
	if (!ok)
	{
		snprintf(err, errlen, "oneDNN failed computing a %s product of %d x %d weights for %d rows",
				 int8 ? "int8" : "fp32", out, in, rows);
		return false;
	}
	if (int8)
	{
		int			r;

#pragma omp parallel for num_threads(threads) schedule(static)
		for (r = 0; r < rows; r++)
		{
			float	   *yr = y + (size_t) r * out;
			float		s = mm->xs[r];
			int			n;

			if (bias != NULL)
				for (n = 0; n < out; n++)
					yr[n] = yr[n] * s + bias[n];
			else
				for (n = 0; n < out; n++)
					yr[n] *= s;
		}
	}
	return true;
}
