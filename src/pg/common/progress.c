/*
 * progress.c - the progress of long statements (progress.h).
 *
 * Each process that reports an operation or holds a model has a slot in
 * shared memory: its operation's row and its models' memory
 * (progress_model_memory). The slots: under
 * shared_preload_libraries one per backend (MaxBackends), reserved at
 * start-up; without preloading, PROGRESS_SPARE_ROWS of them placed by the
 * server's first operation in the spare shared memory every server keeps for
 * add-ins (ShmemInitStruct under AddinShmemInitLock, as the CPU budget does),
 * on every major. A process claims a free slot by compare-and-swap of its
 * pid, and frees it when it has neither; when all are taken (more such
 * processes at once than slots, without preloading) or no memory could be
 * had, it runs unreported.
 *
 * Only the owner writes its slot, between two increments of the slot's
 * change count (odd while it writes); a reader copies the slot and takes the
 * copy when the count was even and unchanged around it (as PostgreSQL's
 * backend status does), so it never waits on a lock and never sees half a
 * row. Abort callbacks (transaction and subtransaction) and an exit callback
 * clear a row that an ERROR, cancel or FATAL left behind.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/timestamp.h"

#include "addin_shmem.h"
#include "progress.h"

/* Rows without preloading. */
#define PROGRESS_SPARE_ROWS 32

/* Operations that took this long or longer end with a LOG line (shorter ones: DEBUG1). */
#define PROGRESS_LOG_SECONDS 1.0

typedef struct ProgressSlot
{
	pg_atomic_uint32 owner;		/* pid of the process reporting here; 0: free */
	pg_atomic_uint32 changecount;	/* odd while the owner writes the slot */
	ProgressRow row;			/* pid 0: no operation */
	MemoryRow	models[PROGRESS_MODELS];	/* model "": none */
} ProgressSlot;

typedef struct ProgressShared
{
	int			nslots;
	ProgressSlot slots[FLEXIBLE_ARRAY_MEMBER];
} ProgressShared;

static ProgressShared *shared = NULL;
static bool unavailable = false;	/* no shared memory could be had: nothing is reported */
static int	preloaded_slots = 0;	/* MaxBackends under shared_preload_libraries (the postmaster's, inherited) */
static ProgressSlot *mine = NULL;	/* this process's slot */
static int	models_held = 0;	/* entries of mine->models in use */

/*
 * Operations begun and not ended (only the outermost is reported), with the
 * transaction nest level each began at, so that a subtransaction's abort
 * forgets those it began (beyond PROGRESS_MAX_DEPTH, the deepest level known).
 */
#define PROGRESS_MAX_DEPTH 8
static int	depth = 0;
static int	begun_at_level[PROGRESS_MAX_DEPTH];
static bool callbacks_registered = false;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* Bytes of n slots. */
static Size
shared_size(int n)
{
	return add_size(offsetof(ProgressShared, slots), mul_size(n, sizeof(ProgressSlot)));
}

/* Makes the slots of a new shared struct free. */
static void
progress_init(void *p)
{
	ProgressShared *s = p;
	int			i;

	s->nslots = preloaded_slots > 0 ? preloaded_slots : PROGRESS_SPARE_ROWS;
	for (i = 0; i < s->nslots; i++)
	{
		pg_atomic_init_u32(&s->slots[i].owner, 0);
		pg_atomic_init_u32(&s->slots[i].changecount, 0);
		memset(&s->slots[i].row, 0, sizeof(ProgressRow));
		memset(s->slots[i].models, 0, sizeof(s->slots[i].models));
	}
}

/* Attaches (or creates) the slots' shared memory; false when there is none to be had. */
static bool
progress_attach(void)
{
	if (shared == NULL)
		shared = addin_shmem_attach("attention progress",
									shared_size(preloaded_slots > 0 ? preloaded_slots : PROGRESS_SPARE_ROWS),
									progress_init, &unavailable, "operations and models run unshown");
	return shared != NULL;
}

/* Starts a write of this process's slot: the change count odd. */
static void
write_begin(void)
{
	pg_atomic_fetch_add_u32(&mine->changecount, 1);
	pg_write_barrier();
}

/* Ends a write: the change count even again. */
static void
write_end(void)
{
	pg_write_barrier();
	pg_atomic_fetch_add_u32(&mine->changecount, 1);
}

/* Claims a free slot for this process (once); false when none is free or there is no shared memory. */
static bool
claim_slot(void)
{
	int			i;

	if (mine != NULL)
		return true;
	if (!progress_attach())
		return false;
	for (i = 0; i < shared->nslots && mine == NULL; i++)
	{
		uint32		free_owner = 0;

		if (pg_atomic_compare_exchange_u32(&shared->slots[i].owner, &free_owner, (uint32) MyProcPid))
			mine = &shared->slots[i];
	}
	return mine != NULL;
}

