/*
 * workers.c - starting this library's background workers (workers.h): one
 * way to fill in a BackgroundWorker, the training job's worker
 * (launch_training_worker: a dynamic BGW_NEVER_RESTART worker per job that
 * connects as the role that submitted it, pg_cron's model) and the
 * launcher's registration.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "postmaster/bgworker.h"
#include "storage/latch.h"
#include "storage/procarray.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

#include "service_registry.h"
#include "wait_events.h"
#include "workers.h"

void
attention_worker_init(BackgroundWorker *worker, const char *function, const char *type, int restart_time,
					  Datum arg, bool notify)
{
	memset(worker, 0, sizeof(*worker));
	worker->bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker->bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker->bgw_restart_time = restart_time;
	strlcpy(worker->bgw_library_name, "attention", BGW_MAXLEN);
	strlcpy(worker->bgw_function_name, function, BGW_MAXLEN);
	strlcpy(worker->bgw_name, type, BGW_MAXLEN);
	strlcpy(worker->bgw_type, type, BGW_MAXLEN);
	worker->bgw_main_arg = arg;
	if (notify)
		worker->bgw_notify_pid = MyProcPid;
}

/*
 * When no worker slot is free: stops the idle translation services that
 * translations started and registers `worker` once the postmaster has freed
 * a slot (it does when it reaps the exited process; at most 10 s). False
 * when none was stopped or no slot came free.
 */
static bool
register_after_release(BackgroundWorker *worker, BackgroundWorkerHandle **handle)
{
	int			tries;

	if (service_release_idle() == 0)
		return false;
	for (tries = 0; tries < 1000; tries++)
	{
		if (RegisterDynamicBackgroundWorker(worker, handle))
			return true;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 10,
						 attention_wait_event(ATTENTION_WAIT_WORKER_SLOT));
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	return false;
}

StaticAssertDecl(sizeof(WorkerArgs) <= BGW_EXTRALEN, "WorkerArgs must fit in bgw_extra");

/* A connection string on its way to a node worker (WorkerArgs.coordinator). */
typedef struct Handover
{
	pg_atomic_uint32 read;		/* 1 once the worker has copied it */
	char		conninfo[FLEXIBLE_ARRAY_MEMBER];
} Handover;

char *
worker_coordinator(dsm_handle handle)
{
	dsm_segment *seg = dsm_attach(handle);
	Handover   *h;
	char	   *conninfo;

	if (seg == NULL)
		ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						errmsg("the connection string for the coordinator was gone before the worker read it")));
	h = dsm_segment_address(seg);
	conninfo = MemoryContextStrdup(TopMemoryContext, h->conninfo);
	pg_atomic_write_u32(&h->read, 1);
	dsm_detach(seg);
	return conninfo;
}

int
launch_training_worker(int64 job_id, Oid role, bool node, const char *coordinator)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	WorkerArgs	args;
	pid_t		pid;
	BgwHandleStatus status;
	dsm_segment *seg = NULL;
	Handover   *h = NULL;

	memset(&args, 0, sizeof(args));
	args.job_id = job_id;
	args.database = MyDatabaseId;
	args.role = role;
	args.submitter_xid = GetTopTransactionId();
	args.node = node;
	args.coordinator = DSM_HANDLE_INVALID;
	if (coordinator != NULL)
	{
		/* this backend holds the segment until the worker has read it (freed with the transaction on ERROR) */
		seg = dsm_create(offsetof(Handover, conninfo) + strlen(coordinator) + 1, 0);
		h = dsm_segment_address(seg);
		pg_atomic_init_u32(&h->read, 0);
		strcpy(h->conninfo, coordinator);
		args.coordinator = dsm_segment_handle(seg);
	}
	attention_worker_init(&worker, "attention_training_worker_main", "attention training", BGW_NEVER_RESTART,
						  Int64GetDatum(job_id), true);
	snprintf(worker.bgw_name, BGW_MAXLEN, "attention training job %lld", (long long) job_id);
	memcpy(worker.bgw_extra, &args, sizeof(args));

	if (!RegisterDynamicBackgroundWorker(&worker, &handle) && !register_after_release(&worker, &handle))
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
	/* wait until it is a server process with a slot, so training_jobs shows it alive (and has read h) */
	while (BackendPidGetProc(pid) == NULL || (h != NULL && pg_atomic_read_u32(&h->read) == 0))
	{
		if (GetBackgroundWorkerPid(handle, &pid) != BGWH_STARTED)
			ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE),
							errmsg("the training worker for job %lld exited while connecting", (long long) job_id),
							errhint("See the server log.")));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 1,
						 attention_wait_event(ATTENTION_WAIT_WORKER_START));
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	if (seg != NULL)
		dsm_detach(seg);
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

	attention_worker_init(&worker, "attention_launcher_main", "attention launcher", 10, (Datum) 0, false);
	RegisterBackgroundWorker(&worker);
}

void
worker_pin_search_path(void)
{
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
}
