/*
 * census_step.c - the steps bench/gpu_census counts: on the census build of the
 * CUDA library (ATTENTION_CUDA_LIBRARY=./attention_cuda_census.so,
 * CUEMU_CENSUS=FILE), a training step and a beam-search step of the base
 * model (6+6 layers, d_model 512, 37,000 pieces), each run once before it is
 * counted (a shape's first step allocates its workspaces), between census
 * marks.
 *
 *   census_step TOKENS SENTENCES [--precision fp32|bf16] [--layers N] [--host]
 *
 * --layers N: a tiny model instead (N + N layers, d_model 64, 4 heads, d_ff
 * 128, 1,001 pieces: odd, so that its logits' rows are aligned only when
 * the device pads them), for the test command's smoke census (launches per
 * layer, host synchronisations, allocations and misaligned products per
 * step).
 *
 * Training: sentences of 20 to 40 tokens on both sides (mean 30, the
 * paper's WMT batches), about TOKENS source and TOKENS target tokens, ids
 * Zipf-distributed over the vocabulary. Decoding: SENTENCES sources of the
 * same lengths, beam 4, the census of the 4th step. Prints one line
 * describing each: sentences, tokens and the step's attention FLOPs (the
 * matrix products of the census count the rest), and a line "timed" with
 * the wall time of the counted training and beam steps (each ends in a
 * download, so on a GPU it is the step's time; under emulation it means
 * nothing). On a GPU the counted steps are also the CUDA profiler's range
 * (cuProfilerStart/Stop), so `ncu --profile-from-start off` or `nsys
 * --capture-range=cudaProfilerApi` sees only them (bench/gpu-suite).
 *
 * --host (the emulated build, ATTENTION_CUDA_LIBRARY=./attention_cuda_emu.so):
 * times the host's own work in the training step, the device's skipped
 * (CUEMU_HOST_ONLY=1, set here): HOST_STEPS steps after one that sets the
 * shapes up, each split into the time before its first launch (the batch's
 * layout and upload: on a GPU the device has only the step before's
 * optimizer kernel queued then, the rest of that step ended in its
 * synchronisation), between its first and last launch (with the grouping of
 * the embedding gradient's rows, behind a queued backward on a GPU), and
 * after; prints each step and the medians ("host ..."). No beam search.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <time.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "transformer.h"

static int	vocab = 37000;
#define FIRST_ID 4				/* pad 0, unk 1, BOS 2, EOS 3 */

static void (*census_mark) (const char *label);
static int	(*profiler_start) (void);	/* the CUDA driver's cuProfilerStart/Stop */
static int	(*profiler_stop) (void);
static long (*launch_times) (double *first, double *last);	/* the emulator's, under --host */

#define HOST_STEPS 9

/* A counted step's bounds ("...-begin", "...-end"): the census's marks, or the profiler's range on a GPU. */
static void
mark(const char *label)
{
	if (census_mark != NULL)
		census_mark(label);
	else if (profiler_start != NULL && strstr(label, "-begin") != NULL)
		profiler_start();
	else if (profiler_stop != NULL)
		profiler_stop();
}

/* Deterministic generator (xorshift64*). */
static uint64_t rng_state = 88172645463325252ull;

static uint64_t
next_random(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ull;
}

static int
sentence_length(void)
{
	return 20 + (int) (next_random() % 21);
}

/* A piece id with probability proportional to 1 / rank (Zipf, s = 1). */
static int32_t
zipf_id(void)
{
	double		u = (double) (next_random() >> 11) / 9007199254740992.0,
				h = log((double) (vocab - FIRST_ID)) + 0.5772156649;
	long		r = (long) exp(u * h);

	if (r < 1)
		r = 1;
	if (r > vocab - FIRST_ID)
		r = vocab - FIRST_ID;
	return (int32_t) (FIRST_ID + r - 1);
}

static void
fail(const char *what, const char *err)
{
	fprintf(stderr, "census_step: %s: %s\n", what, err);
	exit(1);
}

/* The median of x [n] (sorted in place). */
static double
median(double *x, int n)
{
	qsort(x, (size_t) n, sizeof(double), bench_compare_double);
	return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2.0;
}

/*
 * --host: HOST_STEPS training steps over batch tb after a first, each timed
 * by the host and split at its first and last launch; prints them and the
 * medians.
 */
