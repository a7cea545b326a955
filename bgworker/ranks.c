/*
 * ranks.c - the hand-over of a training job's ranks between machines
 * (ranks.h) through attention.job_ranks: the coordinator publishes one row
 * per node with its rank range and the communicator id; each node's worker
 * claims one with FOR UPDATE SKIP LOCKED, so two workers never take the
 * same node.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "ranks.h"
#include "remote.h"
#include "wait_events.h"
#include "workers.h"

/* How long the coordinator waits for the nodes, and a node for the coordinator's rows. */
#define RANKS_WAIT_SECONDS 600
/* Polling interval of those waits. */
#define RANKS_POLL_MS 200

/* The server attention.job_ranks is read and written on for this process (ranks_use; NULL: this one). */
static Remote *remote;

void
ranks_use(Remote *r)
{
	remote = r;
}

/* Sleeps one polling interval on the latch; false once the wait has lasted RANKS_WAIT_SECONDS. */
static bool
poll_wait(instr_time start)
{
	instr_time	now;

	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, RANKS_POLL_MS,
					 attention_wait_event(ATTENTION_WAIT_RANK_RENDEZVOUS));
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
	if (ShutdownRequestPending)
		proc_exit(1);			/* a node worker's SIGTERM (run_node) before it has a node */
	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(now, start);
	return INSTR_TIME_GET_DOUBLE(now) < RANKS_WAIT_SECONDS;
}

void
ranks_publish(int64 job_id, int nodes, int local, TfWorld *world)
{
	char		err[TF_ERRLEN];
	bytea	   *id = palloc(VARHDRSZ + TF_UNIQUE_ID_BYTES);

	if (tf_cuda_unique_id(VARDATA(id), err, sizeof(err)) != TF_OK)
		ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						errmsg("training job %lld: could not make a communicator id for %d nodes: %s",
							   (long long) job_id, nodes, err)));
	SET_VARSIZE(id, VARHDRSZ + TF_UNIQUE_ID_BYTES);
	worker_begin();
	if (SPI_execute_with_args("DELETE FROM attention.job_ranks WHERE job_id = $1", 1, (Oid[]) {INT8OID},
							  (Datum[]) {Int64GetDatum(job_id)}, NULL, false, 0) != SPI_OK_DELETE ||
		SPI_execute_with_args("INSERT INTO attention.job_ranks (job_id, node, first_rank, ranks, world_ranks, "
							  "unique_id, state, worker_pid, claimed_at) "
							  "SELECT $1, n, n * $3, $3, $2 * $3, $4, CASE WHEN n = 0 THEN 'claimed' ELSE 'waiting' END, "
							  "CASE WHEN n = 0 THEN $5 END, CASE WHEN n = 0 THEN now() END "
							  "FROM generate_series(0, $2 - 1) n", 5,
							  (Oid[]) {INT8OID, INT4OID, INT4OID, BYTEAOID, INT4OID},
							  (Datum[]) {Int64GetDatum(job_id), Int32GetDatum(nodes), Int32GetDatum(local),
								  PointerGetDatum(id), Int32GetDatum(MyProcPid)}, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not publish the ranks of training job %lld", (long long) job_id);
	worker_commit();
	world->first_rank = 0;
	world->ranks = nodes * local;
	memcpy(world->id, VARDATA(id), TF_UNIQUE_ID_BYTES);
}

bool
ranks_wait(int64 job_id, int nodes)
{
	instr_time	start;

	INSTR_TIME_SET_CURRENT(start);
	for (;;)
	{
		MemoryContext outer = CurrentMemoryContext;
		bool		isnull;
		int64		joined;
		bool		cancel;
		char	   *failed_node = NULL,
				   *failed_error = NULL;

		worker_begin();
		if (SPI_execute_with_args("SELECT count(*) FILTER (WHERE r.state = 'joined'), "
								  "(SELECT j.cancel_requested FROM attention.jobs j WHERE j.job_id = $1), "
								  "(array_agg(r.node ORDER BY r.node) FILTER (WHERE r.state = 'failed'))[1], "
								  "(array_agg(r.error ORDER BY r.node) FILTER (WHERE r.state = 'failed'))[1] "
								  "FROM attention.job_ranks r WHERE r.job_id = $1", 1, (Oid[]) {INT8OID},
								  (Datum[]) {Int64GetDatum(job_id)}, NULL, true, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not read the ranks of training job %lld", (long long) job_id);
		joined = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		cancel = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
		if (SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3) != NULL)
		{
			/* copies that outlive SPI and the transaction */
			failed_node = MemoryContextStrdup(outer, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3));
			failed_error = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4);
			failed_error = MemoryContextStrdup(outer, failed_error != NULL ? failed_error : "no message");
		}
		worker_commit();
		if (failed_node != NULL)
			ranks_node_failed(job_id, failed_node, failed_error);
		if (joined == nodes - 1)
			return true;
		if (cancel)
			return false;
		if (!poll_wait(start))
			ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE),
							errmsg("training job %lld: %lld of %d nodes joined within %d seconds", (long long) job_id,
								   (long long) joined + 1, nodes, RANKS_WAIT_SECONDS),
							errhint("Start a worker on each other machine with attention.join_training(%lld).",
									(long long) job_id)));
	}
}

