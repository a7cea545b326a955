/*
 * signals.c - blocking signals in engine threads (signals.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "signals.h"

#include <pthread.h>

void
tf_block_signals(sigset_t *old)
{
	sigset_t	all;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, old);
}

void
tf_restore_signals(const sigset_t *old)
{
	pthread_sigmask(SIG_SETMASK, old, NULL);
}
