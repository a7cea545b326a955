/*
 * worker.h - the training worker (bgworker/): job options, the data feed,
 * launching workers and the launcher.
 */
#ifndef ATTENTION_WORKER_H
#define ATTENTION_WORKER_H

#include "postgres.h"

#include "utils/jsonb.h"

#include "spm.h"
#include "transformer.h"

/* Options of a training job (attention.train's options jsonb; jobs.c). */
typedef struct TrainOptions
{
	int64		max_steps;		/* 0: no limit */
	int32		max_epochs;		/* 0: no limit */
	double		max_minutes;	/* training time, across resumes; 0: no limit */
	int32		batch_tokens;	/* per side, padding included */
	int32		warmup_steps;
	double		learning_rate_scale;
	double		label_smoothing;	/* < 0: the model's */
	double		dropout;		/* < 0: the model's */
	int32		accumulate_batches;
	int64		checkpoint_every_steps; /* 0: never by steps */
	double		checkpoint_every_minutes;	/* 0: never by time */
	int32		keep_checkpoints;	/* trained checkpoints kept per job; 0: all */
	int64		validate_every_steps;	/* 0: at checkpoints only */
	int32		validation_bleu_sentences;	/* 0: no BLEU */
	int64		seed;
	char		device[32];		/* "cpu", "cuda" or "cuda:N" */
	int32		threads;		/* 0: attention.num_threads */
} TrainOptions;

/*
 * Parses and validates options (a jsonb object) over the defaults; ERROR
 * (invalid_parameter_value) naming an unknown key, a wrong type or a value
 * out of range. When `only_resumable`, keys that would change the
 * training's math (batch_tokens, seed, ...) are refused.
 */
void		train_options_parse(Jsonb *options, bool only_resumable, TrainOptions *o);

/* The options as a jsonb object with every key (what jobs.options stores). */
Jsonb	   *train_options_to_jsonb(const TrainOptions *o);

/* What a job's worker needs to know before it can read anything (bgw_extra). */
typedef struct WorkerArgs
{
	int64		job_id;
	Oid			database;
	Oid			role;
	TransactionId submitter_xid;
} WorkerArgs;

/*
 * Starts a training worker for job `job_id` that connects to this database
 * as role `role`. The worker first waits for the calling transaction (which
 * must have written the job row, so it has an xid) to end, so it sees the
 * row committed or not at all. Waits until the worker runs and records its
 * pid in attention.jobs. ERROR when no worker slot is free. Inside SPI.
 */
void		launch_training_worker(int64 job_id, Oid role);

/* Entry points of the worker processes (bgw_function_name). */
PGDLLEXPORT void attention_training_worker_main(Datum arg);
PGDLLEXPORT void attention_launcher_main(Datum arg);
PGDLLEXPORT void attention_resume_worker_main(Datum arg);

/* Registers the launcher (from _PG_init under shared_preload_libraries). */
void		register_launcher(void);

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

/* A split of a corpus, encoded and batched (data.c). */
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
 * Reads split `split` of corpus `corpus_id` (in pair_id order, with the
 * current role's privileges), encodes it with `vocab`, drops pairs that
 * exceed max_positions, sorts by length and groups into batches of at most
 * batch_tokens ids per side (padding included). Keeps the target text and
 * ids of the first `references` pairs in corpus order. Memory in the
 * current context. Inside SPI and a transaction.
 */
void		data_load(DataSet *d, int32 corpus_id, const char *split, const SpmModel *vocab,
					  int max_positions, int batch_tokens, int references);

/* Order of the batches in epoch `epoch`: a permutation drawn from (seed, epoch). */
void		data_epoch_order(const DataSet *d, int64 seed, int64 epoch, int32 *order);

/*
 * Fills a padded engine batch from batch `b` into src, tgt_in and labels
 * (each at least max_batch_ids ints).
 */
void		data_fill(const DataSet *d, const DataBatch *b, int pad_id, int bos_id, int eos_id,
					  int32 *src, int32 *tgt_in, int32 *labels, TfBatch *batch);

/* Special ids of a vocabulary and host buffers for padded batches (validate.c). */
typedef struct DataFeed
{
	int			pad_id,
				bos_id,
				eos_id;
	int32	   *src;			/* also holds VALIDATE_BLEU_BATCH sources */
	int32	   *tgt_in;
	int32	   *labels;
} DataFeed;

/* Sentences decoded at once for BLEU. */
#define VALIDATE_BLEU_BATCH 32

/* Allocates feed's buffers for the batches of a and b (b may be NULL) and BLEU batches. */
void		data_feed_alloc(DataFeed *feed, const DataSet *a, const DataSet *b, int max_positions);

/*
 * Cross-entropy per target token (nats; no dropout, no label smoothing) of
 * every batch of d: -sum log P(target + EOS | source) / (target tokens +
 * EOS). NaN when d has no batches. ERROR on an engine failure.
 */
double		dataset_loss(TfModel *engine, const DataSet *d, DataFeed *feed);

/*
 * Corpus BLEU (sacreBLEU defaults) of the beam-search translations of d's
 * first num_references sources against their target texts (sources longer
 * than max_positions - 1 tokens are cut). NaN when there are none. ERROR
 * on an engine failure.
 */
double		dataset_bleu(TfModel *engine, const SpmModel *vocab, const DataSet *d, DataFeed *feed,
						 int beam_size, int max_positions);

#endif
