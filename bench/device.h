/*
 * device.h - the benchmarks' --device option (cpu, cuda, cuda:N) and
 * --precision option (fp32, bf16: tf_model_set_precision; int8:
 * bench_quantize); the CUDA library is $ATTENTION_CUDA_LIBRARY when set
 * (the emulated build in CI).
 */
#ifndef ATTENTION_BENCH_DEVICE_H
#define ATTENTION_BENCH_DEVICE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transformer.h"

/* Monotonic wall time in seconds (the includer defines _POSIX_C_SOURCE). */
static inline double
bench_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* qsort's comparison of doubles, ascending (the benchmarks' medians). */
static inline int
bench_compare_double(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return (x > y) - (x < y);
}

/* "--device D" (default "cpu") and "--precision P" (default "fp32"), removed from argv; returns the new argc. */
static const char *bench_device = "cpu";
static const char *bench_precision = "fp32";

static int
bench_device_option(int argc, char **argv)
{
	int			i,
				j = 1;

	for (i = 1; i < argc; i++)
		if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
			bench_device = argv[++i];
		else if (strcmp(argv[i], "--precision") == 0 && i + 1 < argc)
			bench_precision = argv[++i];
		else
			argv[j++] = argv[i];
	if (getenv("ATTENTION_CUDA_LIBRARY") != NULL)
		tf_backend_set_cuda_library(getenv("ATTENTION_CUDA_LIBRARY"));
	return j;
}

/* Sets the model's precision to --precision; exits with the engine's message when it cannot. */
static void
bench_set_precision(TfModel *m)
{
	char		err[TF_ERRLEN];
	TfPrecision p;

	if (strcmp(bench_precision, "int8") == 0)
		return;					/* bench_quantize, once the weights are loaded */
	if (tf_precision_parse(bench_precision, &p, err, sizeof(err)) != TF_OK ||
		tf_model_set_precision(m, p, err, sizeof(err)) != TF_OK)
	{
		fprintf(stderr, "--precision %s: %s\n", bench_precision, err);
		exit(2);
	}
}

/*
 * With --precision int8: the loaded fp32 model m quantized as the SQL
 * function quantize() does (tf_model_quantize, its tensors loaded into a
 * new int8 model); m is freed. Otherwise m itself.
 */
static inline TfModel *
bench_quantize(TfModel *m, int threads)
{
	char		err[TF_ERRLEN];
	TfModel    *q,
			   *loaded;
	TfTensor   *t;
	int			n;

	if (strcmp(bench_precision, "int8") != 0)
		return m;
	q = tf_model_quantize(m, threads, err, sizeof(err));
	loaded = q != NULL ? tf_model_create_quantized(tf_model_config(m), threads, err, sizeof(err)) : NULL;
	if (loaded == NULL || tf_model_tensors(q, &t, &n, err, sizeof(err)) != TF_OK ||
		tf_model_load(loaded, t, n, err, sizeof(err)) != TF_OK)
	{
		fprintf(stderr, "--precision int8: %s\n", err);
		exit(2);
	}
	fprintf(stderr, "int8 model: %zu bytes of weights, fp32 %zu (%.3f)\n", tf_model_weight_bytes(loaded),
			tf_model_weight_bytes(m), (double) tf_model_weight_bytes(loaded) / tf_model_weight_bytes(m));
	tf_tensors_free(t);
	tf_model_free(q);
	tf_model_free(m);
	return loaded;
}

#endif
