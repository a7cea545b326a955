/*
 * launcher.c - with shared_preload_libraries = 'attention', a launcher that
 * starts with the server (and again after a crash restart), visits every
 * database that has the extension, and resumes the training jobs that a
 * crash or restart interrupted (launch_training_worker, workers.c); then it
 * sleeps until shutdown (as pg_cron's launcher and the logical replication
 * launcher do), waking every minute and at a reload to write the
 * translation counters for a crash restart (statistics_flush).
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
#include "tcop/tcopprot.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"

#include "entry_points.h"
#include "rights.h"
#include "statistics.h"
#include "wait_events.h"
#include "workers.h"

/* A job interrupted more often than this (e.g. one that crashes the server) is left interrupted. */
#define MAX_RESTARTS 3

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
		attention_worker_init(&worker, "attention_resume_worker_main", "attention job resumer", BGW_NEVER_RESTART,
							  ObjectIdGetDatum(db), true);
		snprintf(worker.bgw_name, BGW_MAXLEN, "attention job resumer for database %u", db);
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
		/* the translation counters for a crash restart to read, and at a reload (tests use it) */
		statistics_flush();
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, STATISTICS_FLUSH_SECONDS * 1000L,
						 attention_wait_event(ATTENTION_WAIT_LAUNCHER));
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
	worker_pin_search_path();
	worker_begin();
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
			else
				why = job_entitlement(job_id, role);	/* rows of any version, whoever wrote them */
			if (why != NULL)
			{
				ereport(LOG, (errmsg("attention: training job %lld not resumed: %s", (long long) job_id, why)));
				SPI_execute_with_args("UPDATE attention.jobs SET status = 'interrupted', finished_at = now(), "
									  "error = $2 WHERE job_id = $1", 2, (Oid[]) {INT8OID, TEXTOID},
									  (Datum[]) {Int64GetDatum(job_id), CStringGetTextDatum(why)}, NULL, false, 0);
				continue;
			}
			SPI_execute_with_args("UPDATE attention.jobs SET status = 'queued', worker_pid = NULL, "
								  "restarts = restarts + 1 WHERE job_id = $1", 1, (Oid[]) {INT8OID},
								  (Datum[]) {Int64GetDatum(job_id)}, NULL, false, 0);
			launch_training_worker(job_id, role, false, NULL);
			ereport(LOG, (errmsg("attention: resumed training job %lld after a restart", (long long) job_id)));
		}
	}
	worker_commit();
	pgstat_report_activity(STATE_IDLE, NULL);
	proc_exit(0);
}
