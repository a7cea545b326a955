/*
 * progress.h - the progress of long statements and the memory of loaded
 * models (progress.c), as the views attention.progress and attention.memory
 * show them to every session: one row per running operation
 * (translate_column, evaluate, an import, average_checkpoints, quantize)
 * with its done and total units, and one per model a process holds. A leaf
 * of the SQL glue.
 *
 * A process reports one operation at a time: progress_begin, then
 * progress_add as units are done, then progress_end, which clears the
 * row and writes the end-of-operation LOG line. An ERROR, a cancel or the
 * process's exit clears the row by itself (an abort of the transaction or
 * subtransaction that began it; an operation that commits as it goes, as
 * translate_column does, keeps its row across its commits).
 */
#ifndef ATTENTION_PROGRESS_H
#define ATTENTION_PROGRESS_H

#include "postgres.h"

#include "datatype/timestamp.h"

/* One row of attention.progress (progress_status). */
typedef struct ProgressRow
{
	int			pid;
	Oid			database;
	Oid			role;			/* the role the operation runs as */
	char		operation[32];	/* translate_column, evaluate, ... */
	char		object[160];	/* the relation, model or checkpoint it works on */
	char		unit[16];		/* rows, sentences, tensors */
	int64		done;
	int64		total;			/* -1: not known */
	TimestampTz started;
} ProgressRow;

/* Models whose memory one process shows (more are not shown). */
#define PROGRESS_MODELS 4

/* One row of attention.memory (progress_memory_status): a model a process holds. */
typedef struct MemoryRow
{
	int			pid;
	Oid			database;
	char		model[NAMEDATALEN * 2];
	char		device[16];		/* cpu, cuda */
	int64		weight_bytes;	/* parameters (tf_model_weight_bytes) */
	int64		engine_bytes;	/* all the engine's allocator holds for it (tf_model_memory_bytes) */
} MemoryRow;

/*
 * Starts reporting `operation` on `object` (both cut to their fields'
 * sizes), total units of `unit` (-1: not known). Where an operation is
 * reported already (one inside another) the inner one is not, and its
 * progress_add and progress_end do nothing. Where no shared memory
 * could be had (see progress.c) nothing is reported.
 */
void		progress_begin(const char *operation, const char *object, const char *unit, int64 total);

/* Adds units done to this process's operation (nothing when none is reported). */
void		progress_add(int64 units);

/* Renames this process's operation: a phase of it ("training: validating"). */
void		progress_set_operation(const char *operation);

/*
 * Ends the operation begun last: clears its row and writes one line
 * (operation, object, units done, seconds, rate), LOG for one that took a
 * second or more (DEBUG1 otherwise), as autovacuum does above
 * log_autovacuum_min_duration.
 */
void		progress_end(void);

/*
 * The running operations, a consistent copy of each row (*rows palloc'd,
 * *n of them). Rows of roles the caller has no privileges of (nor
 * pg_read_all_stats) keep only pid, database, role and operation:
 * object is "", done and total -1.
 */
void		progress_status(ProgressRow **rows, int *n);

/*
 * Shows (or updates) the memory model `model` holds in this process, on
 * `device`; weight_bytes -1 stops showing it (the model freed). At most
 * PROGRESS_MODELS models per process are shown, and only where the
 * library is preloaded (or while the process reports an operation).
 */
void		progress_model_memory(const char *model, const char *device, int64 weight_bytes, int64 engine_bytes);

/* The models every process shows, a consistent copy of each (*rows palloc'd, *n of them). */
void		progress_memory_status(MemoryRow **rows, int *n);

/*
 * Reserves the rows' shared memory at start-up (from _PG_init under
 * shared_preload_libraries): one per backend. Without preloading the first
 * operation of the server places PROGRESS_SPARE_ROWS rows in the spare
 * shared memory every server keeps for add-ins.
 */
void		progress_shmem_init(void);

#endif
