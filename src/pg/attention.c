/*
 * attention.c - module entry point: PG_MODULE_MAGIC and the GUCs.
 */
#include "postgres.h"

#include <unistd.h>

#include "access/xact.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "attention.h"
#include "worker.h"

PG_MODULE_MAGIC;

int			attention_num_threads = 0;
char	   *attention_default_model = NULL;
int			attention_beam_size = 4;
int			attention_max_input_tokens = 512;
char	   *attention_cuda_library = NULL;

void		_PG_init(void);

/*
 * Defines the GUCs and, under shared_preload_libraries, registers the
 * launcher that resumes interrupted training jobs; creates no threads and
 * no device context.
 */
void
_PG_init(void)
{
	DefineCustomIntVariable("attention.num_threads",
							"Threads the engine may use per backend (0 = one per CPU).",
							"Used by translation, scoring and vocabulary training.",
							&attention_num_threads,
							0, 0, 1024,
							PGC_USERSET, 0,
							NULL, NULL, NULL);
	DefineCustomStringVariable("attention.default_model",
							   "Model that translate(text) and the functions given no model use.",
							   "Empty: the only model with a deployed checkpoint.",
							   &attention_default_model,
							   "",
							   PGC_USERSET, 0,
							   NULL, NULL, NULL);
	DefineCustomIntVariable("attention.beam_size",
							"Beam size of translate(text) (1 = greedy).",
							NULL,
							&attention_beam_size,
							4, 1, 64,
							PGC_USERSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("attention.max_input_tokens",
							"Longest source, in subword tokens, that translation accepts.",
							"Longer inputs are refused; split them into sentences.",
							&attention_max_input_tokens,
							512, 1, 65535,
							PGC_USERSET, 0,
							NULL, NULL, NULL);
	DefineCustomStringVariable("attention.cuda_library",
							   "Shared object of the CUDA backend that \"cuda\" devices use.",
							   "$libdir/attention_cuda.so for GPUs; $libdir/attention_cuda_emu.so runs the same "
							   "kernels on the CPU under emulation (tests). Read when a worker creates its model.",
							   &attention_cuda_library,
							   "$libdir/attention_cuda.so",
							   PGC_SUSET, 0,
							   NULL, NULL, NULL);
	MarkGUCPrefixReserved("attention");
	if (process_shared_preload_libraries_in_progress)
		register_launcher();
}

/* Number of threads the engine may use in this backend (>= 1); one in a parallel query. */
int
attention_thread_count(void)
{
	long		cpus;

	if (IsInParallelMode())
		return 1;
	if (attention_num_threads > 0)
		return attention_num_threads;
	cpus = sysconf(_SC_NPROCESSORS_ONLN);
	return cpus > 0 ? (int) cpus : 1;
}