/*
 * Clears this process's operation row; frees the slot when it holds no
 * model either. `all` (the process's exit), or without preloading (where
 * models are shown only beside an operation), clears its models too.
 */
static void
clear_row(bool all)
{
	if (mine == NULL)
		return;
	all = all || preloaded_slots == 0;
	write_begin();
	memset(&mine->row, 0, sizeof(ProgressRow));
	if (all)
		memset(mine->models, 0, sizeof(mine->models));
	write_end();
	if (all)
		models_held = 0;
	if (models_held == 0)
	{
		pg_atomic_write_u32(&mine->owner, 0);
		mine = NULL;
	}
}

/*
 * Forgets the operations begun at transaction nest level `level` or deeper
 * (their transaction aborts), clearing the row when none is left; those of
 * a background worker begun outside any transaction (level 0) stay.
 */
static void
forget_operations(int level)
{
	if (depth == 0)
		return;
	/* those beyond the stack began after its last: inside this transaction when that one is outside it */
	if (depth > PROGRESS_MAX_DEPTH && begun_at_level[PROGRESS_MAX_DEPTH - 1] < level)
		depth = PROGRESS_MAX_DEPTH;
	while (depth > 0 && begun_at_level[Min(depth, PROGRESS_MAX_DEPTH) - 1] >= level)
		depth--;
	if (depth == 0)
		clear_row(false);
}

static void
progress_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
		forget_operations(1);
}

static void
progress_subxact_callback(SubXactEvent event, SubTransactionId mySubid, SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
		forget_operations(GetCurrentTransactionNestLevel());
}

static void
progress_exit(int code, Datum arg)
{
	depth = 0;
	clear_row(true);
}

/* Registers the abort and exit callbacks (once). */
static void
register_callbacks(void)
{
	if (callbacks_registered)
		return;
	RegisterXactCallback(progress_xact_callback, NULL);
	RegisterSubXactCallback(progress_subxact_callback, NULL);
	before_shmem_exit(progress_exit, (Datum) 0);
	callbacks_registered = true;
}

/* Copies at most size - 1 bytes of src into dst, not cutting a character. */
static void
copy_clipped(char *dst, const char *src, int size)
{
	int			len = pg_mbcliplen(src, strlen(src), size - 1);

	memcpy(dst, src, len);
	dst[len] = '\0';
}

void
progress_begin(const char *operation, const char *object, const char *unit, int64 total)
{
	register_callbacks();
	if (depth < PROGRESS_MAX_DEPTH)
		begun_at_level[depth] = GetCurrentTransactionNestLevel();
	if (depth++ > 0 || !claim_slot())
		return;					/* inside another, or every slot taken: unreported */
	write_begin();
	mine->row.pid = MyProcPid;
	mine->row.database = MyDatabaseId;
	mine->row.role = GetUserId();
	copy_clipped(mine->row.operation, operation, sizeof(mine->row.operation));
	copy_clipped(mine->row.object, object, sizeof(mine->row.object));
	copy_clipped(mine->row.unit, unit, sizeof(mine->row.unit));
	mine->row.done = 0;
	mine->row.total = total;
	mine->row.started = GetCurrentTimestamp();
	write_end();
}

void
progress_add(int64 units)
{
	if (depth != 1 || mine == NULL || mine->row.pid == 0)
		return;
	write_begin();
	mine->row.done += units;
	if (mine->row.total >= 0 && mine->row.done > mine->row.total)
		mine->row.total = mine->row.done;
	write_end();
}

void
progress_set_operation(const char *operation)
{
	if (depth != 1 || mine == NULL || mine->row.pid == 0)
		return;
	write_begin();
	copy_clipped(mine->row.operation, operation, sizeof(mine->row.operation));
	write_end();
}

void
progress_end(void)
{
	if (depth == 0 || --depth > 0)
		return;
	if (mine != NULL && mine->row.pid != 0)
	{
		ProgressRow r = mine->row;
		double		seconds = (GetCurrentTimestamp() - r.started) / 1e6;

		clear_row(false);
		/* long ones in the server log, as autovacuum's above log_autovacuum_min_duration */
		ereport(seconds >= PROGRESS_LOG_SECONDS ? LOG : DEBUG1,
				(errmsg("attention: %s of %s: %lld %s in %.1f s (%.1f %s/s)", r.operation, r.object,
						(long long) r.done, r.unit, seconds, r.done / Max(seconds, 1e-6), r.unit)));
	}
}

