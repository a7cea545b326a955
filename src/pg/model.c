/*
 * model.c - models and checkpoints in tables: the configuration as jsonb,
 * create_model, initialize_checkpoint (the engine's serializer writing a
 * checkpoint as one row per tensor), and the per-backend cache of deployed
 * models that translation uses.
 *
 * A cached model is engine (malloc) and SentencePiece (C++) memory owned by
 * the cache in TopMemoryContext. Every call looks up the deployed checkpoint
 * (one indexed query) and reloads when the deployment or the checkpoint row
 * changed.
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include "attention.h"
#include "spm.h"

PG_FUNCTION_INFO_V1(attention_create_model);
PG_FUNCTION_INFO_V1(attention_initialize_checkpoint);


/* Vocabulary facts a model needs. */
typedef struct VocabInfo
{
	int32		vocabulary_id;
	int			vocab_size;
	int			pad_id,
				bos_id,
				eos_id;
} VocabInfo;

/* Reads the vocabulary of row 0 of SPI_tuptable from columns first .. first + 4 (id, size, pad, bos, eos). */
static VocabInfo
vocab_info(int first, const char *vocabulary)
{
	VocabInfo	info;
	bool		isnull[5];
	Datum		d[5];
	int			i;

	for (i = 0; i < 5; i++)
		d[i] = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, first + i, &isnull[i]);
	if (isnull[2] || isnull[3] || isnull[4])
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("vocabulary \"%s\" has no %s id", vocabulary,
							   isnull[2] ? "padding" : isnull[3] ? "BOS" : "EOS"),
						errhint("Translation models need pad, BOS and EOS pieces; train_vocabulary adds them.")));
	info.vocabulary_id = DatumGetInt32(d[0]);
	info.vocab_size = DatumGetInt32(d[1]);
	info.pad_id = DatumGetInt32(d[2]);
	info.bos_id = DatumGetInt32(d[3]);
	info.eos_id = DatumGetInt32(d[4]);
	return info;
}

/*
 * create_model(name text, vocabulary text, config jsonb) returns integer:
 * validates the configuration over the vocabulary and stores it in full.
 */
Datum
attention_create_model(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *vocabulary = text_to_cstring(PG_GETARG_TEXT_PP(1));
	Jsonb	   *config = PG_GETARG_JSONB_P(2);
	Oid			types[3] = {TEXTOID, INT4OID, JSONBOID};
	Datum		values[3];
	VocabInfo	info;
	TfConfig	c;
	bool		isnull;
	int32		id;

	SPI_connect();
	if (SPI_execute_with_args("SELECT vocabulary_id, vocab_size, pad_id, bos_id, eos_id "
							  "FROM attention.vocabularies WHERE name = $1",
							  1, types, (Datum[]) {CStringGetTextDatum(vocabulary)}, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read attention.vocabularies");
	if (SPI_processed == 0)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
						errmsg("vocabulary \"%s\" does not exist", vocabulary)));
	info = vocab_info(1, vocabulary);
	attention_config_from_jsonb(config, info.vocab_size, info.pad_id, &c);
	if (SPI_execute_with_args("SELECT 1 FROM attention.models WHERE name = $1", 1, types,
							  (Datum[]) {CStringGetTextDatum(name)}, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read attention.models");
	if (SPI_processed > 0)
		ereport(ERROR, (errcode(ERRCODE_DUPLICATE_OBJECT),
						errmsg("model \"%s\" already exists", name)));
	values[0] = CStringGetTextDatum(name);
	values[1] = Int32GetDatum(info.vocabulary_id);
	values[2] = attention_config_to_jsonb(&c);
	if (SPI_execute_with_args("INSERT INTO attention.models (name, vocabulary_id, config) VALUES ($1, $2, $3) "
							  "RETURNING model_id", 3, types, values, NULL, false, 1) != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "could not insert model \"%s\"", name);
	id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	SPI_finish();
	PG_RETURN_INT32(id);
}

/*
 * initialize_checkpoint(model text, seed bigint) returns bigint: a step-0
 * checkpoint with the paper's initialisation drawn from seed (parameters,
 * zero Adam moments, counters), written by the engine's serializer.
 */
Datum
attention_initialize_checkpoint(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	int64		seed = PG_GETARG_INT64(1);
	Oid			types[1] = {INT4OID};
	VocabInfo	info;
	TfConfig	c;
	TfModel    *m;
	TfTensor   *tensors;
	int			count;
	int32		model_id;
	int64		checkpoint_id;
	bool		isnull;
	char		err[TF_ERRLEN];

	SPI_connect();
	require_model_owner(name, "checkpoint");
	read_model_row(name);
	model_id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	info = vocab_info(3, name);
	attention_config_from_jsonb(DatumGetJsonbP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)),
								info.vocab_size, info.pad_id, &c);
	if (SPI_execute_with_args("INSERT INTO attention.checkpoints (model_id, kind, step) VALUES ($1, 'initial', 0) "
							  "RETURNING checkpoint_id", 1, types, (Datum[]) {Int32GetDatum(model_id)}, NULL,
							  false, 1) != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "could not insert a checkpoint of model \"%s\"", name);
	checkpoint_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));

	m = tf_model_create(&c, (uint64_t) seed, "cpu", attention_thread_count(), err, sizeof(err));
	if (m == NULL)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("could not create model \"%s\": %s", name, err)));
	if (tf_model_tensors(m, &tensors, &count, err, sizeof(err)) != TF_OK)
	{
		tf_model_free(m);
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("%s", err)));
	}
	PG_TRY();
	{
		write_tensors(checkpoint_id, tensors, count);
	}
	PG_FINALLY();
	{
		tf_tensors_free(tensors);
		tf_model_free(m);
	}
	PG_END_TRY();
	SPI_finish();
	PG_RETURN_INT64(checkpoint_id);
}

