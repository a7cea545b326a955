/*
 * rng.c - Philox4x32-10 (see rng.h).
 */
#include "rng.h"

#include <math.h>

#define TWO_PI 6.283185307179586
uint32_t
tf_random_u32(uint64_t seed, uint64_t stream, uint64_t index)
{
	uint32_t	out[4];
	uint64_t	block = index >> 2;

	tf_philox((uint32_t) block, (uint32_t) (block >> 32), (uint32_t) stream, (uint32_t) (stream >> 32),
			  (uint32_t) seed, (uint32_t) (seed >> 32), out);
	return out[index & 3];
}

float
tf_random_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
	return tf_word_uniform(tf_random_u32(seed, stream, index));
}

float
tf_random_normal(uint64_t seed, uint64_t stream, uint64_t index)
{
	double		u1 = ((double) (tf_random_u32(seed, stream, 2 * index) >> 8) + 1.0) / 16777217.0;
	double		u2 = (double) (tf_random_u32(seed, stream, 2 * index + 1) >> 8) / 16777216.0;

	return (float) (sqrt(-2.0 * log(u1)) * cos(TWO_PI * u2));
}

uint64_t
tf_dropout_stream(int64_t step, int batch, uint32_t site)
{
	return ((uint64_t) step << 32) | ((uint64_t) batch << 20) | site;
}
