/*
 * dataset.h - a corpus split encoded for the engine, batched, ordered per
 * epoch, and measured (dataset.c): a leaf of the SQL glue, shared by the
 * training worker and attention.evaluate.
 */
#ifndef ATTENTION_DATASET_H
#define ATTENTION_DATASET_H

#include "postgres.h"

#include "remote.h"
#include "spm.h"
#include "transformer.h"

/* A sentence pair as ids (no BOS/EOS). */
typedef struct DataPair
{
	int32	   *src;
	int32	   *tgt;
	int32		src_len;
	int32		tgt_len;
} DataPair;

/* A batch: pairs [first, first + count) of the length-sorted pairs. */
typedef struct DataBatch
{
	int32		first;
	int32		count;
	int32		src_len;		/* longest source + EOS */
	int32		tgt_len;		/* longest target + BOS (= + EOS) */
	int64		src_tokens;		/* source ids + EOS, no padding */
	int64		tgt_tokens;		/* labels: target ids + EOS */
} DataBatch;

/* A split of a corpus, encoded and batched. */
typedef struct DataSet
{
	DataPair   *pairs;			/* sorted by (source, target) length */
	int32		num_pairs;
	int32		skipped;		/* pairs longer than max_positions */
	DataBatch  *batches;
	int32		num_batches;
	int64		max_batch_ids;	/* most ids of one side of a padded batch */
	char	  **references;		/* target text of the first pairs in corpus order */
	DataPair   *ordered;		/* the first pairs in corpus order (for BLEU) */
	int32		num_references;
} DataSet;

/*
 * Reads split `split` of corpus `corpus_id` (in pair_id order) from this
 * server as the tables' owner (the caller has checked that the current role
 * may use the corpus: job_entitlement, require_usable), or with `remote`
 * from another with the remote role's privileges (a node of a job across
 * machines reads the coordinator's),
 * encodes it with `vocab`, drops pairs that exceed max_positions, sorts by
 * length and groups into batches of at most batch_tokens ids per side
 * (padding included). Keeps the target text and ids of the first
 * `references` pairs in corpus order. Memory in the current context.
 * Inside SPI and a transaction.
 */
void		data_load_from(Remote *remote, DataSet *d, int32 corpus_id, const char *split, const SpmModel *vocab,
						   int max_positions, int batch_tokens, int references);

/* data_load_from this server. */
static inline void
data_load(DataSet *d, int32 corpus_id, const char *split, const SpmModel *vocab, int max_positions,
		  int batch_tokens, int references)
{
	data_load_from(NULL, d, corpus_id, split, vocab, max_positions, batch_tokens, references);
}

/* Order of the batches in epoch `epoch`: a permutation drawn from (seed, epoch). */
void		data_epoch_order(const DataSet *d, int64 seed, int64 epoch, int32 *order);

/*
 * Fills a padded engine batch from batch `b` into src, tgt_in and labels
 * (each at least max_batch_ids ints).
 */
void		data_fill(const DataSet *d, const DataBatch *b, int pad_id, int bos_id, int eos_id,
					  int32 *src, int32 *tgt_in, int32 *labels, TfBatch *batch);

/* Special ids of a vocabulary and host buffers for padded batches. */
typedef struct DataFeed
{
	int			pad_id,
				bos_id,
				eos_id;
	/*
	 * A multilingual model's languages (evaluate): every source starts with
	 * the token source_language (or, with source_language_last, ends with it
	 * after its EOS), the decoder with bos then the forced target_language,
	 * which the loss does not count (as score)
	 */
	bool		multilingual,
				source_language_last;
	int32		source_language,
				target_language;
	int32	   *src;			/* also holds VALIDATE_BLEU_BATCH sources */
	int32	   *tgt_in;
	int32	   *labels;
	/* when set: asked between validation batches; true stops the validation */
	bool		(*stop) (void *arg);
	void	   *stop_arg;
} DataFeed;

/* Sentences decoded at once for BLEU. */
#define VALIDATE_BLEU_BATCH 32

/* Allocates feed's buffers for the batches of a and b (b may be NULL) and BLEU batches. */
void		data_feed_alloc(DataFeed *feed, const DataSet *a, const DataSet *b, int max_positions);

/*
 * Cross-entropy per target token (nats; no dropout, no label smoothing) of
 * every batch of d: -sum log P(target + EOS | source) / (target tokens +
 * EOS). NaN when d has no batches or feed->stop stopped it. ERROR on an
 * engine failure. Each batch's pairs count as done in this process's
 * reported operation (progress_add).
 */
double		dataset_loss(TfModel *engine, const DataSet *d, DataFeed *feed);

/*
 * Corpus BLEU (sacreBLEU defaults) of the beam-search translations of d's
 * first num_references sources against their target texts (sources longer
 * than max_positions - 1 tokens are cut; at most max_output_tokens tokens a
 * translation, 0: no such limit). NaN when there are none or
 * feed->stop stopped it. ERROR on an engine failure. Each sentence counts
 * as done in this process's reported operation (progress_add).
 */
double		dataset_bleu(TfModel *engine, const SpmModel *vocab, const DataSet *d, DataFeed *feed,
						 int beam_size, int max_output_tokens, int max_positions);

#endif
