/*
 * test_model.c - the whole model: against the PyTorch reference fixture
 * (logits, loss, every gradient, 10 Adam steps), a finite-difference check
 * of the full gradient, determinism with and without a checkpoint round
 * trip, and bad input.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "fixture.h"
#include "model.h"

/* The fixture's batch. */
static TfBatch
fixture_batch(const Fixture *fx)
{
	TfBatch		b = {0};

	b.batch_size = 3;
	b.src_len = (int) fixture_get(fx, "src")->count / 3;
	b.tgt_len = (int) fixture_get(fx, "tgt_in")->count / 3;
	b.src = fixture_get(fx, "src")->data;
	b.tgt_in = fixture_get(fx, "tgt_in")->data;
	b.labels = fixture_get(fx, "labels")->data;
	return b;
}

/* A host copy of n floats of the model's backend memory (malloc'd). */
static float *
download(TfModel *m, const float *src, size_t n)
{
	float	   *host = malloc(n * sizeof(float));
	char		err[TF_ERRLEN];

	CHECK(tf_model_download(m, host, src, n * sizeof(float), err, sizeof(err)) == TF_OK, "download: %s", err);
	return host;
}

/*
 * Every gradient of m against PyTorch's times `times` (1 after a backward,
 * 2 after a second backward of the same batch, which adds); the number
 * checked, the worst relative error into *worst.
 */
static int
compare_gradients(TfModel *m, const Fixture *fx, const TfTensor *tensors, int n, float times, double *worst)
{
	int			checked = 0;

	for (int i = 0; i < n; i++)
	{
		char		gname[160];
		const FixTensor *ref;
		size_t		count;
		float	   *g,
				   *want;
		double		e;

		snprintf(gname, sizeof(gname), "grad.%s", tensors[i].name);
		if ((ref = fixture_get(fx, gname)) == NULL)
			continue;
		g = tf_model_grad(m, tensors[i].name, &count);
		CHECK(g != NULL && count == ref->count, "gradient %s missing or of another size", tensors[i].name);
		if (g == NULL)
			continue;
		g = download(m, g, count);
		checked++;
		if (strstr(tensors[i].name, "k_proj.bias") != NULL)
		{
			/* exactly zero in exact arithmetic: compare with the truth, not with noise */
			float		zeros[1024] = {0};

			CHECK(count <= 1024 && rel_error(g, zeros, count) < 1e-4,
				  "%s: gradient should vanish (softmax is shift-invariant)", tensors[i].name);
			free(g);
			continue;
		}
		want = malloc(count * sizeof(float));
		for (size_t k = 0; k < count; k++)
			want[k] = times * ((const float *) ref->data)[k];
		e = rel_error(g, want, count);
		free(g), free(want);
		*worst = fmax(*worst, e);
		CHECK(e < 1e-5, "gradient of %s (x %g) differs from PyTorch: relative error %.3g", tensors[i].name,
			  times, e);
	}
	return checked;
}

