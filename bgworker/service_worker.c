/*
 * service_worker.c - the translation service process: one background
 * worker per (database, model), started by service_start
 * (src/pg/common/service_registry.c).
 *
 * It connects as the bootstrap superuser and reads the model's rows as the
 * model's owner (SetUserIdAndSecContext), the read path only. It loads the
 * deployed checkpoint before it takes requests (start_service reports why
 * when that fails). Its loop:
 * wait on the latch for posted requests; translations that can join the
 * stream (below) start at once, anything else gathers more requests for at
 * most attention.service_batch_wait_ms or until
 * attention.service_batch_sentences sentences are in. Translations
 * (translate, translate(text[]), the batched-rows node) of the loaded
 * checkpoint are decoded by continuous batching: their sentences join one
 * engine stream (tf_stream_*) between its steps, each request is answered
 * as soon as its own sentences are done, and while the stream decodes,
 * requests that arrive join at the next step instead of waiting for the
 * batch's longest sentence. Everything else (n-best lists, scores, another
 * checkpoint or other options than the stream's) waits until the stream
 * drains (no new sentences join it meanwhile) and is then served in
 * batches: in arrival order of their checkpoints (the one each statement
 * saw: after a redeploy the queued requests finish on the old checkpoint,
 * then the new one is loaded), requests with equal options decoded
 * together (identical sources once, length-sorted engine calls). A
 * request's own error (an over-long source) is its answer alone; a
 * checkpoint that does not load fails the requests that asked for it.
 * When idle it checks once a second that the model still exists and that
 * no DROP DATABASE waits for it, and exits otherwise; a service that a
 * translation started (automatic) also exits after
 * attention.service_idle_timeout without requests. stop_service (and the
 * idle timeout) set the slot STOPPING: it answers what is queued, then
 * exits. On exit the slot is freed and its generation changes, which the
 * waiting backends notice (they send their request once more), and the
 * exit is recorded for the back-off of automatic starts. Each engine call
 * (a join, a step) takes its threads from the CPU budget.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_database.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "libpq/pqformat.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "portability/instr_time.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "storage/shm_mq.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "cpu_budget.h"
#include "entry_points.h"
#include "service_registry.h"
#include "settings.h"
#include "statistics.h"
#include "translation.h"
#include "wait_events.h"
#include "workers.h"

#define IDLE_CHECK_MS 1000		/* how often an idle service checks that its model exists */

/* A request taken from the queue, with its segment and answer queue, in its own memory context. */
typedef struct Call
{
	MemoryContext cxt;			/* holds the call, its request and results */
	dsm_segment *segment;
	shm_mq_handle *answer;
	ServiceRequest req;
	Encoded    *encoded;		/* the request's sources (TRANSLATE, NBEST) */
	bool		done;			/* answered */
	/* in the stream: translations so far, sentences still decoding, output tokens */
	text	  **results;
	int			pending;
	int64		tokens;
} Call;

static ServiceSlot *slot;
static uint64 my_generation;
static int32 model_id;
static char device[16];
static MemoryContext calls_cxt;	/* parent of the calls' contexts */
static AttentionModel *loaded;	/* the checkpoint loaded last (NULL while loading) */
static TimestampTz started_at;

/* The stream of translations and the decoding options it was created with. */
static TfStream *stream;
static AttentionModel *stream_model;
static ServiceRequest stream_key;
static Call **streamed;			/* [places]: calls with sentences in the stream, NULL: a free place */
static int	places,
			places_room;
static int	n_streamed;			/* calls in the stream */

/*
 * Frees the slot when the process exits (whatever the reason), and records
 * the exit for the back-off of automatic restarts (an exit code other
 * than 0 is an ERROR, FATAL or a start that failed).
 */
static void
service_exit(int code, Datum arg)
{
	service_note_exit(MyDatabaseId, model_id, code != 0, started_at);
	SpinLockAcquire(&slot->mutex);
	if (slot->generation == my_generation)
	{
		slot->state = SERVICE_FREE;
		slot->pid = 0;
		slot->proc = NULL;
		slot->generation++;
		slot->head = slot->tail = 0;
		slot->in_progress = 0;
	}
	SpinLockRelease(&slot->mutex);
}

/* Sends an answer and lets the requester go (a requester that left drops it). */
static void
answer(Call *c, StringInfo buf)
{
	SpinLockAcquire(&slot->mutex);
	slot->in_progress--;
	SpinLockRelease(&slot->mutex);
	(void) shm_mq_send(c->answer, buf->len, buf->data, false, true);
	dsm_detach(c->segment);
	c->done = true;
}

