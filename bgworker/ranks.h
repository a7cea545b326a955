/*
 * ranks.h - the hand-over of a job's ranks between machines through
 * attention.job_ranks (ranks.c).
 *
 * A job with "nodes": K > 1 has K workers, one per machine: the coordinator
 * (the worker attention.train started) publishes K rows, one per node, with
 * its rank range and one NCCL communicator id, and claims node 0; the worker
 * that attention.join_training starts on each other machine claims the next
 * waiting row, marks it joined and joins the communicator with the id it
 * read; the coordinator joins once every node has.
 */
#ifndef ATTENTION_RANKS_H
#define ATTENTION_RANKS_H

#include "postgres.h"

#include "datatype/timestamp.h"

#include "compat.h"
#include "parallel.h"
#include "remote.h"

/*
 * Coordinator: makes a communicator id, publishes the rank ranges of
 * `nodes` nodes of `local` ranks each (replacing the job's earlier rows),
 * claims node 0, and fills *world for it. Its own transaction. ERROR
 * (object_not_in_prerequisite_state) when no id can be made.
 */
void		ranks_publish(int64 job_id, int nodes, int local, TfWorld *world);

/*
 * Coordinator: waits until every other node has joined. Returns false when
 * the job was cancelled meanwhile. ERROR naming the first node that failed,
 * or when some did not join in time. Honours interrupts.
 */
bool		ranks_wait(int64 job_id, int nodes);

/*
 * Where a node worker's calls below (ranks_claim, ranks_abandon,
 * ranks_set_state, ranks_step, ranks_heartbeat) read and write
 * attention.job_ranks and attention.jobs: the coordinator's server through
 * `r` for a node on another server (join_training(coordinator, job)); NULL
 * (the default) this server. The coordinator's own calls always use this
 * server.
 */
void		ranks_use(Remote *r);

/*
 * Node worker: claims the next waiting node of the job (waiting for the
 * coordinator to publish them), and fills *world from its row. ERROR when
 * none is published in time, the job stops meanwhile, or the node's rank
 * count is not `local` (this machine's devices).
 */
int			ranks_claim(int64 job_id, int local, TfWorld *world);

/*
 * What a worker waiting in its join (TfWorld.abandon) watches: its job and
 * node (0: the coordinator), and why it gave up.
 */
typedef struct RanksWatch
{
	int64		job_id;
	int			node;
	char	   *failed_node;	/* another node that failed, and its error */
	char	   *failed_error;
	bool		stopped;		/* the job stopped or was cancelled */
} RanksWatch;

/*
 * TfWorld.abandon for a worker's join (arg: a RanksWatch): true once an
 * interrupt is pending, another node of the job failed or the job stopped
 * (so a join never waits out its timeout for ranks that will not come).
 * Runs on the worker's thread between engine calls; its own transaction;
 * raises no ERROR (a failed read abandons the join).
 */
bool		ranks_abandon(void *arg);

/* ERROR naming the node of a job that could not join, with its error. */
pg_noreturn void ranks_node_failed(int64 job_id, const char *node, const char *error);

/*
 * Sets the state of a node this worker claimed ("joined", "training",
 * "finished", "failed" with its error), and with step >= 0 its step and
 * heartbeat (now). Its own transaction.
 */
void		ranks_set_state(int64 job_id, int node, const char *state, int64 step, const char *error);

/* The step node `node` of the job last wrote (-1: none, or no such row). Its own transaction. */
int64		ranks_step(int64 job_id, int node);

/*
 * Coordinator, after a step or vote of a job across machines failed: waits
 * up to RANKS_REPORT_SECONDS for another node to record its failure (a node
 * writes its row before its connections close, but the coordinator may see
 * the closed connection first). Returns that node's number and its error
 * (palloc'd), or -1 with *error describing the node whose heartbeat is the
 * oldest. Honours interrupts; its own transactions.
 */
int			ranks_failure(int64 job_id, char **error);

/* How long ranks_failure waits for a failed node's row, seconds. */
#define RANKS_REPORT_SECONDS 5

/* A training node whose heartbeat has not changed for this long is silent, seconds. */
#define RANKS_SILENT_SECONDS 10

/*
 * What the coordinator watches while its ranks wait for the others: each
 * node's last heartbeat_at and when (on this worker's monotonic clock, so
 * the servers' clocks need not agree) it last changed.
 */
typedef struct RanksSilence
{
	int64		job_id;
	int			nodes;
	TimestampTz *beat;			/* [nodes] */
	double	   *changed;		/* [nodes]; 0: not seen training yet */
	double		next_poll;
	int			silent_node;	/* the node found silent; -1 */
	double		silent_seconds;
} RanksSilence;

/* Starts watching the nodes of a job (arrays in the current memory context). */
void		ranks_silence_init(RanksSilence *w, int64 job_id, int nodes);

/*
 * Coordinator (tf_parallel_set_poll, about once a second): true when a
 * node in state training has not changed its heartbeat for
 * RANKS_SILENT_SECONDS (w->silent_node and silent_seconds say which). A
 * node still loading (joined) is not watched. Its own transaction, with
 * interrupts held (they wait for the vote after the step); raises no ERROR
 * (a failed read, logged, is not a silent node).
 */
bool		ranks_silent(RanksSilence *w);

/*
 * Node: writes its heartbeat and step (ranks_set_state's "training"), with
 * interrupts held; raises no ERROR (false if it failed, logged).
 */
bool		ranks_heartbeat(int64 job_id, int node, int64 step);

#endif
