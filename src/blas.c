/*
 * blas.c - loading OpenBLAS with a kernel family for this CPU (blas.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "blas.h"

#include <dlfcn.h>
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "signals.h"

/* The OpenMP build's library (the Makefile passes its path on this system). */
#ifndef TF_OPENBLAS_LIBRARY
#define TF_OPENBLAS_LIBRARY "libopenblas.so.0"
#endif

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static TfBlas blas_table;
static const TfBlas *blas_loaded;
static char blas_error[512];

const char *
tf_blas_core_for_cpu(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
	/* libgcc's checks include the OS's support of the registers (XGETBV) */
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		__builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
		return __builtin_cpu_supports("avx512bf16") ? "Cooperlake" : "SkylakeX";
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return __builtin_cpu_is("amd") ? "Zen" : "Haswell";
	if (__builtin_cpu_supports("avx"))
		return "SandyBridge";
#endif
	return NULL;
}

/* The one load (pthread_once): OPENBLAS_CORETYPE set around dlopen only, then each entry point. */
static void
load_blas(void)
{
	const char *core = getenv("OPENBLAS_CORETYPE") == NULL ? tf_blas_core_for_cpu() : NULL;
	void	   *handle;
	sigset_t	old;

	/*
	 * OpenBLAS's constructor reads the variable during dlopen; nothing else
	 * sees it. Any thread it starts takes no signal.
	 */
	if (core != NULL)
		setenv("OPENBLAS_CORETYPE", core, 0);
	tf_block_signals(&old);
	handle = dlopen(TF_OPENBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
	tf_restore_signals(&old);
	if (core != NULL)
		unsetenv("OPENBLAS_CORETYPE");
	if (handle == NULL)
	{
		snprintf(blas_error, sizeof(blas_error), "cannot load OpenBLAS \"%s\": %s", TF_OPENBLAS_LIBRARY,
				 dlerror());
		return;
	}
	blas_table.sgemm = (__typeof__(blas_table.sgemm)) dlsym(handle, "cblas_sgemm");
	blas_table.sgemv = (__typeof__(blas_table.sgemv)) dlsym(handle, "cblas_sgemv");
	blas_table.set_num_threads = (__typeof__(blas_table.set_num_threads)) dlsym(handle, "openblas_set_num_threads");
	blas_table.get_corename = (__typeof__(blas_table.get_corename)) dlsym(handle, "openblas_get_corename");
	if (blas_table.sgemm == NULL || blas_table.sgemv == NULL || blas_table.set_num_threads == NULL ||
		blas_table.get_corename == NULL)
	{
		snprintf(blas_error, sizeof(blas_error), "\"%s\" lacks an entry point of OpenBLAS (cblas_sgemm, cblas_sgemv, "
				 "openblas_set_num_threads, openblas_get_corename)", TF_OPENBLAS_LIBRARY);
		return;
	}
	blas_loaded = &blas_table;
}

const TfBlas *
tf_blas(char *err, size_t errlen)
{
	pthread_once(&blas_once, load_blas);
	if (blas_loaded == NULL && err != NULL)
		snprintf(err, errlen, "%s", blas_error);
	return blas_loaded;
}