/* Answers with an ERROR's SQLSTATE, message and hint. */
static void
answer_error(Call *c, ErrorData *e)
{
	StringInfoData buf;

	initStringInfo(&buf);
	pq_sendint32(&buf, e->sqlerrcode != 0 ? e->sqlerrcode : ERRCODE_INTERNAL_ERROR);
	pq_sendstring(&buf, e->message != NULL ? e->message : "unknown error");
	pq_sendstring(&buf, e->hint != NULL ? e->hint : "");
	answer(c, &buf);
}

/* The current ERROR, copied into `cxt`, and the error state cleared. */
static ErrorData *
catch_error(MemoryContext cxt)
{
	ErrorData  *e;

	MemoryContextSwitchTo(cxt);
	e = CopyErrorData();
	FlushErrorState();
	return e;
}

/*
 * Takes the posted requests: attaches each segment (one whose requester
 * already left cannot be, and is skipped) and reads its request into a new
 * call in its own context. Adds them to *calls ([*n], room *room, in
 * calls_cxt) and their sentences to *sentences.
 */
static void
take_requests(Call ***calls, int *n, int *room, int *sentences)
{
	ServicePending pending[SERVICE_QUEUE];
	int			count = 0,
				i;

	SpinLockAcquire(&slot->mutex);
	while (slot->head != slot->tail)
		pending[count++] = slot->queue[slot->head++ % SERVICE_QUEUE];
	slot->in_progress += count;
	SpinLockRelease(&slot->mutex);
	for (i = 0; i < count; i++)
	{
		dsm_segment *seg = dsm_attach(pending[i].handle);
		ServiceSegment *h;
		shm_mq_handle *rq;
		Size		len;
		void	   *data;
		StringInfoData buf;
		Call	   *c;

		if (seg != NULL)
		{
			dsm_pin_mapping(seg);
			h = dsm_segment_address(seg);
			rq = shm_mq_attach((shm_mq *) ((char *) h + h->request_offset), seg, NULL);
			if (h->pid == pending[i].pid && shm_mq_receive(rq, &len, &data, true) == SHM_MQ_SUCCESS)
			{
				MemoryContext cxt = AllocSetContextCreate(calls_cxt, "attention service request",
														  ALLOCSET_SMALL_SIZES);
				MemoryContext old = MemoryContextSwitchTo(cxt);

				if (*n == *room)
				{
					*room *= 2;
					*calls = repalloc(*calls, *room * sizeof(Call *));
				}
				c = palloc0(sizeof(Call));
				(*calls)[(*n)++] = c;
				c->cxt = cxt;
				c->segment = seg;
				c->answer = shm_mq_attach((shm_mq *) ((char *) h + h->answer_offset), seg, NULL);
				buf.data = data;
				buf.len = buf.maxlen = (int) len;
				buf.cursor = 0;
				service_read_request(&buf, &c->req);
				MemoryContextSwitchTo(old);
				*sentences += c->req.n;
				continue;
			}
			dsm_detach(seg);
		}
		SpinLockAcquire(&slot->mutex);
		slot->in_progress--;
		SpinLockRelease(&slot->mutex);
	}
}

/*
 * The model at checkpoint `checkpoint_id`, loaded on the service's device
 * (once; the previous checkpoint is freed). Runs a transaction and reads as
 * the model's owner; ERROR when the checkpoint is gone or does not load.
 */
static AttentionModel *
service_model(int64 checkpoint_id)
{
	DeployedModel d;
	Oid			owner,
				save_user;
	int			save_sec;
	bool		isnull;
	AttentionModel *am;
	Jsonb	   *config;

	worker_begin();
	if (SPI_execute_with_args("SELECT m.name, m.config, m.vocabulary_id, m.owner::oid FROM attention.models m "
							  "JOIN attention.checkpoints c ON c.model_id = m.model_id "
							  "WHERE m.model_id = $1 AND c.checkpoint_id = $2", 2, (Oid[]) {INT4OID, INT8OID},
							  (Datum[]) {Int32GetDatum(model_id), Int64GetDatum(checkpoint_id)}, NULL, true, 1) !=
		SPI_OK_SELECT)
		elog(ERROR, "could not read attention.models");
	if (SPI_processed == 0)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
						errmsg("checkpoint %lld of the served model no longer exists", (long long) checkpoint_id)));
	memset(&d, 0, sizeof(d));
	strlcpy(d.name, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1), sizeof(d.name));
	config = DatumGetJsonbP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	d.config = MemoryContextAlloc(TopTransactionContext, VARSIZE(config));
	memcpy(d.config, config, VARSIZE(config));
	d.vocabulary_id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull));
	owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull));
	SPI_finish();
	d.model_id = model_id;
	d.checkpoint_id = checkpoint_id;
	d.xmin = InvalidTransactionId;	/* a checkpoint's tensors never change */

	/*
	 * the tensors as the owner reads them (row-level security), a
	 * security-restricted operation under the pinned search_path
	 * (worker_pin_search_path); an ERROR restores the user
	 */
	GetUserIdAndSecContext(&save_user, &save_sec);
	SetUserIdAndSecContext(owner, save_sec | SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
	loaded = NULL;				/* loading another checkpoint frees the one loaded */
	am = attention_model_load(&d, device, true);
	SetUserIdAndSecContext(save_user, save_sec);
	PopActiveSnapshot();
	CommitTransactionCommand();
	loaded = am;
	return am;
}

