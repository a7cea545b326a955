/*
 * worker.c - the training worker: a dynamic background worker that runs
 * one job. It connects as the role that submitted the job, encodes the
 * corpus once, trains with the engine, keeps attention.jobs current and
 * attention.training_history growing (history.c), writes
 * checkpoints (parameters, optimizer state, data position) in one
 * transaction each, and stops at its limits, on cancel_training (read
 * once a second, also during validation: it ends with a checkpoint of the
 * last step, not validated), on SIGTERM (as die: the job then reads as
 * interrupted) or when the postmaster dies. SIGHUP (pg_reload_conf())
 * reloads the configuration before the next step. It runs only against
 * schema versions it knows (require_known_schema).
 *
 * On several GPUs ("device": "cuda:0,1,2,3"), the engine (parallel.h)
 * drives one rank per device from threads of this process; this thread
 * alone calls PostgreSQL: it reads the data, hands each step's batches to
 * the engine, and writes progress and rank 0's checkpoints.
 *
 * Across machines ("nodes": K), this worker is the coordinator (node 0) and
 * join_training starts a node worker for each other node (run_node): every
 * node runs every step, and after each all vote on stopping (agree_stop).
 * The coordinator alone validates and writes; a node writes only its row of
 * attention.job_ranks, and takes SIGTERM as a request to leave through the
 * vote after its current step.
 */
#include "postgres.h"

#include <math.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "portability/instr_time.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "storage/pmsignal.h"
#include "tcop/tcopprot.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "catalog.h"
#include "cpu_budget.h"
#include "dataset.h"
#include "history.h"
#include "parallel.h"
#include "progress.h"
#include "ranks.h"
#include "rights.h"
#include "settings.h"
#include "entry_points.h"
#include "train_options.h"
#include "workers.h"

/* Seconds between progress updates of attention.jobs. */
#define PROGRESS_SECONDS 2.0
/* How often the loop reads whether the job was cancelled (seconds). */
#define CANCEL_POLL_SECONDS 1.0
/* Seconds between a node worker's heartbeats in attention.job_ranks. */
#define HEARTBEAT_SECONDS 1.0
/* Votes of agree_stop: the coordinator's stop, and a node that leaves. */
#define VOTE_STOP 1
#define VOTE_LEAVE 2
/* Consecutive skipped steps (non-finite gradients) after which the job fails. */
#define MAX_SKIPPED_STEPS 10

/* Training data position and counters stored with each checkpoint as int64 scalars. */
static const char *const data_tensor_names[] = {
	"data.epoch", "data.position", "data.elapsed_ms", "data.tokens_seen", "data.train_pairs"
};

#define NUM_DATA_TENSORS lengthof(data_tensor_names)

/* A running job. */
typedef struct Job
{
	int64		job_id;
	int32		model_id;
	char		model_name[NAMEDATALEN * 2];
	int32		corpus_id;
	TrainOptions o;
	TfConfig	config;
	TfOptimizer opt;
	SpmModel   *vocab;
	TfParallel *engine;			/* one replica per rank */
	Remote	   *remote;			/* a node on another server: the coordinator's (NULL: this server) */
	DataSet		train;
	DataSet		valid;
	int32	   *order;			/* batch order of the current epoch */
	int64		data[NUM_DATA_TENSORS]; /* epoch, position, elapsed_ms, tokens_seen, train_pairs */
	int64		resumed_pairs;	/* train pairs when the checkpoint was written; -1 = fresh */
	DataFeed	feed;			/* special ids and batch buffers */
	int32	   *step_ids;		/* the padded ids of a step's batches: batches_per_step x 3 x max_batch_ids */
	TfBatch    *step_batches;	/* [batches_per_step] */
	/* since the last progress update */
	double		loss_sum;
	int64		loss_tokens;
	int64		tokens;			/* source + target, no padding */
	double		interval_start;
	/* this worker's run: from the end of corpus encoding */
	int64		run_tokens;
	int			node;			/* a node worker's node, once claimed; else -1 */
	RanksSilence silence;		/* across machines, the coordinator's watch on the other nodes */
	int64		node_step;		/* a node worker's last finished step, for heartbeats during steps */
	double		heartbeat;		/* when a node worker last wrote its heartbeat */
	double		train_start;
	double		learning_rate;
	double		valid_loss;		/* NaN: none */
	double		valid_bleu;		/* NaN: none */
	bool		validated;		/* valid_loss (and valid_bleu) measured since the last progress row */
	bool		history;		/* the schema has attention.training_history (0.3.0) */
	int64		checkpoint_step;
	double		checkpoint_time;
	double		run_start;
	double		cancel_polled;	/* when cancel_requested was last read */
	bool		cancelled;		/* cancel_training was called */
} Job;

#define EPOCH(j) ((j)->data[0])
#define POSITION(j) ((j)->data[1])
#define ELAPSED_MS(j) ((j)->data[2])
#define TOKENS_SEEN(j) ((j)->data[3])

/* Rank 0's replica: the step count, validation, checkpoints. */
static TfModel *
model(Job *j)
{
	return tf_parallel_model(j->engine);
}

/* Optimizer steps taken; 0 before the engine exists (a job across machines waiting for its nodes). */
static int64
steps(Job *j)
{
	return j->engine != NULL ? tf_model_steps(model(j)) : 0;
}

/* Shows what the worker does in pg_stat_activity.query. */
static void
report(Job *j, const char *what)
{
	char		text[256];

	snprintf(text, sizeof(text), "attention training job %lld: %s, step %lld, epoch %lld",
			 (long long) j->job_id, what, (long long) steps(j), (long long) EPOCH(j));
	pgstat_report_activity(STATE_RUNNING, text);
	snprintf(text, sizeof(text), strcmp(what, "training") == 0 ? "%s" : "training: %s", what);
	progress_set_operation(text);
}

/* An engine error as an ERROR of the job. */
static void
engine_error(Job *j, const char *what, const char *err)
{
	ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
					errmsg("training job %lld: %s: %s", (long long) j->job_id, what, err)));
}

/*
 * Fine-tuning: the parameters of checkpoint init_checkpoint (of this model)
 * replace the freshly initialised ones; Adam's moments (zero), the step (0)
 * and the generator stay the new job's. Inside SPI.
 */
