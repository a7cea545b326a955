/*
 * validate.c - validation of a model on an encoded corpus split: the
 * cross-entropy per target token (teacher forcing) and the BLEU of its
 * beam-search translations. Used by the training worker between steps and
 * by attention.evaluate.
 */
#include "postgres.h"

#include <math.h>

#include "miscadmin.h"

#include "bleu.h"
#include "worker.h"

void
data_feed_alloc(DataFeed *feed, const DataSet *a, const DataSet *b, int max_positions)
{
	int64		ids = Max(a->max_batch_ids, b ? b->max_batch_ids : 0);

	feed->src = palloc_extended(Max(ids, (int64) VALIDATE_BLEU_BATCH * max_positions) * sizeof(int32),
								MCXT_ALLOC_HUGE);
	feed->tgt_in = palloc_extended(Max(ids, 1) * sizeof(int32), MCXT_ALLOC_HUGE);
	feed->labels = palloc_extended(Max(ids, 1) * sizeof(int32), MCXT_ALLOC_HUGE);
}

double
dataset_loss(TfModel *engine, const DataSet *d, DataFeed *feed)
{
	double		sum = 0;
	int64		tokens = 0;
	int32		b,
				k,
				most = 1;
	double	   *log_prob;
	char		err[TF_ERRLEN];

	for (b = 0; b < d->num_batches; b++)
		most = Max(most, d->batches[b].count);
	log_prob = palloc(most * sizeof(double));
	for (b = 0; b < d->num_batches; b++)
	{
		const DataBatch *db = &d->batches[b];
		TfBatch		batch = {0};

		CHECK_FOR_INTERRUPTS();
		data_fill(d, db, feed->pad_id, feed->bos_id, feed->eos_id, feed->src, feed->tgt_in, feed->labels, &batch);
		if (tf_model_score(engine, &batch, log_prob, err, sizeof(err)) != TF_OK)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("validation: %s", err)));
		for (k = 0; k < db->count; k++)
			sum -= log_prob[k];
		tokens += db->tgt_tokens;
	}
	pfree(log_prob);
	return tokens > 0 ? sum / tokens : NAN;
}

double
dataset_bleu(TfModel *engine, const SpmModel *vocab, const DataSet *d, DataFeed *feed,
			 int beam_size, int max_positions)
{
	BleuStats	stats;
	TfDecodeOptions opt;
	TfHypothesis hyps[VALIDATE_BLEU_BATCH];
	char		err[TF_ERRLEN];
	int32		b;

	if (d->num_references == 0)
		return NAN;
	memset(&stats, 0, sizeof(stats));
	tf_decode_options_default(&opt);
	opt.beam_size = beam_size;
	opt.nbest = 1;
	opt.bos_id = feed->bos_id;
	opt.eos_id = feed->eos_id;
	for (b = 0; b < d->num_references; b += VALIDATE_BLEU_BATCH)
	{
		int32		n = Min(VALIDATE_BLEU_BATCH, d->num_references - b),
					len = 0,
					k,
					t;

		CHECK_FOR_INTERRUPTS();
		for (k = 0; k < n; k++)
			len = Max(len, d->ordered[b + k].src_len + 1);
		len = Min(len, max_positions);
		for (k = 0; k < n; k++)
		{
			const DataPair *p = &d->ordered[b + k];
			int32		m = Min(p->src_len, len - 1);

			for (t = 0; t < len; t++)
				feed->src[k * len + t] = t < m ? p->src[t] : t == m ? feed->eos_id : feed->pad_id;
		}
		if (tf_model_translate(engine, feed->src, n, len, &opt, hyps, err, sizeof(err)) != TF_OK)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("validation translation: %s", err)));
		for (k = 0; k < n; k++)
		{
			char	   *text;
			size_t		text_len;
			const char *ref = d->references[b + k];

			if (spm_decode(vocab, hyps[k].tokens, hyps[k].length, &text, &text_len, err, sizeof(err)) != 0)
			{
				tf_hypotheses_free(hyps, n);
				ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("decoding a translation: %s", err)));
			}
			if (bleu_add_segment(&stats, text, text_len, ref, strlen(ref)) != 0)
			{
				spm_free_buffer(text);
				tf_hypotheses_free(hyps, n);
				ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
			}
			spm_free_buffer(text);
		}
		tf_hypotheses_free(hyps, n);
	}
	return bleu_score(&stats, false);
}