/* Same decoding options (and kind, and target language)? */
static bool
same_options(const ServiceRequest *a, const ServiceRequest *b)
{
	return a->kind == b->kind && a->checkpoint_id == b->checkpoint_id && a->beam_size == b->beam_size &&
		a->nbest == b->nbest && a->length_penalty == b->length_penalty &&
		a->max_length_offset == b->max_length_offset && a->max_output_tokens == b->max_output_tokens &&
		a->target_language == b->target_language;
}

/* Encodes a request's sources under its max_input_tokens; an ERROR is its answer. */
static void
encode_request(AttentionModel *am, Call *c, MemoryContext cxt)
{
	int			i,
				saved = attention_max_input_tokens;

	PG_TRY();
	{
		MemoryContext old = MemoryContextSwitchTo(c->cxt);

		attention_max_input_tokens = c->req.max_input_tokens;
		c->encoded = palloc0(Max(c->req.n, 1) * sizeof(Encoded));
		if (c->req.kind != SERVICE_SCORE)
			for (i = 0; i < c->req.n; i++)
				if (c->req.texts[i] != NULL)
					c->encoded[i] = encode_text(am, c->req.texts[i], true, SPM_SOURCE, c->req.source_language);
		MemoryContextSwitchTo(old);
	}
	PG_CATCH();
	{
		answer_error(c, catch_error(cxt));
	}
	PG_END_TRY();
	attention_max_input_tokens = saved;
}

/* nbest_hypotheses' emitter: appends a hypothesis to the answer in arg. */
static void
put_hypothesis(void *arg, text *translation, double score, ArrayType *pieces)
{
	StringInfo	buf = arg;
	Datum	   *p;
	bool	   *nulls;
	int			n,
				i;

	service_put_text(buf, translation);
	pq_sendfloat8(buf, score);
	deconstruct_array(pieces, TEXTOID, -1, false, TYPALIGN_INT, &p, &nulls, &n);
	pq_sendint32(buf, n);
	for (i = 0; i < n; i++)
		service_put_text(buf, DatumGetTextPP(p[i]));
}

/*
 * Adds served requests' counts to the slot's, before they are answered (a
 * client that reads attention.services after its answer sees them).
 */
static void
count_served(int requests, int sentences, int64 tokens, int batches)
{
	SpinLockAcquire(&slot->mutex);
	slot->requests += requests;
	slot->sentences += sentences;
	slot->tokens += tokens;
	slot->batches += batches;
	SpinLockRelease(&slot->mutex);
}

/*
 * Serves the requests calls[first ..] with calls[first]'s options, all of
 * them not yet answered, with model am: TRANSLATE requests pooled into one
 * translate_encoded, NBEST and SCORE ones in turn. An ERROR fails the
 * requests it concerns; counts the output tokens.
 */
