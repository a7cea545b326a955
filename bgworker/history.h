/*
 * history.h - a training job's history in attention.training_history
 * (history.c): a row per step at which the worker wrote progress,
 * validated or checkpointed; one curve per job however often it resumes;
 * at most the job's keep_history rows.
 */
#ifndef ATTENTION_HISTORY_H
#define ATTENTION_HISTORY_H

#include "postgres.h"

/* One row's values; NaN for a value not measured (NULL). */
typedef struct HistoryRow
{
	int64		step;
	int32		epoch;
	int64		tokens_seen;
	double		train_loss;		/* nats per target token since the previous row */
	double		learning_rate;
	double		tokens_per_second;	/* since the previous row */
	double		valid_loss;		/* measured at this step, else NaN */
	double		valid_bleu;		/* measured at this step, else NaN */
} HistoryRow;

/*
 * At the start of a run from step `step`: deletes the rows an earlier run
 * of the job wrote past it (a resumed job repeats those steps). Returns
 * false, touching nothing, when the schema has no training_history (before
 * 0.3.0). Its own transaction.
 */
bool		history_start(int64 job_id, int64 step);

/*
 * Records *row for job_id: a later row of the same step replaces the
 * values it has (NaN keeps the earlier one). Beyond `keep` rows (0: no
 * bound) every second row without a validation goes (the first and last
 * stay), or every second row when fewer than three lack one. Inside the
 * caller's transaction; ERROR when a statement fails.
 */
void		history_record(int64 job_id, const HistoryRow *row, int32 keep);

#endif
