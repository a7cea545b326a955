/*
 * settings.c - the extension's settings (GUCs), defined once by _PG_init,
 * and what derives from them: the engine's thread count and the CUDA
 * library it loads. A leaf of the SQL glue.
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "settings.h"
#include "transformer.h"

int			attention_num_threads = 0;
int			attention_max_threads = 0;
char	   *attention_default_model = NULL;
int			attention_beam_size = TF_DEFAULT_BEAM_SIZE;
int			attention_max_input_tokens = 512;
int			attention_batch_rows = 64;
char	   *attention_cuda_library = NULL;
int			attention_use_service = USE_SERVICE_AUTO;
int			attention_service_batch_sentences = 32;
int			attention_service_batch_wait_ms = 5;
int			attention_service_idle_timeout = 300;

static const struct config_enum_entry use_service_options[] = {
	{"auto", USE_SERVICE_AUTO, false},
	{"on", USE_SERVICE_ON, false},
	{"off", USE_SERVICE_OFF, false},
	{NULL, 0, false}
};

void
attention_define_settings(void)
{
	DefineCustomIntVariable("attention.num_threads",
							"Most threads one engine call of this session asks for (0 = attention.max_threads).",
							"It gets what the server-wide budget attention.max_threads has free, at least one.",
							&attention_num_threads,
							0, 0, 1024,
							PGC_USERSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("attention.max_threads",
							"Engine threads of all sessions, services and training jobs of the server together (0 = its CPUs).",
							"0 counts the CPUs the server may use: its CPU affinity, lowered to its cgroup's CPU quota. "
							"An engine call takes what is free, at least one thread, and never waits.",
							&attention_max_threads,
							0, 0, 4096,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
	DefineCustomStringVariable("attention.default_model",
							   "Model that translate(text) and the functions given no model use.",
							   "Empty: the only model with a deployed checkpoint.",
							   &attention_default_model,
							   "",
							   PGC_USERSET, 0,
							   NULL, NULL, NULL);
	DefineCustomIntVariable("attention.beam_size",
							"Beam size where a call names none and its model has none of its own (set_decoding); 1 = greedy.",
							NULL,
							&attention_beam_size,
							TF_DEFAULT_BEAM_SIZE, 1, 64,
							PGC_USERSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("attention.max_input_tokens",
							"Longest source, in subword tokens, that translation accepts.",
							"Longer inputs are refused; split them into sentences.",
							&attention_max_input_tokens,
							512, 1, 65535,
							PGC_USERSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("attention.batch_rows",
							"Rows per batch when the planner batches per-row translate() calls (0 = off).",
							"The Attention Batch Translate node reads this many rows ahead of what it returns.",
							&attention_batch_rows,
							64, 0, 10000,
							PGC_USERSET, 0,
							NULL, NULL, NULL);
	DefineCustomEnumVariable("attention.use_service",
							 "Whether translations and scores go through the model's translation service.",
							 "auto: yes, starting one on the CPU when none runs, where one can run (the library "
							 "preloaded, a primary, a free worker slot), else the session translates itself; "
							 "on: always (an ERROR where none can run); off: never (the model is loaded in this session).",
							 &attention_use_service,
							 USE_SERVICE_AUTO, use_service_options,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("attention.service_batch_sentences",
							"Sentences a translation service decodes together at most.",
							"Later requests wait for room in its batch; a request with more sentences is served in batches of this size.",
							&attention_service_batch_sentences,
							32, 1, 1024,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("attention.service_batch_wait_ms",
							"Longest an idle translation service waits for a batch to fill after its first request.",
							NULL,
							&attention_service_batch_wait_ms,
							5, 0, 10000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("attention.service_idle_timeout",
							"A translation service started by a translation exits after this long without requests (0 = never).",
							"Services started with attention.start_service run until stopped.",
							&attention_service_idle_timeout,
							300, 0, 86400 * 365,
							PGC_SIGHUP, GUC_UNIT_S,
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
}

void
attention_use_cuda_library(void)
{
	const char *lib = attention_cuda_library;

	if (strncmp(lib, "$libdir/", 8) == 0)
		tf_backend_set_cuda_library(psprintf("%s/%s", pkglib_path, lib + 8));
	else
		tf_backend_set_cuda_library(lib);
}
