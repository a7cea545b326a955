/*
 * parallel_counts.c - what a data-parallel step costs in synchronisations
 * and communication, counted (not timed) on the emulated CUDA library:
 * per step and rank, host synchronisations, ncclAllReduce calls and bytes
 * all-reduced, for 1, 2, 4, ... ranks on the same batches, against the
 * single-device path and the model's parameter bytes.
 *
 * Usage: ATTENTION_CUDA_LIBRARY=./attention_cuda_emu.so CUEMU_DEVICES=8 CUEMU_THREADS=1 \
 *          bench/parallel_counts [small|base] [VOCAB] [RANKS ...]
 * (defaults: small, 8000, ranks 1 2 4 8). Each run takes 2 steps of 8
 * batches (4 sentences of 8 tokens) and reports the second.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel.h"

#define STEP_BATCHES 8
#define ROWS 4
#define LEN 8

typedef void (*Counters) (int device, long out[4]);

int
main(int argc, char **argv)
{
	const char *preset = argc > 1 ? argv[1] : "small";
	int			vocab = argc > 2 ? atoi(argv[2]) : 8000;
	int			default_ranks[] = {1, 2, 4, 8};
	int			nranks = argc > 3 ? argc - 3 : 4;
	const char *lib = getenv("ATTENTION_CUDA_LIBRARY");
	void	   *handle;
	Counters	counters;
	TfConfig	c;
	static int32_t ids[STEP_BATCHES][3][ROWS * LEN];
	TfBatch		batches[STEP_BATCHES];
	TfOptimizer opt;
	char		err[TF_ERRLEN];

	if (lib == NULL || vocab < 16)
	{
		fprintf(stderr, "usage: ATTENTION_CUDA_LIBRARY=./attention_cuda_emu.so CUEMU_DEVICES=8 %s "
				"[small|base] [VOCAB] [RANKS ...]\n", argv[0]);
		return 2;
	}
	tf_backend_set_cuda_library(lib);
	handle = dlopen(lib, RTLD_NOW);
	*(void **) &counters = handle != NULL ? dlsym(handle, "cuemu_counters") : NULL;
	if (counters == NULL)
	{
		fprintf(stderr, "%s has no cuemu_counters: the counts need the emulated library\n", lib);
		return 2;
	}
	if (strcmp(preset, "base") == 0)
		tf_config_base(&c, vocab);
	else
		tf_config_small(&c, vocab);
	c.max_positions = LEN;
	c.pad_id = 0;
	for (int b = 0; b < STEP_BATCHES; b++)
	{
		for (int r = 0; r < ROWS; r++)
			for (int t = 0; t < LEN; t++)
			{
				int			word = 4 + (b * 131 + r * 17 + t * 7) % (vocab - 4);

				ids[b][0][r * LEN + t] = t < LEN - 1 ? word : 3;
				ids[b][1][r * LEN + t] = t == 0 ? 2 : word;
				ids[b][2][r * LEN + t] = t < LEN - 1 ? word : 3;
			}
		batches[b] = (TfBatch) {ROWS, LEN, LEN, ids[b][0], ids[b][1], ids[b][2], 0};
	}
	tf_optimizer_default(&opt);
	printf("%s model, vocabulary %d, %d batches per step; per step and rank (the second step):\n", preset, vocab,
		   STEP_BATCHES);
	printf("ranks  batches/rank  host syncs  all-reduce calls  bytes all-reduced  parameter bytes\n");
	for (int k = 0; k < nranks; k++)
	{
		int			ranks = argc > 3 ? atoi(argv[3 + k]) : default_ranks[k];
		char		device[TF_MAX_LOCAL_RANKS * 5 + 8] = "cuda:0";
		TfParallel *p;
		long		before[4],
					after[4];
		TfStepStats st;

		for (int r = 1; r < ranks && r < TF_MAX_LOCAL_RANKS; r++)
			snprintf(device + strlen(device), sizeof(device) - strlen(device), ",%d", r);
		p = tf_parallel_create(&c, 1, device, 1, NULL, err, sizeof(err));
		if (p == NULL)
		{
			fprintf(stderr, "%d ranks: %s\n", ranks, err);
			return 1;
		}
		if (tf_parallel_step(p, batches, STEP_BATCHES, 1e-3f, &opt, &st, err, sizeof(err)) != TF_OK)
		{
			fprintf(stderr, "%d ranks: %s\n", ranks, err);
			return 1;
		}
		counters(0, before);
		if (tf_parallel_step(p, batches, STEP_BATCHES, 1e-3f, &opt, &st, err, sizeof(err)) != TF_OK)
		{
			fprintf(stderr, "%d ranks: %s\n", ranks, err);
			return 1;
		}
		counters(0, after);
		printf("%5d  %12d  %10ld  %16ld  %17ld  %15zu\n", ranks, (STEP_BATCHES + ranks - 1) / ranks,
			   after[0] - before[0], after[1] - before[1], after[2] - before[2],
			   tf_model_num_parameters(tf_parallel_model(p)) * sizeof(float));
		tf_parallel_free(p);
	}
	return 0;
}