static void
start_from_checkpoint(Job *j)
{
	TfModel    *replica = tf_parallel_model(j->engine);
	TfTensor   *fresh,
			   *given;
	int			n,
				m,
				i,
				k;
	char		err[TF_ERRLEN];

	/* on another server the coordinator checked it when the job was submitted */
	if (j->remote == NULL)
		require_model_checkpoint(j->o.init_checkpoint, j->model_id, psprintf("%d", j->model_id));
	given = read_tensors_from(j->remote, j->o.init_checkpoint, TENSORS_PARAMETERS, &m);
	if (tf_model_tensors(replica, &fresh, &n, err, sizeof(err)) != TF_OK)
		engine_error(j, "could not read the new model's tensors", err);
	for (i = 0; i < n; i++)
	{
		if (fresh[i].dtype != TF_FLOAT32 || strncmp(fresh[i].name, "optimizer.", 10) == 0)
		{
			/* kept, through a copy (the list may view the model's own memory) */
			void	   *copy = palloc_extended(Max(fresh[i].bytes, 1), MCXT_ALLOC_HUGE);

			memcpy(copy, fresh[i].data, fresh[i].bytes);
			fresh[i].data = copy;
			continue;
		}
		for (k = 0; k < m && strcmp(given[k].name, fresh[i].name) != 0; k++)
			;
		if (k == m)
		{
			tf_tensors_free(fresh);
			ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
							errmsg("training job %lld: checkpoint %lld has no tensor \"%s\"", (long long) j->job_id,
								   (long long) j->o.init_checkpoint, fresh[i].name)));
		}
		fresh[i].data = given[k].data;
		fresh[i].bytes = given[k].bytes;
	}
	if (tf_parallel_load(j->engine, fresh, n, err, sizeof(err)) != TF_OK)
	{
		tf_tensors_free(fresh);
		ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
						errmsg("training job %lld: could not start from checkpoint %lld: %s", (long long) j->job_id,
							   (long long) j->o.init_checkpoint, err)));
	}
	tf_tensors_free(fresh);
}

/* A float8 argument that is SQL NULL when x is NaN ("not measured"). */
static Datum
float8_or_null(double x, bool *isnull)
{
	*isnull = isnan(x);
	return Float8GetDatum(x);
}

/* A job with its model and vocabulary: the columns read_job_row reads (format: vocabulary_columns(), a suffix). */
#define JOB_QUERY "SELECT j.status, j.cancel_requested, j.options, j.model_id, j.corpus_id, m.config, " \
	"v.vocab_size, v.pad_id, v.bos_id, v.eos_id, m.name, %s FROM attention.jobs j " \
	"JOIN attention.models m USING (model_id) JOIN attention.vocabularies v USING (vocabulary_id) " \
	"WHERE j.job_id = $1%s"

/*
 * The job's options, model, vocabulary and optimizer settings from a row of
 * JOB_QUERY (columns 3 .. 20: options, model_id, corpus_id, config,
 * vocab_size, pad_id, bos_id, eos_id, the model's name, the vocabulary).
 */
static void
read_job_row(Job *j, HeapTuple tup, TupleDesc desc)
{
	bool		isnull;

	train_options_parse(DatumGetJsonbP(SPI_getbinval(tup, desc, 3, &isnull)), false, &j->o);
	train_options_check(&j->o);
	j->model_id = DatumGetInt32(SPI_getbinval(tup, desc, 4, &isnull));
	j->corpus_id = DatumGetInt32(SPI_getbinval(tup, desc, 5, &isnull));
	j->feed.pad_id = DatumGetInt32(SPI_getbinval(tup, desc, 8, &isnull));
	if (isnull)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("training job %lld: the model's vocabulary has no padding id", (long long) j->job_id)));
	j->feed.bos_id = DatumGetInt32(SPI_getbinval(tup, desc, 9, &isnull));
	j->feed.eos_id = DatumGetInt32(SPI_getbinval(tup, desc, 10, &isnull));
	attention_config_from_jsonb(DatumGetJsonbP(SPI_getbinval(tup, desc, 6, &isnull)),
								DatumGetInt32(SPI_getbinval(tup, desc, 7, &isnull)), j->feed.pad_id, &j->config);
	if (j->o.dropout >= 0)
		j->config.dropout = (float) j->o.dropout;
	if (j->o.label_smoothing >= 0)
		j->config.label_smoothing = (float) j->o.label_smoothing;
	strlcpy(j->model_name, SPI_getvalue(tup, desc, 11), sizeof(j->model_name));
	j->vocab = vocabulary_load(tup, desc, 12, psprintf("the vocabulary of model \"%s\"", j->model_name),
							   ERRCODE_DATA_CORRUPTED);

	tf_optimizer_default(&j->opt);
	j->opt.warmup_steps = j->o.warmup_steps;
	j->opt.learning_rate_scale = (float) j->o.learning_rate_scale;
}

/* Marks the job running in this worker. Inside a transaction. */
static void
mark_running(Job *j)
{
	SPI_execute_with_args("UPDATE attention.jobs SET status = 'running', worker_pid = $2, "
						  "started_at = coalesce(started_at, now()), updated_at = now() WHERE job_id = $1", 2,
						  (Oid[]) {INT8OID, INT4OID}, (Datum[]) {Int64GetDatum(j->job_id), Int32GetDatum(MyProcPid)},
						  NULL, false, 0);
}

/* The engine in the job's precision on every replica. */
static void
set_precision(Job *j)
{
	char		err[TF_ERRLEN];

	if (tf_parallel_set_precision(j->engine, train_options_precision(&j->o), err, sizeof(err)) != TF_OK)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY),
						errmsg("training job %lld: could not compute in %s: %s", (long long) j->job_id,
							   j->o.precision, err)));
}

/*
 * Loads the job's newest trained checkpoint (parameters, optimizer state,
 * data position) into every replica, or init_checkpoint's parameters for a
 * fresh job that names one. Inside SPI. Every node of a job across
 * machines calls it after joining: none has written a checkpoint since.
 */
