/*
 * addin_shmem.c - a struct of the extension in shared memory (addin_shmem.h).
 */
#include "postgres.h"

#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "addin_shmem.h"

void *
addin_shmem_attach(const char *name, Size size, void (*init) (void *shared), bool *unavailable,
				   const char *consequence)
{
	MemoryContext cxt = CurrentMemoryContext;
	void	   *volatile shared = NULL;
	bool		found;

	if (*unavailable)
		return NULL;
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	PG_TRY();
	{
		void	   *s = ShmemInitStruct(name, size, &found);

		if (!found)
			init(s);
		shared = s;
	}
	PG_CATCH();
	{
		ErrorData  *e;

		/* out of shared memory: ShmemInitStruct released its own lock and left nothing behind */
		MemoryContextSwitchTo(cxt);
		e = CopyErrorData();
		if (e->sqlerrcode != ERRCODE_OUT_OF_MEMORY)
			PG_RE_THROW();		/* anything else (a struct of another size) is a bug to see */
		FreeErrorData(e);
		FlushErrorState();
		*unavailable = true;
	}
	PG_END_TRY();
	LWLockRelease(AddinShmemInitLock);
	if (*unavailable)
		ereport(LOG, (errmsg("attention: no shared memory for %s: %s", name, consequence),
					  errhint("Add attention to shared_preload_libraries.")));
	return shared;
}