/* ------------------------------------------------------------------------
 * The per-backend cache of deployed models
 * ------------------------------------------------------------------------ */

static AttentionModel *model_cache = NULL;
static SPIPlanPtr lookup_plan = NULL;

/* Frees a cached model's engine and vocabulary memory and the entry. */
static void
model_free(AttentionModel *am)
{
	tf_model_free(am->engine);
	spm_free(am->vocabulary);
	pfree(am);
}

/* Name of the model to use when none is given: attention.default_model, or the only deployed one. */
static char *
default_model_name(void)
{
	if (attention_default_model != NULL && attention_default_model[0] != '\0')
		return pstrdup(attention_default_model);
	if (SPI_execute("SELECT m.name FROM attention.models m JOIN attention.checkpoints c "
					"ON c.model_id = m.model_id AND c.deployed ORDER BY m.name", true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read attention.models");
	if (SPI_processed == 0)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
						errmsg("no model is deployed"),
						errhint("Deploy a checkpoint with attention.deploy(model), or name the model.")));
	if (SPI_processed > 1)
		ereport(ERROR, (errcode(ERRCODE_AMBIGUOUS_PARAMETER),
						errmsg("%d models are deployed and attention.default_model is not set", (int) SPI_processed),
						errhint("Set attention.default_model, or pass the model name.")));
	return SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
}

