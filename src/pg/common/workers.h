/*
 * workers.h - starting this library's background workers, and the
 * transactions they run (workers.c). The SQL functions start workers
 * through these functions only; the workers' code is in bgworker/, named by
 * its entry points (bgw_function_name), never included here.
 */
#ifndef ATTENTION_WORKERS_H
#define ATTENTION_WORKERS_H

#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "pgstat.h"
#include "portability/instr_time.h"
#include "postmaster/bgworker.h"
#include "storage/dsm.h"
#include "utils/snapmgr.h"

/* What a job's worker needs to know before it can read anything (bgw_extra). */
typedef struct WorkerArgs
{
	int64		job_id;
	Oid			database;
	Oid			role;
	TransactionId submitter_xid;
	bool		node;			/* a node of a job across machines (join_training) */
	dsm_handle	coordinator;	/* a node on another server: its connection string (worker_coordinator) */
} WorkerArgs;

/*
 * Fills *worker for a process of this library that connects to a database:
 * entry point `function` (bgw_function_name), backend type `type` (also its
 * name until the caller sets bgw_name), started once recovery has finished,
 * restarted after `restart_time` seconds (BGW_NEVER_RESTART: never), main
 * argument `arg`, and, when `notify`, this backend told of its start and
 * exit (dynamic workers).
 */
void		attention_worker_init(BackgroundWorker *worker, const char *function, const char *type,
								  int restart_time, Datum arg, bool notify);

/*
 * Starts a training worker for job `job_id` that connects to this database
 * as role `role`: the job's coordinator, or with `node` a worker that claims
 * one of its nodes (attention.job_ranks). The worker first waits for the
 * calling transaction (which has an xid by then) to end, so it sees the
 * rows committed or not at all. Waits until the worker runs; records the
 * coordinator's pid in attention.jobs. Returns the pid. When no worker
 * slot is free, idle translation services that translations started are
 * stopped to free theirs (service_release_idle); ERROR when that frees
 * none. Inside SPI.
 */
int			launch_training_worker(int64 job_id, Oid role, bool node, const char *coordinator);

/*
 * In the training worker: the connection string WorkerArgs.coordinator
 * hands over (palloc'd in TopMemoryContext); tells the launching backend it
 * was read, so it may let the segment go.
 */
char	   *worker_coordinator(dsm_handle handle);

/*
 * Pins search_path to pg_catalog, pg_temp for the rest of a worker's life,
 * over the database's and the role's settings (PGC_S_OVERRIDE): a worker that
 * runs as a superuser (the resumer, a translation service) or as a job's
 * submitter must run nothing a database's or a model's owner put on its path
 * (docs/security.md). Call right after connecting.
 */
void		worker_pin_search_path(void);

/* Registers the launcher (from _PG_init under shared_preload_libraries). */
void		register_launcher(void);

/* Starts a transaction with SPI and a snapshot (workers run outside any between them). */
static inline void
worker_begin(void)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
}

/* Seconds on PostgreSQL's monotonic instrumentation clock (intervals only). */
static inline double
worker_seconds(void)
{
	instr_time	now;

	INSTR_TIME_SET_CURRENT(now);
	return INSTR_TIME_GET_DOUBLE(now);
}

/* Commits what worker_begin() started. */
static inline void
worker_commit(void)
{
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(false);
}

#endif
