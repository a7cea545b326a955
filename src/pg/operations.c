/*
 * operations.c - the SQL functions a DBA watches the extension with:
 * progress_status and memory_status (the views attention.progress and
 * attention.memory) over progress.c's rows, statistics_status and
 * reset_statistics (the view attention.statistics) over statistics.c's.
 */
#include "postgres.h"

#include "catalog/pg_authid.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "progress.h"
#include "statistics.h"

PG_FUNCTION_INFO_V1(attention_progress_status);
PG_FUNCTION_INFO_V1(attention_memory_status);
PG_FUNCTION_INFO_V1(attention_statistics_status);
PG_FUNCTION_INFO_V1(attention_reset_statistics);

/*
 * progress_status() returns table (pid, database, role, operation, object,
 * done, total, unit, started_at, rate, seconds_left): one row per running
 * long operation of the server (progress.h). rate is units per second since
 * the start; seconds_left the units left at that rate (NULL without a
 * total or a unit done). Another role's row (without pg_read_all_stats)
 * shows pid, database, role and operation only.
 */
Datum
attention_progress_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ProgressRow *rows;
	int			n,
				i;
	TimestampTz now = GetCurrentTimestamp();

	InitMaterializedSRF(fcinfo, 0);
	progress_status(&rows, &n);
	for (i = 0; i < n; i++)
	{
		ProgressRow *r = &rows[i];
		Datum		values[11];
		bool		nulls[11] = {false};
		char	   *database = get_database_name(r->database);
		char	   *role = GetUserNameFromId(r->role, true);
		bool		hidden = r->done < 0;
		double		seconds = Max((now - r->started) / 1e6, 1e-6);
		double		rate = hidden ? 0 : r->done / seconds;

		values[0] = Int32GetDatum(r->pid);
		values[1] = database != NULL ? CStringGetTextDatum(database) : (Datum) 0;
		nulls[1] = database == NULL;
		values[2] = role != NULL ? CStringGetTextDatum(role) : (Datum) 0;
		nulls[2] = role == NULL;
		values[3] = CStringGetTextDatum(r->operation);
		values[4] = CStringGetTextDatum(r->object);
		nulls[4] = hidden;
		values[5] = Int64GetDatum(r->done);
		nulls[5] = hidden;
		values[6] = Int64GetDatum(r->total);
		nulls[6] = r->total < 0;
		values[7] = CStringGetTextDatum(r->unit);
		nulls[7] = hidden;
		values[8] = TimestampTzGetDatum(r->started);
		nulls[8] = hidden;		/* as pg_stat_activity hides another role's query_start */
		values[9] = Float8GetDatum(rate);
		nulls[9] = hidden;
		values[10] = Float8GetDatum(Max(r->total - r->done, 0) / rate);
		nulls[10] = hidden || r->total < 0 || r->done <= 0;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * memory_status() returns table (pid, database, model, device,
 * weight_bytes, engine_bytes): one row per model a process (session,
 * translation service, training worker) holds, as it last showed it
 * (progress_model_memory). model is NULL for another database's model
 * unless the caller has pg_read_all_stats (a model's name is readable only
 * in its own database's attention.models).
 */
Datum
attention_memory_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryRow  *rows;
	int			n,
				i;

	bool		all = has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);

	InitMaterializedSRF(fcinfo, 0);
	progress_memory_status(&rows, &n);
	for (i = 0; i < n; i++)
	{
		MemoryRow  *r = &rows[i];
		Datum		values[6];
		bool		nulls[6] = {false};
		char	   *database = get_database_name(r->database);

		values[0] = Int32GetDatum(r->pid);
		values[1] = database != NULL ? CStringGetTextDatum(database) : (Datum) 0;
		nulls[1] = database == NULL;
		values[2] = CStringGetTextDatum(r->model);
		nulls[2] = r->database != MyDatabaseId && !all;
		values[3] = CStringGetTextDatum(r->device);
		values[4] = Int64GetDatum(r->weight_bytes);
		values[5] = Int64GetDatum(r->engine_bytes);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * statistics_status() returns table (database, model_id, calls, sentences,
 * tokens_in, tokens_out, engine_seconds, errors): every model's counters
 * (statistics.h) in every database of the server.
 */
Datum
attention_statistics_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	StatisticsRow *rows;
	int			n,
				i;

	InitMaterializedSRF(fcinfo, 0);
	statistics_status(&rows, &n);
	for (i = 0; i < n; i++)
	{
		StatisticsRow *r = &rows[i];
		Datum		values[8];
		bool		nulls[8] = {false};

		values[0] = ObjectIdGetDatum(r->database);
		values[1] = Int32GetDatum(r->model_id);
		values[2] = Int64GetDatum(r->counts[STAT_CALLS]);
		values[3] = Int64GetDatum(r->counts[STAT_SENTENCES]);
		values[4] = Int64GetDatum(r->counts[STAT_TOKENS_IN]);
		values[5] = Int64GetDatum(r->counts[STAT_TOKENS_OUT]);
		values[6] = Float8GetDatum(r->counts[STAT_ENGINE_US] / 1e6);
		values[7] = Int64GetDatum(r->counts[STAT_ERRORS]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * reset_statistics(model text) returns void: zeroes model's counters in
 * this database. ERROR unless the caller is a member of the model's owner
 * role (require_model_owner).
 */
Datum
attention_reset_statistics(PG_FUNCTION_ARGS)
{
	int32		model_id;

	SPI_connect();
	model_id = require_model_owner(text_to_cstring(PG_GETARG_TEXT_PP(0)), "reset the statistics of");
	SPI_finish();
	statistics_reset(model_id);
	PG_RETURN_VOID();
}
