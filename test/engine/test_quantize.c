/*
 * test_quantize.c - int8 models on the CPU: the per-row quantization bound,
 * the backend's fp32 and int8 `linear` against plain C of the same rules
 * (int8: exact integer sums, saturation-free at the extremes), a quantized
 * model's tensors, and translation of the decode fixture in int8 against
 * fp32. Run also with ONEDNN_MAX_CPU_ISA=AVX2 (make check-engine), where
 * weights are fitted to 7 bits.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "fixture.h"
#include "model.h"
#include "transformer.h"

/* |w - s q| <= s / 2, |q| <= 127, s = max |w| / 127, a zero row all zero. */
static void
check_quantize_row(void)
{
	unsigned	seed = 7;
	float		w[300];
	int8_t		q[300];
	int			r,
				j,
				bad = 0;

	for (r = 0; r < 20; r++)
	{
		float		range = r == 0 ? 0.0f : powf(10.0f, (float) (r % 7) - 3.0f);
		float		amax = 0.0f,
					s;

		for (j = 0; j < 300; j++)
		{
			w[j] = fixture_uniform(&seed) * range;
			amax = fmaxf(amax, fabsf(w[j]));
		}
		s = tf_quantize_row(w, 300, 127, q);
		CHECK(fabsf(s - amax / 127.0f) <= 1e-7f * amax, "row %d: scale %g, max/127 %g", r, s, amax / 127.0f);
		for (j = 0; j < 300; j++)
			bad += abs(q[j]) > 127 || fabsf(w[j] - s * q[j]) > 0.5f * s * (1.0f + 1e-5f) + 1e-30f;
	}
	CHECK(bad == 0, "%d quantized values outside |w - s q| <= s/2", bad);
}

/* The int8 rule of backend.h's linear in double precision: y [rows, out]. */
static void
reference_int8(double *y, const float *x, const int8_t *w, const float *scales, const float *bias, int rows,
			   int in, int out)
{
	int			r,
				n,
				k;

	for (r = 0; r < rows; r++)
	{
		const float *xr = x + (size_t) r * in;
		float		amax = 0.0f,
					inv;
		int			xq[512];

		for (k = 0; k < in; k++)
			amax = fmaxf(amax, fabsf(xr[k]));
		inv = amax > 0.0f ? 127.0f / amax : 0.0f;
		for (k = 0; k < in; k++)
			xq[k] = (int) nearbyintf(xr[k] * inv);
		for (n = 0; n < out; n++)
		{
			long		sum = 0;

			for (k = 0; k < in; k++)
				sum += (long) xq[k] * w[(size_t) n * in + k];
			y[(size_t) r * out + n] = (double) (amax / 127.0f) * scales[n] * (double) sum + (bias ? bias[n] : 0.0);
		}
	}
}

/* Normwise relative error: max |a - b| / max(max |b|, 1). */
static double
worst_error(const float *a, const double *b, size_t n)
{
	double		worst = 0.0,
				big = 1.0;
	size_t		i;

	for (i = 0; i < n; i++)
	{
		worst = fmax(worst, fabs(a[i] - b[i]));
		big = fmax(big, fabs(b[i]));
	}
	return worst / big;
}

/*
 * 140 products of distinct widths in fp32 (128 rows: oneDNN's, not
 * OpenBLAS's) and in int8 (100 rows: three tile heights where oneDNN runs
 * AMX), each cut into blocks with a narrower last one (two primitives a
 * block width): about 700 primitives on AMX CPUs and 560 elsewhere, past
 * the cache's 256 places, so it is emptied between calls, never within
 * one. Checked against plain C (int8: reference_int8).
 */