/* A consistent copy of slot s (its owner may be writing it): the change count even and unchanged around it. */
static void
copy_slot(ProgressSlot *s, ProgressRow *row, MemoryRow *models)
{
	for (;;)
	{
		uint32		before = pg_atomic_read_u32(&s->changecount);
		uint32		after;

		pg_read_barrier();
		memcpy(row, &s->row, sizeof(ProgressRow));
		memcpy(models, s->models, sizeof(s->models));
		pg_read_barrier();
		after = pg_atomic_read_u32(&s->changecount);
		if (before == after && (before & 1) == 0)
			break;
		CHECK_FOR_INTERRUPTS();
	}
}

void
progress_status(ProgressRow **rows, int *n)
{
	bool		all = has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);
	int			i;

	*n = 0;
	*rows = NULL;
	if (!progress_attach())
		return;
	*rows = palloc(shared->nslots * sizeof(ProgressRow));
	for (i = 0; i < shared->nslots; i++)
	{
		ProgressRow *r = &(*rows)[*n];
		MemoryRow	models[PROGRESS_MODELS];

		copy_slot(&shared->slots[i], r, models);
		if (r->pid == 0)
			continue;
		/* the strings as copied: terminated even where a field was full */
		r->operation[sizeof(r->operation) - 1] = '\0';
		r->object[sizeof(r->object) - 1] = '\0';
		r->unit[sizeof(r->unit) - 1] = '\0';
		if (!all && !has_privs_of_role(GetUserId(), r->role))
		{
			r->object[0] = '\0';
			r->done = -1;
			r->total = -1;
		}
		(*n)++;
	}
}

void
progress_model_memory(const char *model, const char *device, int64 weight_bytes, int64 engine_bytes)
{
	int			i,
				k = -1;

	register_callbacks();
	/*
	 * a process holds its models as long as it lives: only where every
	 * backend has a slot (preloaded) does it take one for them, so that
	 * sessions holding models never leave operations unshown
	 */
	if (mine == NULL && (weight_bytes < 0 || preloaded_slots == 0 || !claim_slot()))
		return;
	for (i = 0; i < PROGRESS_MODELS; i++)
	{
		if (mine->models[i].model[0] != '\0' &&
			strncmp(mine->models[i].model, model, sizeof(mine->models[i].model) - 1) == 0)
			break;
		if (k < 0 && mine->models[i].model[0] == '\0')
			k = i;
	}
	if (i == PROGRESS_MODELS && (weight_bytes < 0 || k < 0))
		return;					/* not shown, or no room: more models than PROGRESS_MODELS */
	write_begin();
	if (weight_bytes < 0)
	{
		memset(&mine->models[i], 0, sizeof(MemoryRow));
		models_held--;
	}
	else
	{
		if (i == PROGRESS_MODELS)
		{
			i = k;
			models_held++;
			mine->models[i].pid = MyProcPid;
			mine->models[i].database = MyDatabaseId;
			copy_clipped(mine->models[i].model, model, sizeof(mine->models[i].model));
		}
		copy_clipped(mine->models[i].device, device, sizeof(mine->models[i].device));
		mine->models[i].weight_bytes = weight_bytes;
		mine->models[i].engine_bytes = engine_bytes;
	}
	write_end();
	if (models_held == 0 && mine->row.pid == 0)
		clear_row(false);
}

void
progress_memory_status(MemoryRow **rows, int *n)
{
	int			i,
				k;

	*n = 0;
	*rows = NULL;
	if (!progress_attach())
		return;
	*rows = palloc(mul_size(shared->nslots, PROGRESS_MODELS * sizeof(MemoryRow)));
	for (i = 0; i < shared->nslots; i++)
	{
		ProgressRow row;
		MemoryRow	models[PROGRESS_MODELS];

		copy_slot(&shared->slots[i], &row, models);
		for (k = 0; k < PROGRESS_MODELS; k++)
			if (models[k].model[0] != '\0')
			{
				models[k].model[sizeof(models[k].model) - 1] = '\0';
				models[k].device[sizeof(models[k].device) - 1] = '\0';
				(*rows)[(*n)++] = models[k];
			}
	}
}

static void
progress_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	preloaded_slots = MaxBackends;
	RequestAddinShmemSpace(MAXALIGN(shared_size(preloaded_slots)));
}

static void
progress_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	/* again after a crash restart: the segment is a new one */
	shared = NULL;
	unavailable = false;
	(void) progress_attach();
}

void
progress_shmem_init(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = progress_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = progress_shmem_startup;
}
