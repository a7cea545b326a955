/*
 * batch.c - turns a padded TfBatch into the engine's padding-free layout:
 * the real tokens of all sentences back to back, each with its position,
 * the first row of every sentence, and where every sentence's attention
 * probabilities start. No layer computes anything for padding.
 */
#include <stdio.h>
#include <stdlib.h>

#include "model.h"

/*
 * Length of a row of ids [len]: up to its last id that is not pad_id.
 * Padding is the trailing run of pad_id; a pad_id before a token is a
 * token (a sentence ends in EOS, and transformers reads "<pad>" in a text
 * as the pad token).
 */
static int
row_length(const int32_t *ids, int len, int pad_id)
{
	int			n = len;

	while (n > 0 && ids[n - 1] == pad_id)
		n--;
	return n;
}

/*
 * Length of a target row: its labels' (target + EOS). The decoder input's
 * first token is the decoder start, which may be the pad id (Marian's
 * models start with it); after the labels' length it must be padding too.
 * -1 when it is not.
 */
static int
target_length(const int32_t *in, const int32_t *labels, int len, int pad_id)
{
	int			n = row_length(labels, len, pad_id),
				t;

	if (n == 0 && in[0] != pad_id)
		return -1;
	for (t = n > 1 ? n : 1; t < len; t++)
		if (in[t] != pad_id)
			return -1;
	return n;
}

/*
 * The position of id, the row's next token, where `tokens` tokens that are
 * not pad_id came before it: its index t, or with fairseq's positions
 * (M2M-100, NLLB-200) the count of tokens before it that are not pad, and
 * a pad token max_positions (the table's row of zeros), as transformers'
 * create_position_ids_from_input_ids gives "<pad>" in a text the padding
 * position, whose sinusoid is zero, and does not count it.
 */
static int32_t
token_position(const TfConfig *c, int32_t id, int t, int *tokens)
{
	if (c->positions != TF_POSITIONS_FAIRSEQ)
		return t;
	if (id == c->pad_id)
		return c->max_positions;
	return (*tokens)++;
}

/*
 * Grows the host staging buffer to hold `longs` int64 then `ints` int32
 * values, and points lay->longs and lay->ints into it.
 */
static int
grow_staging(BatchLayout *lay, size_t ints, size_t longs)
{
	size_t		bytes = longs * sizeof(int64_t) + ints * sizeof(int32_t);

	if (bytes > lay->staging_bytes)
	{
		int64_t    *p = realloc(lay->longs, bytes);

		if (p == NULL)
			return TF_ERROR;
		lay->longs = p;
		lay->staging_bytes = bytes;
	}
	lay->ints = (int32_t *) (lay->longs + longs);
	return TF_OK;
}

