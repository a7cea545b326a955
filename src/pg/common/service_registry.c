/*
 * service_registry.c - the translation services' registry in shared memory
 * and its clients: finding or starting a model's service, sending it a
 * request through shm_mq queues in a DSM segment and waiting for the
 * answer. The SQL functions are in service.c, the service process is
 * bgworker/service_worker.c.
 *
 * A request's DSM segment holds a ServiceSegment header, then the request
 * queue (sized to hold the request whole, so the backend writes it before
 * the service attaches) and the answer queue. The requesting backend sets
 * both queues' sender and receiver (the service's PGPROC is in the slot),
 * posts the segment's handle and waits on its latch; it polls the slot's
 * generation meanwhile, so a service that exits before it attached the
 * segment is noticed within SERVICE_POLL_MS. A backend that errors out
 * (cancel, statement_timeout) detaches the segment: the service then
 * cannot attach it, or its answer goes to a detached queue and is dropped.
 */
#include "postgres.h"

#include "access/parallel.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "libpq/pqformat.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/shm_mq.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/wait_event.h"

#include "service_registry.h"
#include "settings.h"
#include "wait_events.h"
#include "workers.h"

#define SERVICE_POLL_MS 100		/* how often a waiting backend checks that its service lives */
#define ANSWER_QUEUE_MIN 65536	/* bytes; a longer answer streams through */

/* Failures of a model's service: automatic starts wait until `until`. */
typedef struct ServiceBackoff
{
	Oid			database;
	int32		model_id;
	int			failures;		/* 0: a free entry */
	TimestampTz until;
} ServiceBackoff;

/* The shared registry. */
typedef struct ServiceRegistry
{
	slock_t		mutex;			/* guards slot allocation (state FREE <-> STARTING) and backoff */
	ServiceSlot slots[SERVICE_SLOTS];
	ServiceBackoff backoff[SERVICE_SLOTS];
} ServiceRegistry;

/* What became of a request (service_call). */
typedef enum ServiceCall
{
	SERVICE_ANSWERED,
	SERVICE_NOT_SENT,			/* the service stopped taking requests */
	SERVICE_LOST				/* the service exited after it took the request */
} ServiceCall;

static ServiceRegistry *registry = NULL;
ServiceSlot *service_slots = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void
service_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(ServiceRegistry)));
}

static void
service_shmem_startup(void)
{
	bool		found;
	int			i;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	registry = ShmemInitStruct("attention translation services", sizeof(ServiceRegistry), &found);
	if (!found)
	{
		memset(registry, 0, sizeof(ServiceRegistry));
		SpinLockInit(&registry->mutex);
		for (i = 0; i < SERVICE_SLOTS; i++)
			SpinLockInit(&registry->slots[i].mutex);
	}
	LWLockRelease(AddinShmemInitLock);
	service_slots = registry->slots;
}

void
service_shmem_init(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = service_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = service_shmem_startup;
}

/* ERROR unless the registry exists (the library was preloaded). */
void
service_require_registry(void)
{
	if (registry == NULL)
		ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						errmsg("translation services need the attention library preloaded"),
						errhint("Add attention to shared_preload_libraries and restart the server.")));
}

/* The slot of model_id's service in this database (any state but FREE), or NULL. */
ServiceSlot *
service_find(int32 model_id, uint64 *generation, ServiceState *state)
{
	int			i;

	for (i = 0; i < SERVICE_SLOTS; i++)
	{
		ServiceSlot *s = &registry->slots[i];
		bool		match;

		SpinLockAcquire(&s->mutex);
		match = s->state != SERVICE_FREE && s->database == MyDatabaseId && s->model_id == model_id;
		*generation = s->generation;
		*state = s->state;
		SpinLockRelease(&s->mutex);
		if (match)
			return s;
	}
	return NULL;
}

/* The slot's current generation and state. */
static void
slot_state(ServiceSlot *s, uint64 *generation, ServiceState *state)
{
	SpinLockAcquire(&s->mutex);
	*generation = s->generation;
	*state = s->state;
	SpinLockRelease(&s->mutex);
}

int
service_release_idle(void)
{
	int			stopped = 0,
				i;

	if (registry == NULL)
		return 0;
	for (i = 0; i < SERVICE_SLOTS; i++)
	{
		ServiceSlot *s = &registry->slots[i];
		PGPROC	   *proc = NULL;

		SpinLockAcquire(&s->mutex);
		if (s->automatic && s->state == SERVICE_RUNNING && s->head == s->tail && s->in_progress == 0)
		{
			s->state = SERVICE_STOPPING;
			proc = s->proc;
		}
		SpinLockRelease(&s->mutex);
		if (proc != NULL)
		{
			SetLatch(&proc->procLatch);
			stopped++;
		}
	}
	return stopped;
}

