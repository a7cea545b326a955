/*
 * score.c - teacher-forced inspection of a model: the log-probability of
 * given targets, and the attention probabilities of the last forward pass.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "signals.h"

int
tf_model_score(TfModel *m, const TfBatch *b, double *log_prob, char *err, size_t errlen)
{
	return tf_model_score_prefixed(m, b, 0, log_prob, err, errlen);
}

int
tf_model_score_prefixed(TfModel *m, const TfBatch *b, int prefix, double *log_prob, char *err, size_t errlen)
{
	TfBackend  *be = m->be;
	const TfConfig *c = &m->config;
	const int32_t *tgt_start;
	double	   *rows;
	sigset_t	old;
	int			i,
				j;

	if (prefix < 0)
	{
		snprintf(err, errlen, "prefix %d is negative", prefix);
		return TF_ERROR;
	}
	if (tf_model_forward(m, b, false, NULL, NULL, err, errlen) != TF_OK)
		return TF_ERROR;
	tf_model_reset_stats(m);
	rows = malloc((size_t) m->lay.Nt * sizeof(double));
	if (rows == NULL)
	{
		snprintf(err, errlen, "out of memory scoring %d target tokens", m->lay.Nt);
		return TF_ERROR;
	}
	/*
	 * the forward kept the logits: the loss again, without label smoothing,
	 * in one download; every label counts (the packed rows hold no padding:
	 * a pad label is "<pad>" in the target, which transformers scores)
	 */
	tf_block_signals(&old);
	be->cross_entropy(be, m->logits, false, LABELS(m), m->lay.Nt, c->vocab_size, m->ldv, -1, 0.0f,
					  m->row_loss);
	be->download(be, rows, m->row_loss, (size_t) m->lay.Nt * sizeof(double));
	tf_restore_signals(&old);
	tgt_start = m->lay.ints + m->lay.B + 1;
	for (i = 0; i < m->lay.B; i++)
	{
		double		sum = 0.0;

		for (j = tgt_start[i] + prefix; j < tgt_start[i + 1]; j++)
			sum += rows[j];
		log_prob[i] = -sum;
	}
	free(rows);
	return be->status(be, err, errlen);
}

void
tf_model_keep_attention(TfModel *m)
{
	m->keep_asked = true;
}

int
tf_model_attention(const TfModel *m, TfAttentionKind kind, int layer, int sentence, float *out,
				   int *queries, int *keys, char *err, size_t errlen)
{
	const TfConfig *c = &m->config;
	const BatchLayout *lay = &m->lay;
	int			B1 = lay->B + 1;
	const int32_t *src_start = lay->ints,
			   *tgt_start = lay->ints + B1;
	int			layers = kind == TF_ENCODER_SELF ? c->num_encoder_layers : c->num_decoder_layers;
	const LayerActs *a;
	const float *probs;
	int64_t		offset;
	int			lq,
				lk;

	if (!m->have_forward || !m->keep_probs)
	{
		snprintf(err, errlen, "attention probabilities need a score asked to keep them (tf_model_keep_attention) first");
		return TF_ERROR;
	}
	if (layer < 0 || layer >= layers || sentence < 0 || sentence >= lay->B)
	{
		snprintf(err, errlen, "layer %d or sentence %d out of range (%d layers, %d sentences)",
				 layer, sentence, layers, lay->B);
		return TF_ERROR;
	}
	a = &m->acts[kind == TF_ENCODER_SELF ? layer : c->num_encoder_layers + layer];
	lq = kind == TF_ENCODER_SELF ? src_start[sentence + 1] - src_start[sentence]
		: tgt_start[sentence + 1] - tgt_start[sentence];
	lk = kind == TF_DECODER_SELF ? lq : src_start[sentence + 1] - src_start[sentence];
	offset = lay->longs[(kind == TF_ENCODER_SELF ? 0 : kind == TF_DECODER_SELF ? B1 : 2 * B1) + sentence];
	probs = kind == TF_CROSS ? a->probs_cross : a->probs;
	*queries = lq;
	*keys = lk;
	if (out != NULL)
		m->be->download(m->be, out, probs + offset, (size_t) c->num_heads * lq * lk * sizeof(float));
	return TF_OK;
}