/* Logits, loss, every gradient and 10 Adam steps against PyTorch. */
static void
check_against_pytorch(const Fixture *fx)
{
	TfModel    *m = fixture_model(fx, 0.0f);
	TfBatch		b = fixture_batch(fx);
	const int32_t *cfg = fixture_get(fx, "config")->data;
	char		err[TF_ERRLEN];
	double		loss;
	int64_t		tokens;
	TfTensor   *tensors;
	int			n,
				i,
				grads_checked = 0;
	double		worst_grad = 0.0;
	TfOptimizer opt;

	if (m == NULL)
		return;
	CHECK(tf_model_forward(m, &b, false, &loss, &tokens, err, sizeof(err)) == TF_OK, "forward: %s", err);
	{
		/* the engine keeps the logits of the non-pad label rows only */
		const float *ref = fixture_get(fx, "logits")->data;
		int			vocab = cfg[0];
		float	   *compact = malloc(fixture_get(fx, "logits")->count * sizeof(float));
		int			r,
					kept = 0;

		for (r = 0; r < b.batch_size * b.tgt_len; r++)
			if (b.labels[r] != cfg[6])
				memcpy(compact + (size_t) kept++ * vocab, ref + (size_t) r * vocab, vocab * sizeof(float));
		float	   *logits = fixture_logits(m, kept, vocab);

		CHECK(kept == tokens, "%d label rows, %lld tokens", kept, (long long) tokens);
		CHECK(rel_error(logits, compact, (size_t) kept * vocab) < 1e-5,
			  "logits differ from PyTorch: relative error %.3g",
			  rel_error(logits, compact, (size_t) kept * vocab));
		free(logits);
		free(compact);
	}
	CHECK(fabs(loss / tokens - *(float *) fixture_get(fx, "loss")->data) < 1e-5 * fabs(loss / tokens),
		  "loss %.7f, PyTorch %.7f", loss / tokens, *(float *) fixture_get(fx, "loss")->data);
	CHECK(tf_model_backward(m, 1.0f, err, sizeof(err)) == TF_ERROR, "backward after an evaluation forward accepted");
	CHECK(tf_model_forward(m, &b, true, &loss, &tokens, err, sizeof(err)) == TF_OK, "forward: %s", err);
	CHECK(fabs(loss / tokens - *(float *) fixture_get(fx, "loss")->data) < 1e-5 * fabs(loss / tokens),
		  "training loss %.7f, PyTorch %.7f", loss / tokens, *(float *) fixture_get(fx, "loss")->data);
	CHECK(tf_model_backward(m, (float) (1.0 / tokens), err, sizeof(err)) == TF_OK, "backward: %s", err);
	tf_model_tensors(m, &tensors, &n, err, sizeof(err));
	grads_checked = compare_gradients(m, fx, tensors, n, 1.0f, &worst_grad);
	/* a second backward adds: twice PyTorch's gradients */
	CHECK(tf_model_forward(m, &b, true, &loss, &tokens, err, sizeof(err)) == TF_OK &&
		  tf_model_backward(m, (float) (1.0 / tokens), err, sizeof(err)) == TF_OK, "second backward: %s", err);
	compare_gradients(m, fx, tensors, n, 2.0f, &worst_grad);
	CHECK(grads_checked == (n - 3) / 3,
		  "checked %d gradients of %d parameters", grads_checked, (n - 3) / 3);
	tf_tensors_free(tensors);
	printf("  pytorch fixture (%s%s): %d gradients, worst relative error %.2g\n", test_device,
		   m->config.normalize_before ? ", pre-norm" : "", grads_checked, worst_grad);
	tf_model_free(m);

	/* 10 Adam steps with the paper's schedule on the same batch */
	m = fixture_model(fx, 0.0f);
	tf_optimizer_default(&opt);
	opt.warmup_steps = cfg[7];
	for (i = 0; i < cfg[8] && m != NULL; i++)
	{
		TfStepStats st;
		float		want = ((float *) fixture_get(fx, "losses")->data)[i];

		tf_model_forward(m, &b, true, NULL, NULL, err, sizeof(err));
		tf_model_backward(m, (float) (1.0 / tokens), err, sizeof(err));
		CHECK(tf_model_step(m, &opt, &st, err, sizeof(err)) == TF_OK, "step: %s", err);
		CHECK(st.tokens == tokens && fabs(st.loss_sum / st.tokens - want) < 1e-5 * fabs(want),
			  "step %d loss %.7f, PyTorch %.7f", i + 1, st.loss_sum / st.tokens, want);
	}
	tf_model_free(m);
}

/* Loss of the fixture batch at the current parameters (the same dropout masks at every call). */
static double
loss_at(TfModel *m, const TfBatch *b)
{
	double		loss;
	int64_t		tokens;
	char		err[TF_ERRLEN];

	tf_model_forward(m, b, true, &loss, &tokens, err, sizeof(err));
	return loss / tokens;
}

/*
 * Directional finite difference of the whole model m (its dropouts on,
 * fixed masks): (L(p + h u) - L(p - h u)) / 2h against g . u for a random
 * direction u over every parameter. Frees m.
 */
