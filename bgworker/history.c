/*
 * history.c - the training worker's rows of attention.training_history
 * (history.h), written with SPI in the worker's transactions.
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"

#include "history.h"
#include "workers.h"

bool
history_start(int64 job_id, int64 step)
{
	bool		exists;
	bool		isnull;

	worker_begin();
	if (SPI_execute("SELECT pg_catalog.to_regclass('attention.training_history') IS NOT NULL", true, 1) !=
		SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not look up attention.training_history");
	exists = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (exists &&
		SPI_execute_with_args("DELETE FROM attention.training_history WHERE job_id = $1 AND step > $2", 2,
							  (Oid[]) {INT8OID, INT8OID}, (Datum[]) {Int64GetDatum(job_id), Int64GetDatum(step)},
							  NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not trim the training history of job %lld", (long long) job_id);
	worker_commit();
	return exists;
}

/* Thins the job's history to half its rows when it holds more than keep (history_record). */
static void
thin(int64 job_id, int32 keep)
{
	Datum		id = Int64GetDatum(job_id);
	bool		isnull;
	int64		total,
				plain;

	if (SPI_execute_with_args("SELECT count(*), count(*) FILTER (WHERE valid_loss IS NULL AND valid_bleu IS NULL) "
							  "FROM attention.training_history WHERE job_id = $1", 1, (Oid[]) {INT8OID}, &id, NULL,
							  false, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not count the training history of job %lld", (long long) job_id);
	total = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	plain = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	if (total <= keep)
		return;
	if (SPI_execute_with_args(psprintf("DELETE FROM attention.training_history h WHERE h.job_id = $1 AND h.step IN ("
									   "SELECT s.step FROM (SELECT t.step, row_number() OVER (ORDER BY t.step) AS n, "
									   "count(*) OVER () AS rows FROM attention.training_history t "
									   "WHERE t.job_id = $1 %s) s WHERE s.n %% 2 = 0 AND s.n < s.rows)",
									   plain >= 3 ? "AND t.valid_loss IS NULL AND t.valid_bleu IS NULL" : ""),
							  1, (Oid[]) {INT8OID}, &id, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not thin the training history of job %lld", (long long) job_id);
}

void
history_record(int64 job_id, const HistoryRow *row, int32 keep)
{
	const double measured[5] = {row->train_loss, row->learning_rate, row->tokens_per_second, row->valid_loss,
	row->valid_bleu};
	Datum		values[9];
	char		nulls[9] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	int			i;

	values[0] = Int64GetDatum(job_id);
	values[1] = Int64GetDatum(row->step);
	values[2] = Int32GetDatum(row->epoch);
	values[3] = Int64GetDatum(row->tokens_seen);
	for (i = 0; i < 5; i++)
	{
		values[4 + i] = Float8GetDatum(measured[i]);
		nulls[4 + i] = isnan(measured[i]) ? 'n' : ' ';
	}
	if (SPI_execute_with_args("INSERT INTO attention.training_history AS h (job_id, step, epoch, tokens_seen, "
							  "train_loss, learning_rate, tokens_per_second, valid_loss, valid_bleu) "
							  "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (job_id, step) DO UPDATE SET "
							  "recorded_at = now(), epoch = excluded.epoch, tokens_seen = excluded.tokens_seen, "
							  "train_loss = coalesce(excluded.train_loss, h.train_loss), "
							  "learning_rate = coalesce(excluded.learning_rate, h.learning_rate), "
							  "tokens_per_second = coalesce(excluded.tokens_per_second, h.tokens_per_second), "
							  "valid_loss = coalesce(excluded.valid_loss, h.valid_loss), "
							  "valid_bleu = coalesce(excluded.valid_bleu, h.valid_bleu)", 9,
							  (Oid[]) {INT8OID, INT8OID, INT4OID, INT8OID, FLOAT8OID, FLOAT8OID, FLOAT8OID, FLOAT8OID,
								  FLOAT8OID}, values, nulls, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not record the training history of job %lld", (long long) job_id);
	if (keep > 0)
		thin(job_id, keep);
}
