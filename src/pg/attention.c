/*
 * attention.c - module entry point: PG_MODULE_MAGIC and the GUCs.
 */
#include "postgres.h"

#include <unistd.h>

#include "fmgr.h"
#include "utils/guc.h"

#include "attention.h"

PG_MODULE_MAGIC;

int			attention_threads = 0;

void		_PG_init(void);

/* Defines the GUCs; creates no threads and no device context. */
void
_PG_init(void)
{
	DefineCustomIntVariable("attention.threads",
							"Threads the engine may use per backend (0 = one per CPU).",
							"Used by vocabulary training now, and by the CPU backend.",
							&attention_threads,
							0, 0, 1024,
							PGC_USERSET, 0,
							NULL, NULL, NULL);
	MarkGUCPrefixReserved("attention");
}

/* Number of threads the engine may use in this backend (>= 1). */
int
attention_thread_count(void)
{
	long		cpus;

	if (attention_threads > 0)
		return attention_threads;
	cpus = sysconf(_SC_NPROCESSORS_ONLN);
	return cpus > 0 ? (int) cpus : 1;
}
