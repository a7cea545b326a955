/*
 * cpu_budget.c - the server-wide CPU budget (cpu_budget.h).
 *
 * The budget is one counter of threads in use in shared memory, changed
 * with compare-and-swap: taking threads never waits and never blocks
 * another process. Under shared_preload_libraries its memory is reserved at
 * start-up; without preloading, the first engine call of the server places
 * it in the spare shared memory every server keeps for add-ins
 * (ShmemInitStruct under AddinShmemInitLock, as a preloaded library does at
 * start-up), so sessions share one budget either way. Should that memory be
 * exhausted, every engine call runs on one thread: sessions then never
 * oversubscribe the CPUs by more than one thread each.
 *
 * Each process counts what it holds (`held`); an abort callback and an exit
 * callback give back what an ERROR, cancel or FATAL left held.
 */
#include "postgres.h"

#include <sched.h>
#include <stdio.h>
#include <unistd.h>

#include "access/parallel.h"
#include "access/xact.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/resowner.h"

#include "addin_shmem.h"
#include "cpu_budget.h"
#include "settings.h"

typedef struct CpuBudget
{
	pg_atomic_uint32 in_use;	/* threads held by engine calls */
	pg_atomic_uint64 calls;
	pg_atomic_uint64 calls_given_fewer;
} CpuBudget;

static CpuBudget *budget = NULL;
static bool budget_unavailable = false; /* no shared memory could be had: one thread per call */
static int	held = 0;			/* threads this process holds */
static bool callbacks_registered = false;
static int	cores = 0;			/* cpu_budget_server_cores(), computed once */

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* Zeroes a new budget. */
static void
budget_init(void *p)
{
	CpuBudget  *b = p;

	pg_atomic_init_u32(&b->in_use, 0);
	pg_atomic_init_u64(&b->calls, 0);
	pg_atomic_init_u64(&b->calls_given_fewer, 0);
}

/* Attaches (or creates) the budget's shared memory; false when there is none to be had. */
static bool
budget_attach(void)
{
	if (budget == NULL)
		budget = addin_shmem_attach("attention CPU budget", sizeof(CpuBudget), budget_init, &budget_unavailable,
									"engine calls run on one thread");
	return budget != NULL;
}

static void
budget_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(CpuBudget)));
}

static void
budget_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	/* again after a crash restart: the segment is a new one */
	budget = NULL;
	budget_unavailable = false;
	(void) budget_attach();
}

void
cpu_budget_shmem_init(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = budget_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = budget_shmem_startup;
}

/* The CPU quota of cgroup v2 directory `dir` and its parents, in whole CPUs rounded up; 0: none. */
static int
cgroup2_quota(const char *dir)
{
	char		path[MAXPGPATH];
	int			quota = 0;

	strlcpy(path, dir, sizeof(path));
	for (;;)
	{
		char		file[MAXPGPATH + 16];
		FILE	   *f;
		long long	max,
					period;
		char	   *slash;

		snprintf(file, sizeof(file), "%s/cpu.max", path);
		if ((f = fopen(file, "r")) != NULL)
		{
			if (fscanf(f, "%lld %lld", &max, &period) == 2 && max > 0 && period > 0)
			{
				int			q = (int) ((max + period - 1) / period);

				quota = quota == 0 ? q : Min(quota, q);
			}
			fclose(f);
		}
		slash = strrchr(path, '/');
		if (slash == NULL || strcmp(path, "/sys/fs/cgroup") == 0)
			break;
		*slash = '\0';
	}
	return quota;
}

