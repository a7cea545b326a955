/*
 * statistics.c - per-model translation statistics that last (statistics.h).
 *
 * The counters are an array of entries in shared memory, each keyed by
 * (database, model id) and claimed by compare-and-swap of its key, its
 * counters atomic: counting never waits on a lock. Under
 * shared_preload_libraries the postmaster saves them at a clean shutdown to
 * pg_stat/attention_statistics.stat and reads them back at the next start,
 * and the launcher (bgworker/launcher.c) writes them every
 * STATISTICS_FLUSH_SECONDS, when they changed, to
 * pg_stat_tmp/attention_statistics.stat, which a crash restart reads: a
 * crash loses the counts (and resets) of the last minute at most. The
 * clean shutdown's file is written there when read, then removed (so a
 * crash before the first flush restores what the start read). pg_stat_tmp
 * is left out of base backups and pg_rewind, so a standby made from a
 * backup starts from zero; a standby runs no launcher and counts its own
 * translations, saved at its clean shutdowns only. pg_upgrade starts them afresh. PostgreSQL 18's custom
 * cumulative statistics (pgstat_register_kind) would serve only 18, and
 * only preloaded: these files serve every major alike.
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
#define STATISTICS_FLUSH_FILE PG_STAT_TMP_DIR "/attention_statistics.stat"
#define STATISTICS_MAGIC 0x41545331	/* "ATS1": the file's format */

typedef struct StatisticsEntry
{
	pg_atomic_uint64 key;		/* database << 32 | model id; 0: free */
	pg_atomic_uint64 counts[STAT_COUNTERS];
} StatisticsEntry;

typedef struct StatisticsShared
{
	pg_atomic_uint64 changes;	/* counts and resets so far: a flush skips an unchanged array */
	int			nentries;
	StatisticsEntry entries[FLEXIBLE_ARRAY_MEMBER];
} StatisticsShared;

static StatisticsShared *shared = NULL;
static bool unavailable = false;
static bool preloaded = false;
static uint64 flushed_changes = 0;	/* shared->changes at this process's last flush */

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

	pg_atomic_init_u64(&s->changes, 0);
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
	pg_atomic_fetch_add_u64(&shared->changes, 1);
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
	pg_atomic_fetch_add_u64(&shared->changes, 1);
}

/*
 * Writes the counters to path through path.tmp (one writer per file: the
 * postmaster when no launcher runs, else the launcher), renamed over it:
 * durably (fsync) for the clean shutdown's file, plainly for the flushes,
 * which need only outlive a crash restart, not the machine (a failed fsync
 * would raise a PANIC). The rows are copied first, so the count in the
 * header is the rows written. False, with a LOG line, when it cannot.
 */
static bool
write_file(const char *path, bool durable)
{
	char		tmp[MAXPGPATH];
	FILE	   *f;
	uint32		header[2] = {STATISTICS_MAGIC, 0};
	uint64	   *rows = palloc(shared->nentries * sizeof(uint64) * (1 + STAT_COUNTERS));
	int			i,
				k;

	for (i = 0; i < shared->nentries; i++)
	{
		uint64	   *row = rows + header[1] * (1 + STAT_COUNTERS);

		row[0] = pg_atomic_read_u64(&shared->entries[i].key);
		if (row[0] == 0)
			continue;
		for (k = 0; k < STAT_COUNTERS; k++)
			row[1 + k] = pg_atomic_read_u64(&shared->entries[i].counts[k]);
		header[1]++;
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = AllocateFile(tmp, PG_BINARY_W);
	if (f == NULL ||
		fwrite(header, sizeof(header), 1, f) != 1 ||
		(header[1] > 0 && fwrite(rows, sizeof(uint64) * (1 + STAT_COUNTERS), header[1], f) != header[1]))
		goto error;
	if (FreeFile(f) != 0)
	{
		f = NULL;
		goto error;
	}
	pfree(rows);
	if (durable)
		return durable_rename(tmp, path, LOG) == 0;
	if (rename(tmp, path) == 0)
		return true;
	ereport(LOG, (errcode_for_file_access(),
				  errmsg("attention: could not rename file \"%s\" to \"%s\": %m", tmp, path)));
	unlink(tmp);
	return false;

error:
	ereport(LOG, (errcode_for_file_access(),
				  errmsg("attention: could not write file \"%s\": %m", tmp)));
	if (f != NULL)
		FreeFile(f);
	unlink(tmp);
	pfree(rows);
	return false;
}

/* Saves the counters to STATISTICS_FILE (the postmaster, at a clean shutdown). */
static void
statistics_save(int code, Datum arg)
{
	if (code != 0 || shared == NULL)
		return;					/* a crash: the last flush stays */
	(void) write_file(STATISTICS_FILE, true);
}

void
statistics_flush(void)
{
	uint64		changes;

	if (!preloaded || !statistics_attach())
		return;
	changes = pg_atomic_read_u64(&shared->changes);
	if (changes != flushed_changes && write_file(STATISTICS_FLUSH_FILE, false))
		flushed_changes = changes;
}

/* Reads the counters that file path holds into the fresh ones; false when there is no such file. */
static bool
read_file(const char *path)
{
	FILE	   *f = AllocateFile(path, PG_BINARY_R);
	uint32		header[2];
	uint32		i;
	int			k;

	if (f == NULL)
	{
		if (errno != ENOENT)
			ereport(LOG, (errcode_for_file_access(),
						  errmsg("attention: could not read file \"%s\": %m", path)));
		return false;
	}
	if (fread(header, sizeof(header), 1, f) != 1 || header[0] != STATISTICS_MAGIC)
		ereport(LOG, (errmsg("attention: ignoring file \"%s\": not a statistics file of this version", path)));
	else
		for (i = 0; i < header[1]; i++)
		{
			uint64		row[1 + STAT_COUNTERS];
			StatisticsEntry *e;

			if (fread(row, sizeof(row), 1, f) != 1)
			{
				ereport(LOG, (errmsg("attention: file \"%s\" ends early", path)));
				break;
			}
			if (row[0] == 0 || (e = find_entry(row[0], true)) == NULL)
				continue;
			for (k = 0; k < STAT_COUNTERS; k++)
				pg_atomic_write_u64(&e->counts[k], row[1 + k]);
		}
	FreeFile(f);
	return true;
}

/*
 * Reads the clean shutdown's counters, writes them as the flushed ones and
 * removes the shutdown's file (read once); without it (a crash restart, an
 * immediate shutdown), the last flush.
 */
static void
statistics_load(void)
{
	if (read_file(STATISTICS_FILE))
	{
		(void) write_file(STATISTICS_FLUSH_FILE, false);
		(void) durable_unlink(STATISTICS_FILE, LOG);
	}
	else
		(void) read_file(STATISTICS_FLUSH_FILE);
	flushed_changes = 0;
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
	/* again after a crash restart: the segment is a new one, read from the last flush */
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
