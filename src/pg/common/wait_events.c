/*
 * wait_events.c - named wait events (see wait_events.h); the names and what
 * each wait is are documented in docs/operations.md.
 */
#include "postgres.h"

#include "utils/wait_event.h"

#include "wait_events.h"

#if PG_VERSION_NUM >= 170000
/* The name of each AttentionWait, in the enum's order. */
static const char *const wait_names[ATTENTION_WAIT_COUNT] = {
	"AttentionServiceStart",
	"AttentionServiceStop",
	"AttentionServiceQueue",
	"AttentionServiceReply",
	"AttentionServiceIdle",
	"AttentionWorkerSlot",
	"AttentionWorkerStart",
	"AttentionLauncher",
	"AttentionRankRendezvous",
	"AttentionRankFailure",
	"AttentionCoordinator",
	"AttentionVocabularyTrainer",
};

/* This process's registered events (0: not yet; custom events start above it). */
static uint32 wait_events[ATTENTION_WAIT_COUNT];
#endif

uint32
attention_wait_event(AttentionWait w)
{
	Assert(w >= 0 && w < ATTENTION_WAIT_COUNT);
#if PG_VERSION_NUM >= 170000
	if (wait_events[w] == 0)
		wait_events[w] = WaitEventExtensionNew(wait_names[w]);
	return wait_events[w];
#else
	(void) w;
	return PG_WAIT_EXTENSION;
#endif
}
