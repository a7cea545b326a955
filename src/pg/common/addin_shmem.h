/*
 * addin_shmem.h - a struct of the extension in the server's shared memory
 * (addin_shmem.c), reserved at start-up under shared_preload_libraries or
 * placed by the first process that needs it in the spare shared memory
 * every server keeps for add-ins. A leaf of the SQL glue.
 */
#ifndef ATTENTION_ADDIN_SHMEM_H
#define ATTENTION_ADDIN_SHMEM_H

#include "postgres.h"

/*
 * The shared struct `name` of `size` bytes (ShmemInitStruct under
 * AddinShmemInitLock), init() run on it by the process that creates it;
 * NULL when the shared memory is exhausted (once: *unavailable is set, a
 * LOG line says `consequence`, and later calls return NULL at once); any
 * other ERROR of ShmemInitStruct is raised.
 */
void	   *addin_shmem_attach(const char *name, Size size, void (*init) (void *shared), bool *unavailable,
							   const char *consequence);

#endif
