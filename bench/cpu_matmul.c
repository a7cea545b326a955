/*
 * cpu_matmul.c - the products of decoding on the CPU, one call at a time:
 * oneDNN matmul in int8 (s8 x s8, per-column scales), fp32 and bf16 with a
 * run-time row count and weights in nn.Linear's layout (what
 * src/cpu_matmul.c does for int8 and fp32; bf16 is the third option
 * measured, not used), against OpenBLAS (cblas_sgemm, or cblas_sgemv per
 * row for up to 4 rows, as the CPU backend's gemm).
 * Also prints the weights layout oneDNN asks for when left to choose
 * ("any"), int8 with its weights in that layout when it is the transpose
 * ("ab"), whether the int8 product equals the exact integer one, and
 * int8 as src/cpu_matmul.c computes it since 0.4.0 ("tile": the row count
 * fixed in the primitive, int32 sums, no output scales, which selects
 * oneDNN's brgemm kernels), with the implementation oneDNN chose for each.
 *
 *   bench/cpu_matmul [REPS]
 *
 * Shapes: rows 1 to 128 (greedy and beam 4 at batch 1 to 32) times
 * the base model's products (512 -> 1536, 512 -> 2048, 2048 -> 512, 512 ->
 * 8000 logits). One line per shape with microseconds per call (best of 5
 * runs of REPS calls); run it beside nothing else.
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <dnnl.h>
#include <dnnl_debug.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static dnnl_engine_t engine;
static dnnl_stream_t stream;

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void
ok(dnnl_status_t s, const char *what)
{
	if (s != dnnl_success)
	{
		fprintf(stderr, "cpu_matmul: %s failed (%d)\n", what, (int) s);
		exit(1);
	}
}

static void
md2(dnnl_memory_desc_t *md, int64_t r, int64_t c, dnnl_data_type_t dt, dnnl_format_tag_t tag)
{
	dnnl_dims_t dims = {r, c};

	ok(dnnl_memory_desc_init_by_tag(md, 2, dims, dt, tag), "memory_desc_init");
}

/*
 * A matmul primitive [rows, in] x [in, out] -> f32 with a run-time row
 * count and weights in layout tag: dnnl_ba is nn.Linear's [out, in], as
 * src/cpu_matmul.c makes them; *layout receives the layout oneDNN asks for
 * when left to choose ("any"): "ba", "ab" (the transpose, [in, out]
 * row-major), "blocked" or "strided".
 */
static dnnl_primitive_t
make(dnnl_data_type_t dt, int in, int out, dnnl_format_tag_t tag, char *layout, size_t layout_len)
{
	dnnl_memory_desc_t src,
				wei,
				dst;
	dnnl_matmul_desc_t desc;
	dnnl_primitive_attr_t attr;
	dnnl_primitive_desc_t pd;
	dnnl_primitive_t prim;
	float		runtime = DNNL_RUNTIME_F32_VAL;
	const dnnl_memory_desc_t *chosen;
	int			pass;

	ok(dnnl_primitive_attr_create(&attr), "attr");
	if (dt == dnnl_s8)
		ok(dnnl_primitive_attr_set_output_scales(attr, 1, 1 << 1, &runtime), "output scales");
	md2(&src, DNNL_RUNTIME_DIM_VAL, in, dt, dnnl_ab);
	md2(&dst, DNNL_RUNTIME_DIM_VAL, out, dnnl_f32, dnnl_ab);
	for (pass = 0; pass < 2; pass++)
	{
		md2(&wei, in, out, dt, pass == 0 ? dnnl_format_tag_any : tag);
		ok(dnnl_matmul_desc_init(&desc, &src, &wei, NULL, &dst), "matmul_desc_init");
		ok(dnnl_primitive_desc_create(&pd, &desc, attr, engine, NULL), "primitive_desc");
		if (pass == 0)
		{
			chosen = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
			if (chosen->format_kind != dnnl_blocked)
				snprintf(layout, layout_len, "%s", dnnl_fmt_kind2str(chosen->format_kind));
			else
				snprintf(layout, layout_len, "%s", chosen->format_desc.blocking.inner_nblks != 0 ? "blocked" :
						 chosen->format_desc.blocking.strides[0] == 1 && chosen->format_desc.blocking.strides[1] == in
						 ? "ba" : chosen->format_desc.blocking.strides[1] == 1 &&
						 chosen->format_desc.blocking.strides[0] == out ? "ab" : "strided");
			dnnl_primitive_desc_destroy(pd);
		}
	}
	ok(dnnl_primitive_create(&prim, pd), "primitive");
	dnnl_primitive_desc_destroy(pd);
	dnnl_primitive_attr_destroy(attr);
	return prim;
}

/*
 * An int8 matmul primitive [rows, in] x [in, out] (weights "ba") -> dense
 * int32 with the row count fixed, as src/cpu_matmul.c makes its int8
 * tiles; *impl receives the implementation oneDNN chose.
 */