static void
resume_engine(Job *j)
{
	bool		isnull;
	char		err[TF_ERRLEN];
	Rows		rows;

	/* continue from the job's newest checkpoint */
	j->resumed_pairs = -1;
	rows_query(j->remote, &rows, "SELECT checkpoint_id FROM attention.checkpoints WHERE job_id = $1 "
			   "AND model_id = $2 AND kind = 'trained' ORDER BY step DESC, checkpoint_id DESC LIMIT 1", 2,
			   (Oid[]) {INT8OID, INT4OID}, (Datum[]) {Int64GetDatum(j->job_id), Int32GetDatum(j->model_id)}, NULL,
			   false, 1);
	if (rows.n == 1)
	{
		int64		checkpoint_id = DatumGetInt64(SPI_getbinval(rows.vals[0], rows.desc, 1, &isnull));
		int			count,
					i,
					k,
					kept = 0;
		TfTensor   *t = read_tensors_from(j->remote, checkpoint_id, TENSORS_ALL, &count);

		for (i = 0; i < count; i++)
		{
			for (k = 0; k < (int) NUM_DATA_TENSORS; k++)
				if (strcmp(t[i].name, data_tensor_names[k]) == 0 && t[i].dtype == TF_INT64 && t[i].bytes == 8)
					break;
			if (k < (int) NUM_DATA_TENSORS)
				memcpy(&j->data[k], t[i].data, sizeof(int64));
			else
				t[kept++] = t[i];
		}
		if (kept != count - (int) NUM_DATA_TENSORS)
			ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
							errmsg("checkpoint %lld of job %lld lacks its data position (data.* tensors)",
								   (long long) checkpoint_id, (long long) j->job_id)));
		if (tf_parallel_load(j->engine, t, kept, err, sizeof(err)) != TF_OK)
			ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
							errmsg("could not resume job %lld from checkpoint %lld: %s", (long long) j->job_id,
								   (long long) checkpoint_id, err)));
		j->resumed_pairs = j->data[4];
	}
	else if (j->o.init_checkpoint > 0)
		start_from_checkpoint(j);
}

/*
 * Whether this worker's role may run job `job_id` (job_entitlement: checked
 * at every start, whoever queued the job). If not, the job is held
 * interrupted with the reason, written as the tables' owner (the role may no
 * longer see the row), and the caller runs nothing. Inside a transaction.
 */
static bool
entitled(int64 job_id)
{
	char	   *why = job_entitlement(job_id, GetUserId());
	AsTableOwner saved;

	if (why == NULL)
		return true;
	ereport(LOG, (errmsg("attention: training job %lld not run: %s", (long long) job_id, why)));
	as_table_owner(&saved);
	SPI_execute_with_args("UPDATE attention.jobs SET status = 'interrupted', finished_at = now(), updated_at = now(), "
						  "error = $2 WHERE job_id = $1", 2, (Oid[]) {INT8OID, TEXTOID},
						  (Datum[]) {Int64GetDatum(job_id), CStringGetTextDatum(why)}, NULL, false, 0);
	end_as_table_owner(&saved);
	return false;
}

/*
 * Reads the job and claims it (status running); loads the model, the
 * vocabulary and, when the job has a checkpoint, its state. Returns false
 * when there is nothing to run (not queued, or cancelled before it ran).
 */