static void
directional_check(TfModel *m, TfBatch b, const char *what)
{
	char		err[TF_ERRLEN];
	size_t		n,
				i;
	float	   *g,
			   *u,
			   *p0;
	double		analytic = 0.0,
				numeric,
				h = 1e-2;
	unsigned	seed = 99;

	n = tf_model_num_parameters(m);
	g = malloc(n * sizeof(float));
	u = malloc(n * sizeof(float));
	p0 = malloc(n * sizeof(float));
	{
		double		loss;
		int64_t		tokens;

			tf_model_forward(m, &b, true, &loss, &tokens, err, sizeof(err));
		tf_model_backward(m, (float) (1.0 / tokens), err, sizeof(err));
		m->be->download(m->be, g, m->grads, n * sizeof(float));
	}
	m->be->download(m->be, p0, m->params, n * sizeof(float));
	for (i = 0; i < n; i++)
	{
		seed = seed * 1103515245u + 12345u;
		u[i] = ((float) ((seed >> 8) & 0xFFFF) / 65536.0f - 0.5f);
		analytic += (double) g[i] * u[i];
	}
	{
		double		norm = 0.0;

		for (i = 0; i < n; i++)
			norm += (double) u[i] * u[i];
		norm = sqrt(norm);
		for (i = 0; i < n; i++)
			u[i] = (float) (u[i] / norm);
		analytic /= norm;
	}
	for (i = 0; i < n; i++)
		g[i] = p0[i] + (float) h * u[i];
	m->be->upload(m->be, m->params, g, n * sizeof(float));
	numeric = loss_at(m, &b);
	for (i = 0; i < n; i++)
		g[i] = p0[i] - (float) h * u[i];
	m->be->upload(m->be, m->params, g, n * sizeof(float));
	numeric = (numeric - loss_at(m, &b)) / (2 * h);
	m->be->upload(m->be, m->params, p0, n * sizeof(float));
	CHECK(fabs(numeric - analytic) < 2e-3 * fmax(fabs(analytic), 1.0),
		  "%s directional derivative: finite difference %.6f, backward %.6f", what, numeric, analytic);
	printf("  %s gradient (dropout on): finite difference %.6f, backward %.6f\n", what, numeric, analytic);
	free(g);
	free(u);
	free(p0);
	tf_model_free(m);
}

/* The fixture model with all three dropouts. */
static void
check_model_gradient(const Fixture *fx)
{
	TfModel    *m = fixture_model(fx, 0.1f);

	if (m == NULL)
		return;
	m->config.attention_dropout = 0.1f;
	m->config.relu_dropout = 0.1f;
	directional_check(m, fixture_batch(fx), m->config.normalize_before ? "whole-model pre-norm" : "whole-model");
}

/*
 * Models with the options imported models use: swish, then GELU, and a
 * logits bias; pre-norm with fairseq's positions and unscaled embeddings.
 */
static void
check_variant_gradients(void)
{
	TfConfig	c;
	TfBatch		b = {0};
	int32_t		src[32],
				tgt[32],
				lab[32];
	char		err[TF_ERRLEN];
	int			f;

	fixture_synthetic_batch(src, tgt, lab, &b);
	for (f = TF_SWISH; f <= TF_GELU; f++)
	{
		TfModel    *m;
		size_t		count;

		tf_config_small(&c, 64);
		c.d_model = 32, c.num_heads = 4, c.d_ff = 64, c.num_encoder_layers = 1, c.num_decoder_layers = 2;
		c.relu_dropout = 0.1f;
		c.activation = (TfActivation) f;
		c.logits_bias = true;
		m = tf_model_create(&c, 11, test_device, 2, err, sizeof(err));
		CHECK(m != NULL && tf_model_param(m, "final_logits_bias", &count) != NULL && count == 64,
			  "no final_logits_bias [1, 64]: %s", m == NULL ? err : "missing");
		if (m != NULL)
		{
			/* a non-zero bias, so that it shapes the loss */
			float		bias[64];
			int			i;

			for (i = 0; i < 64; i++)
				bias[i] = 0.05f * (float) (i % 7) - 0.15f;
			m->be->upload(m->be, tf_model_param(m, "final_logits_bias", &count), bias, sizeof(bias));
			directional_check(m, b, f == TF_SWISH ? "swish + logits bias" : "gelu + logits bias");
		}
	}
	tf_config_small(&c, 64);
	c.d_model = 32, c.num_heads = 4, c.d_ff = 64, c.num_encoder_layers = 2, c.num_decoder_layers = 2;
	c.attention_dropout = 0.1f, c.relu_dropout = 0.1f;
	c.normalize_before = true;
	c.scale_embedding = false;
	c.positions = TF_POSITIONS_FAIRSEQ;
	{
		TfModel    *m = tf_model_create(&c, 12, test_device, 2, err, sizeof(err));
		size_t		count;

		CHECK(m != NULL && tf_model_param(m, "model.encoder.layer_norm.weight", &count) != NULL && count == 32 &&
			  tf_model_param(m, "model.decoder.layer_norm.bias", &count) != NULL,
			  "no final LayerNorms in a pre-norm model: %s", m == NULL ? err : "missing");
		if (m != NULL)
			directional_check(m, b, "pre-norm, fairseq positions, unscaled embeddings");
	}
}

