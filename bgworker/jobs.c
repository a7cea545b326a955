/*
 * jobs.c - submitting and resuming training jobs: option validation,
 * attention.train, attention.resume_training, and starting the dynamic
 * background worker that runs a job (pg_cron's model: BGW_NEVER_RESTART
 * workers that connect as the role that submitted the job).
 */
#include "postgres.h"

#include <math.h>

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/latch.h"
#include "storage/procarray.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"
#include "utils/syscache.h"

#include "attention.h"
#include "worker.h"

PG_FUNCTION_INFO_V1(attention_train);
PG_FUNCTION_INFO_V1(attention_resume_training);
PG_FUNCTION_INFO_V1(attention_worker_alive);

StaticAssertDecl(sizeof(WorkerArgs) <= BGW_EXTRALEN, "WorkerArgs must fit in bgw_extra");

typedef enum OptionType
{
	OPT_INT32,
	OPT_INT64,
	OPT_FLOAT,
	OPT_TEXT
} OptionType;

/* One option: name, type, range, and whether resume_training may change it. */
typedef struct OptionSpec
{
	const char *name;
	OptionType	type;
	size_t		offset;
	double		min;
	double		max;
	bool		resumable;
} OptionSpec;

static const OptionSpec option_specs[] = {
	{"max_steps", OPT_INT64, offsetof(TrainOptions, max_steps), 0, 1e15, true},
	{"max_epochs", OPT_INT32, offsetof(TrainOptions, max_epochs), 0, 1e6, true},
	{"max_minutes", OPT_FLOAT, offsetof(TrainOptions, max_minutes), 0, 1e7, true},
	{"batch_tokens", OPT_INT32, offsetof(TrainOptions, batch_tokens), 1, 1 << 24, false},
	{"warmup_steps", OPT_INT32, offsetof(TrainOptions, warmup_steps), 1, 1e8, false},
	{"learning_rate_scale", OPT_FLOAT, offsetof(TrainOptions, learning_rate_scale), 1e-6, 1e3, false},
	{"label_smoothing", OPT_FLOAT, offsetof(TrainOptions, label_smoothing), 0, 0.999, false},
	{"dropout", OPT_FLOAT, offsetof(TrainOptions, dropout), 0, 0.999, false},
	{"accumulate_batches", OPT_INT32, offsetof(TrainOptions, accumulate_batches), 1, 1024, false},
	{"checkpoint_every_steps", OPT_INT64, offsetof(TrainOptions, checkpoint_every_steps), 0, 1e15, true},
	{"checkpoint_every_minutes", OPT_FLOAT, offsetof(TrainOptions, checkpoint_every_minutes), 0, 1e7, true},
	{"keep_checkpoints", OPT_INT32, offsetof(TrainOptions, keep_checkpoints), 0, 1e6, true},
	{"validate_every_steps", OPT_INT64, offsetof(TrainOptions, validate_every_steps), 0, 1e15, true},
	{"validation_bleu_sentences", OPT_INT32, offsetof(TrainOptions, validation_bleu_sentences), 0, 1e6, true},
	{"seed", OPT_INT64, offsetof(TrainOptions, seed), 0, 9.0e18, false},
	{"device", OPT_TEXT, offsetof(TrainOptions, device), 0, 0, false},
	{"threads", OPT_INT32, offsetof(TrainOptions, threads), 0, 1024, true},
};

/* The defaults: the paper's schedule, a checkpoint every 10 minutes, 5 kept. */
static void
train_options_default(TrainOptions *o)
{
	memset(o, 0, sizeof(*o));
	o->batch_tokens = 4096;
	o->warmup_steps = 4000;
	o->learning_rate_scale = 1.0;
	o->label_smoothing = -1;
	o->dropout = -1;
	o->accumulate_batches = 1;
	o->checkpoint_every_steps = 1000;
	o->checkpoint_every_minutes = 10;
	o->keep_checkpoints = 5;
	o->seed = 1;
	strlcpy(o->device, "cpu", sizeof(o->device));
}

/* Sets one option from a jsonb value; ERROR naming the key when it does not fit. */
static void
apply_option(TrainOptions *o, const OptionSpec *spec, const JsonbValue *v)
{
	char	   *field = (char *) o + spec->offset;
	double		x;

	if (spec->type == OPT_TEXT)
	{
		char	   *s;

		if (v->type != jbvString)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("training option \"%s\" must be a string", spec->name)));
		s = pnstrdup(v->val.string.val, v->val.string.len);
		if (strlen(s) >= sizeof(o->device))
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("training option \"device\" is too long: \"%s\"", s)));
		attention_check_device(s);
		strlcpy(field, s, sizeof(o->device));
		return;
	}
	if (v->type != jbvNumeric)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("training option \"%s\" must be a number", spec->name)));
	x = DatumGetFloat8(DirectFunctionCall1(numeric_float8, NumericGetDatum(v->val.numeric)));
	if (spec->type != OPT_FLOAT && x != floor(x))
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("training option \"%s\" must be an integer, not %g", spec->name, x)));
	if (!(x >= spec->min && x <= spec->max))
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("training option \"%s\" is %g, out of range [%g, %g]", spec->name, x,
							   spec->min, spec->max)));
	if (spec->type == OPT_INT32)
		*(int32 *) field = (int32) x;
	else if (spec->type == OPT_INT64)
		*(int64 *) field = (int64) x;
	else
		*(double *) field = x;
}

