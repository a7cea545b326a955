/*
 * service_registry.h - the translation services' registry and request
 * protocol (service_registry.c). A translation service is one background
 * worker per (database, model) that holds the model once and decodes the
 * sentences of every session in shared batches (bgworker/service_worker.c).
 *
 * Its rendezvous is a registry of slots in shared memory reserved at
 * start-up (so shared_preload_libraries = 'attention'). A
 * request travels in a DSM segment the requesting backend creates: two
 * shm_mq queues, the request (backend -> service) and the answer (service
 * -> backend). The backend posts the segment's handle in the service's
 * slot, sets its latch and waits on its own; the service gathers requests
 * (service_worker.c), decodes them in batches and answers each.
 */
#ifndef ATTENTION_SERVICE_REGISTRY_H
#define ATTENTION_SERVICE_REGISTRY_H

#include "postgres.h"

#include "fmgr.h"
#include "lib/stringinfo.h"
#include "storage/dsm.h"
#include "storage/proc.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "model_cache.h"

#define SERVICE_SLOTS 32		/* services per cluster */
#define SERVICE_QUEUE 1024		/* requests waiting for one service */
#define SERVICE_BACKOFF_MAX_MS 60000	/* longest wait before a failed service is started again */

/* A service slot's state. */
typedef enum ServiceState
{
	SERVICE_FREE = 0,
	SERVICE_STARTING,			/* registered, not yet connected */
	SERVICE_RUNNING,			/* takes requests */
	SERVICE_STOPPING			/* answers what it has, takes no more */
} ServiceState;

/* A posted request: its DSM segment and who posted it. */
typedef struct ServicePending
{
	dsm_handle	handle;
	int			pid;
} ServicePending;

/* One service, in shared memory; mutex guards every field. */
typedef struct ServiceSlot
{
	slock_t		mutex;
	ServiceState state;
	uint64		generation;		/* changes when a service starts or exits */
	Oid			database;
	int32		model_id;
	char		model[NAMEDATALEN * 2];
	char		device[16];
	bool		automatic;		/* started by a translation: exits when idle */
	int			pid;
	PGPROC	   *proc;			/* the service's, while RUNNING or STOPPING */
	int64		checkpoint_id;	/* loaded last */
	uint64		failed_generation;	/* the generation whose start failed with `error` */
	char		error[256];
	uint32		head,			/* queue[head % SERVICE_QUEUE] is the oldest */
				tail;
	ServicePending queue[SERVICE_QUEUE];
	int			in_progress;	/* requests taken, not yet answered */
	int64		requests,
				sentences,
				tokens,
				batches;
} ServiceSlot;

/* Request kinds. */
typedef enum ServiceKind
{
	SERVICE_TRANSLATE = 1,		/* texts -> translations */
	SERVICE_NBEST,				/* one text -> nbest hypotheses with scores and pieces */
	SERVICE_SCORE				/* (source, target) pairs -> log-probabilities */
} ServiceKind;

/*
 * A request as the service reads it. Texts are NULL for SQL NULLs; for
 * SERVICE_SCORE, texts holds n (source, target) pairs.
 */
typedef struct ServiceRequest
{
	ServiceKind kind;
	int64		checkpoint_id;	/* the deployed checkpoint the statement saw */
	int32		beam_size,
				nbest,
				max_length_offset,
				max_output_tokens,	/* the model's (DeployedModel), 0: none */
				max_input_tokens;	/* the session's attention.max_input_tokens */
	double		length_penalty;
	int32		source_language,
				target_language;	/* language token ids (CallLanguages), -1: none */
	int			n;
	text	  **texts;
} ServiceRequest;

/* The registry (NULL unless the library was preloaded). */
extern ServiceSlot *service_slots;

/* Reserves and attaches the registry's shared memory (from _PG_init under preloading). */
void		service_shmem_init(void);

/* ERROR (object_not_in_prerequisite_state, with a hint) unless the registry exists. */
void		service_require_registry(void);

/*
 * The slot of model_id's service in this database (any state but FREE) with
 * its generation and state, or NULL when none runs.
 */
ServiceSlot *service_find(int32 model_id, uint64 *generation, ServiceState *state);

/*
 * Starts the service of model (model_id, name) on `device` ("cpu" or
 * "cuda") in this database, or finds the one that runs; waits until it
 * takes requests. Returns its slot and generation; *pid receives its pid.
 * ERROR on a hot standby, when every slot or every worker slot is taken,
 * or when the service fails to start (its reason).
 */
ServiceSlot *service_start(int32 model_id, const char *name, const char *device, uint64 *generation,
						   int *pid);

/* A request of `kind` to model d's service with the session's settings; texts as given. */
ServiceRequest service_request(ServiceKind kind, const DeployedModel *d, CallLanguages lang, int beam_size,
							   int nbest, double length_penalty, int max_length_offset, text **texts, int n);

/*
 * Sends request `req` to model d's translation service when
 * attention.use_service lets it and waits for the answer, returned in
 * *answer (its first int32: 0 for success, else an error's SQLSTATE, then
 * the message and hint: service_raise re-throws it). A service is started
 * on the CPU when none runs: with `auto` (the default) unless none can be
 * (not preloaded, a hot standby, a parallel worker, no service or worker
 * slot free, the model's service in back-off after failures), with `on`
 * always (an ERROR when it cannot). A request whose service exited before
 * answering is sent once more (to a service started anew). Returns false
 * when this session is to translate itself: `off`, `auto` where no service
 * can run, a service that stopped taking requests, `auto` after a second
 * loss. ERROR (connection_failure) with `on` after a second loss.
 */
bool		service_send(const DeployedModel *d, const ServiceRequest *req, StringInfo answer);

/*
 * Records the exit of model_id's service in `database` (from the service):
 * after a failure (`failed`: an ERROR, FATAL or a start that failed) the
 * next automatic start is at once, then after 1 s, 2 s, 4 s ... at most a
 * minute (a service that ran a minute counts afresh); a clean exit clears
 * the count. `started`: when the service started.
 */
void		service_note_exit(Oid database, int32 model_id, bool failed, TimestampTz started);

/*
 * Tells the idle translation services of the cluster that translations
 * started (automatic; none with a request queued or in progress) to exit,
 * which frees their worker slots once the postmaster has reaped them;
 * returns how many. Requests posted meanwhile translate in their sessions.
 */
int			service_release_idle(void);

/* Reads the answer's status; re-throws the service's ERROR when it sent one. */
void		service_raise(StringInfo answer);

/* Text t (NULL: SQL NULL) as an int32 length (-1 for NULL) and its bytes. */
void		service_put_text(StringInfo buf, text *t);

/* The next text of buf (service_put_text's format); NULL for SQL NULL. */
text	   *service_get_text(StringInfo buf);

/* Parses a request's bytes into *req (texts palloc'd). */
void		service_read_request(StringInfo buf, ServiceRequest *req);

/* What the service process shares with the registry: its slot's layout in a request segment. */
typedef struct ServiceSegment
{
	int			pid;			/* of the requesting backend */
	Size		request_offset,
				request_size,
				answer_offset,
				answer_size;
} ServiceSegment;

#endif
