/*
 * rng.h - Philox4x32-10, a counter-based generator (Salmon et al. 2011,
 * "Parallel random numbers: as easy as 1, 2, 3"). A number is a pure
 * function of (seed, stream, index): dropout masks and initial weights are
 * reproducible in any order, on any thread, and bit for bit on a GPU.
 */
#ifndef ATTENTION_RNG_H
#define ATTENTION_RNG_H

#include <stdint.h>

/* The generator is shared with the CUDA kernels (kernels/dropout.cu): the same bits on both. */
#ifdef __CUDACC__
#define TF_HOST_DEVICE __host__ __device__
#else
#define TF_HOST_DEVICE
#endif

/*
 * The high 32 bits of the 64-bit product a b. On a GPU, __umulhi: nvcc
 * would otherwise carry the rounds in 64-bit registers (a third more
 * instructions a Philox block).
 */
TF_HOST_DEVICE static inline uint32_t
tf_mulhi(uint32_t a, uint32_t b)
{
#ifdef __CUDA_ARCH__
	return __umulhi(a, b);
#else
	return (uint32_t) (((uint64_t) a * b) >> 32);
#endif
}

/*
 * Philox4x32-10 of counter (c0, c1, c2, c3) under key (k0, k1), into out[4].
 * Inline so that loops over blocks vectorize.
 */
TF_HOST_DEVICE static inline void
tf_philox(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
		  uint32_t k0, uint32_t k1, uint32_t out[4])
{
	int			round;

	for (round = 0; round < 10; round++)
	{
		uint32_t	n0 = tf_mulhi(0xCD9E8D57u, c2) ^ c1 ^ k0;
		uint32_t	n2 = tf_mulhi(0xD2511F53u, c0) ^ c3 ^ k1;

		c1 = 0xCD9E8D57u * c2;
		c3 = 0xD2511F53u * c0;
		c0 = n0;
		c2 = n2;
		k0 += 0x9E3779B9u;
		k1 += 0xBB67AE85u;
	}
	out[0] = c0;
	out[1] = c1;
	out[2] = c2;
	out[3] = c3;
}

/* A Philox word as a float in [0, 1): its top 24 bits (tf_random_uniform's, dropout's on both backends). */
TF_HOST_DEVICE static inline float
tf_word_uniform(uint32_t w)
{
	return (float) (w >> 8) * (1.0f / 16777216.0f);
}

/*
 * The 32-bit random word number `index` of `stream` under `seed`: word
 * index % 4 of Philox on counter (index / 4, stream) and key seed.
 */
uint32_t	tf_random_u32(uint64_t seed, uint64_t stream, uint64_t index);

/* Uniform float in [0, 1) with 24 random bits, from tf_random_u32. */
float		tf_random_uniform(uint64_t seed, uint64_t stream, uint64_t index);

/* Standard normal (Box-Muller on words 2*index and 2*index+1). */
float		tf_random_normal(uint64_t seed, uint64_t stream, uint64_t index);

/*
 * Stream of the dropout masks at `site` (< 2^20) of batch `batch` (< 2^12,
 * its index within the optimizer step) in the step that follows `step`
 * optimizer steps: (step << 32) | (batch << 20) | site. Keyed by the step
 * and the batch's place in it, never by a device's own count of forwards,
 * so a step's masks are the same however its batches are spread over ranks.
 */
uint64_t	tf_dropout_stream(int64_t step, int batch, uint32_t site);

#endif
