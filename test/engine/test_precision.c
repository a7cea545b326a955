/*
 * test_precision.c - bf16 mixed precision (tf_model_set_precision): refused
 * on the CPU backend; on the CUDA backend, matrix products bitwise equal to
 * a CPU model of the same rounding, within 1e-2 of fp32, the weights' copy
 * refreshed exactly when the contract says; the PyTorch fixture recomputed
 * under the same rules (make_bf16_fixture.py) to 1e-3 where OpenBLAS runs the
 * fixture's kernel family, and within that family's measured spread where it
 * runs another; training steps that
 * allocate nothing after the first, and checkpoints that move between
 * precisions. (Training against fp32 over 300 steps of the real corpus:
 * test/cuda/precision_debian.c.)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ctype.h>
#include <dnnl.h>
#include <time.h>

#include "blas.h"
#include "check.h"
#include "fixture.h"
#include "model.h"
#include "rng.h"

/* fp32 -> bf16 -> fp32, round to nearest, ties to even; NaN stays NaN (the CPU model of the rounding). */
static float
bf16_round(float x)
{
	uint32_t	u;

	memcpy(&u, &x, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		u |= 0x00400000u;		/* quiet NaN */
	else
		u += 0x7fffu + ((u >> 16) & 1u);
	u &= 0xffff0000u;
	memcpy(&x, &u, 4);
	return x;
}

static float
from_bits(uint32_t u)
{
	float		x;

	memcpy(&x, &u, 4);
	return x;
}

static unsigned seed_state = 77;

static float
rnd(void)
{
	return fixture_uniform(&seed_state);
}

/* The CPU model itself, on cases whose answers are known. */
static void
check_rounding_model(void)
{
	CHECK(bf16_round(1.0f + 0x1p-8f) == 1.0f, "a tie rounds to the even neighbour 1");
	CHECK(bf16_round(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f, "a tie rounds to the even neighbour 1 + 2^-6");
	CHECK(bf16_round(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f, "above a tie rounds up");
	CHECK(isinf(bf16_round(from_bits(0x7f7fffffu))), "the largest float rounds to infinity");
	CHECK(isnan(bf16_round(from_bits(0x7f800001u))), "a NaN whose payload is in the low bits stays NaN");
	CHECK(bf16_round(-0x1p-130f) == -0x1p-130f, "a subnormal power of two is kept");
}

/* Options and refusals that hold on every backend. */
static void
check_options(void)
{
	char		err[TF_ERRLEN] = "";
	TfPrecision p = TF_FP32;
	TfConfig	c;
	TfModel    *m;

	CHECK(tf_precision_parse("bf16", &p, err, sizeof(err)) == TF_OK && p == TF_BF16, "bf16 parses");
	CHECK(tf_precision_parse("fp32", &p, err, sizeof(err)) == TF_OK && p == TF_FP32, "fp32 parses");
	CHECK(tf_precision_parse("fp16", &p, err, sizeof(err)) == TF_ERROR && strstr(err, "\"fp16\"") != NULL,
		  "fp16 refused naming it: %s", err);
	CHECK(strcmp(tf_precision_name(TF_BF16), "bf16") == 0, "name of TF_BF16");
	tf_config_base(&c, 64);
	c.d_model = 32, c.num_heads = 4, c.d_ff = 64, c.num_encoder_layers = c.num_decoder_layers = 1;
	c.max_positions = 32;
	m = tf_model_create(&c, 1, "cpu", 1, err, sizeof(err));
	CHECK(m != NULL, "cpu model: %s", err);
	if (m == NULL)
		return;
	CHECK(tf_model_set_precision(m, TF_BF16, err, sizeof(err)) == TF_OK && tf_model_precision(m) == TF_BF16,
		  "bf16 on the CPU: %s", err);
	CHECK(tf_model_set_precision(m, TF_FP32, err, sizeof(err)) == TF_OK && tf_model_precision(m) == TF_FP32,
		  "fp32 on the CPU again: %s", err);
	tf_model_free(m);
}

/*
 * tf_cpu_bf16_native against the CPU's own CPUID, as libgcc reads it (an
 * emulated CPU's under qemu): native exactly where the CPU has AVX512_BF16
 * (every CPU with AMX has it too). Not compared (said so) where
 * ONEDNN_MAX_CPU_ISA lowers oneDNN's view on purpose.
 */
static void
check_native(void)
{
	bool		flags_bf16 = false;

	if (getenv("ONEDNN_MAX_CPU_ISA") != NULL)
	{
		printf("  bf16 native: %s (not compared with CPUID: ONEDNN_MAX_CPU_ISA is set)\n",
			   tf_cpu_bf16_native() ? "yes" : "no");
		return;
	}
#if defined(__x86_64__) && defined(__GNUC__)
	__builtin_cpu_init();
	flags_bf16 = __builtin_cpu_supports("avx512bf16");
#endif
	CHECK(tf_cpu_bf16_native() == flags_bf16, "bf16 native %d, but CPUID's AVX512_BF16 says %d", tf_cpu_bf16_native(),
		  flags_bf16);
	printf("  bf16 native: %s, as CPUID says\n", tf_cpu_bf16_native() ? "yes" : "no");
}

static double
seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + ts.tv_nsec * 1e-9;
}

/*
 * What training's "auto" precision decides by: tf_cpu_bf16_preferred at
 * and around its threshold (0, -1 and NaN: fp32); tf_cpu_bf16_speedup 0
 * where bf16 is not native, else a positive ratio measured once (the
 * second call takes a fraction of the first's time). Where oneDNN
 * multiplies on AMX tiles the ratio is at least the threshold, so "auto"
 * trains in bf16 there (not compared under AddressSanitizer, whose
 * instrumented rounding loops are timed against uninstrumented OpenBLAS).
 */
static void
check_speedup(void)
{
	double		t0 = seconds(),
				s = tf_cpu_bf16_speedup(),
				t1 = seconds(),
				again = tf_cpu_bf16_speedup(),
				t2 = seconds();
	bool		amx = (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx;

	CHECK(tf_cpu_bf16_preferred(TF_CPU_BF16_MIN_SPEEDUP) && tf_cpu_bf16_preferred(3.0), "bf16 at and above the threshold");
	CHECK(!tf_cpu_bf16_preferred(TF_CPU_BF16_MIN_SPEEDUP - 0.01) && !tf_cpu_bf16_preferred(0.0) &&
		  !tf_cpu_bf16_preferred(-1.0) && !tf_cpu_bf16_preferred(NAN), "fp32 below the threshold, unmeasured or failed");
	printf("  bf16 products' speedup over fp32: %.2f, measured in %.3f s (auto picks bf16 from %.2f)\n", s, t1 - t0,
		   TF_CPU_BF16_MIN_SPEEDUP);
	CHECK(again == s, "the speedup read %g, then %g", s, again);
	if (!tf_cpu_bf16_native())
	{
		CHECK(s == 0.0, "bf16 is not native, yet its speedup reads %g", s);
		return;
	}
	CHECK(s > 0.0, "bf16 is native, but its speedup could not be measured (%g)", s);
	CHECK(t2 - t1 < (t1 - t0) / 2, "the speedup is measured again (%.3f s, then %.3f s)", t1 - t0, t2 - t1);
#if defined(__SANITIZE_ADDRESS__)
	amx = false;
#endif
	if (amx)
		CHECK(s >= TF_CPU_BF16_MIN_SPEEDUP, "on AMX, bf16 products ran only %.2f times as fast as fp32", s);
}

/* gemm on row-major [rows, cols] with leading dimension ld, on the host: the CPU backend. */
typedef struct Operand
{
	int			rows,
				cols,
				ld;
	float	   *host;
} Operand;

static Operand
operand(int rows, int cols, int ld)
{
	Operand		o = {rows, cols, ld, malloc((size_t) rows * ld * sizeof(float))};

	for (size_t i = 0; i < (size_t) rows * ld; i++)
		o.host[i] = rnd();
	return o;
}

/*
 * bf16 products on `device`'s backend (CUDA, or the CPU's) against the CPU
 * backend's fp32 product of the rounded operands (bitwise under CUDA's
 * emulation where the CPU computes it in one block: both are one
 * cblas_sgemm of the same values; to 1e-6 on a GPU, through oneDNN, and
 * where the CPU cuts it into blocks, whose sums OpenBLAS may run in
 * another order) and of the unrounded
 * ones (1e-2). One operand lies inside the registered weights (b on even
 * shapes, a on odd ones), the other is rounded into a workspace. The
 * larger shapes cut the CPU's products into strips, a 16-row strip and a
 * tail, and columns (cpu_bf16.c); alpha and beta as given (C starts the
 * same for both). On the CPU the bits do not depend on the thread count.
 */
static void
check_gemm(const char *device)
{
	static const int shapes[][7] = {	/* m, n, k, trans_a, trans_b, 100 alpha, beta */
		{7, 5, 3, 0, 1, 100, 0}, {33, 17, 64, 0, 1, 100, 0}, {16, 40, 9, 1, 0, 100, 0}, {5, 64, 31, 0, 0, 100, 0},
		{12, 12, 100, 1, 1, 100, 0}, {9, 21, 40, 1, 0, 100, 0}, {301, 200, 130, 0, 1, 100, 1},
		{70, 1000, 64, 1, 0, 50, 0}, {530, 96, 300, 0, 0, 100, 0}, {150, 300, 257, 1, 0, 25, 1}};
	char		err[TF_ERRLEN];
	TfBackend  *cpu = tf_backend_create("cpu", 0, 1, err, sizeof(err)),
			   *gpu = tf_backend_create(device, 0, 2, err, sizeof(err));
	double		worst_rounded = 0.0,
				worst_fp32 = 0.0;
	bool		emulated = test_cuda_library != NULL && strstr(test_cuda_library, "emu") != NULL,
				on_cpu = strcmp(device, "cpu") == 0,
				keeps_copy = !on_cpu || tf_cpu_bf16_native();	/* the CPU elsewhere rounds the weights at each product */

	CHECK(cpu != NULL && gpu != NULL, "backends: %s", err);
	if (cpu == NULL || gpu == NULL)
		return;
	CHECK(gpu->set_precision != NULL, "the %s backend has bf16", device);
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
	{
		int			m = shapes[s][0],
					n = shapes[s][1],
					k = shapes[s][2];
		bool		ta = shapes[s][3],
					tb = shapes[s][4],
					b_is_weight = s % 2 == 0;
		float		alpha = shapes[s][5] / 100.0f,
					beta = (float) shapes[s][6];
		Operand		a = operand(ta ? k : m, ta ? m : k, (ta ? m : k) + 3),
					b = operand(tb ? n : k, tb ? k : n, (tb ? k : n) + (int) s % 3);
		Operand    *w = b_is_weight ? &b : &a;	/* the operand inside the weights */
		size_t		na = (size_t) a.rows * a.ld,
					nb = (size_t) b.rows * b.ld,
					nw = (size_t) w->rows * w->ld,
					nc = (size_t) m * n,
					pad = 11;	/* it sits inside the weights, not at their start */
		float	   *ra = malloc(na * sizeof(float)),
				   *rb = malloc(nb * sizeof(float)),
				   *want = malloc(nc * sizeof(float)),
				   *exact = malloc(nc * sizeof(float)),
				   *got = malloc(nc * sizeof(float)),
				   *stale = malloc(nc * sizeof(float)),
				   *c0 = malloc(nc * sizeof(float));
		float	   *ca = cpu->alloc(cpu, na * 4),
				   *cb = cpu->alloc(cpu, nb * 4),
				   *cc = cpu->alloc(cpu, nc * 4);
		float	   *gweights = gpu->alloc(gpu, (nw + 2 * pad) * 4),
				   *gother = gpu->alloc(gpu, (b_is_weight ? na : nb) * 4),
				   *gc = gpu->alloc(gpu, nc * 4);
		float	   *ga = b_is_weight ? gother : gweights + pad,
				   *gb = b_is_weight ? gweights + pad : gother;
		double		e;

		for (size_t i = 0; i < nc; i++)
			c0[i] = rnd();
		for (size_t i = 0; i < na; i++)
			ra[i] = bf16_round(a.host[i]);
		for (size_t i = 0; i < nb; i++)
			rb[i] = bf16_round(b.host[i]);
		/* CPU: the product of the rounded operands, and of the exact ones */
		cpu->upload(cpu, ca, ra, na * 4);
		cpu->upload(cpu, cb, rb, nb * 4);
		cpu->upload(cpu, cc, c0, nc * 4);
		cpu->gemm(cpu, ta, tb, m, n, k, alpha, ca, a.ld, cb, b.ld, beta, cc, n);
		cpu->download(cpu, want, cc, nc * 4);
		cpu->upload(cpu, ca, a.host, na * 4);
		cpu->upload(cpu, cb, b.host, nb * 4);
		cpu->upload(cpu, cc, c0, nc * 4);
		cpu->gemm(cpu, ta, tb, m, n, k, alpha, ca, a.ld, cb, b.ld, beta, cc, n);
		cpu->download(cpu, exact, cc, nc * 4);
		/* CUDA in bf16 */
		gpu->upload(gpu, ga, a.host, na * 4);
		gpu->upload(gpu, gb, b.host, nb * 4);
		CHECK(gpu->set_precision(gpu, TF_BF16, gweights, nw + 2 * pad), "set_precision bf16");
		gpu->upload(gpu, gc, c0, nc * 4);
		gpu->gemm(gpu, ta, tb, m, n, k, alpha, ga, a.ld, gb, b.ld, beta, gc, n);
		gpu->download(gpu, got, gc, nc * 4);
		if (on_cpu)
		{
			gpu->set_threads(gpu, 1);
			gpu->upload(gpu, gc, c0, nc * 4);
			gpu->gemm(gpu, ta, tb, m, n, k, alpha, ga, a.ld, gb, b.ld, beta, gc, n);
			gpu->download(gpu, stale, gc, nc * 4);
			CHECK(memcmp(stale, got, nc * 4) == 0, "gemm %d: bf16 on 1 thread not bitwise as on 2", (int) s);
			gpu->set_threads(gpu, 2);
		}
		e = rel_error(got, want, nc);
		worst_rounded = e > worst_rounded ? e : worst_rounded;
		if (emulated && !on_cpu && (double) m * n * k < (1 << 20))	/* the CPU model's product in one block */
			CHECK(memcmp(got, want, nc * 4) == 0, "gemm %d: bf16 product not bitwise the CPU model's (%.3g)", (int) s, e);
		else
			CHECK(e < 1e-6, "gemm %d: bf16 product off the CPU model by %.3g", (int) s, e);
		e = rel_error(got, exact, nc);
		worst_fp32 = e > worst_fp32 ? e : worst_fp32;
		CHECK(e < 1e-2 && e > 0.0, "gemm %d: bf16 against fp32 %.3g (expected in (0, 1e-2))", (int) s, e);
		/* the weights change without a refresh: the product still reads the old copy ... */
		for (size_t i = 0; i < nw; i++)
			w->host[i] = -w->host[i];
		gpu->upload(gpu, gweights + pad, w->host, nw * 4);
		gpu->upload(gpu, gc, c0, nc * 4);
		gpu->gemm(gpu, ta, tb, m, n, k, alpha, ga, a.ld, gb, b.ld, beta, gc, n);
		gpu->download(gpu, stale, gc, nc * 4);
		if (keeps_copy)
			CHECK(memcmp(stale, got, nc * 4) == 0, "gemm %d: the weights' copy changed without set_precision", (int) s);
		/* ... and the refreshed copy gives the negated product; fp32 gives the exact one */
		CHECK(gpu->set_precision(gpu, TF_BF16, gweights, nw + 2 * pad), "refresh");
		gpu->upload(gpu, gc, c0, nc * 4);
		gpu->gemm(gpu, ta, tb, m, n, k, alpha, ga, a.ld, gb, b.ld, beta, gc, n);
		gpu->download(gpu, stale, gc, nc * 4);
		for (size_t i = 0; i < nc; i++)		/* alpha (-AB) + beta C0 = -(alpha AB + beta C0) + 2 beta C0 */
			stale[i] = -stale[i] + 2.0f * beta * c0[i];
		CHECK(rel_error(stale, got, nc) < 1e-6, "gemm %d: refreshed copy %.3g off", (int) s, rel_error(stale, got, nc));
		CHECK(gpu->set_precision(gpu, TF_FP32, NULL, 0), "set_precision fp32");
		for (size_t i = 0; i < nw; i++)
			w->host[i] = -w->host[i];
		gpu->upload(gpu, gweights + pad, w->host, nw * 4);
		gpu->upload(gpu, gc, c0, nc * 4);
		gpu->gemm(gpu, ta, tb, m, n, k, alpha, ga, a.ld, gb, b.ld, beta, gc, n);
		gpu->download(gpu, got, gc, nc * 4);
		CHECK(rel_error(got, exact, nc) < 1e-6, "gemm %d: fp32 again %.3g off", (int) s, rel_error(got, exact, nc));
		CHECK(gpu->status(gpu, err, sizeof(err)) == TF_OK, "gemm %d: %s", (int) s, err);
		cpu->free(cpu, ca), cpu->free(cpu, cb), cpu->free(cpu, cc);
		gpu->free(gpu, gweights), gpu->free(gpu, gother), gpu->free(gpu, gc);
		free(a.host), free(b.host), free(ra), free(rb), free(want), free(exact), free(got), free(stale), free(c0);
	}
	printf("  bf16 gemm (%s): %zu shapes, against the rounded CPU product %.3g, against fp32 %.3g\n", device,
		   sizeof(shapes) / sizeof(shapes[0]), worst_rounded, worst_fp32);
	cpu->destroy(cpu);
	gpu->destroy(gpu);
}

/*
 * The CPU's copy of the training loss's gradient (bf16 bits cross_entropy
 * writes where oneDNN multiplies, backend_cpu.c): the logits' two backward
 * products read it and give the bits they give on an unlisted copy of the
 * same gradient (rounded at the product); any other operation ends it: a
 * zeroing of the gradient is seen by the next product, and so is a product
 * that writes into it.
 */
static void
check_gradient_copy(void)
{
	enum
	{
		R = 37, V = 300, D = 24
	};
	char		err[TF_ERRLEN];
	TfBackend  *be = tf_backend_create("cpu", 0, 2, err, sizeof(err));
	float	   *e = be->alloc(be, (size_t) V * D * 4),
			   *logits = be->alloc(be, (size_t) R * V * 4),
			   *other = be->alloc(be, (size_t) R * V * 4),
			   *x = be->alloc(be, (size_t) R * D * 4),
			   *out[4];
	int32_t    *labels = be->alloc(be, R * sizeof(int32_t));
	double	   *loss = be->alloc(be, R * sizeof(double));
	size_t		n[4] = {(size_t) V * D, (size_t) R * D, (size_t) V * D, (size_t) R * D};
	float	   *h = malloc((size_t) R * V * 4),
			   *got = malloc((size_t) R * V * 4),
			   *want = malloc((size_t) R * V * 4);
	bool		zeros = true;

	for (int i = 0; i < 4; i++)
		out[i] = be->alloc(be, n[i] * 4);
	for (size_t i = 0; i < (size_t) V * D; i++)
		h[i] = rnd();
	be->upload(be, e, h, (size_t) V * D * 4);
	for (size_t i = 0; i < (size_t) R * D; i++)
		h[i] = rnd();
	be->upload(be, x, h, (size_t) R * D * 4);
	for (int r = 0; r < R; r++)
		labels[r] = r % 5 == 4 ? 0 : 1 + r * 7 % (V - 1);	/* some rows padding (id 0) */
	for (size_t i = 0; i < (size_t) R * V; i++)
		h[i] = 8.0f * rnd();
	CHECK(be->set_precision(be, TF_BF16, e, (size_t) V * D), "set_precision bf16");
	be->upload(be, logits, h, (size_t) R * V * 4);
	be->cross_entropy(be, logits, true, labels, R, V, V, 0, 0.1f, loss);
	/* the two products on the gradient just written (its copy), then on an unlisted copy of it */
	be->gemm(be, true, false, V, D, R, 0.5f, logits, V, x, D, 0.0f, out[0], D);
	be->gemm(be, false, false, R, D, V, 0.5f, logits, V, e, D, 0.0f, out[1], D);
	be->copy(be, other, logits, (size_t) R * V);
	be->gemm(be, true, false, V, D, R, 0.5f, other, V, x, D, 0.0f, out[2], D);
	be->gemm(be, false, false, R, D, V, 0.5f, other, V, e, D, 0.0f, out[3], D);
	CHECK(memcmp(out[0], out[2], n[0] * 4) == 0 && memcmp(out[1], out[3], n[1] * 4) == 0,
		  "the gradient's bf16 copy gives other bits than rounding it at the product");
	/* ended by a zeroing ... */
	be->upload(be, logits, h, (size_t) R * V * 4);
	be->cross_entropy(be, logits, true, labels, R, V, V, 0, 0.1f, loss);
	be->zero(be, logits, (size_t) R * V);
	be->gemm(be, false, false, R, D, V, 1.0f, logits, V, e, D, 0.0f, out[1], D);
	be->download(be, got, out[1], n[1] * 4);
	for (size_t i = 0; i < n[1]; i++)
		zeros &= got[i] == 0.0f;
	CHECK(zeros, "a product read the gradient's copy after the gradient was zeroed");
	/* ... and by a product writing into it */
	be->upload(be, logits, h, (size_t) R * V * 4);
	be->cross_entropy(be, logits, true, labels, R, V, V, 0, 0.1f, loss);
	be->gemm(be, false, true, R, V, D, 1.0f, x, D, e, D, 0.0f, logits, V);
	be->gemm(be, false, false, R, D, V, 1.0f, logits, V, e, D, 0.0f, out[1], D);
	be->copy(be, other, logits, (size_t) R * V);
	be->gemm(be, false, false, R, D, V, 1.0f, other, V, e, D, 0.0f, out[3], D);
	be->download(be, got, out[1], n[1] * 4);
	be->download(be, want, out[3], n[1] * 4);
	CHECK(memcmp(got, want, n[1] * 4) == 0, "a product read the gradient's copy after a product overwrote it");
	CHECK(be->status(be, err, sizeof(err)) == TF_OK, "gradient copy: %s", err);
	printf("  bf16 cross-entropy gradient's copy (CPU%s): the products' bits as rounded at the product; ended by "
		   "a zeroing and by a product into it\n", tf_cpu_bf16_native() ? "" : ", none kept here: not native");
	for (int i = 0; i < 4; i++)
		be->free(be, out[i]);
	be->free(be, e), be->free(be, logits), be->free(be, other), be->free(be, x), be->free(be, labels);
	be->free(be, loss);
	free(h), free(got), free(want);
	be->destroy(be);
}

/*
 * ||a - b||_2 / ||b||_2. bf16 comparisons use this norm rather than the
 * largest element: a rounding that falls the other way on a sum 1 ulp apart
 * moves one element by 2^-9, and on this fixture (logits up to 23) PyTorch's
 * own bf16 logits move by 1.5e-3 in the largest element under 2e-7 noise on
 * the rounded inputs.
 */
static double
norm_error(const float *a, const float *b, size_t n)
{
	double		d = 0.0,
				r = 0.0;

	for (size_t i = 0; i < n; i++)
	{
		d += ((double) a[i] - b[i]) * ((double) a[i] - b[i]);
		r += (double) b[i] * b[i];
	}
	return sqrt(d / (r > 0.0 ? r : 1.0));
}

/*
 * Attention under docs/gpus.md's bf16 rules, in double on the host: every
 * product's operands rounded (Q, K, V, dctx, P~, dS), sums exact. With
 * rules false, the fp32 model (nothing rounded). One call's geometry as
 * TfAttentionShape's: sentence b's queries q_start[b].., its keys
 * k_start[b]..; q, k, v, dctx and the outputs [rows, H * DK]; lse [query
 * rows, H]. dq, dk, dv NULL: forward only.
 */
typedef struct RulesCall
{
	int			B,
				H,
				DK;
	const int32_t *q_start,
			   *k_start;
	const int64_t *p_start;
	bool		causal;
	float		dropout;
	uint64_t	seed,
				stream;
} RulesCall;

static float
rule(float x, bool rules)
{
	return rules ? bf16_round(x) : x;
}

static void
attention_rules(const RulesCall *c, bool rules, const float *q, const float *k, const float *v, const float *dctx,
				float *ctx, float *lse, float *dq, float *dk, float *dv)
{
	int			D = c->H * c->DK;
	double		scale = 1.0 / sqrt((double) c->DK),
				keep_scale = c->dropout > 0.0f ? 1.0 / (1.0 - c->dropout) : 1.0;

	if (dq != NULL)
	{
		memset(dq, 0, (size_t) c->q_start[c->B] * D * sizeof(float));
		memset(dk, 0, (size_t) c->k_start[c->B] * D * sizeof(float));
		memset(dv, 0, (size_t) c->k_start[c->B] * D * sizeof(float));
	}
	for (int b = 0; b < c->B; b++)
		for (int h = 0; h < c->H; h++)
		{
			int			lq = c->q_start[b + 1] - c->q_start[b],
						lk = c->k_start[b + 1] - c->k_start[b];
			double	   *s = malloc(((size_t) lk + 1) * sizeof(double)),
					   *g = malloc(((size_t) lk + 1) * sizeof(double));

			for (int i = 0; i < lq; i++)
			{
				size_t		qi = (size_t) (c->q_start[b] + i) * D + (size_t) h * c->DK;
				int			vis = c->causal && i + 1 < lk ? i + 1 : lk;
				double		m = -INFINITY,
							l = 0.0,
							dot = 0.0,
							total = 0.0,
							ls;

				for (int j = 0; j < vis; j++)
				{
					size_t		kj = (size_t) (c->k_start[b] + j) * D + (size_t) h * c->DK;

					s[j] = 0.0;
					for (int e = 0; e < c->DK; e++)
						s[j] += (double) rule(q[qi + e], rules) * rule(k[kj + e], rules);
					s[j] *= scale;
					m = s[j] > m ? s[j] : m;
				}
				for (int j = 0; j < vis; j++)
					l += exp(s[j] - m);
				ls = vis > 0 ? m + log(l) : -INFINITY;
				lse[(size_t) (c->q_start[b] + i) * c->H + h] = (float) ls;
				for (int e = 0; e < c->DK; e++)
				{
					double		acc = 0.0;

					for (int j = 0; j < vis; j++)
					{
						uint64_t	idx = (uint64_t) c->p_start[b] + ((uint64_t) h * lq + i) * lk + j;
						double		p = exp(s[j] - m);

						if (c->dropout > 0.0f)
							p = tf_random_uniform(c->seed, c->stream, idx) >= c->dropout ? p * keep_scale : 0.0;
						acc += (double) rule((float) p, rules) *
							rule(v[(size_t) (c->k_start[b] + j) * D + (size_t) h * c->DK + e], rules);
					}
					ctx[qi + e] = vis > 0 ? (float) (acc / l) : 0.0f;
				}
				if (dq == NULL)
					continue;
				for (int j = 0; j < vis; j++)
				{
					size_t		kj = (size_t) (c->k_start[b] + j) * D + (size_t) h * c->DK;
					uint64_t	idx = (uint64_t) c->p_start[b] + ((uint64_t) h * lq + i) * lk + j;
					bool		keep = c->dropout <= 0.0f || tf_random_uniform(c->seed, c->stream, idx) >= c->dropout;
					double		gv = 0.0,
								p = exp(s[j] - ls);

					for (int e = 0; e < c->DK; e++)
						gv += (double) rule(dctx[qi + e], rules) * rule(v[kj + e], rules);
					g[j] = keep ? gv * keep_scale : 0.0;
					dot += g[j] * p;
					total += p;
					for (int e = 0; e < c->DK; e++)	/* dV += Pd^T dctx */
						dv[kj + e] += (float) ((double) rule((float) (keep ? p * keep_scale : 0.0), rules) *
											   rule(dctx[qi + e], rules));
				}
				dot = total > 0.0 ? dot / total : 0.0;
				for (int j = 0; j < vis; j++)
				{
					size_t		kj = (size_t) (c->k_start[b] + j) * D + (size_t) h * c->DK;
					float		ds = rule((float) (exp(s[j] - ls) * (g[j] - dot) * scale), rules);

					for (int e = 0; e < c->DK; e++)
					{
						dq[qi + e] += (float) ((double) ds * rule(k[kj + e], rules));
						dk[kj + e] += (float) ((double) ds * rule(q[qi + e], rules));
					}
				}
			}
			free(s);
			free(g);
		}
}

/*
 * Attention on the CUDA backend in bf16 (the tensor-core kernels where they
 * fit, the per-row kernels where the probabilities are kept or d_k exceeds
 * 128) against the host model of the rules (norm error under 2e-3; the sums
 * run in another order and a rounding may fall the other way) and against
 * the fp32 model (well above that: the rules are what the kernels do).
 * Sentences of 1, 31, 64, 65 and 200 tokens (the short pairs' kernels and
 * the tiled ones in one call); self-attention causal and not,
 * cross-attention; dropout on and off; d_k 8, 40 (padded to 48) and 64; 10
 * (rows of 30 floats: the slices loaded a column at a time, not 4); 136 for
 * the per-row kernels' backward. Then calls whose every pair is short (the
 * short kernels alone): 3-64 queries, 0-64 keys (a pair without keys), d_k
 * 8, 24, 40 and 64, and 7 (rows of 21 floats).
 */
static void
check_attention_rules(const char *device)
{
	static const int lens[2][5] = {{1, 31, 64, 65, 200}, {3, 17, 64, 33, 48}},
				cross_lens[2][5] = {{7, 200, 1, 65, 31}, {64, 1, 40, 16, 0}};
	static const int cases[][6] = {	/* causal, cross, dropout (%), H, DK, lengths (1: every pair short) */
		{1, 0, 0, 2, 64, 0}, {1, 0, 20, 2, 64, 0}, {0, 1, 0, 2, 64, 0}, {0, 1, 20, 3, 40, 0}, {1, 0, 10, 4, 8, 0},
		{0, 0, 0, 1, 136, 0}, {0, 1, 10, 3, 10, 0},	/* the last: rows of 30 floats, slices loaded a column at a time */
	{1, 0, 20, 2, 64, 1}, {0, 1, 10, 3, 40, 1}, {0, 0, 0, 4, 8, 1}, {0, 1, 0, 2, 24, 1},
	{1, 0, 10, 3, 7, 1}};			/* the last: rows of 21 floats, slices loaded a column at a time */
	char		err[TF_ERRLEN];
	TfBackend  *gpu = tf_backend_create(device, 0, 2, err, sizeof(err));
	double		worst = 0.0,
				nearest32 = INFINITY;
	float	   *weights;

	CHECK(gpu != NULL, "%s backend: %s", device, err);
	if (gpu == NULL)
		return;
	weights = gpu->alloc(gpu, 64 * sizeof(float));
	CHECK(gpu->set_precision(gpu, TF_BF16, weights, 64), "set_precision bf16");
	for (size_t t = 0; t < sizeof(cases) / sizeof(cases[0]); t++)
	{
		int			B = 5,
					H = cases[t][3],
					DK = cases[t][4],
					D = H * DK,
					max_q,
					max_k;
		bool		causal = cases[t][0],
					cross = cases[t][1];
		int32_t		q_start[6] = {0},
					k_start[6] = {0};
		int64_t		p_start[6] = {0};
		RulesCall	c;
		TfAttentionShape sh = {0};
		size_t		nq,
					nk;

		fixture_attention_layout(B, H, lens[cases[t][5]], cross ? cross_lens[cases[t][5]] : NULL, q_start, k_start, p_start,
								 &max_q, &max_k);
		nq = (size_t) q_start[B], nk = (size_t) k_start[B];
		c = (RulesCall) {B, H, DK, q_start, k_start, p_start, causal, cases[t][2] / 100.0f, 5, (7ull << 32) | 2};

		float	   *q = malloc(nq * D * 4),
				   *k = malloc(nk * D * 4),
				   *v = malloc(nk * D * 4),
				   *dctx = malloc(nq * D * 4),
				   *got[6],
				   *want[6],
				   *want32[6];
		size_t		n[6] = {nq * D, nq * H, nq * D, nk * D, nk * D, nq * D};	/* ctx, lse, dq, dk, dv, ctx kept */
		float	   *d_q,
				   *d_k,
				   *d_v,
				   *d_dctx,
				   *d_out[6];
		int32_t    *d_qs,
				   *d_ks;
		int64_t    *d_ps;
		float	   *d_probs;
		static const char *names[6] = {"context", "log-sum-exp", "dQ", "dK", "dV", "context (probabilities kept)"};

		for (size_t i = 0; i < nq * D; i++)
			q[i] = 2.0f * rnd(), dctx[i] = rnd();
		for (size_t i = 0; i < nk * D; i++)
			k[i] = 2.0f * rnd(), v[i] = rnd();
		for (int o = 0; o < 6; o++)
		{
			got[o] = malloc(n[o] * 4), want[o] = malloc(n[o] * 4), want32[o] = malloc(n[o] * 4);
			d_out[o] = gpu->alloc(gpu, n[o] * 4);
		}
		attention_rules(&c, true, q, k, v, dctx, want[0], want[1], want[2], want[3], want[4]);
		attention_rules(&c, false, q, k, v, dctx, want32[0], want32[1], want32[2], want32[3], want32[4]);
		memcpy(want[5], want[0], n[0] * 4), memcpy(want32[5], want32[0], n[0] * 4);
		d_q = gpu->alloc(gpu, nq * D * 4), d_dctx = gpu->alloc(gpu, nq * D * 4);
		d_k = gpu->alloc(gpu, nk * D * 4), d_v = gpu->alloc(gpu, nk * D * 4);
		d_qs = gpu->alloc(gpu, sizeof(q_start)), d_ks = gpu->alloc(gpu, sizeof(k_start));
		d_ps = gpu->alloc(gpu, sizeof(p_start));
		d_probs = gpu->alloc(gpu, (size_t) p_start[B] * 4);
		gpu->upload(gpu, d_q, q, nq * D * 4), gpu->upload(gpu, d_dctx, dctx, nq * D * 4);
		gpu->upload(gpu, d_k, k, nk * D * 4), gpu->upload(gpu, d_v, v, nk * D * 4);
		gpu->upload(gpu, d_qs, q_start, sizeof(q_start)), gpu->upload(gpu, d_ks, k_start, sizeof(k_start));
		gpu->upload(gpu, d_ps, p_start, sizeof(p_start));
		sh.batch = B, sh.num_heads = H, sh.head_dim = DK, sh.causal = causal, sh.dropout = c.dropout;
		sh.seed = c.seed, sh.stream = c.stream, sh.max_q = max_q, sh.max_k = max_k, sh.p_total = p_start[B];
		sh.q_start = d_qs, sh.k_start = d_ks, sh.p_start = d_ps;
		gpu->reserve(gpu, (size_t) max_q * max_k, (size_t) B * max_q * H, 0);
		gpu->attention(gpu, d_out[0], d_out[1], NULL, d_q, D, d_k, d_v, D, &sh);
		gpu->attention(gpu, d_out[5], NULL, d_probs, d_q, D, d_k, d_v, D, &sh);
		gpu->attention_backward(gpu, d_out[2], d_out[3], d_out[4], d_dctx, d_out[1], d_q, D, d_k, d_v, D, &sh);
		CHECK(gpu->status(gpu, err, sizeof(err)) == TF_OK, "bf16 attention case %zu: %s", t, err);
		for (int o = 0; o < 6; o++)
		{
			double		e,
						e32;

			gpu->download(gpu, got[o], d_out[o], n[o] * 4);
			if (o == 1)			/* rows that see no key: -inf in all three */
				for (size_t i = 0; i < n[o]; i++)
					if (isinf(want[o][i]) && got[o][i] == want[o][i])
						got[o][i] = want[o][i] = want32[o][i] = 0.0f;
			e = norm_error(got[o], want[o], n[o]);
			e32 = norm_error(got[o], want32[o], n[o]);
			worst = e > worst ? e : worst;
			if (o != 1)			/* a row's log-sum-exp barely moves */
				nearest32 = e32 < nearest32 ? e32 : nearest32;
			CHECK(e < 2e-3, "bf16 attention case %zu (%s%s, dropout %d%%, %d heads of %d): %s %.3g off the rules",
				  t, causal ? "causal" : "", cross ? "cross" : "", cases[t][2], H, DK, names[o], e);
			CHECK(o == 1 || e32 > 3 * e, "bf16 attention case %zu: %s %.3g off fp32, not well above %.3g off the rules",
				  t, names[o], e32, e);
		}
		for (int o = 0; o < 6; o++)
			free(got[o]), free(want[o]), free(want32[o]), gpu->free(gpu, d_out[o]);
		gpu->free(gpu, d_q), gpu->free(gpu, d_k), gpu->free(gpu, d_v), gpu->free(gpu, d_dctx);
		gpu->free(gpu, d_qs), gpu->free(gpu, d_ks), gpu->free(gpu, d_ps), gpu->free(gpu, d_probs);
		free(q), free(k), free(v), free(dctx);
	}
	printf("  bf16 attention (%s): %zu cases (forward, kept probabilities, backward), worst %.3g off the rules, "
		   "fp32 at least %.3g away\n", device, sizeof(cases) / sizeof(cases[0]), worst, nearest32);
	gpu->free(gpu, weights);
	gpu->destroy(gpu);
}

/* The fixture's logits [non-pad label rows, vocab] and mean loss of a model's evaluation forward. */
static float *
forward(TfModel *m, const Fixture *fx, double *loss, size_t *count)
{
	const int32_t *cfg = fixture_get(fx, "config")->data;
	TfBatch		b = {3, (int) fixture_get(fx, "src")->count / 3, (int) fixture_get(fx, "tgt_in")->count / 3,
	fixture_get(fx, "src")->data, fixture_get(fx, "tgt_in")->data, fixture_get(fx, "labels")->data, 0};
	char		err[TF_ERRLEN];
	int64_t		tokens = 0;
	float	   *logits;

	CHECK(tf_model_forward(m, &b, false, loss, &tokens, err, sizeof(err)) == TF_OK, "forward: %s", err);
	*loss /= (double) (tokens > 0 ? tokens : 1);
	*count = (size_t) tokens * cfg[0];
	logits = fixture_logits(m, (size_t) tokens, cfg[0]);
	return logits;
}

/* The reference's logits of the non-pad label rows. */
static float *
reference_logits(const Fixture *model_fx, const Fixture *ref)
{
	const int32_t *cfg = fixture_get(model_fx, "config")->data;
	const int32_t *labels = fixture_get(model_fx, "labels")->data;
	const float *all = fixture_get(ref, "logits")->data;
	size_t		rows = fixture_get(model_fx, "labels")->count,
				kept = 0;
	float	   *out = malloc(fixture_get(ref, "logits")->count * sizeof(float));

	for (size_t r = 0; r < rows; r++)
		if (labels[r] != cfg[6])
			memcpy(out + kept++ * cfg[0], all + r * cfg[0], cfg[0] * sizeof(float));
	return out;
}

/*
 * Beam search in bf16 (key/value caches of bf16 elements) on the fixture's
 * sources: every hypothesis's log-probability equals its teacher-forced
 * score in bf16 (whose keys and values are fp32 buffers rounded on read) to
 * 1e-4 relative, so the cache holds the right values in the right places.
 */
static void
check_decode(TfModel *m, const Fixture *fx)
{
	const int32_t *src = fixture_get(fx, "src")->data;
	int			B = 3,
				L = (int) fixture_get(fx, "src")->count / 3;
	char		err[TF_ERRLEN];
	TfDecodeOptions opt;
	TfHypothesis h[3 * 4];
	double		worst = 0.0;
	int			tokens = 0;

	/* the CPU keeps fp32 caches, whose keys and values attention reads rounded: the same values */
	CHECK(m->be->cache_bytes == (strcmp(test_device, "cpu") == 0 ? 4 : 2), "a bf16 model's cache holds %d-byte elements",
		  m->be->cache_bytes);
	tf_decode_options_default(&opt);
	opt.nbest = 4;
	opt.max_length_offset = 5;
	CHECK(tf_model_translate(m, src, B, L, &opt, h, err, sizeof(err)) == TF_OK, "bf16 translate: %s", err);
	for (int i = 0; i < B * opt.nbest; i++)
	{
		int			n = h[i].length + 1;
		int32_t    *tgt = calloc(2 * (size_t) n, sizeof(int32_t));
		TfBatch		b = {1, L, n, src + (size_t) (i / opt.nbest) * L, tgt, tgt + n, 0};
		double		lp = 0.0;

		tgt[0] = opt.bos_id;
		for (int j = 0; j < h[i].length; j++)
			tgt[1 + j] = tgt[n + j] = h[i].tokens[j];
		tgt[2 * n - 1] = opt.eos_id;
		CHECK(tf_model_score(m, &b, &lp, err, sizeof(err)) == TF_OK, "bf16 score: %s", err);
		CHECK(fabs(lp - h[i].log_prob) <= 1e-4 * fabs(lp), "bf16 hypothesis %d: incremental %.6f, scored %.6f", i,
			  h[i].log_prob, lp);
		worst = fmax(worst, fabs(lp - h[i].log_prob) / fabs(lp));
		tokens += h[i].length;
		free(tgt);
	}
	CHECK(tokens > B * opt.nbest, "bf16 hypotheses of %d tokens in all", tokens);
	printf("  bf16 beam search: %d hypotheses (%d tokens) from bf16 caches, log-probabilities %.3g from their "
		   "scores\n", B * opt.nbest, tokens, worst);
	tf_hypotheses_free(h, B * opt.nbest);
}

/*
 * The kernel family make_bf16_fixture.py pins (OPENBLAS_CORETYPE): one that
 * every AVX2 CPU runs, so CI can compare under it on any machine.
 */
#define FIXTURE_BLAS_CORE "Haswell"

/* True when OpenBLAS names the same kernel family, case aside. */
static bool
same_core(const char *a, const char *b)
{
	for (; *a != '\0' && *b != '\0'; a++, b++)
		if (tolower((unsigned char) *a) != tolower((unsigned char) *b))
			return false;
	return *a == *b;
}

/*
 * The mean label-smoothed cross-entropy (PyTorch's definition, as the
 * engine's loss) of logits [rows, V] rounded to bf16 first: what a bf16
 * training step computes from the logits its product writes in bf16.
 */
static double
rounded_logits_loss(const float *logits, const int32_t *labels, int32_t pad, size_t rows_all, int V, double eps)
{
	double		total = 0.0;
	size_t		row = 0;

	for (size_t r = 0; r < rows_all; r++)
	{
		const float *x;
		double		mx = -INFINITY,
					sum = 0.0,
					sum_x = 0.0,
					lse;

		if (labels[r] == pad)
			continue;
		x = logits + row++ * V;
		for (int j = 0; j < V; j++)
			mx = fmax(mx, bf16_round(x[j]));
		for (int j = 0; j < V; j++)
		{
			sum += exp(bf16_round(x[j]) - mx);
			sum_x += bf16_round(x[j]);
		}
		lse = mx + log(sum);
		total += (1.0 - eps) * (lse - bf16_round(x[labels[r]])) + eps / V * (V * lse - sum_x);
	}
	return total / (double) (row > 0 ? row : 1);
}

/*
 * The model fixture in bf16 on the CUDA backend: logits and loss against
 * PyTorch under the same rules (1e-3) and against fp32 (1e-2); 10 Adam
 * steps tracking PyTorch's fp32 losses (2%); checkpoints that move between
 * precisions; no device allocation after the first step. Where OpenBLAS
 * (which the emulated cuBLAS multiplies with) runs another kernel family
 * than the fixture's, the comparisons with PyTorch allow the spread the
 * fixture measured across families; the training loss must equal, on every
 * CPU, the loss of the engine's own logits rounded to bf16.
 */
static void
check_model(const char *fixtures)
{
	char		path[4096],
				err[TF_ERRLEN],
				fixture_core[64] = "";
	Fixture		fx,
				bf;
	TfModel    *m;
	double		loss,
				loss32,
				first = 0.0,
				last = 0.0,
				own_train,
				error16,
				tolerance,
				loss_tolerance,
				train_tolerance,
				loss16;			/* the bf16 scoring forward's mean loss */
	size_t		count;
	float	   *logits,
			   *want16,
			   *want32,
			   *logits32;
	float		ref16,
				ref_train,
				ref32;
	const float *spread;
	const FixTensor *core;
	const char *our_core = tf_blas(NULL, 0)->get_corename();	/* loaded by main */
	bool		same_family;
	TfTensor   *tensors;
	int			n;
	int64_t		allocs = 0;
	TfOptimizer opt;

	snprintf(path, sizeof(path), "%s/model_fixture.bin", fixtures);
	CHECK(fixture_read(path, &fx) && fx.n > 0, "cannot read %s", path);
	snprintf(path, sizeof(path), "%s/bf16_fixture.bin", fixtures);
	CHECK(fixture_read(path, &bf) && bf.n > 0, "cannot read %s", path);
	if (fx.n == 0 || bf.n == 0 || (m = fixture_model(&fx, 0.0f)) == NULL)
		return;
	core = fixture_get(&bf, "openblas_core");
	CHECK(core != NULL && fixture_get(&bf, "spread") != NULL && fixture_get(&bf, "spread")->count == 3,
		  "bf16_fixture.bin records no kernel family or spread: remake it (make_bf16_fixture.py)");
	if (core == NULL || fixture_get(&bf, "spread") == NULL || fixture_get(&bf, "spread")->count != 3)
		return;
	for (size_t i = 0; i < core->count && i + 1 < sizeof(fixture_core); i++)
		fixture_core[i] = (char) ((int32_t *) core->data)[i];
	spread = fixture_get(&bf, "spread")->data;
	CHECK(same_core(fixture_core, FIXTURE_BLAS_CORE), "the bf16 fixture was made under OpenBLAS's %s kernels, not %s",
		  fixture_core, FIXTURE_BLAS_CORE);
	CHECK(spread[0] > 0.0f && spread[0] < 1e-2f, "the fixture's spread across kernel families, %.3g, is measured",
		  spread[0]);
	/*
	 * OpenBLAS multiplies only under emulation (the emulated cuBLAS calls it):
	 * on a real GPU cuBLAS does, and the comparisons stay as they were
	 */
	if (strcmp(test_device, "cpu") == 0)	/* oneDNN multiplies where the CPU has bf16, else OpenBLAS */
		same_family = !tf_cpu_bf16_native() && same_core(our_core, fixture_core);
	else
		same_family = same_core(our_core, fixture_core) || strstr(test_cuda_library, "_emu") == NULL;
	tolerance = 1e-3 + (same_family ? 0.0 : spread[0]);
	ref16 = *(float *) fixture_get(&bf, "loss")->data;
	ref_train = *(float *) fixture_get(&bf, "loss_train")->data;
	ref32 = *(float *) fixture_get(&fx, "loss")->data;
	/* a quarter of the rules' effect on the loss (bf16 against fp32), and the spread */
	loss_tolerance = 0.25 * fabs(ref16 - ref32) + (same_family ? 0.0 : spread[1]);
	train_tolerance = 1e-5 * fabs(ref_train) + (same_family ? 0.0 : spread[2]);
	printf("  bf16 fixture: made under OpenBLAS's %s kernels, here %s: %s (spread: logits %.3g, loss %.3g, "
		   "training %.3g)\n", fixture_core, our_core, same_family ? "compared as made" : "compared within the spread",
		   spread[0], spread[1], spread[2]);
	want16 = reference_logits(&fx, &bf);
	want32 = reference_logits(&fx, &fx);
	logits32 = forward(m, &fx, &loss32, &count);
	CHECK(tf_model_set_precision(m, TF_BF16, err, sizeof(err)) == TF_OK, "bf16: %s", err);
	CHECK(tf_model_precision(m) == TF_BF16, "precision reads back");
	logits = forward(m, &fx, &loss, &count);
	loss16 = loss;
	error16 = norm_error(logits, want16, count);
	printf("  bf16 fixture: logits %.3g off PyTorch's bf16 rules, %.3g off fp32 (PyTorch: %.3g); loss %.6f "
		   "(rules %.6f, fp32 %.6f)\n", error16, norm_error(logits, want32, count),
		   norm_error(want16, want32, count), loss, ref16, ref32);
	CHECK(error16 < tolerance, "bf16 logits off PyTorch's bf16 rules by %.3g (allowed %.3g)", error16, tolerance);
	CHECK(fabs(loss - ref16) < loss_tolerance, "bf16 loss %.6f, PyTorch's bf16 rules %.6f (allowed %.3g)", loss, ref16,
		  loss_tolerance);
	CHECK(norm_error(logits, want32, count) < 1e-2 && norm_error(logits, want32, count) > 1e-4,
		  "bf16 logits against fp32: %.3g (expected in (1e-4, 1e-2))", norm_error(logits, want32, count));
	/*
	 * the rules' effect stands well above what separates the engine from
	 * them: its own error, or (a check of the fixture) the families' spread
	 */
	CHECK(norm_error(want16, want32, count) > 3 * (same_family ? error16 : spread[0]),
		  "the rules matter: PyTorch bf16 vs fp32 %.3g is not well above %s %.3g", norm_error(want16, want32, count),
		  same_family ? "the engine's error" : "the kernel families' spread", same_family ? error16 : spread[0]);
	own_train = rounded_logits_loss(logits, fixture_get(&fx, "labels")->data, ((int32_t *) fixture_get(&fx, "config")->data)[6],
									fixture_get(&fx, "labels")->count, ((int32_t *) fixture_get(&fx, "config")->data)[0],
									m->config.label_smoothing);
	free(logits);

	check_decode(m, &fx);

	/*
	 * training: 10 Adam steps on the fixture batch learn (its schedule is too
	 * steep to compare trajectories: fp32 and bf16 part ways after 2 steps)
	 */
	tf_optimizer_default(&opt);
	opt.warmup_steps = ((int32_t *) fixture_get(&fx, "config")->data)[7];
	for (int i = 0; i < 10; i++)
	{
		TfBatch		b = {3, (int) fixture_get(&fx, "src")->count / 3, (int) fixture_get(&fx, "tgt_in")->count / 3,
		fixture_get(&fx, "src")->data, fixture_get(&fx, "tgt_in")->data, fixture_get(&fx, "labels")->data, 0};
		int64_t		tokens;
		TfStepStats st;

		CHECK(tf_model_forward(m, &b, true, &loss, &tokens, err, sizeof(err)) == TF_OK &&
			  tf_model_backward(m, (float) (1.0 / tokens), err, sizeof(err)) == TF_OK &&
			  tf_model_step(m, &opt, &st, err, sizeof(err)) == TF_OK, "step %d: %s", i + 1, err);
		if (i == 0)
		{
			allocs = m->be->allocations;
			first = loss / tokens;
			printf("  bf16 training loss (logits rounded): %.6f, PyTorch's rules %.6f (scoring's %.6f), the engine's "
				   "scoring logits rounded %.6f\n", first, ref_train, ref16, own_train);
			CHECK(fabs(first - ref_train) < train_tolerance,
				  "bf16 training loss %.6f: PyTorch's rules with rounded logits %.6f (allowed %.3g)", first, ref_train,
				  train_tolerance);
			CHECK(fabs(first - own_train) < 1e-5 * fabs(own_train) && fabs(own_train - loss16) > 10 * fabs(first - own_train),
				  "bf16 training loss %.6f: the engine's scoring logits rounded to bf16 give %.6f, unrounded %.6f",
				  first, own_train, loss16);
		}
		last = loss / tokens;
	}
	CHECK(isfinite(last) && last < first / 2, "10 bf16 steps: loss %.4f -> %.4f", first, last);
	CHECK(m->be->allocations == allocs, "bf16 steps 2-10 made %lld device allocations",
		  (long long) (m->be->allocations - allocs));

	/* checkpoints: fp32 tensors; loading them refreshes the copy; fp32 and back */
	CHECK(tf_model_tensors(m, &tensors, &n, err, sizeof(err)) == TF_OK, "tensors: %s", err);
	CHECK(tensors[0].dtype == TF_FLOAT32, "checkpoint tensors stay fp32");
	logits = forward(m, &fx, &loss, &count);
	{
		TfModel    *other = fixture_model(&fx, 0.0f);
		double		l2;
		float	   *again;

		CHECK(other != NULL && tf_model_set_precision(other, TF_BF16, err, sizeof(err)) == TF_OK, "second model");
		CHECK(tf_model_load(other, tensors, n, err, sizeof(err)) == TF_OK, "load into bf16: %s", err);
		again = forward(other, &fx, &l2, &count);
		CHECK(memcmp(again, logits, count * sizeof(float)) == 0, "bf16 after a load: not the saved model's logits");
		free(again);
		CHECK(tf_model_set_precision(other, TF_FP32, err, sizeof(err)) == TF_OK, "back to fp32: %s", err);
		again = forward(other, &fx, &l2, &count);
		CHECK(rel_error(again, logits, count) < 1e-2 && memcmp(again, logits, count * sizeof(float)) != 0,
			  "fp32 on the bf16 run's weights: %.3g from bf16", rel_error(again, logits, count));
		free(again);
		tf_model_free(other);
	}
	tf_tensors_free(tensors);
	free(logits);
	free(logits32);
	free(want16);
	free(want32);
	tf_model_free(m);
	fixture_free(&fx);
	fixture_free(&bf);
}

/*
 * The bf16 copies of set_operands16 change no bit: post-norm and pre-norm
 * models with dropout on the sub-layers, the attention and the hidden
 * layer, 3 training steps and an evaluation forward, with the copies and
 * without (the backend's set_operands16 cleared, so every gemm rounds its
 * operands): the same losses and logits, bit for bit.
 */
/*
 * Beam search (4 beams, 4-best) of the fixture's sources on m[0], whose
 * decoding steps' buffers have bf16 copies, and m[1], which rounds every
 * operand (no set_operands16): the same hypotheses, bit for bit.
 */
static void
same_translations(TfModel *m[2], const Fixture *fx, bool pre)
{
	const int32_t *src = fixture_get(fx, "src")->data;
	int			B = 3,
				L = (int) fixture_get(fx, "src")->count / 3,
				differ = 0,
				tokens = 0;
	char		err[TF_ERRLEN];
	TfDecodeOptions opt;
	TfHypothesis h[2][3 * 4];

	tf_decode_options_default(&opt);
	opt.nbest = 4;
	opt.max_length_offset = 5;
	for (int k = 0; k < 2; k++)
		CHECK(tf_model_translate(m[k], src, B, L, &opt, h[k], err, sizeof(err)) == TF_OK, "translate: %s", err);
	for (int i = 0; i < B * opt.nbest; i++)
	{
		differ += h[0][i].length != h[1][i].length || h[0][i].log_prob != h[1][i].log_prob ||
			memcmp(h[0][i].tokens, h[1][i].tokens, h[0][i].length * sizeof(int32_t)) != 0;
		tokens += h[0][i].length;
	}
	CHECK(differ == 0, "%s: %d of %d hypotheses differ with and without bf16 copies in decoding",
		  pre ? "pre-norm" : "post-norm", differ, B * opt.nbest);
	CHECK(tokens > B * opt.nbest, "%d tokens in %d hypotheses", tokens, B * opt.nbest);
	if (differ == 0)
		printf("  bf16 copies in beam search (%s): %d hypotheses (%d tokens) bitwise those of rounding every "
			   "operand\n", pre ? "pre-norm" : "post-norm", B * opt.nbest, tokens);
	for (int k = 0; k < 2; k++)
		tf_hypotheses_free(h[k], B * opt.nbest);
}

static void
check_operands16(const char *fixtures)
{
	char		path[4096],
				err[TF_ERRLEN];
	Fixture		fx;

	snprintf(path, sizeof(path), "%s/model_fixture.bin", fixtures);
	CHECK(fixture_read(path, &fx) && fx.n > 0, "cannot read %s", path);
	if (fx.n == 0)
		return;
	for (int pre = 0; pre < 2; pre++)
	{
		TfConfig	c;
		TfModel    *m[2];
		double		losses[2][4];
		float	   *logits[2] = {NULL, NULL};
		size_t		count = 0;
		bool		same;
		TfOptimizer opt;

		fixture_config(&fx, &c);
		c.normalize_before = pre;
		c.dropout = c.attention_dropout = c.relu_dropout = 0.1f;
		tf_optimizer_default(&opt);
		for (int k = 0; k < 2; k++)
		{
			m[k] = tf_model_create(&c, 7, test_device, 2, err, sizeof(err));
			CHECK(m[k] != NULL, "create: %s", err);
			if (m[k] == NULL)
				return;
			if (k == 1)
				m[k]->be->set_operands16 = NULL;
			CHECK(tf_model_set_precision(m[k], TF_BF16, err, sizeof(err)) == TF_OK, "bf16: %s", err);
			for (int i = 0; i < 3; i++)
			{
				TfBatch		b = {3, (int) fixture_get(&fx, "src")->count / 3,
					(int) fixture_get(&fx, "tgt_in")->count / 3, fixture_get(&fx, "src")->data,
				fixture_get(&fx, "tgt_in")->data, fixture_get(&fx, "labels")->data, 0};
				int64_t		tokens;
				TfStepStats st;

				CHECK(tf_model_forward(m[k], &b, true, &losses[k][i], &tokens, err, sizeof(err)) == TF_OK &&
					  tf_model_backward(m[k], (float) (1.0 / tokens), err, sizeof(err)) == TF_OK &&
					  tf_model_step(m[k], &opt, &st, err, sizeof(err)) == TF_OK, "step %d: %s", i + 1, err);
			}
			logits[k] = forward(m[k], &fx, &losses[k][3], &count);
		}
		CHECK(m[0]->num_operands16 > 0 && m[1]->num_operands16 == 0,
			  "%s: %d buffers with bf16 copies, %d without set_operands16", pre ? "pre-norm" : "post-norm",
			  m[0]->num_operands16, m[1]->num_operands16);
		same = memcmp(losses[0], losses[1], sizeof(losses[0])) == 0 &&
			memcmp(logits[0], logits[1], count * sizeof(float)) == 0;
		CHECK(memcmp(losses[0], losses[1], sizeof(losses[0])) == 0,
			  "%s: losses with bf16 copies %.9g %.9g %.9g %.9g, without %.9g %.9g %.9g %.9g",
			  pre ? "pre-norm" : "post-norm", losses[0][0], losses[0][1], losses[0][2], losses[0][3],
			  losses[1][0], losses[1][1], losses[1][2], losses[1][3]);
		CHECK(memcmp(logits[0], logits[1], count * sizeof(float)) == 0,
			  "%s: logits after 3 steps differ with and without bf16 copies", pre ? "pre-norm" : "post-norm");
		if (same)
			printf("  bf16 copies (%s, %d buffers): 3 training steps and a forward bitwise those of rounding "
				   "every operand (losses %.6f -> %.6f)\n", pre ? "pre-norm" : "post-norm", m[0]->num_operands16,
				   losses[0][0], losses[0][3]);
		same_translations(m, &fx, pre);
		for (int k = 0; k < 2; k++)
		{
			free(logits[k]);
			tf_model_free(m[k]);
		}
	}
	fixture_free(&fx);
}

/*
 * attention_backward's bf16 copies of dk and dv gathered over calls, as the
 * decoder layers' cross-attention writes them into one [keys, 4D] gradient
 * of 2 layers (the last layer's columns first): a bf16 product reading the
 * whole gradient after the last layer's call alone must round the first
 * layer's columns itself (their copy is stale), and after both reads the
 * copies. Each product bitwise the same over an unlisted copy of the
 * gradient, which gemm rounds whole.
 */
/* n random floats in [-1, 1) (malloc'd). */
static float *
randoms(size_t n)
{
	float	   *x = malloc(n * sizeof(float));

	for (size_t i = 0; i < n; i++)
		x[i] = rnd();
	return x;
}

/* A new device copy of `bytes` of host memory. */
static void *
up(TfBackend *be, const void *host, size_t bytes)
{
	void	   *d = be->alloc(be, bytes);

	be->upload(be, d, host, bytes);
	return d;
}

static void
check_joined_copies(void)
{
	enum {B = 2, H = 2, DK = 32, D = H * DK, LD = 4 * D, E = 24};
	static const int lq[B] = {5, 9},
				lk[B] = {6, 3};
	char		err[TF_ERRLEN];
	TfBackend  *gpu = tf_backend_create("cuda", 0, 1, err, sizeof(err));
	int32_t		q_start[B + 1],
				k_start[B + 1];
	int64_t		p_start[B + 1];
	int			max_q,
				max_k;
	size_t		nq,
				nk;
	TfAttentionShape sh = {0};

	CHECK(gpu != NULL, "cuda backend: %s", err);
	if (gpu == NULL)
		return;
	fixture_attention_layout(B, H, lq, lk, q_start, k_start, p_start, &max_q, &max_k);
	nq = (size_t) q_start[B], nk = (size_t) k_start[B];
	{
		float	   *q = randoms(nq * D),
				   *kv = randoms(nk * LD),
				   *dctx = randoms(nq * D),
				   *w = randoms((size_t) E * LD),
				   *got = malloc(nk * E * 4),
				   *want = malloc(nk * E * 4);
		float	   *d_q = up(gpu, q, nq * D * 4),
				   *d_kv = up(gpu, kv, nk * LD * 4),
				   *d_dctx = up(gpu, dctx, nq * D * 4),
				   *d_w = up(gpu, w, (size_t) E * LD * 4),
				   *d_g = up(gpu, kv, nk * LD * 4),	/* the gradient, its copy stale */
				   *d_plain = gpu->alloc(gpu, nk * LD * 4),
				   *d_dq = gpu->alloc(gpu, nq * D * 4),
				   *d_lse = gpu->alloc(gpu, nq * H * 4),
				   *d_ctx = gpu->alloc(gpu, nq * D * 4),
				   *d_out = gpu->alloc(gpu, nk * E * 4),
				   *d_ref = gpu->alloc(gpu, nk * E * 4);
		void	   *d_g16 = gpu->alloc(gpu, nk * LD * 2);
		TfOperand16 listed = {d_g, d_g16, nk * LD};

		sh.batch = B, sh.num_heads = H, sh.head_dim = DK, sh.max_q = max_q, sh.max_k = max_k;
		sh.q_rows = (int) nq, sh.k_rows = (int) nk;
		sh.q_start = up(gpu, q_start, sizeof(q_start)), sh.k_start = up(gpu, k_start, sizeof(k_start));
		sh.p_start = up(gpu, p_start, sizeof(p_start)), sh.p_total = p_start[B];
		CHECK(gpu->set_precision(gpu, TF_BF16, d_w, (size_t) E * LD), "set_precision bf16");
		gpu->reserve(gpu, 0, (size_t) B * max_q * H, nk * LD);
		gpu->set_operands16(gpu, &listed, 1);
		for (int layer = 1; layer >= 0; layer--)
		{
			float	   *k = d_kv + 2 * D * layer;

			gpu->attention(gpu, d_ctx, d_lse, NULL, d_q, D, k, k + D, LD, &sh);
			gpu->attention_backward(gpu, d_dq, d_g + 2 * D * layer, d_g + 2 * D * layer + D, d_dctx, d_lse, d_q, D,
									k, k + D, LD, &sh);
			gpu->copy(gpu, d_plain, d_g, nk * LD);
			gpu->gemm(gpu, false, true, (int) nk, E, LD, 1.0f, d_g, LD, d_w, LD, 0.0f, d_out, E);
			gpu->gemm(gpu, false, true, (int) nk, E, LD, 1.0f, d_plain, LD, d_w, LD, 0.0f, d_ref, E);
			gpu->download(gpu, got, d_out, nk * E * 4);
			gpu->download(gpu, want, d_ref, nk * E * 4);
			CHECK(gpu->status(gpu, err, sizeof(err)) == TF_OK, "%s", err);
			CHECK(memcmp(got, want, nk * E * 4) == 0,
				  "a product over the gradient after layer %d's dk and dv differs from rounding it whole", layer);
		}
		gpu->set_operands16(gpu, NULL, 0);
		free(q), free(kv), free(dctx), free(w), free(got), free(want);
	}
	gpu->destroy(gpu);
}

/* A bf16 value (its bits) widened. */
static float
widen16(uint16_t b)
{
	return from_bits((uint32_t) b << 16);
}

/*
 * The training step's logits in bf16 (TfOperand16.only16). A product into
 * a listed only16 buffer writes its copy alone: the product of the
 * rounded operands, rounded once (a host model in double within one bf16
 * step, where fp32's sums land beside a tie). cross_entropy with gradient
 * reads that copy and writes the gradient there: the host model's loss
 * and gradient on the same rounded logits. With nothing listed (fp32
 * logits, rounded as cross_entropy reads them) the losses and the
 * gradient's rounding are bitwise the same.
 */
static void
check_rounded_logits(void)
{
	enum {R = 5, D = 48, V = 200, LD = 256, PAD = 0};
	static const int32_t labels[R] = {7, PAD, 199, 1, 64};
	const float eps = 0.1f;
	char		err[TF_ERRLEN];
	TfBackend  *gpu = tf_backend_create("cuda", 0, 1, err, sizeof(err));
	float	   *h = randoms((size_t) R * D),
			   *w = randoms((size_t) V * D),
			   *grad32 = malloc((size_t) R * LD * 4);
	uint16_t	logits16[R * LD],
				grad16[R * LD];
	double		loss[R],
				loss32[R],
				worst_loss = 0.0;
	int			off_product = 0,
				inexact = 0,
				off_gradient = 0,
				unequal = 0;

	CHECK(gpu != NULL, "cuda backend: %s", err);
	if (gpu == NULL)
		return;
	for (size_t i = 0; i < (size_t) R * D; i++)
		h[i] *= 3.0f;			/* logits of a few units, where one bf16 step is 2^-7 .. 2^-5 */
	{
		float	   *d_h = up(gpu, h, (size_t) R * D * 4),
				   *d_w = up(gpu, w, (size_t) V * D * 4),
				   *d_l = gpu->alloc(gpu, (size_t) R * LD * 4);
		void	   *d_l16 = gpu->alloc(gpu, (size_t) R * LD * 2);
		int32_t    *d_lab = up(gpu, labels, sizeof(labels));
		double	   *d_loss = gpu->alloc(gpu, R * sizeof(double));
		TfOperand16 listed = {d_l, d_l16, (size_t) R * LD, true};

		CHECK(gpu->set_precision(gpu, TF_BF16, d_w, (size_t) V * D), "set_precision bf16");
		gpu->reserve(gpu, 0, 0, (size_t) R * D);
		gpu->set_operands16(gpu, &listed, 1);
		gpu->gemm(gpu, false, true, R, V, D, 1.0f, d_h, D, d_w, D, 0.0f, d_l, LD);
		gpu->download(gpu, logits16, d_l16, sizeof(logits16));
		gpu->cross_entropy(gpu, d_l, true, d_lab, R, V, LD, PAD, eps, d_loss);
		gpu->download(gpu, grad16, d_l16, sizeof(grad16));
		gpu->download(gpu, loss, d_loss, sizeof(loss));

		/* nothing listed: fp32 logits, read rounded */
		gpu->set_operands16(gpu, NULL, 0);
		gpu->gemm(gpu, false, true, R, V, D, 1.0f, d_h, D, d_w, D, 0.0f, d_l, LD);
		gpu->cross_entropy(gpu, d_l, true, d_lab, R, V, LD, PAD, eps, d_loss);
		gpu->download(gpu, grad32, d_l, (size_t) R * LD * 4);
		gpu->download(gpu, loss32, d_loss, sizeof(loss32));
		CHECK(gpu->status(gpu, err, sizeof(err)) == TF_OK, "%s", err);
	}
	for (int r = 0; r < R; r++)
	{
		const uint16_t *x = logits16 + r * LD;
		double		mx = -INFINITY,
					sum = 0.0,
					sum_x = 0.0,
					want;

		for (int j = 0; j < V; j++)
		{
			double		p = 0.0;
			float		ref;

			for (int k = 0; k < D; k++)
				p += (double) bf16_round(h[r * D + k]) * bf16_round(w[j * D + k]);
			ref = bf16_round((float) p);
			off_product += fabsf(widen16(x[j]) - ref) > 0x1p-7f * fabsf(ref);
			inexact += widen16(x[j]) != ref;
			mx = fmax(mx, widen16(x[j]));
		}
		for (int j = 0; j < V; j++)
		{
			sum += exp(widen16(x[j]) - mx);
			sum_x += widen16(x[j]);
		}
		want = labels[r] == PAD ? 0.0 : mx + log(sum) - (1.0 - eps) * widen16(x[labels[r]]) - eps * sum_x / V;
		worst_loss = fmax(worst_loss, fabs(loss[r] - want) / fmax(1.0, fabs(want)));
		for (int j = 0; j < V; j++)
		{
			double		g = labels[r] == PAD ? 0.0 : exp(widen16(x[j]) - mx) / sum - eps / V -
				(j == labels[r] ? 1.0 - eps : 0.0);
			float		ref = bf16_round((float) g);

			off_gradient += fabsf(widen16(grad16[r * LD + j]) - ref) > 0x1p-7f * fabsf(ref);
			unequal += bf16_round(grad32[r * LD + j]) != widen16(grad16[r * LD + j]);
		}
	}
	printf("  bf16 logits: product rounded once (%d of %d not the host model's, %d beyond a bf16 step), loss %.2g off "
		   "the host model, gradient %d beyond a step, %d unlike the unlisted path's\n", inexact, R * V, off_product,
		   worst_loss, off_gradient, unequal);
	CHECK(off_product == 0 && inexact <= R * V / 100, "bf16 logits: %d of %d not the rounded product, %d beyond a step",
		  inexact, R * V, off_product);
	CHECK(unequal == 0, "bf16 cross-entropy: %d gradients of the unlisted path round otherwise", unequal);
	CHECK(worst_loss < 1e-6 && off_gradient == 0, "bf16 cross-entropy: loss %.3g off, %d gradients beyond a step",
		  worst_loss, off_gradient);
	CHECK(memcmp(loss, loss32, sizeof(loss)) == 0, "bf16 cross-entropy: the only16 and unlisted losses differ");
	free(h), free(w), free(grad32);
	gpu->destroy(gpu);
}

void
test_precision(const char *fixtures)
{
	check_rounding_model();
	check_options();
	check_native();
	check_speedup();
	check_gemm(test_device);
	check_attention_rules(test_device);
	check_model(fixtures);
	if (strcmp(test_device, "cuda") != 0)
	{
		check_gradient_copy();
		return;
	}
	/* the copies that spare CUDA's rounding passes (set_operands16, only16): the CPU has none */
	check_joined_copies();
	check_rounded_logits();
	check_operands16(fixtures);
}
