/*
 * signals.h - the engine's signal mask around computation (signals.c).
 */
#ifndef ATTENTION_SIGNALS_H
#define ATTENTION_SIGNALS_H

#include <signal.h>

/*
 * Blocks every signal in the calling thread while the engine computes, so
 * threads started meanwhile (OpenMP, OpenBLAS, NCCL) inherit the blocked
 * mask and PostgreSQL's handlers only ever run on the backend's own thread;
 * *old receives the mask to restore. The public compute entry points and
 * backend creation use them.
 */
void		tf_block_signals(sigset_t *old);

/* Restores the mask tf_block_signals saved in *old. */
void		tf_restore_signals(const sigset_t *old);

#endif