static bool
claim_job(Job *j, MemoryContext ctx)
{
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;
	char	   *status;
	char		err[TF_ERRLEN];

	worker_begin();
	if (SPI_execute_with_args(psprintf(JOB_QUERY, vocabulary_columns(), " FOR UPDATE OF j"), 1, (Oid[]) {INT8OID},
							  (Datum[]) {Int64GetDatum(j->job_id)}, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read training job %lld", (long long) j->job_id);
	if (SPI_processed == 0)
	{
		worker_commit();		/* the submitting transaction rolled back */
		return false;
	}
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	status = SPI_getvalue(tup, desc, 1);
	if (strcmp(status, "queued") != 0)
	{
		worker_commit();
		return false;
	}
	if (DatumGetBool(SPI_getbinval(tup, desc, 2, &isnull)))
	{
		SPI_execute_with_args("UPDATE attention.jobs SET status = 'cancelled', finished_at = now(), updated_at = now() "
							  "WHERE job_id = $1", 1, (Oid[]) {INT8OID}, (Datum[]) {Int64GetDatum(j->job_id)},
							  NULL, false, 0);
		worker_commit();
		return false;
	}
	if (!entitled(j->job_id))
	{
		worker_commit();
		return false;
	}
	read_job_row(j, tup, desc);
	if (j->o.nodes > 1)
	{
		/* its engine joins the other machines' ranks (join_as_coordinator) */
		mark_running(j);
		worker_commit();
		MemoryContextSwitchTo(ctx);
		return true;
	}
	attention_use_cuda_library();
	/* one thread until a step takes its share of the CPU budget */
	j->engine = tf_parallel_create(&j->config, (uint64) j->o.seed, j->o.device, 1, NULL, err, sizeof(err));
	if (j->engine == NULL)
		engine_error(j, "could not create the model", err);
	set_precision(j);
	resume_engine(j);
	mark_running(j);
	worker_commit();
	MemoryContextSwitchTo(ctx);
	return true;
}

/* Encodes and batches the train and valid splits (with the submitter's privileges). */
static void
load_data(Job *j, MemoryContext ctx)
{
	report(j, "encoding the corpus");
	worker_begin();
	MemoryContextSwitchTo(ctx);
	data_load_from(j->remote, &j->train, j->corpus_id, "train", j->vocab, j->config.max_positions,
				   j->o.batch_tokens, 0);
	data_load_from(j->remote, &j->valid, j->corpus_id, "valid", j->vocab, j->config.max_positions,
				   j->o.batch_tokens, j->o.validation_bleu_sentences);
	worker_commit();
	MemoryContextSwitchTo(ctx);
	if (j->train.num_batches == 0)
		ereport(ERROR, (errcode(ERRCODE_NO_DATA),
						errmsg("training job %lld: the corpus has no train pairs of at most %d tokens a side",
							   (long long) j->job_id, j->config.max_positions - 1),
						errhint("Add pairs to the train split (%d were too long).", j->train.skipped)));
	if (j->resumed_pairs >= 0 && j->resumed_pairs != j->train.num_pairs)
		ereport(WARNING, (errmsg("training job %lld: the train split had %lld usable pairs at the checkpoint and has %d now; "
								 "the data order differs from an uninterrupted run", (long long) j->job_id,
								 (long long) j->resumed_pairs, j->train.num_pairs)));
	j->data[4] = j->train.num_pairs;
	data_feed_alloc(&j->feed, &j->train, &j->valid, j->config.max_positions);
	j->step_ids = palloc_extended((Size) j->o.batches_per_step * 3 * j->train.max_batch_ids * sizeof(int32),
								  MCXT_ALLOC_HUGE);
	j->step_batches = palloc0(j->o.batches_per_step * sizeof(TfBatch));
	j->order = palloc(j->train.num_batches * sizeof(int32));
	if (POSITION(j) >= j->train.num_batches)
	{
		EPOCH(j)++;
		POSITION(j) = 0;
	}
	data_epoch_order(&j->train, j->o.seed, EPOCH(j), j->order);
}

/*
 * Whether cancel_training was called for the job: attention.jobs is read at
 * most once per CANCEL_POLL_SECONDS, in a transaction of its own (the
 * caller is in none), whatever the checkpoint and progress cadence.
 */
static bool
cancel_requested(Job *j)
{
	bool		isnull;

	if (j->cancelled || worker_seconds() - j->cancel_polled < CANCEL_POLL_SECONDS)
		return j->cancelled;
	worker_begin();
	if (SPI_execute_with_args("SELECT cancel_requested FROM attention.jobs WHERE job_id = $1", 1,
							  (Oid[]) {INT8OID}, (Datum[]) {Int64GetDatum(j->job_id)}, NULL, true, 1) !=
		SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not read training job %lld", (long long) j->job_id);
	j->cancelled = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	worker_commit();
	j->cancel_polled = worker_seconds();
	return j->cancelled;
}

/* The validation's stop test (DataFeed.stop): a cancel. */
static bool
validation_stop(void *arg)
{
	return cancel_requested((Job *) arg);
}

/* Validation loss, and BLEU of greedy translations when asked; a cancel stops it (NaN: none). */
static void
validate(Job *j)
{
	if (j->valid.num_batches == 0)
		return;
	report(j, "validating");
	/* inside the job's row, which counts steps: its sentences are not counted there */
	progress_begin("validation", "", "sentences", -1);
	j->valid_loss = dataset_loss(model(j), &j->valid, &j->feed);
	if (j->valid.num_references > 0)
		j->valid_bleu = dataset_bleu(model(j), j->vocab, &j->valid, &j->feed, 1, 0, j->config.max_positions);
	progress_end();
	progress_set_operation("training");
	j->validated = true;
}

/* Writes the progress columns (and status, when final); returns cancel_requested. Inside a transaction. */
static bool
write_progress(Job *j, const char *final_status)
{
	Datum		values[10];
	bool		nulls[10];
	char		n[10];
	bool		isnull;
	int			i;
	bool		cancel;
	double		elapsed = worker_seconds() - j->interval_start;
	double		train_loss = j->loss_tokens > 0 ? j->loss_sum / j->loss_tokens : NAN;
	double		interval_rate = j->tokens > 0 && elapsed > 0 ? j->tokens / elapsed : NAN;

	values[0] = Int64GetDatum(j->job_id);
	values[1] = Int64GetDatum(steps(j));
	values[2] = Int32GetDatum((int32) EPOCH(j));
	values[3] = Int64GetDatum(TOKENS_SEEN(j));
	values[4] = float8_or_null(train_loss, &nulls[4]);
	values[5] = float8_or_null(j->learning_rate, &nulls[5]);
	/* wall-clock throughput since the last update; at the end, over the whole run */
	if (final_status != NULL)
		values[6] = float8_or_null(j->run_tokens > 0 ? j->run_tokens / (worker_seconds() - j->train_start) : NAN,
								   &nulls[6]);
	else
		values[6] = float8_or_null(interval_rate, &nulls[6]);
	values[7] = float8_or_null(j->valid_loss, &nulls[7]);
	values[8] = float8_or_null(j->valid_bleu, &nulls[8]);
	values[9] = final_status ? CStringGetTextDatum(final_status) : (Datum) 0;
	nulls[0] = nulls[1] = nulls[2] = nulls[3] = false;
	nulls[9] = final_status == NULL;
	for (i = 0; i < 10; i++)
		n[i] = nulls[i] ? 'n' : ' ';
	if (SPI_execute_with_args("UPDATE attention.jobs SET step = $2, epoch = $3, tokens_seen = $4, "
							  "train_loss = coalesce($5, train_loss), learning_rate = coalesce($6, learning_rate), "
							  "tokens_per_second = coalesce($7, tokens_per_second), valid_loss = coalesce($8, valid_loss), "
							  "valid_bleu = coalesce($9, valid_bleu), updated_at = now(), status = coalesce($10, status), "
							  "finished_at = CASE WHEN $10 IS NULL THEN NULL ELSE now() END "
							  "WHERE job_id = $1 RETURNING cancel_requested", 10,
							  (Oid[]) {INT8OID, INT8OID, INT4OID, INT8OID, FLOAT8OID, FLOAT8OID, FLOAT8OID, FLOAT8OID,
								  FLOAT8OID, TEXTOID}, values, n, false, 1) != SPI_OK_UPDATE_RETURNING ||
		SPI_processed != 1)
		elog(ERROR, "could not update training job %lld", (long long) j->job_id);
	cancel = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (j->history)
	{
		HistoryRow	row = {.step = steps(j), .epoch = (int32) EPOCH(j), .tokens_seen = TOKENS_SEEN(j),
			.train_loss = train_loss, .learning_rate = j->learning_rate, .tokens_per_second = interval_rate,
			.valid_loss = j->validated ? j->valid_loss : NAN, .valid_bleu = j->validated ? j->valid_bleu : NAN};

		history_record(j->job_id, &row, j->o.keep_history);
	}
	j->validated = false;
	/* rank 0's replica: on several devices each holds as much (attention.memory) */
	if (j->engine != NULL)
		progress_model_memory(j->model_name, tf_model_backend(model(j)), tf_model_weight_bytes(model(j)),
							  tf_model_memory_bytes(model(j)));
	elog(DEBUG1, "attention: training job %lld at step %lld", (long long) j->job_id, (long long) steps(j));
	j->loss_sum = 0;
	j->loss_tokens = 0;
	j->tokens = 0;
	j->interval_start = worker_seconds();
	return cancel;
}

/* A progress update in its own transaction; returns whether the job was cancelled. */
static bool
progress(Job *j)
{
	bool		cancel;

	worker_begin();
	cancel = write_progress(j, NULL);
	worker_commit();
	report(j, "training");
	return cancel;
}

/*
 * Writes a checkpoint (every tensor of the engine plus the data position),
 * prunes the job's older trained checkpoints beyond keep_checkpoints, and
 * updates the job (with its final status when given): one transaction.
 * Returns whether the job was cancelled.
 */
static bool
checkpoint(Job *j, const char *final_status)
{
	TfTensor   *tensors;
	TfTensor	data[NUM_DATA_TENSORS];
	int			count,
				k;
	int64		checkpoint_id;
	bool		isnull,
				nulls[2],
				cancel;
	char		err[TF_ERRLEN];
	Datum		v0,
				v1;

	report(j, "writing a checkpoint");
	ELAPSED_MS(j) += (int64) ((worker_seconds() - j->run_start) * 1000);
	j->run_start = worker_seconds();
	if (tf_model_tensors(model(j), &tensors, &count, err, sizeof(err)) != TF_OK)
		engine_error(j, "checkpoint", err);
	memset(data, 0, sizeof(data));
	for (k = 0; k < (int) NUM_DATA_TENSORS; k++)
	{
		strlcpy(data[k].name, data_tensor_names[k], sizeof(data[k].name));
		data[k].dtype = TF_INT64;
		data[k].ndim = 0;
		data[k].data = &j->data[k];
		data[k].bytes = sizeof(int64);
	}
	worker_begin();
	v0 = float8_or_null(j->valid_loss, &nulls[0]);
	v1 = float8_or_null(j->valid_bleu, &nulls[1]);
	if (SPI_execute_with_args("INSERT INTO attention.checkpoints (model_id, job_id, kind, step, valid_loss, valid_bleu) "
							  "VALUES ($1, $2, 'trained', $3, $4, $5) RETURNING checkpoint_id", 5,
							  (Oid[]) {INT4OID, INT8OID, INT8OID, FLOAT8OID, FLOAT8OID},
							  (Datum[]) {Int32GetDatum(j->model_id), Int64GetDatum(j->job_id),
								  Int64GetDatum(steps(j)), v0, v1},
							  (char[]) {' ', ' ', ' ', nulls[0] ? 'n' : ' ', nulls[1] ? 'n' : ' '},
							  false, 1) != SPI_OK_INSERT_RETURNING)
	{
		tf_tensors_free(tensors);
		elog(ERROR, "could not insert a checkpoint of job %lld", (long long) j->job_id);
	}
	checkpoint_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	/* inside the job's row, which counts steps: the tensors are not counted there */
	progress_begin("checkpoint", "", "tensors", -1);
	PG_TRY();
	{
		write_tensors(checkpoint_id, tensors, count);
	}
	PG_FINALLY();
	{
		tf_tensors_free(tensors);
	}
	PG_END_TRY();
	write_tensors(checkpoint_id, data, NUM_DATA_TENSORS);
	progress_end();
	if (j->o.keep_checkpoints > 0 &&
		SPI_execute_with_args("DELETE FROM attention.checkpoints WHERE checkpoint_id IN ("
							  "SELECT checkpoint_id FROM attention.checkpoints WHERE job_id = $1 AND kind = 'trained' "
							  "AND NOT deployed ORDER BY step DESC, checkpoint_id DESC OFFSET $2)", 2,
							  (Oid[]) {INT8OID, INT4OID},
							  (Datum[]) {Int64GetDatum(j->job_id), Int32GetDatum(j->o.keep_checkpoints)}, NULL,
							  false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not prune the checkpoints of job %lld", (long long) j->job_id);
	cancel = write_progress(j, final_status);
	worker_commit();
	j->checkpoint_step = steps(j);
	j->checkpoint_time = worker_seconds();
	progress_set_operation("training");
	return cancel;
}

/* Whether a limit of the job is reached. */
static bool
limit_reached(Job *j)
{
	int64		elapsed_ms = ELAPSED_MS(j) + (int64) ((worker_seconds() - j->run_start) * 1000);

	return (j->o.max_steps > 0 && steps(j) >= j->o.max_steps) ||
		(j->o.max_epochs > 0 && EPOCH(j) >= j->o.max_epochs) ||
		(j->o.max_minutes > 0 && elapsed_ms >= j->o.max_minutes * 60000.0);
}

/* The next batch of the data order (moving to the next epoch at its end). */
static const DataBatch *
next_batch(Job *j)
{
	const DataBatch *b = &j->train.batches[j->order[POSITION(j)]];

	if (++POSITION(j) == j->train.num_batches)
	{
		EPOCH(j)++;
		POSITION(j) = 0;
		data_epoch_order(&j->train, j->o.seed, EPOCH(j), j->order);
	}
	return b;
}

/*
 * A step or vote that failed on this node's ranks. In a job across
 * machines another node may have failed first (its process exited, its
 * device failed): on the coordinator the job's error adds the first
 * failure another node recorded in attention.job_ranks, or the node heard
 * from longest ago; which came first is not claimed (a node whose device
 * fails may close its connections before it writes its row).
 */
static void
step_failed(Job *j, const char *what, const char *err)
{
	char	   *cause;
	int			node;

	if (j->o.nodes == 1)
		engine_error(j, what, err);
	if (j->node >= 0)
		ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE),
						errmsg("training job %lld: node %d: %s: %s", (long long) j->job_id, j->node, what, err)));
	if (j->silence.silent_node > 0)
		ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE),
						errmsg("training job %lld: %s: node %d went silent: its heartbeat did not change for %.0f s "
							   "(the limit is %d s), so its ranks were given up", (long long) j->job_id, what,
							   j->silence.silent_node, j->silence.silent_seconds, RANKS_SILENT_SECONDS),
						errdetail("This node's ranks: %s", err)));
	node = ranks_failure(j->job_id, &cause);
	/* no node recorded why (one killed, or cut off): the cause names the node heard from longest ago */
	if (node < 0)
		ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE),
						errmsg("training job %lld: %s: %s; %s", (long long) j->job_id, what, err, cause)));
	ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE),
					errmsg("training job %lld: %s: %s; node %d failed: %s", (long long) j->job_id, what, err, node,
						   cause)));
}