static void
check_linear_many_shapes(TfBackend *be)
{
	int			in = 64,
				qmax = be->int8_weight_max,
				j,
				wrong = 0,
				wrong_int8 = 0;
	unsigned	seed = 5;
	float	   *x = malloc((size_t) 128 * in * sizeof(float)),
			   *w = malloc((size_t) 400 * in * sizeof(float)),
			   *y = malloc((size_t) 128 * 400 * sizeof(float)),
			   *scales = malloc(400 * sizeof(float));
	int8_t	   *wq = malloc((size_t) 400 * in);
	double	   *ref = malloc((size_t) 128 * 400 * sizeof(double));
	size_t		i;

	for (i = 0; i < (size_t) 128 * in; i++)
		x[i] = fixture_uniform(&seed);
	for (i = 0; i < (size_t) 400 * in; i++)
	{
		w[i] = fixture_uniform(&seed);
		wq[i] = (int8_t) lrintf(fixture_uniform(&seed) * (float) qmax);
	}
	for (i = 0; i < 400; i++)
		scales[i] = 0.01f;
	for (j = 0; j < 140; j++)
	{
		int			out = 201 + j,
					r,
					n,
					k;

		be->linear(be, TF_WEIGHTS_FP32, y, x, w, NULL, NULL, 128, in, out);
		for (r = 0; r < 128; r++)
			for (n = 0; n < out; n++)
			{
				double		sum = 0.0;

				for (k = 0; k < in; k++)
					sum += (double) x[(size_t) r * in + k] * w[(size_t) n * in + k];
				ref[(size_t) r * out + n] = sum;
			}
		wrong += worst_error(y, ref, (size_t) 128 * out) >= 1e-5;
		be->linear(be, TF_WEIGHTS_INT8, y, x, wq, scales, NULL, 100, in, out);
		reference_int8(ref, x, wq, scales, NULL, 100, in, out);
		wrong_int8 += worst_error(y, ref, (size_t) 100 * out) >= 1e-5;
	}
	CHECK(wrong == 0 && wrong_int8 == 0,
		  "%d fp32 and %d int8 products of 140 each, past the primitive cache's size, differ from plain C", wrong,
		  wrong_int8);
	{
		char		err[256] = "";

		CHECK(be->status(be, err, sizeof(err)) == TF_OK, "linear reported an error: %s", err);
	}
	free(x);
	free(w);
	free(y);
	free(scales);
	free(wq);
	free(ref);
}

/*
 * fp32 and int8 linear against plain C, at decoding's and encoding's row
 * counts and at the extremes; int8's row tiles on AMX CPUs (64 rows, then
 * one per bit of the rest) at 64 + 32 + 4, 3 x 64 + 8, 127 (seven tile
 * heights) and 9 x 64 + 16 + 8 rows, elsewhere (tiles of 256 and the
 * rest) at 2 x 256 + 88, and with many column blocks.
 */