/* Trains `steps` steps, writing each loss to out. */
static void
train(TfModel *m, const TfBatch *b, int steps, double *out)
{
	TfOptimizer opt;
	char		err[TF_ERRLEN];
	int			i;

	tf_optimizer_default(&opt);
	opt.warmup_steps = 10;
	opt.clip_norm = 1.0f;
	for (i = 0; i < steps; i++)
	{
		TfStepStats st;

		CHECK(tf_model_forward(m, b, true, NULL, NULL, err, sizeof(err)) == TF_OK, "forward: %s", err);
		CHECK(tf_model_backward(m, 1.0f / 26, err, sizeof(err)) == TF_OK, "backward: %s", err);
		CHECK(tf_model_step(m, &opt, &st, err, sizeof(err)) == TF_OK, "step: %s", err);
		CHECK(st.tokens == 26, "step %d counted %lld tokens", i + 1, (long long) st.tokens);
		out[i] = st.loss_sum / st.tokens;
	}
}

/* Same seed, same losses, bit for bit; and across a save at step 10 and a reload. */
static void
check_determinism(void)
{
	TfConfig	c;
	char		err[TF_ERRLEN];
	int32_t		src[32],
				tgt[32],
				lab[32];
	TfBatch		b = {0};
	double		a[20],
				r[20],
				resumed[10];
	TfModel    *m1,
			   *m2,
			   *m3;
	TfTensor   *tensors;
	int			n,
				i;

	tf_config_small(&c, 64);
	c.d_model = 32;
	c.num_heads = 4;
	c.d_ff = 64;
	c.num_encoder_layers = 2;
	c.num_decoder_layers = 2;
	c.attention_dropout = 0.1f;
	c.relu_dropout = 0.1f;
	fixture_synthetic_batch(src, tgt, lab, &b);
	m1 = tf_model_create(&c, 42, test_device, 2, err, sizeof(err));
	m2 = tf_model_create(&c, 42, test_device, 2, err, sizeof(err));
	train(m1, &b, 20, a);
	train(m2, &b, 10, r);
	/* checkpoint m2 at step 10: copy every tensor, load into a fresh model with another seed */
	tf_model_tensors(m2, &tensors, &n, err, sizeof(err));
	for (i = 0; i < n; i++)
	{
		void	   *copy = malloc(tensors[i].bytes);

		memcpy(copy, tensors[i].data, tensors[i].bytes);
		tensors[i].data = copy;
	}
	m3 = tf_model_create(&c, 7, test_device, 2, err, sizeof(err));
	CHECK(tf_model_load(m3, tensors, n, err, sizeof(err)) == TF_OK, "reload: %s", err);
	train(m2, &b, 10, r + 10);
	train(m3, &b, 10, resumed);
	CHECK(memcmp(a, r, sizeof(a)) == 0, "two runs with seed 42 differ");
	CHECK(memcmp(a + 10, resumed, sizeof(resumed)) == 0,
		  "steps 11-20 after a reload differ (step 11: %.9f vs %.9f)", a[10], resumed[0]);
	CHECK(a[19] < a[0], "loss did not fall in 20 steps (%.4f -> %.4f)", a[0], a[19]);
	printf("  determinism: 20 steps bitwise equal, reload at 10 bitwise equal; loss %.4f -> %.4f\n", a[0], a[19]);

	/* a mismatched checkpoint is refused by name */
	tensors[0].shape[0] += 1;
	CHECK(tf_model_load(m3, tensors, n, err, sizeof(err)) == TF_ERROR && strstr(err, "model.shared.weight") != NULL,
		  "a wrong shape was not refused by name: %s", err);
	tensors[0].shape[0] -= 1;
	tensors[1].dtype = TF_INT64;
	CHECK(tf_model_load(m3, tensors, n, err, sizeof(err)) == TF_ERROR && strstr(err, tensors[1].name) != NULL,
		  "a wrong dtype was not refused by name: %s", err);
	tensors[1].dtype = TF_FLOAT32;
	CHECK(tf_model_load(m3, tensors, n - 1, err, sizeof(err)) == TF_ERROR && strstr(err, "missing") != NULL,
		  "a missing tensor was not refused: %s", err);
	{
		TfTensor   *more = malloc((n + 1) * sizeof(TfTensor));

		memcpy(more, tensors, n * sizeof(TfTensor));
		more[n] = tensors[0];
		CHECK(tf_model_load(m3, more, n + 1, err, sizeof(err)) == TF_ERROR && strstr(err, "twice") != NULL,
			  "a repeated tensor was not refused: %s", err);
		free(more);
	}
	for (i = 0; i < n; i++)
		free(tensors[i].data);
	tf_tensors_free(tensors);
	tf_model_free(m1);
	tf_model_free(m2);
	tf_model_free(m3);
}

