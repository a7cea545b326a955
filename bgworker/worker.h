/*
 * worker.h - the training worker (bgworker/): launching job workers, their
 * entry points, and the launcher.
 */
#ifndef ATTENTION_WORKER_H
#define ATTENTION_WORKER_H

#include "postgres.h"

/* What a job's worker needs to know before it can read anything (bgw_extra). */
typedef struct WorkerArgs
{
	int64		job_id;
	Oid			database;
	Oid			role;
	TransactionId submitter_xid;
	bool		node;			/* a node of a job across machines (join_training) */
} WorkerArgs;

/*
 * Starts a training worker for job `job_id` that connects to this database
 * as role `role`: the job's coordinator, or with `node` a worker that claims
 * one of its nodes (attention.job_ranks). The worker first waits for the
 * calling transaction (which has an xid by then) to end, so it sees the
 * rows committed or not at all. Waits until the worker runs; records the
 * coordinator's pid in attention.jobs. Returns the pid. ERROR when no
 * worker slot is free. Inside SPI.
 */
int			launch_training_worker(int64 job_id, Oid role, bool node);

/* Entry points of the worker processes (bgw_function_name). */
PGDLLEXPORT void attention_training_worker_main(Datum arg);
PGDLLEXPORT void attention_launcher_main(Datum arg);
PGDLLEXPORT void attention_resume_worker_main(Datum arg);

/* Registers the launcher (from _PG_init under shared_preload_libraries). */
void		register_launcher(void);

#endif
