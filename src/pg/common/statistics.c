/*
 * statistics.c - per-model translation statistics that last (statistics.h).
 *
 * The counters are an array of entries in shared memory, each keyed by
 * (database, model id) and claimed by compare-and-swap of its key, its
 * counters atomic: counting never waits on a lock. Under
 * shared_preload_libraries the postmaster saves them at a clean shutdown to
 * pg_stat/attention_statistics.stat and reads them back at the next start
 * (then removes the file, as pg_stat_statements does with its own), so they
 * last across clean restarts and are lost at a crash (the counts since the
 * last start) and at pg_upgrade; a standby counts its own translations and
 * keeps them in its own data directory. PostgreSQL 18's custom cumulative
 * statistics (pgstat_register_kind) would serve only 18, and only
 * preloaded: this file serves every major alike.
 */
#include "postgres.h"

#include <unistd.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/shmem.h"

#include "addin_shmem.h"
#include "statistics.h"

/* Entries under shared_preload_libraries, and without it. */
#define STATISTICS_ENTRIES 1024
#define STATISTICS_SPARE_ENTRIES 64

#define STATISTICS_FILE PGSTAT_STAT_PERMANENT_DIRECTORY "/attention_statistics.stat"
#define STATISTICS_MAGIC 0x41545331	/* "ATS1": the file's format */

typedef struct StatisticsEntry
{
	pg_atomic_uint64 key;		/* database << 32 | model id; 0: free */
	pg_atomic_uint64 counts[STAT_COUNTERS];
} StatisticsEntry;

typedef struct StatisticsShared
{
	int			nentries;
	StatisticsEntry entries[FLEXIBLE_ARRAY_MEMBER];
} StatisticsShared;

static StatisticsShared *shared = NULL;
static bool unavailable = false;
static bool preloaded = false;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static Size
shared_size(int n)
{
	return add_size(offsetof(StatisticsShared, entries), mul_size(n, sizeof(StatisticsEntry)));
}

/* Makes the entries of a new shared struct free. */
static void
statistics_init(void *p)
{
	StatisticsShared *s = p;
	int			i,
				k;

	s->nentries = preloaded ? STATISTICS_ENTRIES : STATISTICS_SPARE_ENTRIES;
	for (i = 0; i < s->nentries; i++)
	{
		pg_atomic_init_u64(&s->entries[i].key, 0);
		for (k = 0; k < STAT_COUNTERS; k++)
			pg_atomic_init_u64(&s->entries[i].counts[k], 0);
	}
}

/* Attaches (or creates) the counters' shared memory; false when there is none to be had. */
static bool
statistics_attach(void)
{
	if (shared == NULL)
		shared = addin_shmem_attach("attention statistics",
									shared_size(preloaded ? STATISTICS_ENTRIES : STATISTICS_SPARE_ENTRIES),
									statistics_init, &unavailable, "translations are not counted");
	return shared != NULL;
}

/* The entry of key, claimed when `claim`; NULL when there is none (or no free one). */
static StatisticsEntry *
find_entry(uint64 key, bool claim)
{
	int			i;

	for (i = 0; i < shared->nentries; i++)
	{
		StatisticsEntry *e = &shared->entries[i];
		uint64		k = pg_atomic_read_u64(&e->key);

		if (k == key)
			return e;
		if (k == 0 && claim)
		{
			uint64		expected = 0;

			if (pg_atomic_compare_exchange_u64(&e->key, &expected, key) || expected == key)
				return e;
		}
	}
	return NULL;
}

static uint64
entry_key(Oid database, int32 model_id)
{
	return ((uint64) database << 32) | (uint32) model_id;
}

void
statistics_add(int32 model_id, const int64 counts[STAT_COUNTERS])
{
	StatisticsEntry *e;
	int			k;

	if (!statistics_attach() || (e = find_entry(entry_key(MyDatabaseId, model_id), true)) == NULL)
		return;
	for (k = 0; k < STAT_COUNTERS; k++)
		if (counts[k] != 0)
			pg_atomic_fetch_add_u64(&e->counts[k], (uint64) counts[k]);
}