/*
 * Every thread but the main one (the CPU backend's pool, started by the
 * engine) has SIGINT, SIGTERM, SIGUSR1 and SIGALRM blocked: PostgreSQL's
 * handlers must only run on the backend's own thread. A training step of a
 * CPU model on 2 threads first, so that the engine's threads exist whatever
 * ran before (on cuda alone none would).
 */
static void
check_thread_signal_masks(void)
{
	DIR		   *dir;
	struct dirent *e;
	int			others = 0;
	TfConfig	c;
	char		err[TF_ERRLEN];
	int32_t		src[32],
				tgt[32],
				lab[32];
	TfBatch		b = {0};
	double		loss;
	TfModel    *m;

	tf_config_small(&c, 64);
	fixture_synthetic_batch(src, tgt, lab, &b);
	m = tf_model_create(&c, 42, "cpu", 2, err, sizeof(err));
	CHECK(m != NULL, "cpu model: %s", err);
	if (m != NULL)
		train(m, &b, 1, &loss);
	/* listed while the model lives: its pool's helpers end with it */
	dir = opendir("/proc/self/task");

	CHECK(dir != NULL, "cannot list /proc/self/task");
	if (dir == NULL)
	{
		tf_model_free(m);
		return;
	}
	while ((e = readdir(dir)) != NULL)
	{
		char		path[300],
					line[256];
		FILE	   *f;
		unsigned long long blocked = 0;
		unsigned long long want = (1ULL << (SIGINT - 1)) | (1ULL << (SIGTERM - 1)) |
			(1ULL << (SIGUSR1 - 1)) | (1ULL << (SIGALRM - 1));

		if (e->d_name[0] == '.' || atoi(e->d_name) == (int) getpid())
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/status", e->d_name);
		if ((f = fopen(path, "r")) == NULL)
			continue;
		while (fgets(line, sizeof(line), f) != NULL)
			if (strncmp(line, "SigBlk:", 7) == 0)
				blocked = strtoull(line + 7, NULL, 16);
		fclose(f);
		CHECK((blocked & want) == want, "thread %s does not block signals (SigBlk %llx)", e->d_name, blocked);
		others++;
	}
	closedir(dir);
	tf_model_free(m);
	CHECK(others >= 1, "no engine threads found (%d)", others);
	printf("  signal masks: %d engine threads, all blocking PostgreSQL's signals\n", others);
}