static void
host_steps(TfModel *m, const TfBatch *tb, int tgt_tokens)
{
	TfOptimizer opt;
	char		err[TF_ERRLEN];
	double		step[HOST_STEPS],
				before[HOST_STEPS],
				span[HOST_STEPS],
				after[HOST_STEPS];
	long		launches = 0;

	tf_optimizer_default(&opt);
	for (int s = -1; s < HOST_STEPS; s++)
	{
		TfStepStats st;
		double		t0,
					t1,
					first,
					last;

		launch_times(&first, &last);
		t0 = bench_now();
		if (tf_model_forward(m, tb, true, NULL, NULL, err, sizeof(err)) != TF_OK ||
			tf_model_backward(m, (float) (1.0 / tgt_tokens), err, sizeof(err)) != TF_OK ||
			tf_model_step(m, &opt, &st, err, sizeof(err)) != TF_OK)
			fail("training step", err);
		t1 = bench_now();
		launches = launch_times(&first, &last);
		if (s < 0)
			continue;
		step[s] = 1e3 * (t1 - t0), before[s] = 1e3 * (first - t0), span[s] = 1e3 * (last - first),
			after[s] = 1e3 * (t1 - last);
		printf("host step %d: %.3f ms, %.3f before the first launch, %.3f over %ld launches, %.3f after the last\n",
			   s + 1, step[s], before[s], span[s], launches, after[s]);
	}
	printf("host train_step_ms=%.3f before_first_launch_ms=%.3f launches_ms=%.3f after_last_launch_ms=%.3f "
		   "launches=%ld (medians of %d steps; the device's work skipped)\n", median(step, HOST_STEPS),
		   median(before, HOST_STEPS), median(span, HOST_STEPS), median(after, HOST_STEPS), launches, HOST_STEPS);
}

/* Waits for the model's device (a download is complete on return); outside the census marks. */
static void
sync_device(TfModel *m)
{
	char		err[TF_ERRLEN];
	float		x;
	size_t		count;

	if (tf_model_download(m, &x, tf_model_param(m, "model.shared.weight", &count), sizeof(x), err,
						  sizeof(err)) != TF_OK)
		fail("download", err);
}