static void
serve_group(AttentionModel *am, Call **calls, int n, int first, MemoryContext cxt)
{
	ServiceRequest *key = &calls[first]->req;
	TfDecodeOptions opt = decode_options(am, key->beam_size, key->nbest, key->length_penalty,
										 key->max_length_offset, key->max_output_tokens, key->target_language);
	int			total = 0,
				saved = attention_max_input_tokens,
				i,
				k;

	for (i = first; i < n; i++)
		if (!calls[i]->done && same_options(&calls[i]->req, key))
			total += calls[i]->req.n;
	if (key->kind == SERVICE_TRANSLATE)
	{
		PG_TRY();
		{
			Encoded    *pool = palloc(Max(total, 1) * sizeof(Encoded));
			text	  **results = palloc(Max(total, 1) * sizeof(text *));
			int64		tokens = 0;

			for (i = first, k = 0; i < n; i++)
				if (!calls[i]->done && same_options(&calls[i]->req, key))
				{
					memcpy(pool + k, calls[i]->encoded, calls[i]->req.n * sizeof(Encoded));
					k += calls[i]->req.n;
				}
			translate_encoded(am, pool, total, &opt, attention_service_batch_sentences, results, &tokens);
			count_served(0, 0, tokens, 0);
			for (i = first, k = 0; i < n; i++)
				if (!calls[i]->done && same_options(&calls[i]->req, key))
				{
					StringInfoData buf;
					int			j;

					initStringInfo(&buf);
					pq_sendint32(&buf, 0);
					for (j = 0; j < calls[i]->req.n; j++)
						service_put_text(&buf, results[k++]);
					answer(calls[i], &buf);
				}
		}
		PG_CATCH();
		{
			ErrorData  *e = catch_error(cxt);

			for (i = first; i < n; i++)
				if (!calls[i]->done && same_options(&calls[i]->req, key))
					answer_error(calls[i], e);
		}
		PG_END_TRY();
		return;
	}

	/* n-best lists and scores: each request on its own, its ERROR its answer */
	for (i = first; i < n; i++)
	{
		Call	   *c = calls[i];
		StringInfoData buf;

		if (c->done || !same_options(&c->req, key))
			continue;
		initStringInfo(&buf);
		attention_max_input_tokens = c->req.max_input_tokens;
		PG_TRY();
		{
			pq_sendint32(&buf, 0);
			if (c->req.kind == SERVICE_NBEST)
			{
				pq_sendint32(&buf, c->encoded[0].n == c->encoded[0].prefix ? 1 : c->req.nbest);
				nbest_hypotheses(am, c->req.texts[0], c->req.source_language, &opt, put_hypothesis, &buf);
			}
			else
				pq_sendfloat8(&buf, score_text(am, c->req.texts[0], c->req.texts[1],
											   (CallLanguages) {c->req.source_language, c->req.target_language}));
		}
		PG_CATCH();
		{
			answer_error(c, catch_error(cxt));
		}
		PG_END_TRY();
		attention_max_input_tokens = saved;
		if (!c->done)
			answer(c, &buf);
	}
}

/*
 * The model at calls[i]'s checkpoint (service_model), or NULL when it does
 * not load: then every request for that checkpoint is answered its ERROR.
 */
static AttentionModel *
model_for(Call **calls, int n, int i, MemoryContext cxt)
{
	AttentionModel *volatile am = NULL;

	PG_TRY();
	{
		am = service_model(calls[i]->req.checkpoint_id);
	}
	PG_CATCH();
	{
		ErrorData  *e = catch_error(cxt);
		int			j;

		AbortCurrentTransaction();
		for (j = i; j < n; j++)
			if (!calls[j]->done && calls[j]->req.checkpoint_id == calls[i]->req.checkpoint_id)
				answer_error(calls[j], e);
	}
	PG_END_TRY();
	return am;
}

/* Serves the gathered calls[0 .. n): checkpoints in order of first request. */
static void
serve(Call **calls, int n, MemoryContext cxt)
{
	int			i,
				j,
				sentences = 0;

	for (i = 0; i < n; i++)
		sentences += calls[i]->req.n;
	count_served(n, sentences, 0, 1);
	for (i = 0; i < n; i++)
	{
		AttentionModel *am;

		if (calls[i]->done || (am = model_for(calls, n, i, cxt)) == NULL)
			continue;
		SpinLockAcquire(&slot->mutex);
		slot->checkpoint_id = am->checkpoint_id;
		SpinLockRelease(&slot->mutex);
		for (j = i; j < n; j++)
			if (!calls[j]->done && calls[j]->req.checkpoint_id == am->checkpoint_id)
				encode_request(am, calls[j], cxt);
		for (j = i; j < n; j++)
			if (!calls[j]->done && calls[j]->req.checkpoint_id == am->checkpoint_id)
				serve_group(am, calls, n, j, cxt);
	}
}

/* Appends c to list [*n] (room *room, grown in calls_cxt); returns the list. */
static Call **
append_call(Call **list, int *n, int *room, Call *c)
{
	if (*n == *room)
	{
		*room *= 2;
		list = repalloc(list, *room * sizeof(Call *));
	}
	list[(*n)++] = c;
	return list;
}