static void
check_linear(void)
{
	TfBackend  *be = tf_backend_cpu_create(2);
	static const int shapes[][3] = {{1, 64, 48}, {4, 96, 130}, {37, 512, 64}, {128, 40, 200}, {100, 96, 130},
	{200, 64, 1100}, {127, 256, 96}, {600, 64, 130}};
	unsigned	seed = 11;
	size_t		s;
	int			qmax;

	CHECK(be != NULL && be->linear != NULL && be->embed_int8 != NULL, "the CPU backend has linear");
	if (be == NULL || be->linear == NULL)
		return;
	qmax = be->int8_weight_max;
	CHECK(qmax == 127 || qmax == 63, "int8_weight_max %d", qmax);
	for (s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
	{
		int			rows = shapes[s][0],
					in = shapes[s][1],
					out = shapes[s][2],
					extreme;

		for (extreme = 0; extreme < 2; extreme++)
		{
			float	   *x = malloc((size_t) rows * in * sizeof(float)),
					   *wf = malloc((size_t) out * in * sizeof(float)),
					   *y = malloc((size_t) rows * out * sizeof(float)),
					   *scales = malloc(out * sizeof(float)),
					   *bias = malloc(out * sizeof(float));
			double	   *ref = malloc((size_t) rows * out * sizeof(double));
			int8_t	   *w = malloc((size_t) out * in);
			size_t		i;
			int			r,
						n,
						k;

			/* extreme: every activation at its row's maximum and every weight at +-qmax, where u8 x s8 pairs saturate 16 bits */
			for (i = 0; i < (size_t) rows * in; i++)
				x[i] = extreme ? 3.0f : fixture_uniform(&seed) * 4.0f;
			for (i = 0; i < (size_t) out * in; i++)
			{
				w[i] = extreme ? (int8_t) ((i / in) % 2 ? qmax : -qmax)
					: (int8_t) lrintf(fixture_uniform(&seed) * (float) qmax);
				wf[i] = fixture_uniform(&seed);
			}
			for (n = 0; n < out; n++)
			{
				scales[n] = 0.01f + 0.001f * (float) n;
				bias[n] = fixture_uniform(&seed);
			}
			be->linear(be, TF_WEIGHTS_INT8, y, x, w, scales, bias, rows, in, out);
			reference_int8(ref, x, w, scales, bias, rows, in, out);
			CHECK(worst_error(y, ref, (size_t) rows * out) < 1e-5,
				  "int8 linear %dx%dx%d%s: worst relative error %.3g", rows, in, out, extreme ? " (extremes)" : "",
				  worst_error(y, ref, (size_t) rows * out));
			if (!extreme)
			{
				be->linear(be, TF_WEIGHTS_FP32, y, x, wf, NULL, bias, rows, in, out);
				for (r = 0; r < rows; r++)
					for (n = 0; n < out; n++)
					{
						double		sum = bias[n];

						for (k = 0; k < in; k++)
							sum += (double) x[(size_t) r * in + k] * wf[(size_t) n * in + k];
						ref[(size_t) r * out + n] = sum;
					}
				CHECK(worst_error(y, ref, (size_t) rows * out) < 1e-5, "fp32 linear %dx%dx%d: worst relative error %.3g",
					  rows, in, out, worst_error(y, ref, (size_t) rows * out));
			}
			free(x);
			free(wf);
			free(y);
			free(scales);
			free(bias);
			free(ref);
			free(w);
		}
	}
	printf("  linear: int8 and fp32 equal plain C on %zu shapes (int8 weights up to %d: %s)\n",
		   sizeof(shapes) / sizeof(shapes[0]), qmax, qmax == 127 ? "VNNI" : "no VNNI, 7 bits");
	check_linear_many_shapes(be);
	be->destroy(be);
}

/*
 * A quantized model's tensors: int8 weights within half a step of the fp32
 * ones (a step more where fitted to 7 bits), scales, fp32 biases; loading
 * them back gives the same tensors; a float32 tensor for an int8 one is
 * refused by name.
 */
static TfModel *
check_tensors(TfModel *fp32)
{
	TfModel    *q,
			   *loaded = NULL;
	TfTensor   *tf,
			   *tq;
	int			nf,
				nq,
				i,
				int8s = 0;
	double		worst = 0.0;
	char		err[TF_ERRLEN];

	q = tf_model_quantize(fp32, 2, err, sizeof(err));
	CHECK(q != NULL && tf_model_quantized(q), "quantize: %s", err);
	if (q == NULL)
		return NULL;
	CHECK(tf_model_quantize(q, 2, err, sizeof(err)) == NULL && strstr(err, "int8") != NULL,
		  "quantizing an int8 model is refused: %s", err);
	if (tf_model_tensors(fp32, &tf, &nf, err, sizeof(err)) != TF_OK ||
		tf_model_tensors(q, &tq, &nq, err, sizeof(err)) != TF_OK)
	{
		CHECK(false, "tensors: %s", err);
		return NULL;
	}
	for (i = 0; i < nf; i++)
	{
		int			j,
					k;

		for (j = 0; j < nq && strcmp(tq[j].name, tf[i].name) != 0; j++)
			;
		CHECK(j < nq, "quantized model lacks %s", tf[i].name);
		if (j == nq)
			continue;
		if (tq[j].dtype == TF_INT8)
		{
			char		sname[160];
			const float *scale = NULL;
			int64_t		r,
						c;

			int8s++;
			snprintf(sname, sizeof(sname), "%s_scale", tf[i].name);
			for (k = 0; k < nq; k++)
				if (strcmp(tq[k].name, sname) == 0)
					scale = tq[k].data;
			CHECK(scale != NULL, "no %s", sname);
			if (scale == NULL)
				continue;
			for (r = 0; r < tq[j].shape[0]; r++)
				for (c = 0; c < tq[j].shape[1]; c++)
				{
					size_t		e = (size_t) r * tq[j].shape[1] + c;
					double		d = fabs(((const float *) tf[i].data)[e] - scale[r] * ((const int8_t *) tq[j].data)[e]);

					worst = fmax(worst, d / (0.5 * scale[r]));
				}
		}
		else
			CHECK(tq[j].dtype == TF_FLOAT32 && memcmp(tq[j].data, tf[i].data, tf[i].bytes) == 0,
				  "%s is copied as float32", tf[i].name);
	}
	/* the embedding, 6 matrices per encoder layer, 10 per decoder layer */
	CHECK(int8s == 1 + 6 * tf_model_config(fp32)->num_encoder_layers + 10 * tf_model_config(fp32)->num_decoder_layers,
		  "int8 tensors: %d", int8s);
	CHECK(worst <= 1.0 + 1e-4, "dequantized weights: worst error %.4f half-steps", worst);
	CHECK(nq == nf + int8s, "quantized model lists %d tensors for %d parameters and %d scales", nq, nf, int8s);

	loaded = tf_model_create_quantized(tf_model_config(fp32), 2, err, sizeof(err));
	CHECK(loaded != NULL, "create int8: %s", err);
	if (loaded != NULL)
	{
		TfTensor   *bad = malloc(nq * sizeof(TfTensor));

		memcpy(bad, tq, nq * sizeof(TfTensor));
		for (i = 0; i < nq && bad[i].dtype != TF_INT8; i++)
			;
		bad[i].dtype = TF_FLOAT32;
		CHECK(tf_model_load(loaded, bad, nq, err, sizeof(err)) == TF_ERROR && strstr(err, bad[i].name) != NULL &&
			  strstr(err, "expected int8") != NULL, "a float32 tensor for an int8 one: %s", err);
		free(bad);
		CHECK(tf_model_load(loaded, tq, nq, err, sizeof(err)) == TF_OK, "load int8: %s", err);
	}
	printf("  tensors: %d int8 weights with scales, worst |w - s q| = %.3f half-steps; %zu of %zu bytes\n",
		   int8s, worst, tf_model_weight_bytes(q), tf_model_weight_bytes(fp32));
	{
		/* int8 weights and a float scale per row; everything else float32 */
		size_t		int8_bytes = 0,
					rows = 0;

		for (i = 0; i < nq; i++)
			if (tq[i].dtype == TF_INT8)
			{
				int8_bytes += tq[i].bytes;
				rows += tq[i].shape[0];
			}
		CHECK(tf_model_num_parameters(q) + int8_bytes == tf_model_num_parameters(fp32) &&
			  tf_model_weight_bytes(q) == tf_model_num_parameters(q) * sizeof(float) + int8_bytes + rows * sizeof(float),
			  "int8 model holds %zu bytes (%zu int8, %zu rows), fp32 %zu", tf_model_weight_bytes(q), int8_bytes, rows,
			  tf_model_weight_bytes(fp32));
	}
	{
		int32_t		src[4] = {5, 6, 7, 3};
		TfDecodeOptions opt;
		TfHypothesis h;

		tf_decode_options_default(&opt);
		CHECK(tf_model_translate(q, src, 1, 4, &opt, &h, err, sizeof(err)) == TF_ERROR &&
			  strstr(err, "load them") != NULL, "the quantizing model does not compute: %s", err);
	}
	tf_tensors_free(tf);
	tf_tensors_free(tq);
	tf_model_free(q);
	return loaded;
}

/* Log-probability (nats) of hypothesis h of source row src under model m. */
static double
log_prob_under(TfModel *m, const int32_t *src, int L, const TfHypothesis *h, const TfDecodeOptions *opt)
{
	int			n = h->length + 1,
				j;
	int32_t    *tgt = calloc(2 * (size_t) n, sizeof(int32_t));
	TfBatch		b = {1, L, n, src, tgt, tgt + n};
	double		lp = 0.0;
	char		err[TF_ERRLEN];

	tgt[0] = opt->bos_id;
	for (j = 0; j < h->length; j++)
		tgt[1 + j] = tgt[n + j] = h->tokens[j];
	tgt[n + n - 1] = opt->eos_id;
	CHECK(tf_model_score(m, &b, &lp, err, sizeof(err)) == TF_OK, "score: %s", err);
	free(tgt);
	return lp;
}

/*
 * The decode fixture's model in int8 and fp32 on 64 sources (the fixture's
 * 4 and 60 random ones of 3 to 12 tokens), beam 4 and greedy: the same best
 * hypothesis for at least 90% of sentences; where they differ, each of the
 * two hypotheses has log-probabilities under int8 and fp32 (teacher forced)
 * within 0.05 nats per token: the search took another path on a near-tie
 * (this fixture is a small random model, d_model 32, full of them), not a
 * different model.
 */
static void
check_translation(const Fixture *fx, TfModel *fp32, TfModel *q)
{
	const int32_t *cfg = fixture_get(fx, "config")->data;
	const FixTensor *fsrc = fixture_get(fx, "src");
	int			B = 64,
				L = 13,
				FL = (int) fsrc->count / 4,
				beam,
				i,
				j,
				same = 0,
				total = 0;
	int32_t    *src = calloc((size_t) B * L, sizeof(int32_t));
	TfHypothesis *hf = calloc(B, sizeof(TfHypothesis)),
			   *hq = calloc(B, sizeof(TfHypothesis));
	unsigned	seed = 5;
	double		worst_gap = 0.0;
	char		err[TF_ERRLEN];

	for (i = 0; i < B; i++)
	{
		int			n = 3 + (int) ((fixture_uniform(&seed) + 1.0f) * 4.99f);

		for (j = 0; j < L; j++)
			src[(size_t) i * L + j] = cfg[6];	/* pad */
		if (i < 4 && FL <= L)
			memcpy(src + (size_t) i * L, (const int32_t *) fsrc->data + (size_t) i * FL, FL * sizeof(int32_t));
		else
		{
			for (j = 0; j < n; j++)
				src[(size_t) i * L + j] = 4 + (int) ((fixture_uniform(&seed) + 1.0f) * 0.5f * (cfg[0] - 5));
			src[(size_t) i * L + n] = cfg[8];	/* EOS */
		}
	}
	for (beam = 1; beam <= 4; beam += 3)
	{
		TfDecodeOptions opt;

		tf_decode_options_default(&opt);
		opt.beam_size = beam;
		opt.bos_id = cfg[7];
		opt.eos_id = cfg[8];
		if (tf_model_translate(fp32, src, B, L, &opt, hf, err, sizeof(err)) != TF_OK ||
			tf_model_translate(q, src, B, L, &opt, hq, err, sizeof(err)) != TF_OK)
		{
			CHECK(false, "translate beam %d: %s", beam, err);
			break;
		}
		for (i = 0; i < B; i++)
		{
			bool		eq = hf[i].length == hq[i].length &&
				memcmp(hf[i].tokens, hq[i].tokens, hf[i].length * sizeof(int32_t)) == 0;

			total++;
			same += eq;
			if (!eq)
			{
				const int32_t *row = src + (size_t) i * L;

				worst_gap = fmax(worst_gap, fabs(log_prob_under(q, row, L, &hf[i], &opt) -
												 log_prob_under(fp32, row, L, &hf[i], &opt)) / (hf[i].length + 1));
				worst_gap = fmax(worst_gap, fabs(log_prob_under(q, row, L, &hq[i], &opt) -
												 log_prob_under(fp32, row, L, &hq[i], &opt)) / (hq[i].length + 1));
			}
		}
		tf_hypotheses_free(hf, B);
		tf_hypotheses_free(hq, B);
	}
	CHECK(same * 10 >= total * 9, "int8 equals fp32 on %d of %d sentences", same, total);
	CHECK(worst_gap <= 0.05, "int8 and fp32 log-probabilities of a hypothesis differ by %.4f nats per token", worst_gap);
	printf("  translation: int8 equals fp32 on %d of %d sentences; where not, both models' hypotheses score within "
		   "%.4f nats per token under int8 and fp32\n", same, total, worst_gap);
	free(src);
	free(hf);
	free(hq);
}

/*
 * The PyTorch reference's int8 rules (test/fixtures/int8_fixture.bin, from
 * bench/torch_model.py INT8_RULES on the decode fixture's model): the int8
 * model's teacher-forced log-probabilities equal them (7-bit weights'
 * where the CPU has no VNNI) within 1e-4 nats per sentence, where int8 and
 * fp32 differ by up to 6e-2 (measured: within 1e-6). (Not bitwise: the
 * two compute the fp32 parts in different orders, and an input that lands
 * on a rounding boundary of its quantization may round either way.)
 */
static void
check_torch_rules(const char *fixtures, const Fixture *fx, TfModel *q)
{
	Fixture		ref;
	char		path[512],
				err[TF_ERRLEN];
	const FixTensor *src = fixture_get(fx, "src"),
			   *tgt_in = fixture_get(fx, "score.tgt_in");
	TfBatch		b = {4, (int) src->count / 4, (int) tgt_in->count / 4, src->data, tgt_in->data,
	fixture_get(fx, "score.labels")->data};
	double		lp[4],
				worst = 0.0,
				int8_vs_fp32 = 0.0;
	const float *want,
			   *fp32;
	int			i;

	snprintf(path, sizeof(path), "%s/int8_fixture.bin", fixtures);
	CHECK(fixture_read(path, &ref), "read %s", path);
	/* the 7-bit weights of a CPU without VNNI have their own reference */
	want = fixture_get(&ref, q->be->int8_weight_max == 127 ? "int8.log_prob" : "int8_7bit.log_prob")->data;
	fp32 = fixture_get(&ref, "fp32.log_prob")->data;
	CHECK(tf_model_score(q, &b, lp, err, sizeof(err)) == TF_OK, "score: %s", err);
	for (i = 0; i < 4; i++)
	{
		worst = fmax(worst, fabs(lp[i] - want[i]));
		int8_vs_fp32 = fmax(int8_vs_fp32, fabs(want[i] - fp32[i]));
	}
	CHECK(worst <= 1e-4, "int8 log-probabilities differ from PyTorch's int8 rules by %.2g nats", worst);
	printf("  PyTorch int8 rules (%d-bit weights): 4 teacher-forced log-probabilities within %.2g nats (int8 vs fp32: %.2g)\n",
		   q->be->int8_weight_max == 127 ? 8 : 7, worst, int8_vs_fp32);
	fixture_free(&ref);
}

void
test_quantize(const char *fixtures)
{
	Fixture		fx;
	char		path[512];
	TfModel    *fp32,
			   *q;

	check_quantize_row();
	if (strcmp(test_device, "cpu") != 0)
	{
		printf("  (int8 models are CPU-only: linear and translation checked in the CPU run)\n");
		return;
	}
	check_linear();
	snprintf(path, sizeof(path), "%s/decode_fixture.bin", fixtures);
	CHECK(fixture_read(path, &fx), "read %s", path);
	fp32 = fixture_decode_model(&fx);
	q = fp32 != NULL ? check_tensors(fp32) : NULL;
	if (q != NULL)
	{
		check_torch_rules(fixtures, &fx, q);
		check_translation(&fx, fp32, q);
	}
	tf_model_free(q);
	tf_model_free(fp32);
	fixture_free(&fx);
}