void
ranks_node_failed(int64 job_id, const char *node, const char *error)
{
	ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE),
					errmsg("training job %lld: node %s could not join: %s", (long long) job_id, node, error)));
}

bool
ranks_abandon(void *arg)
{
	RanksWatch *w = arg;
	MemoryContext outer = CurrentMemoryContext;
	volatile bool abandon = false;

	if (InterruptPending || ShutdownRequestPending)
		return true;
	PG_TRY();
	{
		bool		isnull;
		char	   *node;

		Rows		rows;

		worker_begin();
		rows_query(remote, &rows, "SELECT (SELECT j.status NOT IN ('queued', 'running') OR j.cancel_requested "
				   "FROM attention.jobs j WHERE j.job_id = $1), "
				   "(array_agg(r.node ORDER BY r.node) FILTER (WHERE r.state = 'failed' AND r.node <> $2))[1], "
				   "(array_agg(r.error ORDER BY r.node) FILTER (WHERE r.state = 'failed' AND r.node <> $2))[1] "
				   "FROM attention.job_ranks r WHERE r.job_id = $1", 2, (Oid[]) {INT8OID, INT4OID},
				   (Datum[]) {Int64GetDatum(w->job_id), Int32GetDatum(w->node)}, NULL, true, 1);
		w->stopped = DatumGetBool(SPI_getbinval(rows.vals[0], rows.desc, 1, &isnull));
		w->stopped = w->stopped || isnull;
		node = SPI_getvalue(rows.vals[0], rows.desc, 2);
		if (node != NULL)
		{
			char	   *error = SPI_getvalue(rows.vals[0], rows.desc, 3);

			w->failed_node = MemoryContextStrdup(outer, node);
			w->failed_error = MemoryContextStrdup(outer, error != NULL ? error : "no message");
		}
		worker_commit();
		abandon = w->stopped || w->failed_node != NULL;
	}
	PG_CATCH();
	{
		/* the worker's own error handling reports what is wrong with the database */
		MemoryContextSwitchTo(outer);
		FlushErrorState();
		AbortCurrentTransaction();
		abandon = true;
	}
	PG_END_TRY();
	return abandon;
}

int
ranks_claim(int64 job_id, int local, TfWorld *world)
{
	instr_time	start;

	INSTR_TIME_SET_CURRENT(start);
	for (;;)
	{
		bool		isnull;
		bool		live;
		Rows		rows;

		worker_begin();
		/* only a node of this machine's rank count: a claim another server commits is never taken back */
		rows_query(remote, &rows, "UPDATE attention.job_ranks SET state = 'claimed', worker_pid = $2, "
				   "claimed_at = now() WHERE (job_id, node) = (SELECT job_id, node FROM attention.job_ranks "
				   "WHERE job_id = $1 AND state = 'waiting' AND ranks = $3 ORDER BY node LIMIT 1 "
				   "FOR UPDATE SKIP LOCKED) RETURNING node, first_rank, world_ranks, unique_id", 3,
				   (Oid[]) {INT8OID, INT4OID, INT4OID},
				   (Datum[]) {Int64GetDatum(job_id), Int32GetDatum(MyProcPid), Int32GetDatum(local)}, NULL, false, 1);
		if (rows.n == 1)
		{
			HeapTuple	tup = rows.vals[0];
			TupleDesc	desc = rows.desc;
			int			node = DatumGetInt32(SPI_getbinval(tup, desc, 1, &isnull));
			bytea	   *id = DatumGetByteaPP(SPI_getbinval(tup, desc, 4, &isnull));

			world->first_rank = DatumGetInt32(SPI_getbinval(tup, desc, 2, &isnull));
			world->ranks = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
			if (VARSIZE_ANY_EXHDR(id) != TF_UNIQUE_ID_BYTES)
				elog(ERROR, "the communicator id of training job %lld has %zu bytes", (long long) job_id,
					 VARSIZE_ANY_EXHDR(id));
			memcpy(world->id, VARDATA_ANY(id), TF_UNIQUE_ID_BYTES);
			worker_commit();
			return node;
		}
		rows_query(remote, &rows, "SELECT status IN ('queued', 'running'), (SELECT min(ranks) FROM "
				   "attention.job_ranks WHERE job_id = $1 AND state = 'waiting') FROM attention.jobs "
				   "WHERE job_id = $1", 1, (Oid[]) {INT8OID}, (Datum[]) {Int64GetDatum(job_id)}, NULL, true, 1);
		live = rows.n == 1 && DatumGetBool(SPI_getbinval(rows.vals[0], rows.desc, 1, &isnull));
		if (live)
		{
			int			ranks = DatumGetInt32(SPI_getbinval(rows.vals[0], rows.desc, 2, &isnull));

			if (!isnull && ranks != local)
				ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
								errmsg("training job %lld: its nodes have %d ranks, but this machine's devices give %d",
									   (long long) job_id, ranks, local),
								errhint("Every node of a job needs the same number of devices.")));
		}
		worker_commit();
		if (!live)
			ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
							errmsg("training job %lld stopped before a node could be claimed", (long long) job_id)));
		if (!poll_wait(start))
			ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
							errmsg("training job %lld published no waiting node within %d seconds", (long long) job_id,
								   RANKS_WAIT_SECONDS),
							errhint("Every node of the job may be claimed already.")));
	}
}