/*
 * One optimizer step over the next batches_per_step batches of the data
 * order, spread over the ranks by the engine; the gradient is of the mean
 * loss over all their labels.
 */
static void
train_step(Job *j, int *skipped)
{
	TfBatch    *batches = j->step_batches;
	int64		labels = 0;
	TfStepStats stats = {0};
	int			a,
				n = j->o.batches_per_step;
	int64		ids = j->train.max_batch_ids;
	char		err[TF_ERRLEN];
	int			threads,
				rc;

	for (a = 0; a < n; a++)
	{
		const DataBatch *b = next_batch(j);
		int32	   *base = j->step_ids + (int64) a * 3 * ids;

		data_fill(&j->train, b, j->feed.pad_id, j->feed.bos_id, j->feed.eos_id, base, base + ids, base + 2 * ids,
				  &batches[a]);
		labels += b->tgt_tokens;
		j->tokens += b->src_tokens + b->tgt_tokens;
		j->run_tokens += b->src_tokens + b->tgt_tokens;
	}
	CHECK_FOR_INTERRUPTS();
	/* pg_reload_conf(): the new configuration from this step on (log levels, our settings) */
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
	}
	/*
	 * every rank's batches, the all-reduce and the Adam step; one download
	 * per rank. On the CPU the step runs on what the budget has free (the
	 * job's "threads" at most): translations beside it keep their threads.
	 */
	threads = cpu_budget_take_for(model(j), j->o.threads);
	rc = tf_parallel_step(j->engine, batches, n, (float) (1.0 / labels), &j->opt, &stats, err, sizeof(err));
	cpu_budget_give(threads);
	if (rc != TF_OK && !stats.skipped)
		step_failed(j, psprintf("step %lld", (long long) steps(j) + 1), err);
	j->loss_sum += stats.loss_sum;
	j->loss_tokens += stats.tokens;
	if (!stats.skipped)
	{
		j->learning_rate = stats.learning_rate;
		*skipped = 0;
	}
	else
	{
		if (++*skipped >= MAX_SKIPPED_STEPS)
			engine_error(j, "too many steps skipped", err);
		ereport(WARNING, (errmsg("training job %lld: %s", (long long) j->job_id, err)));
	}
	TOKENS_SEEN(j) += labels;
}

