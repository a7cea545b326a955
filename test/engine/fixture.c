/*
 * fixture.c - reading the engine tests' PyTorch reference fixtures.
 */
#define _POSIX_C_SOURCE 200809L
#include "fixture.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* Reads a fixture file (format: make_model_fixture.py); false when unreadable. */
bool
fixture_read(const char *path, Fixture *fx)
{
	FILE	   *f = fopen(path, "rb");
	char		magic[8];
	int			cap = 256;

	fx->n = 0;
	fx->t = calloc(cap, sizeof(FixTensor));
	if (f == NULL || fread(magic, 1, 8, f) != 8 || memcmp(magic, "ATTFIX1\n", 8) != 0)
	{
		if (f)
			fclose(f);
		return false;
	}
	for (;;)
	{
		uint32_t	len,
					dtype,
					ndim,
					dim;
		FixTensor  *t;
		uint32_t	i;

		if (fread(&len, 4, 1, f) != 1)
			break;
		if (fx->n == cap)
			fx->t = realloc(fx->t, (cap *= 2) * sizeof(FixTensor));
		t = &fx->t[fx->n++];
		if (len >= sizeof(t->name) || fread(t->name, 1, len, f) != len ||
			fread(&dtype, 4, 1, f) != 1 || fread(&ndim, 4, 1, f) != 1)
			return false;
		t->name[len] = '\0';
		t->dtype = (int) dtype;
		t->count = 1;
		for (i = 0; i < ndim; i++)
		{
			if (fread(&dim, 4, 1, f) != 1)
				return false;
			t->count *= dim;
		}
		t->data = malloc(t->count * 4);
		if (fread(t->data, 4, t->count, f) != t->count)
			return false;
	}
	fclose(f);
	return true;
}

const FixTensor *
fixture_get(const Fixture *fx, const char *name)
{
	int			i;

	for (i = 0; i < fx->n; i++)
		if (strcmp(fx->t[i].name, name) == 0)
			return &fx->t[i];
	return NULL;
}

/*
 * max |a - b| / max(max |b|, 1e-2): the normwise relative error of a against
 * reference b, absolute below 1e-2; infinite where one side is NaN and the
 * other is not (NaN on both sides is equal).
 */
double
rel_error(const float *a, const float *b, size_t n)
{
	double		num = 0.0,
				den = 1e-2;
	size_t		i;

	for (i = 0; i < n; i++)
	{
		if (isnan(a[i]) != isnan(b[i]))
			return INFINITY;	/* fmax would drop the NaN: a NaN on one side is a difference */
		if (isnan(a[i]))
			continue;			/* NaN on both sides: equal */
		if (a[i] != b[i])
			num = fmax(num, fabs((double) a[i] - b[i]));
		den = fmax(den, fabs((double) b[i]));
	}
	return den > 0.0 ? num / den : num;
}

/* Loads the fixture's parameters (zero optimizer state) into a new model. */
void
fixture_config(const Fixture *fx, TfConfig *c)
{
	const FixTensor *t = fixture_get(fx, "config");
	const int32_t *cfg = t->data;

	tf_config_base(c, cfg[0]);
	if (t->count >= 11)
	{
		/* prenorm_fixture.bin: normalize_before and fairseq's positions */
		c->normalize_before = cfg[9] != 0;
		c->positions = cfg[10] != 0 ? TF_POSITIONS_FAIRSEQ : TF_POSITIONS_PAPER;
	}
	c->d_model = cfg[1];
	c->num_heads = cfg[2];
	c->d_ff = cfg[3];
	c->num_encoder_layers = cfg[4];
	c->num_decoder_layers = cfg[5];
	c->pad_id = cfg[6];
	c->max_positions = 64;
}

TfModel *
fixture_model(const Fixture *fx, float dropout)
{
	TfConfig	c;
	TfModel    *m;
	TfTensor   *tensors;
	int			n,
				i;
	char		err[TF_ERRLEN];
	float	   *zeros;
	int64_t		zero = 0,
				seed = 1234;

	fixture_config(fx, &c);
	c.dropout = dropout;
	m = tf_model_create(&c, 1, test_device, 2, err, sizeof(err));
	CHECK(m != NULL, "create: %s", err);
	if (m == NULL || tf_model_tensors(m, &tensors, &n, err, sizeof(err)) != TF_OK)
		return NULL;
	zeros = calloc(tf_model_num_parameters(m), sizeof(float));
	for (i = 0; i < n; i++)
	{
		const FixTensor *f = fixture_get(fx, tensors[i].name);

		if (f != NULL)
			tensors[i].data = f->data;
		else if (tensors[i].dtype == TF_FLOAT32)
			tensors[i].data = zeros;
		else
			tensors[i].data = strcmp(tensors[i].name, "rng.seed") == 0 ? &seed : &zero;
	}
	CHECK(tf_model_load(m, tensors, n, err, sizeof(err)) == TF_OK, "load fixture: %s", err);
	tf_tensors_free(tensors);
	free(zeros);
	return m;
}