/* The CPU quota of this process's cgroup (v2, else v1's cpu controller), in whole CPUs; 0: none. */
static int
cgroup_quota(void)
{
	FILE	   *f = fopen("/proc/self/cgroup", "r");
	char		line[MAXPGPATH];
	int			quota = 0;

	if (f == NULL)
		return 0;
	while (quota == 0 && fgets(line, sizeof(line), f) != NULL)
	{
		char	   *path = strchr(line, ':');
		char	   *controllers;
		char		dir[MAXPGPATH];

		if (path == NULL)
			continue;
		controllers = path + 1;
		path = strchr(controllers, ':');
		if (path == NULL)
			continue;
		*path++ = '\0';
		path[strcspn(path, "\n")] = '\0';
		if (strcmp(line, "0") == 0 && controllers[0] == '\0')
		{
			snprintf(dir, sizeof(dir), "/sys/fs/cgroup%s", strcmp(path, "/") == 0 ? "" : path);
			quota = cgroup2_quota(dir);
		}
		else if (strstr(controllers, "cpu") != NULL && strstr(controllers, "cpuset") == NULL)
		{
			FILE	   *q;
			long long	max = -1,
						period = 0;

			snprintf(dir, sizeof(dir), "/sys/fs/cgroup/%s%s/cpu.cfs_quota_us", controllers,
					 strcmp(path, "/") == 0 ? "" : path);
			if ((q = fopen(dir, "r")) != NULL)
			{
				if (fscanf(q, "%lld", &max) != 1)
					max = -1;
				fclose(q);
			}
			snprintf(dir, sizeof(dir), "/sys/fs/cgroup/%s%s/cpu.cfs_period_us", controllers,
					 strcmp(path, "/") == 0 ? "" : path);
			if (max > 0 && (q = fopen(dir, "r")) != NULL)
			{
				if (fscanf(q, "%lld", &period) == 1 && period > 0)
					quota = (int) ((max + period - 1) / period);
				fclose(q);
			}
		}
	}
	fclose(f);
	return quota;
}

int
cpu_budget_server_cores(void)
{
	if (cores == 0)
	{
		cpu_set_t	set;
		long		n = sysconf(_SC_NPROCESSORS_ONLN);
		int			quota;

		if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
			n = CPU_COUNT(&set);
		quota = cgroup_quota();
		if (quota > 0 && quota < n)
			n = quota;
		cores = n > 0 ? (int) n : 1;
	}
	return cores;
}

/* attention.max_threads with 0 resolved to the server's cores. */
static int
max_threads(void)
{
	return attention_max_threads > 0 ? attention_max_threads : cpu_budget_server_cores();
}

/* Gives back what this process still holds. */
static void
give_all(void)
{
	if (held > 0 && budget != NULL)
		pg_atomic_sub_fetch_u32(&budget->in_use, held);
	held = 0;
}

/* An abort (ERROR, cancel) between take and give: no engine call is under way any more. */
static void
budget_release(ResourceReleasePhase phase, bool isCommit, bool isTopLevel, void *arg)
{
	if (phase == RESOURCE_RELEASE_AFTER_LOCKS && !isCommit)
		give_all();
}

static void
budget_exit(int code, Datum arg)
{
	give_all();
}

int
cpu_budget_take(int want)
{
	int			limit = max_threads();
	uint32		used;
	int			got;

	if (want <= 0)
		want = attention_num_threads > 0 ? attention_num_threads : limit;
	if (IsInParallelMode() || !budget_attach())
		want = 1;
	if (budget == NULL)
		return 1;
	if (!callbacks_registered)
	{
		RegisterResourceReleaseCallback(budget_release, NULL);
		before_shmem_exit(budget_exit, (Datum) 0);
		callbacks_registered = true;
	}
	used = pg_atomic_read_u32(&budget->in_use);
	do
		got = Max(1, Min(want, limit - (int) used));
	while (!pg_atomic_compare_exchange_u32(&budget->in_use, &used, used + got));
	held += got;
	pg_atomic_add_fetch_u64(&budget->calls, 1);
	if (got < want)
		pg_atomic_add_fetch_u64(&budget->calls_given_fewer, 1);
	return got;
}

void
cpu_budget_give(int threads)
{
	threads = Min(threads, held);
	if (threads <= 0 || budget == NULL)
		return;
	held -= threads;
	pg_atomic_sub_fetch_u32(&budget->in_use, threads);
}

int
cpu_budget_take_for(TfModel *model, int want)
{
	int			threads;

	if (strcmp(tf_model_backend(model), "cpu") != 0)
		return 0;				/* a GPU's engine: its host thread waits on the device */
	threads = cpu_budget_take(want);
	tf_model_set_threads(model, threads);
	return threads;
}

void
cpu_budget_status(CpuBudgetStatus *status)
{
	status->max_threads = max_threads();
	status->server_cores = cpu_budget_server_cores();
	status->shared = budget_attach();
	status->threads_in_use = status->shared ? (int) pg_atomic_read_u32(&budget->in_use) : 0;
	status->engine_calls = status->shared ? (int64) pg_atomic_read_u64(&budget->calls) : 0;
	status->calls_given_fewer = status->shared ? (int64) pg_atomic_read_u64(&budget->calls_given_fewer) : 0;
}