int
main(int argc, char **argv)
{
	TfConfig	c;
	TfModel    *m;
	TfOptimizer opt;
	TfDecodeOptions dopt;
	TfStream   *stream;
	char		err[TF_ERRLEN];
	int			tokens,
				sentences,
				b,
				n = 0,
				src_tokens = 0,
				tgt_tokens = 0,
				max_s = 0,
				max_t = 0,
				layers = 0,
				host = 0,
				ls[4096],
				lt[4096];
	int32_t    *src,
			   *tgt_in,
			   *labels;
	double		attention_flops = 0,
				train_s = 0,
				decode_s = 0,
				t0 = 0;
	void	   *lib;

	argc = bench_device_option(argc, argv);
	for (int i = 1; i < argc; i++)	/* --host, wherever it is */
		if (strcmp(argv[i], "--host") == 0)
		{
			memmove(argv + i, argv + i + 1, (size_t) (argc - i) * sizeof(char *));
			host = 1, argc--, setenv("CUEMU_HOST_ONLY", "1", 1);
			break;
		}
	if (argc == 5 && strcmp(argv[3], "--layers") == 0)
		layers = atoi(argv[4]), argc = 3;
	if (argc != 3 || layers < 0 || layers > 12|| (tokens = atoi(argv[1])) < 40 || (sentences = atoi(argv[2])) < 1 || sentences > 4096)
	{
		fprintf(stderr, "usage: census_step TOKENS SENTENCES [--precision fp32|bf16] [--layers N] [--host]\n");
		return 2;
	}
	if (layers > 0)
	{
		vocab = 1001;
		tf_config_small(&c, vocab);
		c.num_encoder_layers = c.num_decoder_layers = layers;
		c.d_model = 64, c.num_heads = 4, c.d_ff = 128;
	}
	else
		tf_config_base(&c, vocab);
	m = tf_model_create(&c, 1, "cuda", 1, err, sizeof(err));
	if (m == NULL)
		fail("model", err);
	bench_set_precision(m);
	lib = dlopen(getenv("ATTENTION_CUDA_LIBRARY"), RTLD_NOW | RTLD_NOLOAD);
	if (lib != NULL)
		*(void **) &census_mark = dlsym(lib, "cuemu_census_mark");
	if (lib != NULL && host)
		*(void **) &launch_times = dlsym(lib, "cuemu_launch_times");
	if (host && launch_times == NULL)
		fail("--host", "needs an emulated CUDA library (ATTENTION_CUDA_LIBRARY=./attention_cuda_emu.so)");
	if (census_mark == NULL && (lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD)) != NULL)
	{
		*(void **) &profiler_start = dlsym(lib, "cuProfilerStart");
		*(void **) &profiler_stop = dlsym(lib, "cuProfilerStop");
	}
	if (census_mark == NULL && !host)
		fprintf(stderr, "census_step: the CUDA library has no census (build attention_cuda_census.so)\n");

	/* the training batch: sentences until both sides reach TOKENS */
	while ((src_tokens < tokens || tgt_tokens < tokens) && n < 4096)
	{
		ls[n] = sentence_length(), lt[n] = sentence_length();
		src_tokens += ls[n], tgt_tokens += lt[n];
		max_s = ls[n] > max_s ? ls[n] : max_s, max_t = lt[n] > max_t ? lt[n] : max_t;
		/* per layer, QK^T and PV: 2 * 2 * lq * lk * d_model, forward (x1) and backward (x2) */
		attention_flops += 3.0 * 4.0 * c.d_model * ((double) c.num_encoder_layers * ls[n] * ls[n] +
													(double) c.num_decoder_layers * (lt[n] * (lt[n] + 1) / 2.0 + (double) lt[n] * ls[n]));
		n++;
	}
	src = calloc((size_t) n * (max_s + 1), sizeof(int32_t));
	tgt_in = calloc((size_t) n * (max_t + 1), sizeof(int32_t));
	labels = calloc((size_t) n * (max_t + 1), sizeof(int32_t));
	for (b = 0; b < n; b++)
	{
		int			j;

		for (j = 0; j < ls[b]; j++)
			src[(size_t) b * (max_s + 1) + j] = zipf_id();
		src[(size_t) b * (max_s + 1) + ls[b]] = 3;
		tgt_in[(size_t) b * (max_t + 1)] = 2;
		for (j = 0; j < lt[b]; j++)
		{
			int32_t		id = zipf_id();

			labels[(size_t) b * (max_t + 1) + j] = id;
			tgt_in[(size_t) b * (max_t + 1) + j + 1] = id;
		}
		labels[(size_t) b * (max_t + 1) + lt[b]] = 3;
	}
	src_tokens += n, tgt_tokens += n;	/* EOS; BOS */
	printf("train sentences=%d src_tokens=%d tgt_tokens=%d attention_flops=%.0f\n", n, src_tokens, tgt_tokens,
		   attention_flops);

	if (host)
	{
		TfBatch		tb = {n, max_s + 1, max_t + 1, src, tgt_in, labels, 0};

		host_steps(m, &tb, tgt_tokens);
		tf_model_free(m);
		return 0;
	}
	tf_optimizer_default(&opt);
	for (int step = 0; step < 2; step++)
	{
		TfBatch		tb = {n, max_s + 1, max_t + 1, src, tgt_in, labels, 0};
		TfStepStats st;

		if (step == 1)
			sync_device(m), mark("train-begin"), t0 = bench_now();
		if (tf_model_forward(m, &tb, true, NULL, NULL, err, sizeof(err)) != TF_OK ||
			tf_model_backward(m, (float) (1.0 / tgt_tokens), err, sizeof(err)) != TF_OK ||
			tf_model_step(m, &opt, &st, err, sizeof(err)) != TF_OK)
			fail("training step", err);
		if (step == 1)
			mark("train-end"), sync_device(m), train_s = bench_now() - t0;
	}

	/* beam search: the first SENTENCES sources of the batch */
	tf_decode_options_default(&dopt);
	dopt.beam_size = 4;
	if (tf_stream_create(m, &dopt, &stream, err, sizeof(err)) != TF_OK ||
		tf_stream_add(stream, src, sentences < n ? sentences : n, max_s + 1, NULL, err, sizeof(err)) != TF_OK)
		fail("beam search", err);
	for (int step = 0; step < 4; step++)
	{
		if (step == 3)
			mark("decode-begin"), t0 = bench_now();
		if (tf_stream_step(stream, err, sizeof(err)) != TF_OK)
			fail("beam search step", err);
		if (step == 3)
			decode_s = bench_now() - t0, mark("decode-end");
	}
	printf("decode sentences=%d beam=4 live=%d\n", sentences < n ? sentences : n, tf_stream_sentences(stream));
	printf("timed train_step_ms=%.3f decode_step_ms=%.3f\n", train_s * 1e3, decode_s * 1e3);
	tf_stream_free(stream);
	tf_model_free(m);
	free(src);
	free(tgt_in);
	free(labels);
	return 0;
}
