/*
 * models.c - models in tables: create_model (the configuration over a
 * vocabulary, stored in full as jsonb) and initialize_checkpoint (the
 * engine's serializer writing a checkpoint as one row per tensor).
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

#include "catalog.h"
#include "spm.h"
#include "rights.h"

PG_FUNCTION_INFO_V1(attention_create_model);
PG_FUNCTION_INFO_V1(attention_initialize_checkpoint);

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
	(void) require_usable("vocabulary", vocabulary, "build a model on");
	if (SPI_execute_with_args("SELECT vocabulary_id, vocab_size, pad_id, bos_id, eos_id "
							  "FROM attention.vocabularies WHERE name = $1",
							  1, types, (Datum[]) {CStringGetTextDatum(vocabulary)}, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read attention.vocabularies");
	if (SPI_processed == 0)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
						errmsg("vocabulary \"%s\" does not exist", vocabulary)));
	info = catalog_vocab_info(1, vocabulary);
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
	info = catalog_vocab_info(3, name);
	attention_config_from_jsonb(DatumGetJsonbP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)),
								info.vocab_size, info.pad_id, &c);
	if (SPI_execute_with_args("INSERT INTO attention.checkpoints (model_id, kind, step) VALUES ($1, 'initial', 0) "
							  "RETURNING checkpoint_id", 1, types, (Datum[]) {Int32GetDatum(model_id)}, NULL,
							  false, 1) != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "could not insert a checkpoint of model \"%s\"", name);
	checkpoint_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));

	m = tf_model_create(&c, (uint64_t) seed, "cpu", 1, err, sizeof(err));
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