/* Loads the checkpoint d describes on `device`; ERROR on any problem. Inside SPI. */
static AttentionModel *
model_load(const DeployedModel *d, const char *device, bool owner)
{
	Oid			types[1] = {INT4OID};
	VocabInfo	info;
	TfConfig	c;
	TfTensor   *tensors;
	int			count;
	SpmModel   *vocab = NULL;
	HeapTuple	vocab_row;
	TupleDesc	vocab_desc;
	TfModel    *engine;
	AttentionModel *am;
	char		err[TF_ERRLEN];

	if (SPI_execute_with_args(psprintf("SELECT vocabulary_id, vocab_size, pad_id, bos_id, eos_id, %s "
									   "FROM attention.vocabularies v WHERE vocabulary_id = $1", vocabulary_columns()),
							  1, types,
							  (Datum[]) {Int32GetDatum(d->vocabulary_id)}, NULL, true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not read the vocabulary of model \"%s\"", d->name);
	info = vocab_info(1, d->name);
	/* copies (in SPI's procedure context) that outlive the next query */
	vocab_row = heap_copytuple(SPI_tuptable->vals[0]);
	vocab_desc = CreateTupleDescCopy(SPI_tuptable->tupdesc);
	attention_config_from_jsonb(d->config, info.vocab_size, info.pad_id, &c);
	tensors = read_tensors(d->checkpoint_id, owner ? TENSORS_PARAMETERS : TENSORS_DEPLOYED, &count);
	if (strcmp(device, "cuda") == 0)
		attention_use_cuda_library();

	/* from here on no ERROR until the engine objects are owned by the cache entry */
	vocab = vocabulary_load(vocab_row, vocab_desc, 6,
							psprintf("the vocabulary of model \"%s\"", d->name), ERRCODE_DATA_CORRUPTED);
	engine = tf_model_create_inference(&c, device, attention_thread_count(), err, sizeof(err));
	if (engine == NULL || tf_model_load(engine, tensors, count, err, sizeof(err)) != TF_OK)
	{
		int			code = engine != NULL ? ERRCODE_DATA_CORRUPTED :
			strcmp(device, "cpu") == 0 ? ERRCODE_OUT_OF_MEMORY : ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE;

		tf_model_free(engine);
		spm_free(vocab);
		ereport(ERROR, (errcode(code),
						errmsg("could not load checkpoint %lld of model \"%s\": %s",
							   (long long) d->checkpoint_id, d->name, err)));
	}
	am = MemoryContextAllocZero(TopMemoryContext, sizeof(AttentionModel));
	strlcpy(am->name, d->name, sizeof(am->name));
	am->model_id = d->model_id;
	am->checkpoint_id = d->checkpoint_id;
	am->xmin = d->xmin;
	am->engine = engine;
	am->vocabulary = vocab;
	am->bos_id = info.bos_id;
	am->eos_id = info.eos_id;
	am->pad_id = info.pad_id;
	am->max_positions = c.max_positions;
	am->bytes = tf_model_num_parameters(engine) * sizeof(float);
	strlcpy(am->device, device, sizeof(am->device));
	return am;
}

void
attention_model_lookup(text *model, DeployedModel *d)
{
	Oid			types[1] = {TEXTOID};
	char	   *name;
	bool		isnull;
	Jsonb	   *config;
	MemoryContext caller = CurrentMemoryContext;

	SPI_connect();
	name = model != NULL ? text_to_cstring(model) : default_model_name();
	/* the per-call check: planned once per backend */
	if (lookup_plan == NULL)
	{
		SPIPlanPtr	plan = SPI_prepare("SELECT m.model_id, m.config, m.vocabulary_id, c.checkpoint_id, c.xmin::text "
									   "FROM attention.models m LEFT JOIN attention.checkpoints c "
									   "ON c.model_id = m.model_id AND c.deployed WHERE m.name = $1", 1, types);

		if (plan == NULL || SPI_keepplan(plan) != 0)
			elog(ERROR, "could not prepare the model lookup: %s", SPI_result_code_string(SPI_result));
		lookup_plan = plan;
	}
	if (SPI_execute_plan(lookup_plan, (Datum[]) {CStringGetTextDatum(name)}, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read attention.models");
	if (SPI_processed == 0)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
						errmsg("model \"%s\" does not exist", name)));
	strlcpy(d->name, name, sizeof(d->name));
	d->model_id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	d->vocabulary_id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull));
	d->checkpoint_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull));
	if (isnull)
		ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						errmsg("model \"%s\" has no deployed checkpoint", name),
						errhint("Deploy one with attention.deploy('%s').", name)));
	d->xmin = (TransactionId) strtoul(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 5), NULL, 10);
	config = DatumGetJsonbP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	d->config = MemoryContextAlloc(caller, VARSIZE(config));
	memcpy(d->config, config, VARSIZE(config));
	SPI_finish();
}

AttentionModel *
attention_model_load(const DeployedModel *d, const char *device, bool owner)
{
	AttentionModel **p,
			   *am;

	for (p = &model_cache; *p != NULL; p = &(*p)->next)
		if ((*p)->model_id == d->model_id)
			break;
	am = *p;
	if (am != NULL && (am->checkpoint_id != d->checkpoint_id || am->xmin != d->xmin ||
					   strcmp(am->name, d->name) != 0 || strcmp(am->device, device) != 0))
	{
		*p = am->next;
		model_free(am);
		am = NULL;
	}
	if (am == NULL)
	{
		SPI_connect();
		am = model_load(d, device, owner);
		SPI_finish();
		am->next = model_cache;
		model_cache = am;
	}
	tf_model_set_threads(am->engine, attention_thread_count());
	return am;
}

AttentionModel *
attention_model_get(text *model)
{
	DeployedModel d;

	attention_model_lookup(model, &d);
	return attention_model_load(&d, "cpu", false);
}
