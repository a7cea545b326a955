/*
 * model_cache.c - the per-backend cache of deployed models that translation
 * uses (model_cache.h).
 *
 * A cached model is engine (malloc) and SentencePiece (C++) memory owned by
 * the cache in TopMemoryContext. Every call looks up the deployed checkpoint
 * (one indexed query) and reloads when the deployment or the checkpoint row
 * changed.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include "catalog.h"
#include "model_cache.h"
#include "progress.h"
#include "settings.h"
#include "spm.h"

static AttentionModel *model_cache = NULL;
static SPIPlanPtr lookup_plan = NULL;

/* Frees a cached model's engine and vocabulary memory and the entry. */
static void
model_free(AttentionModel *am)
{
	progress_model_memory(am->name, am->device, -1, 0);
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
	info = catalog_vocab_info(1, d->name);
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
	engine = tf_model_create_for(&c, tensors, count, device, 1, err, sizeof(err));
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
	am->source_language_last = vocabulary_source_language_last(vocab_row, vocab_desc, 6);
	am->bytes = tf_model_weight_bytes(engine);
	strlcpy(am->device, device, sizeof(am->device));
	return am;
}

/*
 * The languages of a model row (columns first .. first + 3: languages,
 * language_ids, source_language, target_language) into d, allocated in cxt.
 */
static void
read_languages(HeapTuple tup, TupleDesc desc, int first, MemoryContext cxt, DeployedModel *d)
{
	MemoryContext old;
	bool		isnull;
	Datum		codes = SPI_getbinval(tup, desc, first, &isnull);
	char	   *source,
			   *target;

	d->n_languages = 0;
	d->languages = NULL;
	d->language_ids = NULL;
	source = SPI_getvalue(tup, desc, first + 2);
	target = SPI_getvalue(tup, desc, first + 3);
	old = MemoryContextSwitchTo(cxt);
	d->source_language = source != NULL ? pstrdup(source) : NULL;
	d->target_language = target != NULL ? pstrdup(target) : NULL;
	if (!isnull)
	{
		Datum	   *elems,
				   *ids;
		int			n,
					k,
					i;

		deconstruct_array(DatumGetArrayTypeP(codes), TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &n);
		deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tup, desc, first + 1, &isnull)), INT4OID, 4, true,
						  TYPALIGN_INT, &ids, NULL, &k);
		d->n_languages = Min(n, k);
		d->languages = palloc(Max(n, 1) * sizeof(char *));
		d->language_ids = palloc(Max(n, 1) * sizeof(int32));
		for (i = 0; i < d->n_languages; i++)
		{
			d->languages[i] = TextDatumGetCString(elems[i]);
			d->language_ids[i] = DatumGetInt32(ids[i]);
		}
	}
	MemoryContextSwitchTo(old);
}

/* The columns read_languages reads, from 0.3.0 on, and those read_decoding reads, from 0.4.0 on. */
#define LANGUAGE_COLUMNS "v.languages, v.language_ids, m.source_language, m.target_language"
#define DECODING_COLUMNS "m.beam_size, m.max_output_tokens"

/* Whether attention.models has the column (a library newer than its schema lacks the newest); in SPI. */
static bool
models_column(const char *column)
{
	if (SPI_execute_with_args("SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = 'attention.models'::pg_catalog.regclass "
							  "AND attname = $1 AND NOT attisdropped", 1, (Oid[]) {TEXTOID},
							  (Datum[]) {CStringGetTextDatum(column)}, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the columns of attention.models");
	return SPI_processed == 1;
}

/* d's decoding defaults from columns first, first + 1 of tuple (beam_size, max_output_tokens; NULL: 0). */
static void
read_decoding(HeapTuple tuple, TupleDesc desc, int first, DeployedModel *d)
{
	bool		isnull;
	Datum		v;

	v = SPI_getbinval(tuple, desc, first, &isnull);
	d->beam_size = isnull ? 0 : DatumGetInt32(v);
	v = SPI_getbinval(tuple, desc, first + 1, &isnull);
	d->max_output_tokens = isnull ? 0 : DatumGetInt32(v);
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
		SPIPlanPtr	plan;

		/* the languages from 0.3.0 on, decoding defaults from 0.4.0 (a library newer than its schema reads none) */
		plan = SPI_prepare(psprintf("SELECT m.model_id, m.config, m.vocabulary_id, c.checkpoint_id, c.xmin::text, %s, %s "
									"FROM attention.models m JOIN attention.vocabularies v USING (vocabulary_id) "
									"LEFT JOIN attention.checkpoints c "
									"ON c.model_id = m.model_id AND c.deployed WHERE m.name = $1",
									models_column("target_language") ? LANGUAGE_COLUMNS
									: "NULL::text[], NULL::integer[], NULL::text, NULL::text",
									models_column("max_output_tokens") ? DECODING_COLUMNS
									: "NULL::integer, NULL::integer"), 1, types);
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
	read_languages(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 6, caller, d);
	read_decoding(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 10, d);
	SPI_finish();
}

void
attention_model_languages(const char *model, DeployedModel *d)
{
	MemoryContext caller = CurrentMemoryContext;

	SPI_connect();
	/* as attention_model_lookup's columns, of a schema of any version */
	if (SPI_execute_with_args(psprintf("SELECT %s, %s "
									   "FROM attention.models m JOIN attention.vocabularies v USING (vocabulary_id) "
									   "WHERE m.name = $1",
									   models_column("target_language") ? LANGUAGE_COLUMNS
									   : "NULL::text[], NULL::integer[], NULL::text, NULL::text",
									   models_column("max_output_tokens") ? DECODING_COLUMNS
									   : "NULL::integer, NULL::integer"),
							  1, (Oid[]) {TEXTOID}, (Datum[]) {CStringGetTextDatum(model)},
							  NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read attention.models");
	if (SPI_processed == 0)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT), errmsg("model \"%s\" does not exist", model)));
	memset(d, 0, sizeof(*d));
	strlcpy(d->name, model, sizeof(d->name));
	read_languages(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, caller, d);
	read_decoding(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 5, d);
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
	/* what it holds as the last call left it (attention.memory) */
	progress_model_memory(am->name, am->device, am->bytes, tf_model_memory_bytes(am->engine));
	return am;
}

AttentionModel *
attention_model_get(text *model)
{
	DeployedModel d;

	attention_model_lookup(model, &d);
	return attention_model_load(&d, "cpu", false);
}