/* Answers a streamed call with its translations, counts it and frees it. */
static void
answer_translations(Call *c)
{
	StringInfoData buf;
	int			j;
	int64		counts[STAT_COUNTERS] = {[STAT_CALLS] = 1, [STAT_SENTENCES] = c->req.n, [STAT_TOKENS_OUT] = c->tokens};

	initStringInfo(&buf);
	pq_sendint32(&buf, 0);
	for (j = 0; j < c->req.n; j++)
	{
		service_put_text(&buf, c->results[j]);
		counts[STAT_TOKENS_IN] += c->encoded[j].n;
	}
	count_served(1, c->req.n, c->tokens, 0);
	statistics_add(stream_model->model_id, counts);
	answer(c, &buf);
	MemoryContextDelete(c->cxt);
}

/* Fails every streamed call with message and frees the stream (an engine failure). */
static void
stream_fail(const char *message)
{
	ErrorData	e = {0};
	int			i;

	e.sqlerrcode = ERRCODE_INTERNAL_ERROR;
	e.message = psprintf("translation with model \"%s\" failed: %s", stream_model->name, message);
	for (i = 0; i < places; i++)
		if (streamed[i] != NULL)
		{
			statistics_add(stream_model->model_id, (int64[STAT_COUNTERS]) {[STAT_CALLS] = 1, [STAT_ERRORS] = 1});
			answer_error(streamed[i], &e);
			MemoryContextDelete(streamed[i]->cxt);
			streamed[i] = NULL;
		}
	n_streamed = 0;
	tf_stream_free(stream);
	stream = NULL;
}

/*
 * Can call c join the stream? A translation of the loaded checkpoint with
 * the stream's options (any options when the stream holds nothing).
 */
static bool
stream_accepts(const Call *c)
{
	if (c->req.kind != SERVICE_TRANSLATE || loaded == NULL || c->req.checkpoint_id != loaded->checkpoint_id)
		return false;
	if (stream == NULL || n_streamed == 0)
		return true;
	return stream_model == loaded && same_options(&c->req, &stream_key);
}

/*
 * Can calls[0 .. n) all join the stream now, with one set of options? Then
 * they need not wait for a batch to fill: later requests join the stream
 * between its steps.
 */
static bool
streamable(Call **calls, int n)
{
	int			i;

	for (i = 0; i < n; i++)
		if (!stream_accepts(calls[i]) || calls[i]->req.n > attention_service_batch_sentences ||
			!same_options(&calls[i]->req, &calls[0]->req))
			return false;
	return true;
}

/*
 * The calls join[0 .. n) join the stream: encoded (a request's own ERROR is
 * its answer), their non-empty sentences added in one engine call, tagged
 * with the call's place in `streamed` and the sentence's index. Calls with
 * nothing to decode are answered at once.
 */