/* Frees the slot taken for generation `generation` if it is still STARTING (a start that failed). */
static void
release_starting(ServiceSlot *s, uint64 generation)
{
	SpinLockAcquire(&registry->mutex);
	SpinLockAcquire(&s->mutex);
	if (s->generation == generation && s->state == SERVICE_STARTING)
	{
		s->state = SERVICE_FREE;
		s->generation++;
	}
	SpinLockRelease(&s->mutex);
	SpinLockRelease(&registry->mutex);
}

/* The back-off entry of (database, model_id), or a free or the oldest one to reuse (registry->mutex held). */
static ServiceBackoff *
backoff_entry(Oid database, int32 model_id, bool reuse)
{
	ServiceBackoff *oldest = &registry->backoff[0];
	int			i;

	for (i = 0; i < SERVICE_SLOTS; i++)
	{
		ServiceBackoff *b = &registry->backoff[i];

		if (b->failures > 0 && b->database == database && b->model_id == model_id)
			return b;
		if (b->failures == 0 || b->until < oldest->until)
			oldest = b;
	}
	return reuse ? oldest : NULL;
}

void
service_note_exit(Oid database, int32 model_id, bool failed, TimestampTz started)
{
	TimestampTz now = GetCurrentTimestamp();
	ServiceBackoff *b;

	SpinLockAcquire(&registry->mutex);
	b = backoff_entry(database, model_id, failed);
	if (b != NULL && !failed)
		b->failures = 0;
	else if (b != NULL)
	{
		/* one that ran a while starts the count afresh */
		if (b->failures == 0 || b->database != database || b->model_id != model_id ||
			TimestampDifferenceExceeds(started, now, SERVICE_BACKOFF_MAX_MS))
			b->failures = 0;
		b->database = database;
		b->model_id = model_id;
		b->failures++;
		/* the first restart is at once; then 1 s, 2 s, 4 s ... at most a minute */
		b->until = b->failures == 1 ? now :
			TimestampTzPlusMilliseconds(now, Min(SERVICE_BACKOFF_MAX_MS, 1000L << Min(b->failures - 2, 16)));
	}
	SpinLockRelease(&registry->mutex);
}

/* Is model_id's service in this database in back-off after failures (no automatic start now)? */
static bool
in_backoff(int32 model_id)
{
	ServiceBackoff *b;
	bool		waiting;

	SpinLockAcquire(&registry->mutex);
	b = backoff_entry(MyDatabaseId, model_id, false);
	waiting = b != NULL && GetCurrentTimestamp() < b->until;
	SpinLockRelease(&registry->mutex);
	return waiting;
}

/*
 * The reason the service of generation `generation` left in slot s when it
 * could not start (its checkpoint did not load), into *why and *code; false
 * when it left none.
 */
static bool
start_failure(ServiceSlot *s, uint64 generation, char **why, int *code)
{
	char		error[sizeof(s->error)] = "";

	SpinLockAcquire(&s->mutex);
	if (s->failed_generation == generation)
		strlcpy(error, s->error, sizeof(error));
	SpinLockRelease(&s->mutex);
	if (error[0] == '\0')
		return false;
	*code = ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE;
	*why = pstrdup(error);
	return true;
}

/*
 * Starts the service of model (model_id, name) on `device` in this
 * database, or finds the one that runs (marking it explicit unless
 * `automatic`); waits until it takes requests. Returns its slot with its
 * generation and pid; NULL with the reason in *why (and *code its SQLSTATE)
 * when it cannot: a hot standby, no service or worker slot free, a start
 * that failed. A cancel while waiting is an ERROR.
 */
