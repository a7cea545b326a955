/*
 * fixture.h - the engine tests' PyTorch reference fixtures
 * (the .bin files in test/fixtures, written by the make_..._fixture.py scripts there).
 */
#ifndef ATTENTION_FIXTURE_H
#define ATTENTION_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>

#include "transformer.h"

/* A tensor of the fixture file. */
typedef struct FixTensor
{
	char		name[128];
	int			dtype;			/* 0 float32, 1 int32 */
	size_t		count;
	void	   *data;
} FixTensor;

typedef struct Fixture
{
	FixTensor  *t;
	int			n;
} Fixture;

/* Reads a fixture file (format: make_model_fixture.py); false when unreadable. */
bool		fixture_read(const char *path, Fixture *fx);

/* The tensor called name, or NULL. */
const FixTensor *fixture_get(const Fixture *fx, const char *name);

/* Frees what fixture_read allocated. */
void		fixture_free(Fixture *fx);

/* max |a - b| / max(max |b|, 1e-2): normwise relative error against reference b; infinite for a NaN on one side. */
double		rel_error(const float *a, const float *b, size_t n);

/*
 * Uniform in [-1, 1): the tests' linear congruential generator, advancing
 * *state (each suite keeps its own seed, so its values do not depend on the
 * others').
 */
float		fixture_uniform(unsigned *state);

/*
 * The configuration of a fixture's "config" record (vocab, d_model, heads,
 * d_ff, encoder layers, decoder layers, pad): the base model with those,
 * max_positions 64.
 */
void		fixture_config(const Fixture *fx, TfConfig *c);

/*
 * A new training model (dropout as given, max_positions 64, 2 threads) with
 * the fixture's "config" and parameters, zero optimizer state.
 */
TfModel    *fixture_model(const Fixture *fx, float dropout);

/*
 * A deterministic synthetic batch of 4 pairs (vocab 64, pad 0, BOS 2, EOS
 * 3; 26 target tokens) into the caller's arrays of 32 ids each.
 */
void		fixture_synthetic_batch(int32_t *src, int32_t *tgt, int32_t *lab, TfBatch *b);

/*
 * The logits of the model's last evaluation forward, rows of vocab floats
 * without the device's padding (tf_model_logits_stride): [rows, vocab] on
 * the host (malloc'd; a failed CHECK leaves it unfilled).
 */
float	   *fixture_logits(TfModel *m, size_t rows, int vocab);

/*
 * The packed layout of B sentences for an attention call (TfAttentionShape):
 * sentence b has lq[b] queries and lk[b] keys (lk NULL: lq[b], self-
 * attention) and H heads of probabilities; q_start, k_start and p_start
 * [B + 1] receive the offsets, *max_q and *max_k the longest.
 */
void		fixture_attention_layout(int B, int H, const int *lq, const int *lk, int32_t *q_start,
									 int32_t *k_start, int64_t *p_start, int *max_q, int *max_k);

/*
 * An inference model (on test_device, 2 threads, no dropout) with the decode
 * fixture's configuration and parameters; NULL (a failed CHECK) on error.
 */
TfModel    *fixture_decode_model(const Fixture *fx);

#endif
