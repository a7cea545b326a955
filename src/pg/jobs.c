/*
 * jobs.c - submitting and resuming training jobs: attention.train,
 * attention.resume_training, attention.join_training (a node of a job
 * across machines) and attention.worker_alive. The options are
 * checked here (train_options.c), so a job that cannot run is never
 * queued; the worker that runs a job is started by launch_training_worker
 * (bgworker/launcher.c).
 */
#include "postgres.h"

#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/procarray.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/syscache.h"

#include "catalog.h"
#include "rights.h"
#include "train_options.h"
#include "workers.h"

PG_FUNCTION_INFO_V1(attention_train);
PG_FUNCTION_INFO_V1(attention_resume_training);
PG_FUNCTION_INFO_V1(attention_worker_alive);
PG_FUNCTION_INFO_V1(attention_join_training);
PG_FUNCTION_INFO_V1(attention_join_training_remote);

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

/* ERROR unless the current role may run job `job_id` as its worker (job_entitlement, rights.h). */
static void
require_entitled(int64 job_id)
{
	char	   *why = job_entitlement(job_id, GetUserId());

	if (why != NULL)
		ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
						errmsg("permission denied to run training job %lld: %s", (long long) job_id, why)));
}

/*
 * Reads job `job_id` (locked with for_update) into *o and returns its
 * status; ERROR when it does not exist, or unless the current role owns its
 * model and may run it (its worker connects as this role). Inside SPI.
 */
static char *
read_job(int64 job_id, bool for_update, TrainOptions *o)
{
	char	   *model,
			   *status;
	bool		isnull;

	if (SPI_execute_with_args(psprintf("SELECT m.name, v.status, j.options FROM attention.jobs j "
									   "JOIN attention.training_jobs v USING (job_id) JOIN attention.models m "
									   "ON m.model_id = j.model_id WHERE j.job_id = $1%s",
									   for_update ? " FOR UPDATE OF j" : ""), 1,
							  (Oid[]) {INT8OID}, (Datum[]) {Int64GetDatum(job_id)}, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read attention.jobs");
	if (SPI_processed == 0)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT), errmsg("training job %lld does not exist", (long long) job_id)));
	model = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	status = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	train_options_parse(DatumGetJsonbP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull)),
						false, o);
	require_model_owner(model, "train");
	require_entitled(job_id);
	return status;
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
	train_options_check(&o);
	SPI_connect();
	model_id = require_model_owner(model, "train");
	corpus_id = require_usable("corpus", corpus, "train on");
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
	if (o.init_checkpoint > 0)
		require_model_checkpoint(o.init_checkpoint, model_id, model);
	if (SPI_execute_with_args("INSERT INTO attention.jobs (model_id, corpus_id, options) VALUES ($1, $2, $3) "
							  "RETURNING job_id", 3, (Oid[]) {INT4OID, INT4OID, JSONBOID},
							  (Datum[]) {Int32GetDatum(model_id), Int32GetDatum(corpus_id),
								  JsonbPGetDatum(train_options_to_jsonb(&o))}, NULL, false, 1) != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "could not insert a training job");
	job_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	require_entitled(job_id);
	launch_training_worker(job_id, GetUserId(), false, NULL);
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
	char	   *status;

	SPI_connect();
	status = read_job(job_id, true, &o);
	train_options_parse(changes, true, &o);
	train_options_check(&o);
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
	launch_training_worker(job_id, GetUserId(), false, NULL);
	SPI_finish();
	PG_RETURN_INT64(job_id);
}

/* worker_alive(pid int) returns bool: a server process with this pid holds a slot in this cluster. */
Datum
attention_worker_alive(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(BackendPidGetProc(PG_GETARG_INT32(0)) != NULL);
}

/* ERROR unless a node may join job `job_id`, whose status and options these are. */
static void
require_joinable(int64 job_id, const char *status, TrainOptions *o)
{
	if (o->nodes < 2)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("training job %lld runs on one machine (\"nodes\" is 1)", (long long) job_id),
						errhint("Submit the job with \"nodes\": N to train on N machines.")));
	if (strcmp(status, "queued") != 0 && strcmp(status, "running") != 0)
		ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						errmsg("training job %lld is %s", (long long) job_id, status),
						errhint("A node joins a job that is queued or running.")));
	train_options_check(o);		/* the devices named must exist on this server too */
}

/*
 * join_training(job bigint) returns integer: starts a worker on this server
 * that claims the next waiting node of a running job across machines
 * ("nodes" > 1) and joins its communicator; returns the worker's pid.
 */
Datum
attention_join_training(PG_FUNCTION_ARGS)
{
	int64		job_id = PG_GETARG_INT64(0);
	TrainOptions o;
	char	   *status;
	int			pid;

	SPI_connect();
	status = read_job(job_id, false, &o);
	require_joinable(job_id, status, &o);
	pid = launch_training_worker(job_id, GetUserId(), true, NULL);
	SPI_finish();
	PG_RETURN_INT32(pid);
}

/*
 * join_training(coordinator text, job bigint) returns integer: the same
 * from another server. Connects to the coordinator's server with libpq
 * (`coordinator`: a connection string without a password), checks there
 * that the job may be joined and that both databases have the same
 * attention version, then starts a worker on this server that connects
 * the same way, claims a node and reads the job, vocabulary, corpus and
 * checkpoint from there. Returns the worker's pid.
 */
Datum
attention_join_training_remote(PG_FUNCTION_ARGS)
{
	char	   *coordinator = text_to_cstring(PG_GETARG_TEXT_PP(0));
	int64		job_id = PG_GETARG_INT64(1);
	Remote	   *volatile r = NULL;
	int			pid;

	remote_check_conninfo(coordinator);
	require_login(GetUserId());
	SPI_connect();
	PG_TRY();
	{
		TrainOptions o;
		Rows		rows;
		bool		isnull;
		char	   *here = attention_extension_version(NULL),
				   *there;

		r = remote_connect(coordinator, "attention join_training");
		there = attention_extension_version(r);
		if (here == NULL || there == NULL || strcmp(here, there) != 0)
			ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
							errmsg("the coordinator's database has attention %s, this one %s", there ? there : "(none)",
								   here ? here : "(none)"),
							errhint("Install the same version on every server of the job (ALTER EXTENSION attention "
									"UPDATE).")));
		rows_query(r, &rows, "SELECT v.status, j.options FROM attention.jobs j JOIN attention.training_jobs v "
				   "USING (job_id) WHERE j.job_id = $1", 1, (Oid[]) {INT8OID}, (Datum[]) {Int64GetDatum(job_id)},
				   NULL, true, 1);
		if (rows.n == 0)
			ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
							errmsg("training job %lld does not exist on the coordinator's server", (long long) job_id)));
		train_options_parse(DatumGetJsonbP(SPI_getbinval(rows.vals[0], rows.desc, 2, &isnull)), false, &o);
		require_joinable(job_id, SPI_getvalue(rows.vals[0], rows.desc, 1), &o);
	}
	PG_FINALLY();
	{
		remote_close(r);
	}
	PG_END_TRY();
	pid = launch_training_worker(job_id, GetUserId(), true, coordinator);
	SPI_finish();
	PG_RETURN_INT32(pid);
}