static void
stream_join(Call **join, int n, MemoryContext cxt)
{
	int			sentences = 0,
				len = 0,
				added = 0,
				place = 0,
				i,
				j;
	int32	   *ids;
	int64	   *tags;
	char		err[TF_ERRLEN];
	MemoryContext old;

	if (stream != NULL && n_streamed == 0 && (stream_model != loaded || !same_options(&join[0]->req, &stream_key)))
	{
		tf_stream_free(stream);
		stream = NULL;
	}
	if (stream == NULL)
	{
		TfDecodeOptions opt;

		stream_key = join[0]->req;
		opt = decode_options(loaded, stream_key.beam_size, 1, stream_key.length_penalty,
							 stream_key.max_length_offset, stream_key.max_output_tokens, stream_key.target_language);
		if (tf_stream_create(loaded->engine, &opt, &stream, err, sizeof(err)) != TF_OK)
			ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("%s", err)));
		stream_model = loaded;
	}
	if (places_room < places + n)
	{
		places_room = Max(2 * places_room, places + n);
		streamed = streamed == NULL ? MemoryContextAlloc(calls_cxt, places_room * sizeof(Call *)) :
			repalloc(streamed, places_room * sizeof(Call *));
		memset(streamed + places, 0, (places_room - places) * sizeof(Call *));
	}
	for (i = 0; i < n; i++)
	{
		Call	   *c = join[i];

		encode_request(loaded, c, cxt);
		if (c->done)
		{
			MemoryContextDelete(c->cxt);
			join[i] = NULL;
			continue;
		}
		old = MemoryContextSwitchTo(c->cxt);
		c->results = palloc0(Max(c->req.n, 1) * sizeof(text *));
		for (j = 0; j < c->req.n; j++)
			if (c->encoded[j].ids != NULL && c->encoded[j].n == c->encoded[j].prefix)
				c->results[j] = cstring_to_text("");
			else if (c->encoded[j].ids != NULL)
			{
				c->pending++;
				len = Max(len, c->encoded[j].n + 1);
			}
		MemoryContextSwitchTo(old);
		sentences += c->pending;
	}
	ids = palloc(Max(sentences, 1) * Max(len, 1) * sizeof(int32));
	tags = palloc(Max(sentences, 1) * sizeof(int64));
	for (i = 0; i < n; i++)
	{
		Call	   *c = join[i];

		if (c == NULL)
			continue;
		if (c->pending == 0)
		{
			answer_translations(c);
			continue;
		}
		while (place < places && streamed[place] != NULL)
			place++;
		for (j = 0; j < c->req.n; j++)
			if (c->encoded[j].ids != NULL && c->encoded[j].n > c->encoded[j].prefix)
			{
				int32	   *row = ids + (size_t) added * len;
				int			t;

				memcpy(row, c->encoded[j].ids, (c->encoded[j].n + 1) * sizeof(int32));
				for (t = c->encoded[j].n + 1; t < len; t++)
					row[t] = loaded->pad_id;
				tags[added++] = (int64) place << 32 | j;
			}
		streamed[place] = c;
		places = Max(places, place + 1);
		n_streamed++;
	}
	if (added > 0)
	{
		int			threads = cpu_budget_take_for(loaded->engine, 0);
		int			rc = tf_stream_add(stream, ids, added, len, tags, err, sizeof(err));

		cpu_budget_give(threads);
		if (rc != TF_OK)
			stream_fail(err);
		else
			count_served(0, 0, 0, 1);
	}
	pfree(ids);
	pfree(tags);
}

/*
 * One step of the stream; a call whose sentences are all done is answered
 * and its place freed (its sentences' tags are its place and their
 * indexes, so a call keeps its place while any is decoding).
 */
static void
stream_step(void)
{
	char		err[TF_ERRLEN];
	TfHypothesis h;
	int64		tag;
	instr_time	start,
				elapsed;
	int			threads = cpu_budget_take_for(stream_model->engine, 0);
	int			rc;

	INSTR_TIME_SET_CURRENT(start);
	rc = tf_stream_step(stream, err, sizeof(err));
	INSTR_TIME_SET_CURRENT(elapsed);
	INSTR_TIME_SUBTRACT(elapsed, start);
	cpu_budget_give(threads);
	statistics_add(stream_model->model_id,
				   (int64[STAT_COUNTERS]) {[STAT_ENGINE_US] = (int64) INSTR_TIME_GET_MICROSEC(elapsed)});
	if (rc != TF_OK)
	{
		stream_fail(err);
		return;
	}
	while (tf_stream_take(stream, &tag, &h))
	{
		Call	   *c = streamed[tag >> 32];
		MemoryContext old = MemoryContextSwitchTo(c->cxt);

		c->results[tag & 0xFFFFFFFF] = decode_ids(stream_model, h.tokens, h.length);
		c->tokens += h.length;
		tf_hypotheses_free(&h, 1);
		MemoryContextSwitchTo(old);
		if (--c->pending == 0)
		{
			answer_translations(c);
			streamed[tag >> 32] = NULL;
			n_streamed--;
		}
	}
}

/*
 * Does the served model still exist, and may the service stay connected to
 * its database? DROP DATABASE (and ALTER DATABASE ... RENAME) hold the
 * database's lock exclusively while they wait for its other sessions to
 * leave: an idle service exits then rather than fail the command.
 */