static dnnl_primitive_t
make_tile(int rows, int in, int out, const char **impl)
{
	dnnl_memory_desc_t src,
				wei,
				dst;
	dnnl_matmul_desc_t desc;
	dnnl_primitive_desc_t pd;
	dnnl_primitive_t prim;

	md2(&src, rows, in, dnnl_s8, dnnl_ab);
	md2(&wei, in, out, dnnl_s8, dnnl_ba);
	md2(&dst, rows, out, dnnl_s32, dnnl_ab);
	ok(dnnl_matmul_desc_init(&desc, &src, &wei, NULL, &dst), "matmul_desc_init");
	ok(dnnl_primitive_desc_create(&pd, &desc, NULL, engine, NULL), "primitive_desc");
	ok(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, impl), "impl");
	ok(dnnl_primitive_create(&prim, pd), "primitive");
	dnnl_primitive_desc_destroy(pd);
	return prim;
}

/*
 * Runs prim on x [rows, in] and w (layout tag) into y [rows, out]: f32, or
 * with scales NULL for int8 make_tile's dense int32 sums; int8 with scales
 * passes them as the output scales.
 */
static void
run(dnnl_primitive_t prim, dnnl_data_type_t dt, dnnl_format_tag_t tag, int rows, int in, int out, void *x, void *w,
	void *y, float *scales)
{
	dnnl_memory_desc_t smd,
				wmd,
				dmd,
				cmd;
	dnnl_memory_t mem[4];
	dnnl_dims_t n = {out};
	dnnl_exec_arg_t args[4];
	int			nargs = 3,
				i;

	md2(&smd, rows, in, dt, dnnl_ab);
	md2(&wmd, in, out, dt, tag);
	md2(&dmd, rows, out, dt == dnnl_s8 && scales == NULL ? dnnl_s32 : dnnl_f32, dnnl_ab);
	ok(dnnl_memory_create(&mem[0], &smd, engine, x), "src");
	ok(dnnl_memory_create(&mem[1], &wmd, engine, w), "weights");
	ok(dnnl_memory_create(&mem[2], &dmd, engine, y), "dst");
	args[0] = (dnnl_exec_arg_t) {DNNL_ARG_SRC, mem[0]};
	args[1] = (dnnl_exec_arg_t) {DNNL_ARG_WEIGHTS, mem[1]};
	args[2] = (dnnl_exec_arg_t) {DNNL_ARG_DST, mem[2]};
	if (dt == dnnl_s8 && scales != NULL)
	{
		ok(dnnl_memory_desc_init_by_tag(&cmd, 1, n, dnnl_f32, dnnl_a), "scales desc");
		ok(dnnl_memory_create(&mem[3], &cmd, engine, scales), "scales");
		args[nargs++] = (dnnl_exec_arg_t) {DNNL_ARG_ATTR_OUTPUT_SCALES, mem[3]};
	}
	ok(dnnl_primitive_execute(prim, stream, nargs, args), "execute");
	ok(dnnl_stream_wait(stream), "wait");
	for (i = 0; i < nargs; i++)
		dnnl_memory_destroy(mem[i]);
}

