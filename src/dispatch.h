/*
 * dispatch.h - run-time dispatch of the engine's own hot loops.
 *
 * The library is built for x86-64's baseline (Makefile: OPTFLAGS), so that
 * one binary runs on any x86-64 CPU. TF_CLONES on a function makes GCC
 * compile it three times, for x86-64-v4 (AVX-512), x86-64-v3 (AVX2, FMA)
 * and the baseline, and pick the one the CPU runs when the library is
 * loaded (an ifunc resolver). Sums in such a loop may then run in another
 * order on another CPU, as OpenBLAS's and oneDNN's do; on one CPU the bits
 * stay the same on any number of threads. Measured: the small model's bf16
 * training step, whose products oneDNN runs fast, 20% faster with its
 * element-wise loops built for the CPU (docs/training.md). Off under the
 * sanitizers (their run-time does not follow ifuncs) and other compilers.
 */
#ifndef ATTENTION_DISPATCH_H
#define ATTENTION_DISPATCH_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
	!defined(__SANITIZE_UNDEFINED__)
#define TF_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TF_CLONES
#endif

#endif