static ServiceSlot *
try_start(int32 model_id, const char *name, const char *device, bool automatic, uint64 *generation, int *pid,
		  char **why, int *code)
{
	ServiceSlot *s = NULL;
	ServiceState state;
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	int			i;

	*code = ERRCODE_INSUFFICIENT_RESOURCES;
	if (RecoveryInProgress())
	{
		*code = ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE;
		*why = "the server is a hot standby";
		return NULL;
	}
	SpinLockAcquire(&registry->mutex);
	s = service_find(model_id, generation, &state);
	if (s == NULL)
	{
		for (i = 0; i < SERVICE_SLOTS && s == NULL; i++)
		{
			ServiceSlot *t = &registry->slots[i];

			SpinLockAcquire(&t->mutex);
			if (t->state == SERVICE_FREE)
			{
				s = t;
				s->state = SERVICE_STARTING;
				s->generation++;
				s->database = MyDatabaseId;
				s->model_id = model_id;
				strlcpy(s->model, name, sizeof(s->model));
				strlcpy(s->device, device, sizeof(s->device));
				s->automatic = automatic;
				s->pid = 0;
				s->proc = NULL;
				s->checkpoint_id = 0;
				s->head = s->tail = 0;
				s->in_progress = 0;
				s->requests = s->sentences = s->tokens = s->batches = 0;
				*generation = s->generation;
			}
			SpinLockRelease(&t->mutex);
		}
		state = SERVICE_FREE;	/* ours to start */
	}
	else if (!automatic)
	{
		SpinLockAcquire(&s->mutex);
		s->automatic = false;	/* start_service keeps it from timing out */
		SpinLockRelease(&s->mutex);
	}
	SpinLockRelease(&registry->mutex);
	if (s == NULL)
	{
		*why = psprintf("all %d service slots are taken", SERVICE_SLOTS);
		return NULL;
	}
	if (state == SERVICE_FREE)
	{
		attention_worker_init(&worker, "attention_service_main", "attention service", BGW_NEVER_RESTART,
							  Int32GetDatum((int32) (s - registry->slots)), true);
		snprintf(worker.bgw_name, BGW_MAXLEN, "attention translation service for model %s", name);
		memcpy(worker.bgw_extra, generation, sizeof(uint64));
		if (!RegisterDynamicBackgroundWorker(&worker, &handle))
		{
			release_starting(s, *generation);
			*why = psprintf("no background worker slot is free (max_worker_processes is %d)", max_worker_processes);
			return NULL;
		}
		if (WaitForBackgroundWorkerStartup(handle, pid) != BGWH_STARTED)
		{
			/* it may have run and exited already, leaving its reason */
			release_starting(s, *generation);
			if (!start_failure(s, *generation, why, code))
				*why = "its process did not start (see the server log)";
			return NULL;
		}
	}
	/* wait until it takes requests (or exits: then its slot is FREE again) */
	for (;;)
	{
		uint64		g;

		slot_state(s, &g, &state);
		if (g != *generation)
		{
			if (!start_failure(s, *generation, why, code))
			{
				*code = ERRCODE_CONNECTION_FAILURE;
				*why = "it exited while starting (see the server log)";
			}
			return NULL;
		}
		if (state != SERVICE_STARTING)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 10,
						 attention_wait_event(ATTENTION_WAIT_SERVICE_START));
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	SpinLockAcquire(&s->mutex);
	*pid = s->pid;
	SpinLockRelease(&s->mutex);
	return s;
}

ServiceSlot *
service_start(int32 model_id, const char *name, const char *device, uint64 *generation, int *pid)
{
	char	   *why;
	int			code;
	ServiceSlot *s = try_start(model_id, name, device, false, generation, pid, &why, &code);

	if (s == NULL && code != ERRCODE_INSUFFICIENT_RESOURCES && !RecoveryInProgress())
		ereport(ERROR, (errcode(code),
						errmsg("the translation service for model \"%s\" could not start: %s", name, why)));
	if (s == NULL)
		ereport(ERROR, (errcode(code),
						errmsg("could not start a translation service for model \"%s\": %s", name, why),
						code == ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE && RecoveryInProgress() ?
						errhint("Translate with attention.use_service = auto or off: each session loads the model.") :
						code == ERRCODE_INSUFFICIENT_RESOURCES ?
						errhint("Stop a service with attention.stop_service(model), or raise max_worker_processes.") : 0));
	return s;
}

/*
 * The slot of model d's running service, with its generation; NULL when
 * this session translates itself. Starts one on the CPU when none runs:
 * with `on` (an ERROR when it cannot), and with `auto` unless the model's
 * service is in back-off after failures (then, and when none can start,
 * NULL).
 */
static ServiceSlot *
service_for(const DeployedModel *d, uint64 *generation)
{
	ServiceSlot *s;
	ServiceState state;
	int			pid,
				code;
	char	   *why;

	if (attention_use_service == USE_SERVICE_OFF)
		return NULL;
	if (attention_use_service == USE_SERVICE_ON)
		service_require_registry();
	/* a deployment this transaction made is invisible to the service until it commits */
	if (registry == NULL || TransactionIdIsCurrentTransactionId(d->xmin))
		return NULL;
	s = service_find(d->model_id, generation, &state);
	if (s != NULL && state == SERVICE_RUNNING)
		return s;
	/* a parallel worker translates itself rather than start one (its leader would have) */
	if (IsParallelWorker())
		return NULL;
	if (attention_use_service == USE_SERVICE_ON)
		return service_start(d->model_id, d->name, "cpu", generation, &pid);
	if (RecoveryInProgress() || in_backoff(d->model_id))
		return NULL;
	/* a service that failed to load or exited counted itself into the back-off */
	return try_start(d->model_id, d->name, "cpu", true, generation, &pid, &why, &code);
}