void
train_options_parse(Jsonb *options, bool only_resumable, TrainOptions *o)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	const OptionSpec *pending = NULL;

	if (!only_resumable)
		train_options_default(o);
	if (!JB_ROOT_IS_OBJECT(options))
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("training options must be a JSON object")));
	it = JsonbIteratorInit(&options->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
		{
			char	   *key = pnstrdup(v.val.string.val, v.val.string.len);
			int			i;

			pending = NULL;
			for (i = 0; i < (int) lengthof(option_specs); i++)
				if (strcmp(option_specs[i].name, key) == 0)
					pending = &option_specs[i];
			if (pending == NULL)
				ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
								errmsg("unknown training option \"%s\"", key),
								errhint("Options: max_steps, max_epochs, max_minutes, batch_tokens, warmup_steps, "
										"learning_rate_scale, label_smoothing, dropout, accumulate_batches, "
										"checkpoint_every_steps, checkpoint_every_minutes, keep_checkpoints, "
										"validate_every_steps, validation_bleu_sentences, seed, device, threads.")));
			if (only_resumable && !pending->resumable)
				ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
								errmsg("training option \"%s\" cannot change when a job resumes", key),
								errhint("A resumed job keeps its data order and schedule; submit a new job to change them.")));
		}
		else if (tok == WJB_VALUE && pending != NULL)
			apply_option(o, pending, &v);
	}
	if (!only_resumable && o->max_steps == 0 && o->max_epochs == 0 && o->max_minutes == 0)
		o->max_epochs = 10;
}

Jsonb *
train_options_to_jsonb(const TrainOptions *o)
{
	StringInfoData s;
	int			i;

	initStringInfo(&s);
	appendStringInfoChar(&s, '{');
	for (i = 0; i < (int) lengthof(option_specs); i++)
	{
		const OptionSpec *spec = &option_specs[i];
		const char *field = (const char *) o + spec->offset;

		if (spec->type == OPT_FLOAT && *(const double *) field < 0)
			continue;			/* the model's own value */
		appendStringInfo(&s, "%s\"%s\": ", i > 0 ? ", " : "", spec->name);
		if (spec->type == OPT_INT32)
			appendStringInfo(&s, "%d", *(const int32 *) field);
		else if (spec->type == OPT_INT64)
			appendStringInfo(&s, INT64_FORMAT, *(const int64 *) field);
		else if (spec->type == OPT_FLOAT)
			appendStringInfo(&s, "%.7g", *(const double *) field);
		else
			appendStringInfo(&s, "\"%s\"", field);
	}
	appendStringInfoChar(&s, '}');
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(s.data)));
}

/* ERROR unless role `role` may log in: a job's worker connects as it. */
static void
require_login(Oid role)
{
	HeapTuple	tup = SearchSysCache1(AUTHOID, ObjectIdGetDatum(role));
	bool		can_login;
	char	   *name;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for role %u", role);
	can_login = ((Form_pg_authid) GETSTRUCT(tup))->rolcanlogin;
	name = pstrdup(NameStr(((Form_pg_authid) GETSTRUCT(tup))->rolname));
	ReleaseSysCache(tup);
	if (!can_login)
		ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
						errmsg("role \"%s\" cannot log in, and a training job's worker connects as the role that submits it",
							   name),
						errhint("Submit the job as a role with LOGIN (a member of the model's owner role).")));
}

