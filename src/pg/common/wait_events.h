/*
 * wait_events.h - the extension's waits, each under its own name in
 * pg_stat_activity.wait_event on PostgreSQL 17 and later (custom wait
 * events of class Extension, listed in pg_wait_events once used), and as
 * the generic "Extension" on 15 and 16. Only waits on a latch or socket
 * carry one: computation never does.
 */
#ifndef ATTENTION_WAIT_EVENTS_H
#define ATTENTION_WAIT_EVENTS_H

#include "postgres.h"

typedef enum AttentionWait
{
	ATTENTION_WAIT_SERVICE_START,	/* AttentionServiceStart */
	ATTENTION_WAIT_SERVICE_STOP,	/* AttentionServiceStop */
	ATTENTION_WAIT_SERVICE_QUEUE,	/* AttentionServiceQueue */
	ATTENTION_WAIT_SERVICE_REPLY,	/* AttentionServiceReply */
	ATTENTION_WAIT_SERVICE_IDLE,	/* AttentionServiceIdle */
	ATTENTION_WAIT_WORKER_SLOT, /* AttentionWorkerSlot */
	ATTENTION_WAIT_WORKER_START,	/* AttentionWorkerStart */
	ATTENTION_WAIT_LAUNCHER,	/* AttentionLauncher */
	ATTENTION_WAIT_RANK_RENDEZVOUS, /* AttentionRankRendezvous */
	ATTENTION_WAIT_RANK_FAILURE,	/* AttentionRankFailure */
	ATTENTION_WAIT_COORDINATOR, /* AttentionCoordinator */
	ATTENTION_WAIT_VOCABULARY_TRAINER,	/* AttentionVocabularyTrainer */
	ATTENTION_WAIT_COUNT
} AttentionWait;

/*
 * The wait event info of wait w for WaitLatch and WaitLatchOrSocket: on 17
 * and later its custom event, registered by name at this process's first
 * wait of that kind (WaitEventExtensionNew: shared memory, so not in
 * _PG_init) and cached; PG_WAIT_EXTENSION before 17.
 */
uint32		attention_wait_event(AttentionWait w);

#endif							/* ATTENTION_WAIT_EVENTS_H */