int
tf_batch_layout(TfModel *m, const TfBatch *b, char *err, size_t errlen)
{
	const TfConfig *c = &m->config;
	BatchLayout *lay = &m->lay;
	int			B = b->batch_size;
	int			H = c->num_heads;
	int			r,
				t;
	int32_t    *src_ids,
			   *tgt_ids,
			   *labels,
			   *src_pos,
			   *tgt_pos,
			   *src_start,
			   *tgt_start;
	int64_t    *enc_p,
			   *dec_p,
			   *cross_p;

	if (B < 1 || b->src_len < 1 || b->tgt_len < 1)
	{
		snprintf(err, errlen, "empty batch: batch_size %d, src_len %d, tgt_len %d",
				 B, b->src_len, b->tgt_len);
		return TF_ERROR;
	}
	if (grow_staging(lay, 5 * (size_t) B * b->src_len + 6 * (size_t) B * b->tgt_len + 2 * (size_t) (B + 1) + 2,
					 3 * (size_t) (B + 1)) != TF_OK)
	{
		snprintf(err, errlen, "out of memory for a batch of %d sentences", B);
		return TF_ERROR;
	}

	/* lengths, checks, and the per-sentence offsets */
	src_start = lay->ints;
	tgt_start = src_start + B + 1;
	enc_p = lay->longs;
	dec_p = enc_p + B + 1;
	cross_p = dec_p + B + 1;
	src_start[0] = tgt_start[0] = 0;
	enc_p[0] = dec_p[0] = cross_p[0] = 0;
	lay->max_src = lay->max_tgt = 0;
	for (r = 0; r < B; r++)
	{
		int			ls = row_length(b->src + (size_t) r * b->src_len, b->src_len, c->pad_id);
		int			lt = target_length(b->tgt_in + (size_t) r * b->tgt_len, b->labels + (size_t) r * b->tgt_len,
									   b->tgt_len, c->pad_id);

		if (lt < 0)
		{
			snprintf(err, errlen, "sentence %d: its target input (decoder start + target) is not padded "
					 "exactly where its labels are", r);
			return TF_ERROR;
		}
		if (ls > c->max_positions || lt > c->max_positions)
		{
			snprintf(err, errlen, "sentence %d has length %d, over max_positions %d", r,
					 ls > lt ? ls : lt, c->max_positions);
			return TF_ERROR;
		}
		src_start[r + 1] = src_start[r] + ls;
		tgt_start[r + 1] = tgt_start[r] + lt;
		enc_p[r + 1] = enc_p[r] + (int64_t) H * ls * ls;
		dec_p[r + 1] = dec_p[r] + (int64_t) H * lt * lt;
		cross_p[r + 1] = cross_p[r] + (int64_t) H * lt * ls;
		lay->max_src = ls > lay->max_src ? ls : lay->max_src;
		lay->max_tgt = lt > lay->max_tgt ? lt : lay->max_tgt;
	}
	lay->B = B;
	lay->Ns = src_start[B];
	lay->Nt = tgt_start[B];
	if (lay->Ns == 0 || lay->Nt == 0)
	{
		snprintf(err, errlen, "empty batch: no %s tokens", lay->Ns == 0 ? "source" : "target");
		return TF_ERROR;
	}

	/* the tokens, back to back, with their positions */
	src_ids = tgt_start + B + 1;
	tgt_ids = src_ids + lay->Ns;
	labels = tgt_ids + lay->Nt;
	src_pos = labels + lay->Nt;
	tgt_pos = src_pos + lay->Ns;
	for (r = 0; r < B; r++)
	{
		int			src_tokens = 0,
					tgt_tokens = 0;

		for (t = 0; t < src_start[r + 1] - src_start[r]; t++)
		{
			int32_t		id = b->src[(size_t) r * b->src_len + t];

			if (id < 0 || id >= c->vocab_size)
			{
				snprintf(err, errlen, "source id %d of sentence %d is out of range [0, %d)", id, r, c->vocab_size);
				return TF_ERROR;
			}
			src_ids[src_start[r] + t] = id;
			src_pos[src_start[r] + t] = token_position(c, id, t, &src_tokens);
		}
		for (t = 0; t < tgt_start[r + 1] - tgt_start[r]; t++)
		{
			int32_t		id = b->tgt_in[(size_t) r * b->tgt_len + t];
			int32_t		label = b->labels[(size_t) r * b->tgt_len + t];

			if (id < 0 || id >= c->vocab_size || label < 0 || label >= c->vocab_size)
			{
				snprintf(err, errlen, "%s id %d of sentence %d is out of range [0, %d)",
						 id < 0 || id >= c->vocab_size ? "target" : "label",
						 id < 0 || id >= c->vocab_size ? id : label, r, c->vocab_size);
				return TF_ERROR;
			}
			tgt_ids[tgt_start[r] + t] = id;
			labels[tgt_start[r] + t] = label;
			tgt_pos[tgt_start[r] + t] = token_position(c, id, t, &tgt_tokens);
		}
	}
	/* the embedding gradient's rows by id follow, when the backward needs them (tf_batch_group_ids) */
	lay->groups = (int) (tgt_pos + lay->Nt - lay->ints);
	lay->unique = 0;
	lay->ints_used = (size_t) lay->groups;
	return TF_OK;
}

size_t
tf_batch_group_ids(TfModel *m)
{
	BatchLayout *lay = &m->lay;
	const int32_t *src_ids = lay->ints + 2 * (lay->B + 1);	/* then the target's: back to back */

	if (lay->counts == NULL && (lay->counts = malloc((size_t) m->config.vocab_size * sizeof(int32_t))) == NULL)
		return 0;
	lay->unique = tf_group_by_id(src_ids, lay->Ns + lay->Nt, m->config.vocab_size, lay->ints + lay->groups,
								 lay->counts);
	return 2 * (size_t) lay->unique + 1 + lay->Ns + lay->Nt;
}