/* The coordinator's poll while its ranks wait for the others: gives up on a silent node. */
static bool
coordinator_poll(void *arg)
{
	return ranks_silent(&((Job *) arg)->silence);
}

/* A node's poll while its ranks work or wait: keeps its heartbeat current. */
static bool
node_poll(void *arg)
{
	Job		   *j = arg;

	if (worker_seconds() - j->heartbeat >= HEARTBEAT_SECONDS)
	{
		(void) ranks_heartbeat(j->job_id, j->node, j->node_step);
		j->heartbeat = worker_seconds();
	}
	return false;
}

/*
 * This node's ranks of a job across machines join the communicator of all
 * nodes' ranks (world, from attention.job_ranks), in the job's precision,
 * and load its newest checkpoint (every node the same one: none is written
 * before all have joined).
 */
static void
join_nodes(Job *j, TfWorld *world, MemoryContext ctx)
{
	char		err[TF_ERRLEN];
	int			threads = j->o.threads > 0 ? j->o.threads : cpu_budget_server_cores();
	RanksWatch	watch = {.job_id = j->job_id, .node = Max(j->node, 0)};

	attention_use_cuda_library();
	/* while waiting for the other machines' ranks, watch for a node's failure and for the job's end */
	world->abandon = ranks_abandon;
	world->abandon_arg = &watch;
	j->engine = tf_parallel_create(&j->config, (uint64) j->o.seed, j->o.device, threads, world, err, sizeof(err));
	CHECK_FOR_INTERRUPTS();
	if (j->engine == NULL && watch.failed_node != NULL)
		ranks_node_failed(j->job_id, watch.failed_node, watch.failed_error);
	if (j->engine == NULL)
		ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE),
						errmsg("training job %lld: ranks %d .. %d could not join the communicator of %d ranks: %s",
							   (long long) j->job_id, world->first_rank, world->first_rank + j->o.ranks - 1,
							   world->ranks, err)));
	set_precision(j);
	worker_begin();
	resume_engine(j);
	worker_commit();
	MemoryContextSwitchTo(ctx);
}

/*
 * The coordinator of a job across machines: publishes the nodes' ranks,
 * waits for them and joins. false when the job was cancelled meanwhile
 * (then it is marked so).
 */
static bool
join_as_coordinator(Job *j, MemoryContext ctx)
{
	TfWorld		world = {0};

	report(j, "waiting for the other nodes");
	ranks_publish(j->job_id, j->o.nodes, j->o.ranks, &world);
	if (!ranks_wait(j->job_id, j->o.nodes))
	{
		worker_begin();
		write_progress(j, "cancelled");
		worker_commit();
		return false;
	}
	join_nodes(j, &world, ctx);
	ranks_silence_init(&j->silence, j->job_id, j->o.nodes);
	tf_parallel_set_poll(j->engine, coordinator_poll, j);
	return true;
}

/*
 * Whether every node stops now: the nodes' votes summed (tf_parallel_agree)
 * after each step, so all stop after the same one. The coordinator votes
 * VOTE_STOP for its limits, a cancel, or an interrupt of its own (handled
 * once all have stopped); a node whose worker is asked to exit votes
 * VOTE_LEAVE (its row says why); one node alone decides by itself.
 */
static bool
agree_stop(Job *j, int vote)
{
	char		err[TF_ERRLEN];
	int			total;

	if (j->o.nodes == 1)
		return vote != 0;
	if (tf_parallel_agree(j->engine, vote, &total, err, sizeof(err)) != TF_OK)
		step_failed(j, psprintf("the vote after step %lld", (long long) steps(j)), err);
	/* a node left (unless the job was done anyway): keep this step, then fail naming the node */
	if (j->node < 0 && total - vote >= VOTE_LEAVE && !limit_reached(j))
	{
		char	   *cause;
		int			node = ranks_failure(j->job_id, &cause);

		if (steps(j) != j->checkpoint_step)
			checkpoint(j, NULL);
		if (node < 0)
			ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE),
							errmsg("training job %lld: a node left after step %lld", (long long) j->job_id,
								   (long long) steps(j)),
							errdetail("%s", cause)));
		ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE),
						errmsg("training job %lld: node %d left after step %lld: %s", (long long) j->job_id, node,
							   (long long) steps(j), cause)));
	}
	return total > 0;
}

/*
 * Whether this node worker is asked to stop (SIGTERM: pg_terminate_backend
 * or a shutdown, which run_node turns into ShutdownRequestPending; or its
 * postmaster died); if so, its row says why first, and the caller votes to
 * leave, so every node stops after the same step.
 */
static bool
node_leaving(Job *j)
{
	const char *why;

	if (ShutdownRequestPending)
		why = "SIGTERM: pg_terminate_backend or a server shutdown";
	else if (!PostmasterIsAlive())
		why = "its server stopped";
	else
		return false;
	ranks_set_state(j->job_id, j->node, "failed", steps(j),
					psprintf("its worker was stopped after step %lld (%s)", (long long) steps(j), why));
	return true;
}

/*
 * On another server: ERROR 55000 unless this server's SentencePiece encodes
 * a probe text with the job's vocabulary as the coordinator's does
 * (attention.encode there), so both servers cut the corpus into the same
 * batches. The libraries' version strings are not compared: the same
 * encoding is what the job needs. Inside a transaction.
 */