void
statistics_status(StatisticsRow **rows, int *n)
{
	int			i,
				k;

	*n = 0;
	*rows = NULL;
	if (!statistics_attach())
		return;
	*rows = palloc(shared->nentries * sizeof(StatisticsRow));
	for (i = 0; i < shared->nentries; i++)
	{
		StatisticsEntry *e = &shared->entries[i];
		uint64		key = pg_atomic_read_u64(&e->key);
		StatisticsRow *r = &(*rows)[*n];

		if (key == 0)
			continue;
		r->database = (Oid) (key >> 32);
		r->model_id = (int32) (uint32) key;
		for (k = 0; k < STAT_COUNTERS; k++)
			r->counts[k] = (int64) pg_atomic_read_u64(&e->counts[k]);
		(*n)++;
	}
}

void
statistics_reset(int32 model_id)
{
	StatisticsEntry *e;
	int			k;

	if (!statistics_attach() || (e = find_entry(entry_key(MyDatabaseId, model_id), false)) == NULL)
		return;
	for (k = 0; k < STAT_COUNTERS; k++)
		pg_atomic_write_u64(&e->counts[k], 0);
}

/* Saves the counters to STATISTICS_FILE (the postmaster, at a clean shutdown). */
static void
statistics_save(int code, Datum arg)
{
	FILE	   *f;
	uint32		header[2] = {STATISTICS_MAGIC, 0};
	int			i,
				k;

	if (code != 0 || shared == NULL)
		return;					/* a crash: nothing is saved */
	for (i = 0; i < shared->nentries; i++)
		if (pg_atomic_read_u64(&shared->entries[i].key) != 0)
			header[1]++;
	f = AllocateFile(STATISTICS_FILE ".tmp", PG_BINARY_W);
	if (f == NULL)
		goto error;
	if (fwrite(header, sizeof(header), 1, f) != 1)
		goto error;
	for (i = 0; i < shared->nentries; i++)
	{
		uint64		row[1 + STAT_COUNTERS];

		row[0] = pg_atomic_read_u64(&shared->entries[i].key);
		if (row[0] == 0)
			continue;
		for (k = 0; k < STAT_COUNTERS; k++)
			row[1 + k] = pg_atomic_read_u64(&shared->entries[i].counts[k]);
		if (fwrite(row, sizeof(row), 1, f) != 1)
			goto error;
	}
	if (FreeFile(f) != 0)
	{
		f = NULL;
		goto error;
	}
	(void) durable_rename(STATISTICS_FILE ".tmp", STATISTICS_FILE, LOG);
	return;

error:
	ereport(LOG, (errcode_for_file_access(),
				  errmsg("attention: could not write file \"%s\": %m", STATISTICS_FILE ".tmp")));
	if (f != NULL)
		FreeFile(f);
	unlink(STATISTICS_FILE ".tmp");
}

/* Reads what statistics_save saved into the fresh counters, then removes the file. */
static void
statistics_load(void)
{
	FILE	   *f = AllocateFile(STATISTICS_FILE, PG_BINARY_R);
	uint32		header[2];
	uint32		i;
	int			k;

	if (f == NULL)
	{
		if (errno != ENOENT)
			ereport(LOG, (errcode_for_file_access(),
						  errmsg("attention: could not read file \"%s\": %m", STATISTICS_FILE)));
		return;
	}
	if (fread(header, sizeof(header), 1, f) != 1 || header[0] != STATISTICS_MAGIC)
		ereport(LOG, (errmsg("attention: ignoring file \"%s\": not a statistics file of this version",
							 STATISTICS_FILE)));
	else
		for (i = 0; i < header[1]; i++)
		{
			uint64		row[1 + STAT_COUNTERS];
			StatisticsEntry *e;

			if (fread(row, sizeof(row), 1, f) != 1)
			{
				ereport(LOG, (errmsg("attention: file \"%s\" ends early", STATISTICS_FILE)));
				break;
			}
			if (row[0] == 0 || (e = find_entry(row[0], true)) == NULL)
				continue;
			for (k = 0; k < STAT_COUNTERS; k++)
				pg_atomic_write_u64(&e->counts[k], row[1 + k]);
		}
	FreeFile(f);
	unlink(STATISTICS_FILE);
}

static void
statistics_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(shared_size(STATISTICS_ENTRIES)));
}

static void
statistics_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	/* again after a crash restart: the segment is a new one, the file gone since the first start */
	shared = NULL;
	unavailable = false;
	if (!statistics_attach())
		return;
	if (!IsUnderPostmaster)
	{
		/* a crash restart's shmem_exit ran and emptied the exit callbacks: registered again each time */
		statistics_load();
		on_shmem_exit(statistics_save, (Datum) 0);
	}
}

void
statistics_shmem_init(void)
{
	preloaded = true;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = statistics_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = statistics_shmem_startup;
}
