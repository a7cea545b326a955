/*
 * batch_translate.h - the planner hook and custom scan that run per-row
 * translate() calls in batches (batch_translate.c).
 */
#ifndef ATTENTION_BATCH_TRANSLATE_H
#define ATTENTION_BATCH_TRANSLATE_H

/*
 * Registers the "Attention Batch Translate" custom scan (also in parallel
 * workers, which read it back from the plan) and installs the planner hook
 * that inserts it. From _PG_init, once per process.
 */
void		batch_translate_init(void);

#endif
