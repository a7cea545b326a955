/*
 * device.h - the benchmarks' --device option (cpu, cuda, cuda:N); the CUDA
 * library is $ATTENTION_CUDA_LIBRARY when set (the emulated build in CI).
 */
#ifndef ATTENTION_BENCH_DEVICE_H
#define ATTENTION_BENCH_DEVICE_H

#include <stdlib.h>
#include <string.h>

#include "transformer.h"

/* The device of "--device D" (default "cpu"), removed from argv; returns the new argc. */
static const char *bench_device = "cpu";

static int
bench_device_option(int argc, char **argv)
{
	int			i,
				j = 1;

	for (i = 1; i < argc; i++)
		if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
			bench_device = argv[++i];
		else
			argv[j++] = argv[i];
	if (getenv("ATTENTION_CUDA_LIBRARY") != NULL)
		tf_backend_set_cuda_library(getenv("ATTENTION_CUDA_LIBRARY"));
	return j;
}

#endif