void
service_put_text(StringInfo buf, text *t)
{
	if (t == NULL)
	{
		pq_sendint32(buf, -1);
		return;
	}
	pq_sendint32(buf, VARSIZE_ANY_EXHDR(t));
	pq_sendbytes(buf, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
}

text *
service_get_text(StringInfo buf)
{
	int32		len = pq_getmsgint(buf, 4);

	if (len < 0)
		return NULL;
	return cstring_to_text_with_len(pq_getmsgbytes(buf, len), len);
}

/* The request as bytes. */
static void
request_bytes(const ServiceRequest *req, StringInfo buf)
{
	int			i,
				count = req->kind == SERVICE_SCORE ? 2 * req->n : req->n;

	pq_sendint32(buf, req->kind);
	pq_sendint64(buf, req->checkpoint_id);
	pq_sendint32(buf, req->beam_size);
	pq_sendint32(buf, req->nbest);
	pq_sendint32(buf, req->max_length_offset);
	pq_sendint32(buf, req->max_output_tokens);
	pq_sendint32(buf, req->max_input_tokens);
	pq_sendfloat8(buf, req->length_penalty);
	pq_sendint32(buf, req->source_language);
	pq_sendint32(buf, req->target_language);
	pq_sendint32(buf, req->n);
	for (i = 0; i < count; i++)
		service_put_text(buf, req->texts[i]);
}

void
service_read_request(StringInfo buf, ServiceRequest *req)
{
	int			i,
				count;

	req->kind = pq_getmsgint(buf, 4);
	req->checkpoint_id = pq_getmsgint64(buf);
	req->beam_size = pq_getmsgint(buf, 4);
	req->nbest = pq_getmsgint(buf, 4);
	req->max_length_offset = pq_getmsgint(buf, 4);
	req->max_output_tokens = pq_getmsgint(buf, 4);
	req->max_input_tokens = pq_getmsgint(buf, 4);
	req->length_penalty = pq_getmsgfloat8(buf);
	req->source_language = pq_getmsgint(buf, 4);
	req->target_language = pq_getmsgint(buf, 4);
	req->n = pq_getmsgint(buf, 4);
	count = req->kind == SERVICE_SCORE ? 2 * req->n : req->n;
	req->texts = palloc(Max(count, 1) * sizeof(text *));
	for (i = 0; i < count; i++)
		req->texts[i] = service_get_text(buf);
}

/*
 * Sends request `req` to the service in `slot` (generation `generation`)
 * and waits for the answer, which it returns in *answer: SERVICE_ANSWERED;
 * SERVICE_NOT_SENT when the service stopped taking requests since it was
 * found; SERVICE_LOST when it exited after taking the request, before
 * answering.
 */
static ServiceCall
service_call(ServiceSlot *slot, uint64 generation, const ServiceRequest *req, StringInfo answer)
{
	StringInfoData msg;
	ServiceSegment *header;
	dsm_segment *seg;
	shm_mq	   *rq,
			   *aq;
	shm_mq_handle *rqh,
			   *aqh;
	Size		request_size,
				answer_size,
				n;
	void	   *data;
	bool		posted = false;

	initStringInfo(&msg);
	request_bytes(req, &msg);
	request_size = MAXALIGN(shm_mq_minimum_size + msg.len + 64);
	answer_size = MAXALIGN(Max(ANSWER_QUEUE_MIN, 2 * (Size) msg.len * Max(req->nbest, 1)));
	seg = dsm_create(MAXALIGN(sizeof(ServiceSegment)) + request_size + answer_size, 0);
	header = dsm_segment_address(seg);
	header->pid = MyProcPid;
	header->request_offset = MAXALIGN(sizeof(ServiceSegment));
	header->request_size = request_size;
	header->answer_offset = header->request_offset + request_size;
	header->answer_size = answer_size;

	/* both queues are wired here; the service's PGPROC is fixed while its generation lasts */
	SpinLockAcquire(&slot->mutex);
	if (slot->generation == generation && slot->state == SERVICE_RUNNING)
	{
		rq = shm_mq_create((char *) header + header->request_offset, request_size);
		shm_mq_set_sender(rq, MyProc);
		shm_mq_set_receiver(rq, slot->proc);
		aq = shm_mq_create((char *) header + header->answer_offset, answer_size);
		shm_mq_set_sender(aq, slot->proc);
		shm_mq_set_receiver(aq, MyProc);
		posted = true;
	}
	SpinLockRelease(&slot->mutex);
	if (!posted)
	{
		dsm_detach(seg);
		return SERVICE_NOT_SENT;
	}
	rqh = shm_mq_attach(rq, seg, NULL);
	aqh = shm_mq_attach(aq, seg, NULL);
	if (shm_mq_send(rqh, msg.len, msg.data, true, true) != SHM_MQ_SUCCESS)
		elog(ERROR, "could not queue a translation request");

	/* post the handle (the queue is full only under a flood: wait for room) */
	for (posted = false; !posted;)
	{
		PGPROC	   *proc = NULL;

		SpinLockAcquire(&slot->mutex);
		if (slot->generation != generation || slot->state != SERVICE_RUNNING)
		{
			SpinLockRelease(&slot->mutex);
			dsm_detach(seg);
			return SERVICE_NOT_SENT;
		}
		if (slot->tail - slot->head < SERVICE_QUEUE)
		{
			ServicePending *p = &slot->queue[slot->tail % SERVICE_QUEUE];

			p->handle = dsm_segment_handle(seg);
			p->pid = MyProcPid;
			slot->tail++;
			proc = slot->proc;
			posted = true;
		}
		SpinLockRelease(&slot->mutex);
		if (posted)
			SetLatch(&proc->procLatch);
		else
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 10,
							 attention_wait_event(ATTENTION_WAIT_SERVICE_QUEUE));
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}

	/* wait for the answer */
	for (;;)
	{
		shm_mq_result r = shm_mq_receive(aqh, &n, &data, true);
		uint64		g;
		ServiceState state;

		if (r == SHM_MQ_SUCCESS)
			break;
		if (r == SHM_MQ_DETACHED)
		{
			dsm_detach(seg);
			return SERVICE_LOST;
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, SERVICE_POLL_MS,
						 attention_wait_event(ATTENTION_WAIT_SERVICE_REPLY));
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		slot_state(slot, &g, &state);
		if (g != generation)
		{
			/* it may have answered just before it exited */
			if (shm_mq_receive(aqh, &n, &data, true) == SHM_MQ_SUCCESS)
				break;
			dsm_detach(seg);
			return SERVICE_LOST;
		}
	}
	initStringInfo(answer);
	appendBinaryStringInfo(answer, data, n);
	dsm_detach(seg);
	pfree(msg.data);
	return SERVICE_ANSWERED;
}

