/*
 * entry_points.h - the entry points of this library's background workers
 * (bgw_function_name): the training job's worker (worker.c), the launcher
 * and the per-database job resumer (launcher.c), and the translation
 * service (service_worker.c). Workers are started by src/pg/common/workers.c
 * and service_registry.c, which name these functions and include nothing
 * of bgworker/.
 */
#ifndef ATTENTION_ENTRY_POINTS_H
#define ATTENTION_ENTRY_POINTS_H

#include "postgres.h"

PGDLLEXPORT void attention_training_worker_main(Datum arg);
PGDLLEXPORT void attention_launcher_main(Datum arg);
PGDLLEXPORT void attention_resume_worker_main(Datum arg);
PGDLLEXPORT void attention_service_main(Datum arg);

#endif