void
ranks_set_state(int64 job_id, int node, const char *state, int64 step, const char *error)
{
	Rows		rows;

	worker_begin();
	/* only this worker's claim (rows published again since belong to others); a failure's first reason stays */
	rows_query(remote, &rows, "UPDATE attention.job_ranks SET state = $3, error = $4, step = coalesce($6, step), "
							  "heartbeat_at = CASE WHEN $6 IS NULL AND $3 <> 'failed' THEN heartbeat_at ELSE now() END "
							  "WHERE job_id = $1 AND node = $2 AND worker_pid = $5 AND state <> 'failed'", 6,
							  (Oid[]) {INT8OID, INT4OID, TEXTOID, TEXTOID, INT4OID, INT8OID},
							  (Datum[]) {Int64GetDatum(job_id), Int32GetDatum(node), CStringGetTextDatum(state),
								  error != NULL ? CStringGetTextDatum(error) : (Datum) 0, Int32GetDatum(MyProcPid),
								  Int64GetDatum(step)},
							  (char[]) {' ', ' ', ' ', error != NULL ? ' ' : 'n', ' ', step >= 0 ? ' ' : 'n'},
							  false, 0);
	worker_commit();
}

int64
ranks_step(int64 job_id, int node)
{
	int64		step = -1;
	bool		isnull = true;
	Rows		rows;

	worker_begin();
	rows_query(remote, &rows, "SELECT step FROM attention.job_ranks WHERE job_id = $1 AND node = $2", 2,
			   (Oid[]) {INT8OID, INT4OID}, (Datum[]) {Int64GetDatum(job_id), Int32GetDatum(node)}, NULL, true, 1);
	if (rows.n == 1)
		step = DatumGetInt64(SPI_getbinval(rows.vals[0], rows.desc, 1, &isnull));
	worker_commit();
	return isnull ? -1 : step;
}