void
launch_training_worker(int64 job_id, Oid role)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	WorkerArgs	args;
	pid_t		pid;
	BgwHandleStatus status;

	memset(&worker, 0, sizeof(worker));
	memset(&args, 0, sizeof(args));
	args.job_id = job_id;
	args.database = MyDatabaseId;
	args.role = role;
	args.submitter_xid = GetTopTransactionId();
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "attention", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "attention_training_worker_main", BGW_MAXLEN);
	snprintf(worker.bgw_name, BGW_MAXLEN, "attention training job %lld", (long long) job_id);
	strlcpy(worker.bgw_type, "attention training", BGW_MAXLEN);
	worker.bgw_main_arg = Int64GetDatum(job_id);
	memcpy(worker.bgw_extra, &args, sizeof(args));
	worker.bgw_notify_pid = MyProcPid;

	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
		ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_RESOURCES),
						errmsg("could not start a training worker for job %lld: no background worker slot is free",
							   (long long) job_id),
						errhint("Raise max_worker_processes (now %d) or wait for a job to finish.",
								max_worker_processes)));
	status = WaitForBackgroundWorkerStartup(handle, &pid);
	if (status != BGWH_STARTED)
		ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_RESOURCES),
						errmsg("the training worker for job %lld did not start", (long long) job_id),
						errhint("See the server log.")));
	/* wait until it is a server process with a slot, so training_jobs shows it alive */
	while (BackendPidGetProc(pid) == NULL)
	{
		if (GetBackgroundWorkerPid(handle, &pid) != BGWH_STARTED)
			ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE),
							errmsg("the training worker for job %lld exited while connecting", (long long) job_id),
							errhint("See the server log.")));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 1, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	if (SPI_execute_with_args("UPDATE attention.jobs SET worker_pid = $2 WHERE job_id = $1", 2,
							  (Oid[]) {INT8OID, INT4OID}, (Datum[]) {Int64GetDatum(job_id), Int32GetDatum(pid)},
							  NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not record the worker of job %lld", (long long) job_id);
}

/*
 * train(model text, corpus text, options jsonb) returns bigint: validates
 * the options, records a queued job and starts its worker; returns the job
 * id at once.
 */
Datum
attention_train(PG_FUNCTION_ARGS)
{
	char	   *model = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *corpus = text_to_cstring(PG_GETARG_TEXT_PP(1));
	Jsonb	   *options = PG_GETARG_JSONB_P(2);
	TrainOptions o;
	int32		model_id,
				corpus_id;
	int64		job_id;
	bool		isnull;

	train_options_parse(options, false, &o);
	SPI_connect();
	model_id = require_model_owner(model, "train");
	corpus_id = attention_corpus_id(corpus);
	require_login(GetUserId());
	if (SPI_execute_with_args("SELECT job_id FROM attention.training_jobs WHERE model_id = $1 "
							  "AND status IN ('queued', 'running') LIMIT 1", 1, (Oid[]) {INT4OID},
							  (Datum[]) {Int32GetDatum(model_id)}, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read attention.training_jobs");
	if (SPI_processed > 0)
		ereport(ERROR, (errcode(ERRCODE_OBJECT_IN_USE),
						errmsg("model \"%s\" is already training (job %s)", model,
							   SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1)),
						errhint("Wait for it (attention.wait_training) or cancel it (attention.cancel_training).")));
	if (SPI_execute_with_args("INSERT INTO attention.jobs (model_id, corpus_id, options) VALUES ($1, $2, $3) "
							  "RETURNING job_id", 3, (Oid[]) {INT4OID, INT4OID, JSONBOID},
							  (Datum[]) {Int32GetDatum(model_id), Int32GetDatum(corpus_id),
								  JsonbPGetDatum(train_options_to_jsonb(&o))}, NULL, false, 1) != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "could not insert a training job");
	job_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	launch_training_worker(job_id, GetUserId());
	SPI_finish();
	PG_RETURN_INT64(job_id);
}

/*
 * resume_training(job bigint, options jsonb) returns bigint: queues a job
 * that is not running (interrupted, cancelled, failed or succeeded) again,
 * with its stopping and checkpoint options optionally changed, and starts
 * a worker that continues from the job's newest checkpoint; returns the
 * job id.
 */
Datum
attention_resume_training(PG_FUNCTION_ARGS)
{
	int64		job_id = PG_GETARG_INT64(0);
	Jsonb	   *changes = PG_GETARG_JSONB_P(1);
	TrainOptions o;
	char	   *model,
			   *status;
	bool		isnull;

	SPI_connect();
	if (SPI_execute_with_args("SELECT m.name, v.status, j.options FROM attention.jobs j "
							  "JOIN attention.training_jobs v USING (job_id) JOIN attention.models m "
							  "ON m.model_id = j.model_id WHERE j.job_id = $1 FOR UPDATE OF j", 1,
							  (Oid[]) {INT8OID}, (Datum[]) {Int64GetDatum(job_id)}, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read attention.jobs");
	if (SPI_processed == 0)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT), errmsg("training job %lld does not exist", (long long) job_id)));
	model = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	status = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	train_options_parse(DatumGetJsonbP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull)),
						false, &o);
	train_options_parse(changes, true, &o);
	require_model_owner(model, "train");
	require_login(GetUserId());
	if (strcmp(status, "queued") == 0 || strcmp(status, "running") == 0)
		ereport(ERROR, (errcode(ERRCODE_OBJECT_IN_USE),
						errmsg("training job %lld is %s", (long long) job_id, status),
						errhint("Only a job that has stopped can be resumed.")));
	if (SPI_execute_with_args("UPDATE attention.jobs SET status = 'queued', options = $2, worker_pid = NULL, "
							  "cancel_requested = false, finished_at = NULL, error = NULL, submitted_by = current_user "
							  "WHERE job_id = $1", 2, (Oid[]) {INT8OID, JSONBOID},
							  (Datum[]) {Int64GetDatum(job_id), JsonbPGetDatum(train_options_to_jsonb(&o))}, NULL,
							  false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not queue training job %lld", (long long) job_id);
	launch_training_worker(job_id, GetUserId());
	SPI_finish();
	PG_RETURN_INT64(job_id);
}

/* worker_alive(pid int) returns bool: a server process with this pid holds a slot in this cluster. */
Datum
attention_worker_alive(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(BackendPidGetProc(PG_GETARG_INT32(0)) != NULL);
}
