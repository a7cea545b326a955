/*
 * score.c - teacher-forced inspection of a model: the log-probability of
 * given targets, and the attention probabilities of the last forward pass.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "model.h"

int
tf_model_score(TfModel *m, const TfBatch *b, double *log_prob, char *err, size_t errlen)
{
	TfBackend  *be = m->be;
	const TfConfig *c = &m->config;
	const int32_t *tgt_start;
	double		loss;
	int64_t		tokens;
	sigset_t	old;
	int			i;

	if (tf_model_forward(m, b, false, &loss, &tokens, err, errlen) != TF_OK)
		return TF_ERROR;
	/* the forward kept the logits; the loss again per sentence, without label smoothing */
	tgt_start = m->lay.ints + m->lay.B + 1;
	tf_block_signals(&old);
	for (i = 0; i < m->lay.B; i++)
	{
		double		sum = 0.0;
		int64_t		n = 0;

		be->cross_entropy(be, m->logits + (size_t) tgt_start[i] * c->vocab_size, NULL,
						  LABELS(m) + tgt_start[i], tgt_start[i + 1] - tgt_start[i], c->vocab_size,
						  c->pad_id, 0.0f, &sum, &n);
		log_prob[i] = -sum;
	}
	tf_restore_signals(&old);
	return TF_OK;
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

	if (!m->have_forward || m->training)
	{
		snprintf(err, errlen, "attention probabilities need a forward pass with training = false first");
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