int
ranks_failure(int64 job_id, char **error)
{
	instr_time	start;
	MemoryContext outer = CurrentMemoryContext;

	INSTR_TIME_SET_CURRENT(start);
	for (;;)
	{
		instr_time	now;
		int			node = -1;
		bool		isnull;

		worker_begin();
		/* the failed node that failed first (a failure stamps heartbeat_at); else the one heard from longest ago */
		if (SPI_execute_with_args("SELECT node, state = 'failed', error, "
								  "extract(epoch FROM now() - heartbeat_at)::float8 FROM attention.job_ranks "
								  "WHERE job_id = $1 AND node > 0 "
								  "ORDER BY state = 'failed' DESC, heartbeat_at NULLS FIRST, node LIMIT 1", 1,
								  (Oid[]) {INT8OID}, (Datum[]) {Int64GetDatum(job_id)}, NULL, true,
								  1) != SPI_OK_SELECT)
			elog(ERROR, "could not read the ranks of training job %lld", (long long) job_id);
		INSTR_TIME_SET_CURRENT(now);
		INSTR_TIME_SUBTRACT(now, start);
		if (SPI_processed == 1)
		{
			HeapTuple	tup = SPI_tuptable->vals[0];
			TupleDesc	desc = SPI_tuptable->tupdesc;
			bool		failed = DatumGetBool(SPI_getbinval(tup, desc, 2, &isnull));
			double		age;

			if (failed || INSTR_TIME_GET_DOUBLE(now) >= RANKS_REPORT_SECONDS)
			{
				node = DatumGetInt32(SPI_getbinval(tup, desc, 1, &isnull));
				if (failed)
					*error = MemoryContextStrdup(outer, SPI_getvalue(tup, desc, 3) != NULL ?
												 SPI_getvalue(tup, desc, 3) : "no message");
				else
				{
					age = DatumGetFloat8(SPI_getbinval(tup, desc, 4, &isnull));
					*error = isnull ? MemoryContextStrdup(outer, psprintf("no node recorded a failure within %d s; "
																		  "node %d never sent a heartbeat",
																		  RANKS_REPORT_SECONDS, node)) :
						MemoryContextStrdup(outer, psprintf("no node recorded a failure within %d s; node %d's last "
															"heartbeat was %.1f s ago", RANKS_REPORT_SECONDS,
															node, age));
					node = -1;
				}
				worker_commit();
				return node;
			}
		}
		else if (INSTR_TIME_GET_DOUBLE(now) >= RANKS_REPORT_SECONDS)
		{
			worker_commit();
			*error = MemoryContextStrdup(outer, "the job has no other node");
			return -1;
		}
		worker_commit();
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, RANKS_POLL_MS,
						 attention_wait_event(ATTENTION_WAIT_RANK_FAILURE));
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

void
ranks_silence_init(RanksSilence *w, int64 job_id, int nodes)
{
	w->job_id = job_id;
	w->nodes = nodes;
	w->beat = palloc0(nodes * sizeof(TimestampTz));
	w->changed = palloc0(nodes * sizeof(double));
	w->next_poll = 0;
	w->silent_node = -1;
	w->silent_seconds = 0;
}

bool
ranks_silent(RanksSilence *w)
{
	MemoryContext outer = CurrentMemoryContext;
	double		now = worker_seconds();

	uint32		holdoff = InterruptHoldoffCount;

	if (now < w->next_poll)
		return false;
	w->next_poll = now + 1.0;
	/* called mid-step: a pending SIGTERM or cancel waits for the vote after the step (run_job) */
	HOLD_INTERRUPTS();
	PG_TRY();
	{
		worker_begin();
		if (SPI_execute_with_args("SELECT node, heartbeat_at FROM attention.job_ranks WHERE job_id = $1 AND node > 0 "
								  "AND node < $2 AND state = 'training' AND heartbeat_at IS NOT NULL", 2,
								  (Oid[]) {INT8OID, INT4OID},
								  (Datum[]) {Int64GetDatum(w->job_id), Int32GetDatum(w->nodes)}, NULL, true,
								  0) != SPI_OK_SELECT)
			elog(ERROR, "could not read the ranks of training job %lld", (long long) w->job_id);
		for (uint64 r = 0; r < SPI_processed; r++)
		{
			bool		isnull;
			int			node = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &isnull));
			TimestampTz beat = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 2,
																 &isnull));

			if (w->changed[node] == 0 || beat != w->beat[node])
			{
				w->beat[node] = beat;
				w->changed[node] = now;
			}
			else if (now - w->changed[node] >= RANKS_SILENT_SECONDS && w->silent_node < 0)
			{
				w->silent_node = node;
				w->silent_seconds = now - w->changed[node];
			}
		}
		worker_commit();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(outer);
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
	}
	PG_END_TRY();
	InterruptHoldoffCount = holdoff;	/* an ERROR reset it to 0 */
	MemoryContextSwitchTo(outer);
	return w->silent_node >= 0;
}

bool
ranks_heartbeat(int64 job_id, int node, int64 step)
{
	MemoryContext outer = CurrentMemoryContext;
	uint32		holdoff = InterruptHoldoffCount;
	volatile bool ok = true;

	/* called mid-step: a pending SIGINT waits for the step's end (run_node) */
	HOLD_INTERRUPTS();
	PG_TRY();
	{
		ranks_set_state(job_id, node, "training", step, NULL);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(outer);
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
		ok = false;
	}
	PG_END_TRY();
	InterruptHoldoffCount = holdoff;	/* an ERROR reset it to 0 */
	MemoryContextSwitchTo(outer);
	return ok;
}
