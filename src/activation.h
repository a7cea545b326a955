/*
 * activation.h - the feed-forward activations f(x) and their slopes f'(x)
 * (TfActivation), shared by the CPU backend and the CUDA kernels
 * (kernels/elementwise.cu) so that both compute the same float expressions.
 */
#ifndef ATTENTION_ACTIVATION_H
#define ATTENTION_ACTIVATION_H

#include <math.h>

#include "rng.h"				/* TF_HOST_DEVICE */
#include "transformer.h"

/* ReLU max(x, 0); swish x * sigmoid(x); GELU x * Phi(x) = x (1 + erf(x / sqrt 2)) / 2. */
TF_HOST_DEVICE static inline float
tf_activation_value(TfActivation f, float x)
{
	if (f == TF_SWISH)
		return x / (1.0f + expf(-x));
	if (f == TF_GELU)
		return 0.5f * x * (1.0f + erff(x * 0.70710678f));
	return x > 0.0f ? x : 0.0f;
}

/* f'(x): swish s (1 + x (1 - s)) with s = sigmoid(x); GELU Phi(x) + x phi(x); ReLU 1 for x > 0. */
TF_HOST_DEVICE static inline float
tf_activation_slope(TfActivation f, float x)
{
	if (f == TF_SWISH)
	{
		float		s = 1.0f / (1.0f + expf(-x));

		return s * (1.0f + x * (1.0f - s));
	}
	if (f == TF_GELU)
		return 0.5f * (1.0f + erff(x * 0.70710678f)) + x * 0.39894228f * expf(-0.5f * x * x);
	return x > 0.0f ? 1.0f : 0.0f;
}

#endif
