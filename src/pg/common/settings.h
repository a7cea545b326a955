/*
 * settings.h - the extension's settings (GUCs) and what derives from them
 * (settings.c): a leaf of the SQL glue.
 */
#ifndef ATTENTION_SETTINGS_H
#define ATTENTION_SETTINGS_H

#include "postgres.h"

/* The settings (GUCs). */
extern int	attention_num_threads;	/* attention.num_threads: 0 = attention.max_threads */
extern int	attention_max_threads;	/* attention.max_threads: 0 = the server's CPUs */
extern char *attention_default_model;	/* attention.default_model */
extern int	attention_beam_size;	/* attention.beam_size */
extern int	attention_max_input_tokens; /* attention.max_input_tokens */
extern char *attention_cuda_library;	/* attention.cuda_library */
extern int	attention_batch_rows;	/* attention.batch_rows: 0 = per-row calls */
extern int	attention_use_service;	/* attention.use_service: a UseService */
extern int	attention_service_batch_sentences;	/* attention.service_batch_sentences */
extern int	attention_service_batch_wait_ms;	/* attention.service_batch_wait_ms */
extern int	attention_service_idle_timeout; /* attention.service_idle_timeout, seconds: 0 = never */

/* attention.use_service: whether translation goes through the model's translation service. */
typedef enum UseService
{
	USE_SERVICE_AUTO,			/* where one can run: start one when none runs */
	USE_SERVICE_ON,				/* always: start one when none runs, ERROR when none can */
	USE_SERVICE_OFF				/* never */
} UseService;

/*
 * Hands attention.cuda_library to the engine ("$libdir/" expanded to the
 * server's package library directory) for the CUDA models created after it.
 */
void		attention_use_cuda_library(void);

/* Defines the settings (from _PG_init). */
void		attention_define_settings(void);

#endif