void
fixture_free(Fixture *fx)
{
	while (fx->n > 0)
		free(fx->t[--fx->n].data);
	free(fx->t);
	fx->t = NULL;
}

/* A deterministic synthetic batch of 4 pairs (vocab 64). */
void
fixture_synthetic_batch(int32_t *src, int32_t *tgt, int32_t *lab, TfBatch *b)
{
	int			i,
				t;

	for (i = 0; i < 4; i++)
		for (t = 0; t < 8; t++)
		{
			int			len = 8 - i;

			src[i * 8 + t] = t < len - 1 ? 4 + (i * 7 + t * 3) % 60 : t == len - 1 ? 3 : 0;
			tgt[i * 8 + t] = t == 0 ? 2 : t < len ? 4 + (i * 5 + t * 11) % 60 : 0;
			lab[i * 8 + t] = t < len - 1 ? 4 + (i * 5 + (t + 1) * 11) % 60 : t == len - 1 ? 3 : 0;
		}
	b->batch_size = 4;
	b->src_len = 8;
	b->tgt_len = 8;
	b->src = src;
	b->tgt_in = tgt;
	b->labels = lab;
	b->index = 0;
}

float
fixture_uniform(unsigned *state)
{
	*state = *state * 1664525u + 1013904223u;
	return (float) ((*state >> 8) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

TfModel *
fixture_decode_model(const Fixture *fx)
{
	const int32_t *cfg = fixture_get(fx, "config")->data;
	TfConfig	c;
	TfModel    *m;
	TfTensor   *tensors;
	int			n,
				i;
	char		err[TF_ERRLEN];

	fixture_config(fx, &c);
	c.dropout = 0.0f;
	m = tf_model_create_inference(&c, test_device, 2, err, sizeof(err));
	CHECK(m != NULL, "create: %s", err);
	if (m == NULL || tf_model_tensors(m, &tensors, &n, err, sizeof(err)) != TF_OK)
		return NULL;
	/* the embedding, 16 tensors per encoder layer, 26 per decoder layer: parameters only */
	CHECK(n == 1 + 16 * cfg[4] + 26 * cfg[5], "inference model lists %d tensors", n);
	for (i = 0; i < n; i++)
	{
		const FixTensor *f = fixture_get(fx, tensors[i].name);

		CHECK(f != NULL && f->count * 4 == tensors[i].bytes, "fixture lacks %s", tensors[i].name);
		tensors[i].data = f != NULL ? f->data : NULL;
	}
	CHECK(tf_model_load(m, tensors, n, err, sizeof(err)) == TF_OK, "load: %s", err);
	tf_tensors_free(tensors);
	return m;
}

void
fixture_attention_layout(int B, int H, const int *lq, const int *lk, int32_t *q_start, int32_t *k_start,
						 int64_t *p_start, int *max_q, int *max_k)
{
	q_start[0] = k_start[0] = 0;
	p_start[0] = 0;
	*max_q = *max_k = 0;
	for (int b = 0; b < B; b++)
	{
		int			k = lk != NULL ? lk[b] : lq[b];

		q_start[b + 1] = q_start[b] + lq[b];
		k_start[b + 1] = k_start[b] + k;
		p_start[b + 1] = p_start[b] + (int64_t) H * lq[b] * k;
		*max_q = lq[b] > *max_q ? lq[b] : *max_q;
		*max_k = k > *max_k ? k : *max_k;
	}
}

float *
fixture_logits(TfModel *m, size_t rows, int vocab)
{
	size_t		ld = (size_t) tf_model_logits_stride(m);
	float	   *strided = malloc((rows > 0 ? rows : 1) * ld * sizeof(float)),
			   *logits = malloc((rows > 0 ? rows : 1) * vocab * sizeof(float));
	char		err[TF_ERRLEN];
	size_t		r;

	CHECK(ld >= (size_t) vocab, "logits stride %zu under the vocabulary %d", ld, vocab);
	CHECK(tf_model_download(m, strided, tf_model_logits(m), rows * ld * sizeof(float), err, sizeof(err)) == TF_OK,
		  "download: %s", err);
	for (r = 0; r < rows; r++)
		memcpy(logits + r * vocab, strided + r * ld, vocab * sizeof(float));
	free(strided);
	return logits;
}
