/*
 * attention.c - the module's entry point: PG_MODULE_MAGIC, and _PG_init,
 * which defines the settings, installs the planner hook that batches
 * per-row translate() calls and, under shared_preload_libraries,
 * registers the launcher that resumes interrupted training jobs (not in
 * pg_upgrade's binary-upgrade mode) and reserves the translation services'
 * registry, the CPU budget, the progress rows and the statistics in shared
 * memory. It also loads OpenBLAS (src/blas.h) so that, preloaded, every
 * backend and worker inherits it from the postmaster, as when the library
 * linked it.
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"

#include "batch_translate.h"
#include "blas.h"
#include "cpu_budget.h"
#include "progress.h"
#include "service_registry.h"
#include "settings.h"
#include "statistics.h"
#include "workers.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

void
_PG_init(void)
{
	attention_define_settings();
	batch_translate_init();
	/* a failure is reported again where a model first needs the CPU backend */
	{
		char		err[512];

		if (tf_blas(err, sizeof(err)) == NULL)
			elog(LOG, "attention: %s", err);
	}
	if (process_shared_preload_libraries_in_progress)
	{
		/*
		 * pg_upgrade starts both servers in binary-upgrade mode (-b) with
		 * their own configuration: no job may resume (and write) while it
		 * dumps and restores the schema.
		 */
		if (!IsBinaryUpgrade)
			register_launcher();
		service_shmem_init();
		cpu_budget_shmem_init();
		progress_shmem_init();
		statistics_shmem_init();
	}
}
