/*
 * blas.h - the engine's BLAS (blas.c): OpenBLAS's OpenMP build, loaded at
 * first use with the kernel family this CPU runs best.
 *
 * OpenBLAS chooses its kernels once, when it is loaded, from its own table of
 * CPU models; a model newer than the table gets its slowest kernels (Debian
 * 12's 0.3.21 runs an Intel Xeon of family 6 model 207, with AVX-512 and
 * AMX, on its SSE3 "Prescott" kernels: 24.7 against 102.3 GFLOP/s of sgemm
 * with its Cooperlake ones there, training 2.3x slower,
 * bench/results/blas_core-vm-20261128-1108.txt). So the engine does not
 * link OpenBLAS: it loads it itself, naming in OPENBLAS_CORETYPE, for the
 * load only, the family that the CPU's features call for, unless the
 * environment already names one (which is kept, as the tests' pinned runs
 * need).
 */
#ifndef ATTENTION_BLAS_H
#define ATTENTION_BLAS_H

#include <cblas.h>
#include <stddef.h>

/* OpenBLAS's entry points the engine calls, with cblas.h's signatures. */
typedef struct TfBlas
{
	__typeof__(&cblas_sgemm) sgemm;
	__typeof__(&cblas_sgemv) sgemv;
	__typeof__(&openblas_set_num_threads) set_num_threads;
	__typeof__(&openblas_get_corename) get_corename;
} TfBlas;

/*
 * OpenBLAS, loaded on the first call (later calls, from any thread, return
 * the same table). The first call sets and clears OPENBLAS_CORETYPE, which
 * races with getenv in other threads: make it where the process has one
 * thread (the engine does in tf_backend_create, before starting ranks, and
 * the glue in _PG_init). NULL when it cannot be loaded, with the reason in err (err
 * may be NULL). Call it before any code that may load OpenBLAS as a
 * dependency (the emulated CUDA library links it): the first load chooses
 * the kernels for the process.
 */
const TfBlas *tf_blas(char *err, size_t errlen);

/*
 * The OpenBLAS kernel family for this CPU's features (x86-64: Cooperlake
 * with AVX-512 BF16, SkylakeX with AVX-512, Zen or Haswell with AVX2 and
 * FMA, SandyBridge with AVX), or NULL to leave the choice to OpenBLAS.
 */
const char *tf_blas_core_for_cpu(void);

#endif
