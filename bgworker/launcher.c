/*
 * launcher.c - starting training workers: launch_training_worker (a
 * dynamic BGW_NEVER_RESTART worker per job that connects as the role that
 * submitted it, pg_cron's model), and, with shared_preload_libraries =
 * 'attention', a launcher that starts with the server (and again after a
 * crash restart), visits every database that has the extension, and
 * resumes the training jobs that a crash or restart interrupted; then it
 * sleeps until shutdown (as pg_cron's launcher and the logical replication
 * launcher do).
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/procarray.h"
#include "tcop/tcopprot.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"

#include "worker.h"

/* A job interrupted more often than this (e.g. one that crashes the server) is left interrupted. */
#define MAX_RESTARTS 3

StaticAssertDecl(sizeof(WorkerArgs) <= BGW_EXTRALEN, "WorkerArgs must fit in bgw_extra");

int
launch_training_worker(int64 job_id, Oid role, bool node)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	WorkerArgs	args;
	pid_t		pid;
	BgwHandleStatus status;

	memset(&worker, 0, sizeof(worker));
	memset(&args, 0, sizeof(args));
	args.job_id = job_id;
	args.database = MyDatabaseId;
	args.role = role;
	args.submitter_xid = GetTopTransactionId();
	args.node = node;
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "attention", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "attention_training_worker_main", BGW_MAXLEN);
	snprintf(worker.bgw_name, BGW_MAXLEN, "attention training job %lld", (long long) job_id);
	strlcpy(worker.bgw_type, "attention training", BGW_MAXLEN);
	worker.bgw_main_arg = Int64GetDatum(job_id);
	memcpy(worker.bgw_extra, &args, sizeof(args));
	worker.bgw_notify_pid = MyProcPid;

	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
		ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_RESOURCES),
						errmsg("could not start a training worker for job %lld: no background worker slot is free",
							   (long long) job_id),
						errhint("Raise max_worker_processes (now %d) or wait for a job to finish.",
								max_worker_processes)));
	status = WaitForBackgroundWorkerStartup(handle, &pid);
	if (status != BGWH_STARTED)
		ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_RESOURCES),
						errmsg("the training worker for job %lld did not start", (long long) job_id),
						errhint("See the server log.")));
	/* wait until it is a server process with a slot, so training_jobs shows it alive */
	while (BackendPidGetProc(pid) == NULL)
	{
		if (GetBackgroundWorkerPid(handle, &pid) != BGWH_STARTED)
			ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE),
							errmsg("the training worker for job %lld exited while connecting", (long long) job_id),
							errhint("See the server log.")));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 1, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	if (!node &&
		SPI_execute_with_args("UPDATE attention.jobs SET worker_pid = $2 WHERE job_id = $1", 2,
							  (Oid[]) {INT8OID, INT4OID}, (Datum[]) {Int64GetDatum(job_id), Int32GetDatum(pid)},
							  NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not record the worker of job %lld", (long long) job_id);
	return (int) pid;
}

void
register_launcher(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 10;
	strlcpy(worker.bgw_library_name, "attention", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "attention_launcher_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "attention launcher", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "attention launcher", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}

/* Databases that accept connections (a heap scan of the shared catalog pg_database). */
static List *
database_list(void)
{
	List	   *dbs = NIL;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;
	MemoryContext outer = CurrentMemoryContext;

	StartTransactionCommand();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while (HeapTupleIsValid(tup = heap_getnext(scan, ForwardScanDirection)))
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tup);
		MemoryContext old;

		if (!db->datallowconn || db->datistemplate)
			continue;
		old = MemoryContextSwitchTo(outer);
		dbs = lappend_oid(dbs, db->oid);
		MemoryContextSwitchTo(old);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
	MemoryContextSwitchTo(outer);
	return dbs;
}

void
attention_launcher_main(Datum arg)
{
	List	   *dbs;
	ListCell   *lc;

	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	dbs = database_list();
	foreach(lc, dbs)
	{
		BackgroundWorker worker;
		BackgroundWorkerHandle *handle;
		Oid			db = lfirst_oid(lc);

		CHECK_FOR_INTERRUPTS();
		memset(&worker, 0, sizeof(worker));
		worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
		worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
		worker.bgw_restart_time = BGW_NEVER_RESTART;
		strlcpy(worker.bgw_library_name, "attention", BGW_MAXLEN);
		strlcpy(worker.bgw_function_name, "attention_resume_worker_main", BGW_MAXLEN);
		snprintf(worker.bgw_name, BGW_MAXLEN, "attention job resumer for database %u", db);
		strlcpy(worker.bgw_type, "attention job resumer", BGW_MAXLEN);
		worker.bgw_main_arg = ObjectIdGetDatum(db);
		worker.bgw_notify_pid = MyProcPid;
		if (!RegisterDynamicBackgroundWorker(&worker, &handle))
		{
			ereport(WARNING, (errmsg("attention launcher: no background worker slot to resume jobs in database %u", db),
							  errhint("Raise max_worker_processes.")));
			continue;
		}
		(void) WaitForBackgroundWorkerShutdown(handle);
	}
	pgstat_report_activity(STATE_IDLE, NULL);
	for (;;)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_EXIT_ON_PM_DEATH, -1L, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
	}
}

void
attention_resume_worker_main(Datum arg)
{
	Oid			db = DatumGetObjectId(arg);
	uint64		r,
				n;
	SPITupleTable *jobs;

	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(db, InvalidOid, 0);
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "resuming interrupted training jobs");
	if (OidIsValid(get_extension_oid("attention", true)))
	{
		if (SPI_execute("SELECT job_id, submitted_by, restarts FROM attention.jobs "
						"WHERE status IN ('queued', 'running') "
						"AND (worker_pid IS NULL OR NOT attention.worker_alive(worker_pid)) "
						"ORDER BY job_id FOR UPDATE", false, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not read attention.jobs");
		jobs = SPI_tuptable;
		n = SPI_processed;
		for (r = 0; r < n; r++)
		{
			bool		isnull;
			int64		job_id = DatumGetInt64(SPI_getbinval(jobs->vals[r], jobs->tupdesc, 1, &isnull));
			char	   *role_name = SPI_getvalue(jobs->vals[r], jobs->tupdesc, 2);
			int32		restarts = DatumGetInt32(SPI_getbinval(jobs->vals[r], jobs->tupdesc, 3, &isnull));
			Oid			role = get_role_oid(role_name, true);
			const char *why = NULL;

			if (restarts >= MAX_RESTARTS)
				why = "the training worker exited without finishing too often; resume it with attention.resume_training";
			else if (!OidIsValid(role))
				why = "the role that submitted the job no longer exists";
			if (why != NULL)
			{
				SPI_execute_with_args("UPDATE attention.jobs SET status = 'interrupted', finished_at = now(), "
									  "error = $2 WHERE job_id = $1", 2, (Oid[]) {INT8OID, TEXTOID},
									  (Datum[]) {Int64GetDatum(job_id), CStringGetTextDatum(why)}, NULL, false, 0);
				continue;
			}
			SPI_execute_with_args("UPDATE attention.jobs SET status = 'queued', worker_pid = NULL, "
								  "restarts = restarts + 1 WHERE job_id = $1", 1, (Oid[]) {INT8OID},
								  (Datum[]) {Int64GetDatum(job_id)}, NULL, false, 0);
			launch_training_worker(job_id, role, false);
			ereport(LOG, (errmsg("attention: resumed training job %lld after a restart", (long long) job_id)));
		}
	}
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	proc_exit(0);
}
