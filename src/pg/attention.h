/*
 * attention.h - declarations shared by the SQL glue (src/pg/).
 */
#ifndef ATTENTION_PG_H
#define ATTENTION_PG_H

#include "postgres.h"

/* GUC attention.threads: engine threads per backend (0 = one per CPU). */
extern int	attention_threads;

/* Number of threads the engine may use in this backend (>= 1). */
int			attention_thread_count(void);

/*
 * Id of the corpus named `name`; ERROR (undefined_object) when there is none.
 * Must be called between SPI_connect and SPI_finish.
 */
int32		attention_corpus_id(const char *name);

#endif
