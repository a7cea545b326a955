/*
 * cpu_budget.h - the server-wide CPU budget (cpu_budget.c): the engine
 * threads of every session, translation service and training job of the
 * server together stay within attention.max_threads. A leaf of the SQL glue.
 *
 * Each engine call takes threads for its duration (cpu_budget_take) and
 * gives them back (cpu_budget_give): what it asks for, or what is free,
 * and never fewer than one, so no call waits. Threads still held when a
 * transaction aborts (an ERROR or cancel between take and give) or when
 * the process exits (FATAL, pg_terminate_backend) go back by themselves.
 */
#ifndef ATTENTION_CPU_BUDGET_H
#define ATTENTION_CPU_BUDGET_H

#include "postgres.h"

#include "transformer.h"

/* What attention.cpu_budget shows. */
typedef struct CpuBudgetStatus
{
	int			max_threads;	/* attention.max_threads, 0 resolved to the server's cores */
	int			server_cores;	/* CPUs this server may use (affinity, cgroup quota) */
	int			threads_in_use; /* held by engine calls now (may exceed max_threads: one per call) */
	int64		engine_calls;	/* calls that took threads */
	int64		calls_given_fewer;	/* calls that got fewer threads than they asked for */
	bool		shared;			/* false: no shared memory could be had, every call runs on one thread */
} CpuBudgetStatus;

/*
 * CPUs this server may use: the CPUs of its affinity mask, lowered to its
 * cgroup's CPU quota (v2 cpu.max, v1 cpu.cfs_quota_us) rounded up; >= 1.
 */
int			cpu_budget_server_cores(void);

/*
 * Takes threads for one engine call: `want` (0: attention.num_threads, or
 * attention.max_threads when that is 0), at most what the budget has free,
 * at least one; one inside a parallel query. Never waits. The caller gives
 * the count back with cpu_budget_give.
 */
int			cpu_budget_take(int want);

/* Gives back `threads` taken by cpu_budget_take. */
void		cpu_budget_give(int threads);

/*
 * cpu_budget_take(want) for model's engine, which is set to run on what
 * was taken; returns the count for cpu_budget_give (0, taking nothing, for
 * a model on a GPU).
 */
int			cpu_budget_take_for(TfModel *model, int want);

/* The budget as attention.cpu_budget shows it. */
void		cpu_budget_status(CpuBudgetStatus *status);

/*
 * Reserves the budget's shared memory at start-up (from _PG_init under
 * shared_preload_libraries); without it the budget is placed in the
 * server's spare shared memory by the first call that needs it.
 */
void		cpu_budget_shmem_init(void);

#endif
