/*
 * statistics.h - per-model translation statistics that last (statistics.c):
 * calls, sentences, tokens in and out, engine time and errors of every
 * model of every database of the server, counted where the engine runs (a
 * session translating itself, a translation service), as the view
 * attention.statistics shows them. A leaf of the SQL glue.
 */
#ifndef ATTENTION_STATISTICS_H
#define ATTENTION_STATISTICS_H

#include "postgres.h"

/* The counters of one model. */
typedef enum StatisticsCounter
{
	STAT_CALLS,					/* translation calls (a statement's, a service request's) */
	STAT_SENTENCES,
	STAT_TOKENS_IN,				/* source tokens */
	STAT_TOKENS_OUT,			/* translated tokens */
	STAT_ENGINE_US,				/* microseconds in the engine */
	STAT_ERRORS,				/* calls that ended in an ERROR */
	STAT_COUNTERS
} StatisticsCounter;

/* One row of attention.statistics. */
typedef struct StatisticsRow
{
	Oid			database;
	int32		model_id;
	int64		counts[STAT_COUNTERS];
} StatisticsRow;

/*
 * Adds counts[STAT_COUNTERS] to model model_id of this database. Never
 * waits; a model that finds no free entry (more models counted since the
 * last reset than entries) is not counted.
 */
void		statistics_add(int32 model_id, const int64 counts[STAT_COUNTERS]);

/* Every model's counters (*rows palloc'd, *n of them). */
void		statistics_status(StatisticsRow **rows, int *n);

/* Zeroes model model_id's counters in this database (its entry stays). */
void		statistics_reset(int32 model_id);

/*
 * Writes the counters to pg_stat_tmp/attention_statistics.stat when they
 * changed since this process's last write, for a crash restart to read (the
 * launcher, every STATISTICS_FLUSH_SECONDS). Only under
 * shared_preload_libraries; a failed write is a LOG line.
 */
#define STATISTICS_FLUSH_SECONDS 60
void		statistics_flush(void);

/*
 * Reserves the counters' shared memory at start-up (from _PG_init under
 * shared_preload_libraries), reads what the last clean shutdown saved (or,
 * after a crash, the last flush) and has the postmaster save them at
 * shutdown. Without preloading, the first
 * count of the server places STATISTICS_SPARE_ENTRIES entries in the spare
 * shared memory every server keeps for add-ins, lost at a restart.
 */
void		statistics_shmem_init(void);

#endif