static bool
model_exists(void)
{
	bool		exists;
	LOCKTAG		tag;

	worker_begin();
	SET_LOCKTAG_OBJECT(tag, InvalidOid, DatabaseRelationId, MyDatabaseId, 0);
	if (LockAcquire(&tag, AccessShareLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
	{
		worker_commit();
		elog(LOG, "attention: the database of the translation service for model \"%s\" is being dropped or renamed; "
			 "the service exits", slot->model);
		proc_exit(0);
	}
	if (SPI_execute_with_args("SELECT 1 FROM attention.models WHERE model_id = $1", 1, (Oid[]) {INT4OID},
							  (Datum[]) {Int32GetDatum(model_id)}, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read attention.models");
	exists = SPI_processed > 0;
	worker_commit();
	return exists;
}

/*
 * Has a service that a translation started (not start_service) been idle
 * for attention.service_idle_timeout? Then it stops taking requests (any
 * posted meanwhile are answered first) and true is returned.
 */
static bool
idle_timeout_reached(TimestampTz idle_since)
{
	bool		stop = false;

	if (attention_service_idle_timeout <= 0 || idle_since == 0 ||
		!TimestampDifferenceExceeds(idle_since, GetCurrentTimestamp(), attention_service_idle_timeout * 1000))
		return false;
	SpinLockAcquire(&slot->mutex);
	if (slot->automatic && slot->state == SERVICE_RUNNING && slot->head == slot->tail)
	{
		slot->state = SERVICE_STOPPING;
		stop = true;
	}
	SpinLockRelease(&slot->mutex);
	if (stop)
		elog(LOG, "attention: the translation service for model \"%s\" was idle for %d s; it exits",
			 slot->model, attention_service_idle_timeout);
	return stop;
}

/*
 * Loads the model's deployed checkpoint before the service takes requests;
 * when it cannot, leaves the reason in the slot for start_service and exits.
 */
static void
load_deployed(const char *model)
{
	MemoryContext cxt = CurrentMemoryContext;

	PG_TRY();
	{
		int64		checkpoint_id;
		bool		isnull;

		worker_begin();
		if (SPI_execute_with_args("SELECT checkpoint_id FROM attention.checkpoints WHERE model_id = $1 AND deployed",
								  1, (Oid[]) {INT4OID}, (Datum[]) {Int32GetDatum(model_id)}, NULL, true, 1) !=
			SPI_OK_SELECT)
			elog(ERROR, "could not read attention.checkpoints");
		if (SPI_processed == 0)
			ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
							errmsg("model \"%s\" has no deployed checkpoint", model)));
		checkpoint_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		worker_commit();
		service_model(checkpoint_id);
		SpinLockAcquire(&slot->mutex);
		slot->checkpoint_id = checkpoint_id;
		SpinLockRelease(&slot->mutex);
	}
	PG_CATCH();
	{
		ErrorData  *e = catch_error(cxt);

		SpinLockAcquire(&slot->mutex);
		strlcpy(slot->error, e->message, sizeof(slot->error));
		slot->failed_generation = my_generation;
		SpinLockRelease(&slot->mutex);
		elog(LOG, "attention: the translation service for model \"%s\" could not start: %s", model, e->message);
		proc_exit(1);
	}
	PG_END_TRY();
}

void
attention_service_main(Datum arg)
{
	MemoryContext round;
	Oid			database;
	char		model[NAMEDATALEN * 2];
	int			room = 64,
				waiting_room = 64,
				n_waiting = 0,
				held_room = 64,
				n_held = 0;
	Call	  **waiting;		/* requests waiting for the stream to drain, oldest first */
	Call	  **held;			/* translations waiting for room in the stream, oldest first */
	TimestampTz idle_since;		/* when it last had nothing to do */

	slot = &service_slots[DatumGetInt32(arg)];
	memcpy(&my_generation, MyBgworkerEntry->bgw_extra, sizeof(uint64));
	started_at = GetCurrentTimestamp();
	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	SpinLockAcquire(&slot->mutex);
	if (slot->generation != my_generation || slot->state != SERVICE_STARTING)
	{
		SpinLockRelease(&slot->mutex);
		proc_exit(0);
	}
	database = slot->database;
	model_id = slot->model_id;
	strlcpy(model, slot->model, sizeof(model));
	strlcpy(device, slot->device, sizeof(device));
	SpinLockRelease(&slot->mutex);
	before_shmem_exit(service_exit, (Datum) 0);

	BackgroundWorkerInitializeConnectionByOid(database, InvalidOid, 0);
	worker_pin_search_path();
	pgstat_report_appname(psprintf("attention service %s", model));
	load_deployed(model);
	SpinLockAcquire(&slot->mutex);
	slot->pid = MyProcPid;
	slot->proc = MyProc;
	slot->state = SERVICE_RUNNING;
	SpinLockRelease(&slot->mutex);
	elog(LOG, "attention: translation service for model \"%s\" started on %s", model, device);

	round = AllocSetContextCreate(TopMemoryContext, "attention service round", ALLOCSET_DEFAULT_SIZES);
	calls_cxt = AllocSetContextCreate(TopMemoryContext, "attention service requests", ALLOCSET_DEFAULT_SIZES);
	waiting = MemoryContextAlloc(calls_cxt, waiting_room * sizeof(Call *));
	held = MemoryContextAlloc(calls_cxt, held_room * sizeof(Call *));
	idle_since = GetCurrentTimestamp();
	for (;;)
	{
		Call	  **calls;
		int			n = 0,
					sentences = 0,
					i;
		TimestampTz first = 0;
		bool		stopping = false;

		MemoryContextReset(round);
		MemoryContextSwitchTo(round);
		calls = palloc(room * sizeof(Call *));
		for (;;)
		{
			long		timeout = IDLE_CHECK_MS;
			int			rc;

			CHECK_FOR_INTERRUPTS();
			if (ConfigReloadPending)
			{
				ConfigReloadPending = false;
				ProcessConfigFile(PGC_SIGHUP);
			}
			take_requests(&calls, &n, &room, &sentences);
			SpinLockAcquire(&slot->mutex);
			stopping = slot->state == SERVICE_STOPPING && slot->head == slot->tail;
			SpinLockRelease(&slot->mutex);
			if (n_streamed > 0)
				break;			/* the stream decodes: new requests join its next step */
			if (n > 0)
			{
				long		waited;

				if (first == 0)
					first = GetCurrentTimestamp();
				waited = TimestampDifferenceMilliseconds(first, GetCurrentTimestamp());
				if (stopping || sentences >= attention_service_batch_sentences ||
					waited >= attention_service_batch_wait_ms || streamable(calls, n))
					break;
				timeout = attention_service_batch_wait_ms - waited;
			}
			else if (stopping || n_waiting > 0 || n_held > 0)
				break;
			pgstat_report_activity(STATE_IDLE, NULL);
			rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, timeout,
						   attention_wait_event(ATTENTION_WAIT_SERVICE_IDLE));
			ResetLatch(MyLatch);
			if (n == 0 && (rc & WL_TIMEOUT) && !model_exists())
			{
				elog(LOG, "attention: model \"%s\" was dropped; its translation service exits", model);
				proc_exit(0);
			}
			if (n == 0 && idle_timeout_reached(idle_since))
				break;
		}
		if (n == 0 && n_streamed == 0 && n_waiting == 0 && n_held == 0)
			break;				/* stopping with nothing queued */
		idle_since = 0;

		/*
		 * Translations join the stream in arrival order, unless an older
		 * request waits for it to drain; up to service_batch_sentences
		 * sentences decode at once, the next translations are held until
		 * there is room. Requests over that size are served in batches.
		 */
		{
			Call	  **join = palloc(Max(n + n_held, 1) * sizeof(Call *));
			int			n_join = 0,
						joining = 0,
						live = stream != NULL ? tf_stream_sentences(stream) : 0,
						held_before = n_held;
			bool		full = false;

			for (i = 0; i < held_before + n; i++)
			{
				Call	   *c = i < held_before ? held[i] : calls[i - held_before];

				if (n_waiting == 0 && stream_accepts(c) && c->req.n <= attention_service_batch_sentences &&
					(n_join == 0 || same_options(&c->req, &join[0]->req)))
				{
					if (!full && (live + joining + c->req.n <= attention_service_batch_sentences ||
								  live + joining == 0))
					{
						join[n_join++] = c;
						joining += c->req.n;
					}
					else
					{
						full = true;
						held = append_call(held, &n_held, &held_room, c);
					}
				}
				else
					waiting = append_call(waiting, &n_waiting, &waiting_room, c);
			}
			/* the held calls taken above leave the front of the list */
			memmove(held, held + held_before, (n_held - held_before) * sizeof(Call *));
			n_held -= held_before;
			if (n_join > 0)
				stream_join(join, n_join, round);
		}
		if (n_streamed > 0)
		{
			pgstat_report_activity(STATE_RUNNING, psprintf("translating %d requests", n_streamed));
			stream_step();
		}
		if (n_streamed == 0 && n_waiting > 0)
		{
			/* the stream drained: the waiting requests in batches, the model they ask for loaded */
			tf_stream_free(stream);
			stream = NULL;
			pgstat_report_activity(STATE_RUNNING, psprintf("serving %d requests", n_waiting));
			serve(waiting, n_waiting, round);
			for (i = 0; i < n_waiting; i++)
				MemoryContextDelete(waiting[i]->cxt);
			n_waiting = 0;
		}
		if (n_streamed == 0 && n_held == 0 && n_waiting == 0)
			idle_since = GetCurrentTimestamp();
	}
	elog(LOG, "attention: translation service for model \"%s\" stopped", model);
	proc_exit(0);
}