static void
require_same_encoding(Job *j)
{
	static const char probe[] = "Grüße aus Köln: naïve café, 2026 - ½ « déjà vu »!";
	Rows		rows;
	bool		isnull;
	ArrayType  *there;
	int		   *here;
	size_t		n;
	char		err[TF_ERRLEN];
	StringInfoData ids;

	rows_query(j->remote, &rows, "SELECT attention.encode($1, v.name) FROM attention.models m "
			   "JOIN attention.vocabularies v USING (vocabulary_id) WHERE m.model_id = $2", 2,
			   (Oid[]) {TEXTOID, INT4OID}, (Datum[]) {CStringGetTextDatum(probe), Int32GetDatum(j->model_id)},
			   NULL, true, 1);
	if (rows.n != 1)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
						errmsg("training job %lld: its model is gone from the coordinator's server",
							   (long long) j->job_id)));
	there = DatumGetArrayTypeP(SPI_getbinval(rows.vals[0], rows.desc, 1, &isnull));
	if (spm_encode(j->vocab, SPM_SOURCE, probe, strlen(probe), &here, &n, err, sizeof(err)) != 0)
		ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
						errmsg("training job %lld: could not encode with its vocabulary here: %s",
							   (long long) j->job_id, err)));
	if (ArrayGetNItems(ARR_NDIM(there), ARR_DIMS(there)) == (int) n && !ARR_HASNULL(there) &&
		memcmp(ARR_DATA_PTR(there), here, n * sizeof(int32)) == 0)
	{
		spm_free_buffer(here);
		return;
	}
	initStringInfo(&ids);
	for (size_t i = 0; i < n; i++)
		appendStringInfo(&ids, "%s%d", i > 0 ? "," : "", here[i]);
	spm_free_buffer(here);
	ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					errmsg("training job %lld: this server's SentencePiece encodes text with the job's vocabulary "
						   "differently from the coordinator's", (long long) j->job_id),
					errdetail("\"%s\": %s there, {%s} here.", probe, SPI_getvalue(rows.vals[0], rows.desc, 1),
							  ids.data),
					errhint("Install the same SentencePiece library on every server of the job.")));
}

/*
 * A node worker (attention.join_training): claims a node of the job, joins
 * its communicator, loads what the coordinator loaded (the newest
 * checkpoint, the corpus in the same order), then runs every step the
 * others run until they all agree to stop. The coordinator alone validates
 * and writes checkpoints and progress; this node writes only its row of
 * attention.job_ranks (state, step, a heartbeat about every second).
 */
static void
run_node(Job *j, MemoryContext ctx, const char *coordinator)
{
	TfWorld		world = {0};
	int			skipped = 0;
	int64		coordinator_step;
	Rows		rows;

	/* SIGTERM sets a flag the node acts on between steps, leaving through the vote (node_leaving) */
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pgstat_report_activity(STATE_RUNNING, "attention training node: claiming a node");
	if (coordinator != NULL)
	{
		j->remote = remote_connect(coordinator, "attention training node");
		ranks_use(j->remote);
	}
	worker_begin();
	/* a node of another server's job runs as the role that joined it there (docs/security.md) */
	if (j->remote == NULL)
	{
		char	   *why = job_entitlement(j->job_id, GetUserId());

		if (why != NULL)
			ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
							errmsg("training job %lld: this node's worker may not run it: %s", (long long) j->job_id,
								   why)));
	}
	rows_query(j->remote, &rows, psprintf(JOB_QUERY, vocabulary_columns(), ""), 1, (Oid[]) {INT8OID},
			   (Datum[]) {Int64GetDatum(j->job_id)}, NULL, false, 1);
	if (rows.n != 1)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
						errmsg("training job %lld does not exist on the coordinator's server", (long long) j->job_id)));
	read_job_row(j, rows.vals[0], rows.desc);
	worker_commit();
	MemoryContextSwitchTo(ctx);
	j->node = ranks_claim(j->job_id, j->o.ranks, &world);
	/* after the claim, so a failure is the node's row's, and the coordinator's wait names it */
	if (j->remote != NULL)
	{
		worker_begin();
		require_same_encoding(j);
		worker_commit();
		MemoryContextSwitchTo(ctx);
	}
	ranks_set_state(j->job_id, j->node, "joined", -1, NULL);
	join_nodes(j, &world, ctx);
	load_data(j, ctx);
	report(j, "training");
	j->node_step = steps(j);
	ranks_set_state(j->job_id, j->node, "training", j->node_step, NULL);
	j->heartbeat = worker_seconds();
	tf_parallel_set_poll(j->engine, node_poll, j);
	for (bool first = true;; first = false)
	{
		bool		leave = node_leaving(j);

		/* leaving: through the vote, so the others stop after this step too */
		if (agree_stop(j, leave ? VOTE_LEAVE : 0) || leave)
			break;
		/* the first vote is also where every node has loaded: the coordinator's row has its step by then */
		if (first && (coordinator_step = ranks_step(j->job_id, 0)) != steps(j))
			ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
							errmsg("training job %lld: node %d resumed at step %lld, but the coordinator at step %lld",
								   (long long) j->job_id, j->node, (long long) steps(j),
								   (long long) coordinator_step)));
		train_step(j, &skipped);
		j->node_step = steps(j);
		if (worker_seconds() - j->heartbeat >= HEARTBEAT_SECONDS)
		{
			ranks_set_state(j->job_id, j->node, "training", j->node_step, NULL);
			report(j, "training");
			j->heartbeat = worker_seconds();
		}
	}
	if (ShutdownRequestPending || !PostmasterIsAlive())
		proc_exit(1);
	ranks_set_state(j->job_id, j->node, "finished", steps(j), NULL);
}