int
main(int argc, char **argv)
{
	static const int rows_list[] = {1, 4, 8, 16, 32, 64, 128};
	static const int shapes[][2] = {{512, 1536}, {512, 2048}, {2048, 512}, {512, 8000}};
	int			reps = argc > 1 ? atoi(argv[1]) : 100;
	size_t		s,
				ri;

	ok(dnnl_engine_create(&engine, dnnl_cpu, 0), "engine");
	ok(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags), "stream");
	printf("# bench/cpu_matmul %d: oneDNN %d.%d, isa 0x%x, %d threads; microseconds per call (best of 5 x %d)\n", reps,
		   dnnl_version()->major, dnnl_version()->minor, (unsigned) dnnl_get_effective_cpu_isa(), omp_get_max_threads(), reps);
	for (s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
	{
		int			in = shapes[s][0],
					out = shapes[s][1];
		float	   *wf = malloc((size_t) in * out * sizeof(float)),
				   *scales = malloc(out * sizeof(float));
		int8_t	   *wq = malloc((size_t) in * out),
				   *wt = malloc((size_t) in * out);
		uint16_t   *wb = malloc((size_t) in * out * 2);
		char		lq[16],
					lf[16],
					lb[16];
		dnnl_primitive_t pq = make(dnnl_s8, in, out, dnnl_ba, lq, sizeof(lq)),
					pt = make(dnnl_s8, in, out, dnnl_ab, lq, sizeof(lq)),
					pf = make(dnnl_f32, in, out, dnnl_ba, lf, sizeof(lf)),
					pb = make(dnnl_bf16, in, out, dnnl_ba, lb, sizeof(lb));
		size_t		i;

		for (i = 0; i < (size_t) in * out; i++)
		{
			wf[i] = (float) rand() / RAND_MAX - 0.5f;
			wq[i] = (int8_t) (rand() % 255 - 127);
			memcpy(&wb[i], (char *) &wf[i] + 2, 2);
		}
		for (i = 0; i < (size_t) out; i++)
			scales[i] = 1.0f;
		for (i = 0; i < (size_t) in * out; i++)
			wt[(i % in) * out + i / in] = wq[i];	/* [in, out] row-major: the "ab" layout */
		for (ri = 0; ri < sizeof(rows_list) / sizeof(rows_list[0]); ri++)
		{
			int			rows = rows_list[ri],
						rep,
						k,
						kind;
			float	   *xf = malloc((size_t) rows * in * sizeof(float)),
					   *y = malloc((size_t) rows * out * sizeof(float));
			int8_t	   *xq = malloc((size_t) rows * in);
			uint16_t   *xb = malloc((size_t) rows * in * 2);
			int32_t    *sums = malloc((size_t) rows * out * sizeof(int32_t));
			double		best[6] = {1e9, 1e9, 1e9, 1e9, 1e9, 1e9};
			long		wrong = 0,
						wrong_tile = 0;
			const char *impl;
			dnnl_primitive_t ptile = make_tile(rows, in, out, &impl);

			for (i = 0; i < (size_t) rows * in; i++)
			{
				xf[i] = (float) rand() / RAND_MAX - 0.5f;
				xq[i] = (int8_t) (rand() % 255 - 127);
				memcpy(&xb[i], (char *) &xf[i] + 2, 2);
			}
			run(pq, dnnl_s8, dnnl_ba, rows, in, out, xq, wq, y, scales);
			run(ptile, dnnl_s8, dnnl_ba, rows, in, out, xq, wq, sums, NULL);
			for (i = 0; i < (size_t) rows * out; i++)
			{
				long		sum = 0;

				for (k = 0; k < in; k++)
					sum += (long) xq[(i / out) * in + k] * wq[(i % out) * in + k];
				wrong += y[i] != (float) sum;
				wrong_tile += sums[i] != sum;
			}
			for (rep = 0; rep < 5; rep++)
				for (kind = 0; kind < 6; kind++)
				{
					double		t0 = now();

					for (k = 0; k < reps; k++)
						if (kind == 0)
							run(pq, dnnl_s8, dnnl_ba, rows, in, out, xq, wq, y, scales);
						else if (kind == 1)
							run(pf, dnnl_f32, dnnl_ba, rows, in, out, xf, wf, y, NULL);
						else if (kind == 2)
							run(pb, dnnl_bf16, dnnl_ba, rows, in, out, xb, wb, y, NULL);
						else if (kind == 4)
							run(pt, dnnl_s8, dnnl_ab, rows, in, out, xq, wt, y, scales);
						else if (kind == 5)
							run(ptile, dnnl_s8, dnnl_ba, rows, in, out, xq, wq, sums, NULL);
						else if (rows <= 4)
						{
							int			r;

							/* the engine's OpenBLAS path for up to 4 rows: sgemv per row (src/backend_cpu.c) */
							for (r = 0; r < rows; r++)
								cblas_sgemv(CblasRowMajor, CblasNoTrans, out, in, 1.0f, wf, in, xf + (size_t) r * in, 1,
											0.0f, y + (size_t) r * out, 1);
						}
						else
							cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in, 1.0f, xf, in, wf, in,
										0.0f, y, out);
					best[kind] = (now() - t0) / reps * 1e6 < best[kind] ? (now() - t0) / reps * 1e6 : best[kind];
				}
			printf("rows %3d  %4d -> %4d   int8 %8.1f (ab %8.1f, tile %8.1f %s)   fp32 %8.1f   bf16 %8.1f   "
				   "openblas %8.1f   fp32/int8 %.2f  int8/tile %.2f  layout asked for (any): int8 %s, fp32 %s, "
				   "bf16 %s; int8 exact: %s, tile exact: %s\n",
				   rows, in, out, best[0], best[4], best[5], impl, best[1], best[2], best[3], best[1] / best[0],
				   best[0] / best[5], lq, lf, lb, wrong == 0 ? "yes" : "NO", wrong_tile == 0 ? "yes" : "NO");
			dnnl_primitive_destroy(ptile);
			free(sums);
			free(xf);
			free(y);
			free(xq);
			free(xb);
		}
		dnnl_primitive_destroy(pq);
		dnnl_primitive_destroy(pt);
		dnnl_primitive_destroy(pf);
		dnnl_primitive_destroy(pb);
		free(wf);
		free(scales);
		free(wq);
		free(wt);
		free(wb);
	}
	return 0;
}
