/*
 * test_marian.c - Marian's coordinate order (src/marian.h): the
 * permutation maps this engine's sinusoids onto Marian's exactly, every
 * parameter of a model goes to Marian's order and back bitwise, and bad
 * names and shapes are refused.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "marian.h"

/* The engine's position table at (pos, e) is Marian's at (pos, m(e)), bitwise. */
static void
sinusoids(int d)
{
	enum {P = 64};
	float	   *pe = malloc((size_t) P * d * sizeof(float));
	char	   *seen = calloc(d, 1);
	int			pos,
				e,
				bad = 0,
				dup = 0;

	tf_positional_encoding(pe, P, d);
	for (e = 0; e < d; e++)
	{
		int			m = tf_marian_coordinate(e, d);

		if (m < 0 || m >= d || seen[m]++)
			dup++;
		for (pos = 0; pos < P; pos++)
			bad += pe[(size_t) pos * d + e] != tf_marian_sinusoid(pos, m, d);
	}
	CHECK(dup == 0, "marian: coordinate map of d_model %d is not a permutation (%d collisions)", d, dup);
	CHECK(bad == 0, "marian: %d of %d position values differ from Marian's permuted (d_model %d)", bad, P * d, d);
	free(pe);
	free(seen);
}

/* Every parameter of a small model to Marian's order and back: equal bits, and some moved. */
static void
round_trip(void)
{
	TfConfig	c;
	TfModel    *m;
	TfTensor   *t;
	char		err[TF_ERRLEN];
	int			n,
				i,
				moved = 0,
				back = 0;

	tf_config_small(&c, 40);
	c.num_encoder_layers = c.num_decoder_layers = 1;
	c.d_model = 16;
	c.num_heads = 2;
	c.d_ff = 24;
	c.logits_bias = true;
	m = tf_model_create_inference(&c, "cpu", 1, err, sizeof(err));
	CHECK(m != NULL, "marian: model: %s", err);
	if (m == NULL)
		return;
	CHECK(tf_model_tensors(m, &t, &n, err, sizeof(err)) == TF_OK, "marian: tensors: %s", err);
	for (i = 0; i < n; i++)
	{
		float	   *copy = malloc(t[i].bytes);
		size_t		k;

		for (k = 0; k < t[i].bytes / sizeof(float); k++)
			((float *) t[i].data)[k] = (float) (i * 1000 + k);
		memcpy(copy, t[i].data, t[i].bytes);
		CHECK(tf_marian_permute(&t[i], c.d_model, true, err, sizeof(err)) == TF_OK, "marian: %s", err);
		moved += memcmp(copy, t[i].data, t[i].bytes) != 0;
		CHECK(tf_marian_permute(&t[i], c.d_model, false, err, sizeof(err)) == TF_OK, "marian: %s", err);
		back += memcmp(copy, t[i].data, t[i].bytes) == 0;
		free(copy);
	}
	CHECK(back == n, "marian: %d of %d tensors came back changed", n - back, n);
	/* per layer: 2 (enc) or 3 (dec) norms x 2, attention out_proj w+b, q/k/v weights, fc1 w, fc2 w+b */
	CHECK(moved == 1 + (4 + 2 + 3 + 1 + 2) + (6 + 4 + 6 + 1 + 2), "marian: %d tensors moved", moved);
	tf_tensors_free(t);
	tf_model_free(m);
}

/* Unknown names and misfit shapes are errors. */
static void
refusals(void)
{
	float		x[32] = {0};
	TfTensor	t = {.dtype = TF_FLOAT32, .ndim = 1, .shape = {32}, .data = x, .bytes = sizeof(x)};
	char		err[TF_ERRLEN] = "";

	snprintf(t.name, sizeof(t.name), "model.encoder.embed_positions.weight");
	CHECK(tf_marian_permute(&t, 32, true, err, sizeof(err)) == TF_ERROR && strstr(err, "not a MarianMT") != NULL,
		  "marian: an unknown name was permuted (%s)", err);
	snprintf(t.name, sizeof(t.name), "model.decoder.layers.0.final_layer_norm.weight");
	CHECK(tf_marian_permute(&t, 16, true, err, sizeof(err)) == TF_ERROR && strstr(err, "d_model 16") != NULL,
		  "marian: a [32] LayerNorm was permuted as d_model 16 (%s)", err);
	CHECK(tf_marian_permute(&t, 32, true, err, sizeof(err)) == TF_OK && x[0] == 0.0f, "marian: %s", err);
}

void
test_marian(const char *fixtures)
{
	(void) fixtures;
	sinusoids(2);
	sinusoids(64);
	sinusoids(512);
	round_trip();
	refusals();
}