/* Runs job `job_id` to its end. */
static void
run_job(Job *j, MemoryContext ctx)
{
	double		last_progress;
	int			skipped = 0;
	bool		cancelled = false;

	if (!claim_job(j, ctx))
		return;
	if (j->o.nodes > 1 && !join_as_coordinator(j, ctx))
		return;
	/* attention.progress: the job's steps, its phases as the operation (report) */
	progress_begin("training", psprintf("%s (job %lld)", j->model_name, (long long) j->job_id), "steps",
				   j->o.max_steps > 0 ? j->o.max_steps : -1);
	progress_add(steps(j));
	j->valid_loss = NAN;
	j->valid_bleu = NAN;
	j->learning_rate = NAN;
	load_data(j, ctx);
	j->history = history_start(j->job_id, steps(j));
	j->run_start = j->train_start = j->interval_start = worker_seconds();
	j->checkpoint_step = steps(j);
	j->checkpoint_time = last_progress = j->cancel_polled = worker_seconds();
	j->feed.stop = validation_stop;
	j->feed.stop_arg = j;
	if (j->o.nodes > 1)
		ranks_set_state(j->job_id, 0, "training", steps(j), NULL);
	report(j, "training");
	/*
	 * every node votes after each step (agree_stop): a stop below goes
	 * through the vote, and across machines so does an interrupt of this
	 * worker (the nodes stop with it; it is handled once they have)
	 */
	while (!agree_stop(j, cancelled || j->cancelled || limit_reached(j) ||
					   (j->o.nodes > 1 && (ProcDiePending || QueryCancelPending || !PostmasterIsAlive())) ? VOTE_STOP : 0))
	{
		int64		step = steps(j);

		CHECK_FOR_INTERRUPTS();
		if (!PostmasterIsAlive())
			proc_exit(1);
		train_step(j, &skipped);
		progress_add(steps(j) - step);	/* 0 for a step skipped for a non-finite gradient */
		step = steps(j);
		if (cancel_requested(j))
			continue;
		if (j->o.validate_every_steps > 0 && step % j->o.validate_every_steps == 0)
			validate(j);
		if ((j->o.checkpoint_every_steps > 0 && step - j->checkpoint_step >= j->o.checkpoint_every_steps) ||
			(j->o.checkpoint_every_minutes > 0 &&
			 worker_seconds() - j->checkpoint_time >= j->o.checkpoint_every_minutes * 60))
		{
			if (j->o.validate_every_steps == 0)
				validate(j);
			if (cancel_requested(j))
				continue;
			last_progress = worker_seconds();
			cancelled = checkpoint(j, NULL);
		}
		else if (j->validated || worker_seconds() - last_progress >= PROGRESS_SECONDS)
		{
			/* a validation is written at the step it measured */
			cancelled = progress(j);
			last_progress = worker_seconds();
		}
	}
	CHECK_FOR_INTERRUPTS();
	if (!PostmasterIsAlive())
		proc_exit(1);
	if (j->o.nodes > 1)
		ranks_set_state(j->job_id, 0, "finished", steps(j), NULL);
	/* a cancel ends with a checkpoint of the last step, not validated */
	cancelled = cancelled || j->cancelled;
	if (steps(j) != j->checkpoint_step)
	{
		if (j->o.validate_every_steps == 0 && !cancelled)
			validate(j);
		checkpoint(j, cancelled ? "cancelled" : "succeeded");
	}
	else
	{
		worker_begin();
		write_progress(j, cancelled ? "cancelled" : "succeeded");
		worker_commit();
	}
	progress_end();
}

/* Records an ERROR that ended the job (a cancel request from pg_cancel_backend ends it as cancelled). */
static void
record_error(int64 job_id, ErrorData *edata)
{
	const char *status = edata->sqlerrcode == ERRCODE_QUERY_CANCELED ? "cancelled" : "failed";

	worker_begin();
	SPI_execute_with_args("UPDATE attention.jobs SET status = $2, error = $3, finished_at = now(), updated_at = now() "
						  "WHERE job_id = $1 AND status IN ('queued', 'running')", 3,
						  (Oid[]) {INT8OID, TEXTOID, TEXTOID},
						  (Datum[]) {Int64GetDatum(job_id), CStringGetTextDatum(status),
							  CStringGetTextDatum(edata->message)}, NULL, false, 0);
	worker_commit();
}

/*
 * Exits, touching nothing, unless this database's attention schema is a
 * version this library's worker knows (after the binaries were downgraded,
 * or before ALTER EXTENSION UPDATE to a version newer than the library's).
 */
static void
require_known_schema(int64 job_id)
{
	static const char *const known[] = {"0.1.0", "0.2.0", "0.3.0", "0.4.0"};
	char	   *version = NULL;
	size_t		i;

	worker_begin();
	version = attention_extension_version(NULL);
	if (version != NULL)
		version = MemoryContextStrdup(TopMemoryContext, version);
	worker_commit();
	for (i = 0; version != NULL && i < lengthof(known); i++)
		if (strcmp(version, known[i]) == 0)
			return;
	ereport(LOG, (errmsg("attention: training job %lld not run: the attention schema of this database is version %s, "
						 "which this library does not know", (long long) job_id,
						 version != NULL ? version : "(none)"),
				  errhint("Install the attention library of that version, or a newer one; the job is left as it is.")));
	proc_exit(1);
}

void
attention_training_worker_main(Datum arg)
{
	WorkerArgs	args;
	MemoryContext ctx;
	Job		   *j;
	char		name[64];
	char	   *volatile coordinator = NULL;	/* set before PG_TRY; volatile for -Wclobbered */

	memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof(args));
	pqsignal(SIGTERM, die);
	pqsignal(SIGINT, StatementCancelHandler);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(args.database, args.role, 0);
	worker_pin_search_path();
	snprintf(name, sizeof(name), "attention training %s %lld", args.node ? "node, job" : "job",
			 (long long) args.job_id);
	SetConfigOption("application_name", name, PGC_USERSET, PGC_S_SESSION);
	SetConfigOption("statement_timeout", "0", PGC_USERSET, PGC_S_SESSION);
	/* before the wait below: the backend that started this node worker waits for it to be read */
	if (args.coordinator != DSM_HANDLE_INVALID)
		coordinator = worker_coordinator(args.coordinator);
	pgstat_report_activity(STATE_RUNNING, "waiting for the submitting transaction");

	/* the job row is visible once the transaction that submitted it ends */
	StartTransactionCommand();
	XactLockTableWait(args.submitter_xid, NULL, NULL, XLTW_None);
	CommitTransactionCommand();

	require_known_schema(args.job_id);
	ctx = AllocSetContextCreate(TopMemoryContext, "attention training job", ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(ctx);
	j = palloc0(sizeof(Job));
	j->job_id = args.job_id;
	j->node = -1;
	PG_TRY();
	{
		if (args.node)
			run_node(j, ctx, coordinator);
		else
			run_job(j, ctx);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		HOLD_INTERRUPTS();
		MemoryContextSwitchTo(ctx);
		edata = CopyErrorData();
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
		RESUME_INTERRUPTS();
		/* a node worker's failure is its node's; the coordinator fails the job */
		if (!args.node)
			record_error(args.job_id, edata);
		else if (j->node >= 0)
		{
			/* the coordinator's server may be what failed: then only this server's log says why */
			PG_TRY();
			{
				ranks_set_state(args.job_id, j->node, "failed", -1, edata->message);
			}
			PG_CATCH();
			{
				EmitErrorReport();
				FlushErrorState();
				AbortCurrentTransaction();
			}
			PG_END_TRY();
		}
	}
	PG_END_TRY();
	tf_parallel_free(j->engine);
	spm_free(j->vocab);
	remote_close(j->remote);
	pgstat_report_activity(STATE_IDLE, NULL);
	proc_exit(0);
}