/* Bad input: a status and a message, never a crash. */
static void
check_bad_input(void)
{
	TfConfig	c;
	char		err[TF_ERRLEN];
	int32_t		src[32],
				tgt[32],
				lab[32];
	TfBatch		b = {0};
	TfModel    *m;
	double		loss;
	int64_t		tokens;

	tf_config_small(&c, 64);
	c.d_model = 30;
	c.num_heads = 4;
	CHECK(tf_config_validate(&c, err, sizeof(err)) == TF_ERROR && strstr(err, "d_model") != NULL,
		  "d_model %% num_heads != 0 accepted: %s", err);
	CHECK(tf_model_create(&c, 1, test_device, 1, err, sizeof(err)) == NULL, "created an invalid model");
	c.d_model = 32;
	CHECK(tf_model_create(&c, 1, "gpu", 1, err, sizeof(err)) == NULL && strstr(err, "\"gpu\"") != NULL,
		  "device \"gpu\" accepted: %s", err);
	CHECK(tf_model_create(&c, 1, "cuda:x", 1, err, sizeof(err)) == NULL && strstr(err, "cuda:x") != NULL,
		  "device \"cuda:x\" accepted: %s", err);
	c.d_model = 32;
	c.dropout = 1.5f;
	CHECK(tf_config_validate(&c, err, sizeof(err)) == TF_ERROR && strstr(err, "dropout") != NULL,
		  "dropout 1.5 accepted: %s", err);
	c.dropout = 0.1f;
	c.max_positions = 6;
	m = tf_model_create(&c, 1, test_device, 1, err, sizeof(err));
	fixture_synthetic_batch(src, tgt, lab, &b);
	CHECK(tf_model_backward(m, 1.0f, err, sizeof(err)) == TF_ERROR, "backward without forward accepted");
	CHECK(tf_model_forward(m, &b, true, &loss, &tokens, err, sizeof(err)) == TF_ERROR &&
		  strstr(err, "max_positions") != NULL, "length 8 > max_positions 6 accepted: %s", err);
	tf_model_free(m);

	c.max_positions = 64;
	m = tf_model_create(&c, 1, test_device, 1, err, sizeof(err));
	src[5] = 64;
	CHECK(tf_model_forward(m, &b, true, &loss, &tokens, err, sizeof(err)) == TF_ERROR && strstr(err, "64") != NULL,
		  "source id 64 of vocab 64 accepted: %s", err);
	src[5] = -3;
	CHECK(tf_model_forward(m, &b, true, &loss, &tokens, err, sizeof(err)) == TF_ERROR && strstr(err, "-3") != NULL,
		  "source id -3 accepted: %s", err);
	src[5] = 5;
	lab[2] = 1000;
	CHECK(tf_model_forward(m, &b, true, &loss, &tokens, err, sizeof(err)) == TF_ERROR && strstr(err, "1000") != NULL,
		  "label 1000 accepted: %s", err);
	lab[2] = 5;
	src[8 + 2] = 0;				/* the pad id inside sentence 1's source: a token ("<pad>" in a text) */
	CHECK(tf_model_forward(m, &b, true, &loss, &tokens, err, sizeof(err)) == TF_OK && tokens == 8 + 7 + 6 + 5,
		  "a pad id before a sentence's end refused or miscounted: %s", err);
	src[8 + 2] = 5;
	tgt[3 * 8 + 6] = 7;			/* a target input token where sentence 3's labels are padding */
	CHECK(tf_model_forward(m, &b, true, &loss, &tokens, err, sizeof(err)) == TF_ERROR && strstr(err, "labels") != NULL,
		  "a target input longer than its labels accepted: %s", err);
	tgt[3 * 8 + 6] = 0;
	b.batch_size = 0;
	CHECK(tf_model_forward(m, &b, true, &loss, &tokens, err, sizeof(err)) == TF_ERROR && strstr(err, "empty") != NULL,
		  "an empty batch accepted: %s", err);
	b.batch_size = 4;
	CHECK(tf_model_forward(m, &b, true, &loss, &tokens, err, sizeof(err)) == TF_OK, "a fixed batch failed: %s", err);
	CHECK(tokens == 8 + 7 + 6 + 5, "%lld target tokens, expected 26", (long long) tokens);
	{
		TfOptimizer opt;
		TfStepStats st;

		tf_optimizer_default(&opt);
		opt.beta1 = 1.0f;
		CHECK(tf_model_step(m, &opt, &st, err, sizeof(err)) == TF_ERROR && strstr(err, "beta1") != NULL,
			  "beta1 = 1 accepted: %s", err);
		CHECK(tf_model_steps(m) == 0, "a refused step counted");
	}
	c.num_encoder_layers = 1000;
	CHECK(tf_config_validate(&c, err, sizeof(err)) == TF_ERROR && strstr(err, "num_encoder_layers") != NULL,
		  "1000 encoder layers accepted: %s", err);
	tf_model_free(m);
}

void
test_model(const char *fixtures)
{
	char		path[4096];
	Fixture		fx;

	snprintf(path, sizeof(path), "%s/model_fixture.bin", fixtures);
	CHECK(fixture_read(path, &fx), "cannot read %s", path);
	if (fx.n > 0)
	{
		check_against_pytorch(&fx);
		check_model_gradient(&fx);
	}
	fixture_free(&fx);
	snprintf(path, sizeof(path), "%s/prenorm_fixture.bin", fixtures);
	CHECK(fixture_read(path, &fx), "cannot read %s", path);
	if (fx.n > 0)
	{
		check_against_pytorch(&fx);
		check_model_gradient(&fx);
	}
	check_variant_gradients();
	check_determinism();
	check_thread_signal_masks();
	check_bad_input();
	fixture_free(&fx);
}