bool
service_send(const DeployedModel *d, const ServiceRequest *req, StringInfo answer)
{
	int			attempt;

	for (attempt = 0; attempt < 2; attempt++)
	{
		uint64		generation;
		ServiceSlot *slot = service_for(d, &generation);

		if (slot == NULL)
			return false;
		switch (service_call(slot, generation, req, answer))
		{
			case SERVICE_ANSWERED:
				return true;
			case SERVICE_NOT_SENT:
				return false;
			case SERVICE_LOST:
				if (attempt == 1 && attention_use_service == USE_SERVICE_ON)
					ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE),
									errmsg("the translation service for model \"%s\" exited twice before answering",
										   d->name),
									errhint("See the server log.")));
				break;
		}
	}
	return false;
}

void
service_raise(StringInfo answer)
{
	int			sqlstate = pq_getmsgint(answer, 4);
	const char *message,
			   *hint;

	if (sqlstate == 0)
		return;
	message = pq_getmsgstring(answer);
	hint = pq_getmsgstring(answer);
	ereport(ERROR, (errcode(sqlstate), errmsg("%s", message), hint[0] != '\0' ? errhint("%s", hint) : 0));
}

/* A request to model d's service with the session's settings; texts as given. */
ServiceRequest
service_request(ServiceKind kind, const DeployedModel *d, CallLanguages lang, int beam_size, int nbest,
				double length_penalty, int max_length_offset, text **texts, int n)
{
	ServiceRequest req;

	req.kind = kind;
	req.source_language = lang.source_id;
	req.target_language = lang.target_id;
	req.checkpoint_id = d->checkpoint_id;
	req.beam_size = beam_size;
	req.nbest = nbest;
	req.length_penalty = length_penalty;
	req.max_length_offset = max_length_offset;
	req.max_output_tokens = d->max_output_tokens;
	req.max_input_tokens = attention_max_input_tokens;
	req.texts = texts;
	req.n = n;
	return req;
}
