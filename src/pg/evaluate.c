/*
 * evaluate.c - attention.evaluate: a checkpoint's cross-entropy and BLEU
 * on a corpus split, with the validation code of the training worker.
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "catalog.h"
#include "dataset.h"
#include "progress.h"
#include "spm.h"
#include "transformer.h"
#include "translation.h"
#include "rights.h"

PG_FUNCTION_INFO_V1(attention_evaluate);

/* Pairs per batch when scoring the split. */
#define EVALUATE_BATCH_TOKENS 4096

/*
 * evaluate(model, corpus, split, checkpoint, beam_size, target_language,
 * source_language) returns (bleu, loss, sentences, seconds): the BLEU of
 * beam-search translations of every
 * source of the split, the cross-entropy per target token of its pairs
 * that fit max_positions, the number of pairs, and the wall-clock seconds.
 * beam_size NULL is the model's (call_beam_size), and its max_output_tokens
 * apply; checkpoint NULL is the deployed one (else the newest); any role may
 * evaluate a deployed checkpoint, other checkpoints need the model's owner.
 */
Datum
attention_evaluate(PG_FUNCTION_ARGS)
{
	char	   *model,
			   *corpus,
			   *split;
	int32		beam_size;
	int64		checkpoint_id;
	bool		deployed,
				isnull;
	TfConfig	c;
	TfTensor   *tensors;
	int			count;
	SpmModel   *vocab = NULL;
	TfModel    *volatile engine = NULL;
	DataSet		d;
	DataFeed	feed = {0};
	volatile double bleu = NAN,
				loss = NAN;
	instr_time	start,
				elapsed;
	TupleDesc	tupdesc;
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};
	char		err[TF_ERRLEN];
	DeployedModel dm;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						errmsg("model, corpus and split must not be NULL")));
	model = text_to_cstring(PG_GETARG_TEXT_PP(0));
	corpus = text_to_cstring(PG_GETARG_TEXT_PP(1));
	split = text_to_cstring(PG_GETARG_TEXT_PP(2));
	beam_size = beam_size_argument(PG_ARGISNULL(4), PG_ARGISNULL(4) ? 0 : PG_GETARG_INT32(4));
	if (strcmp(split, "train") != 0 && strcmp(split, "valid") != 0 && strcmp(split, "test") != 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("split \"%s\" is not train, valid or test", split)));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "evaluate must return a row");
	INSTR_TIME_SET_CURRENT(start);
	/* the model's decoding defaults, and a multilingual model's languages (0.3.0's definition) */
	attention_model_languages(model, &dm);
	beam_size = call_beam_size(&dm, beam_size);
	if (PG_NARGS() > 5)
	{
		CallLanguages lang;

		lang = call_languages(&dm, PG_ARGISNULL(6) ? NULL : PG_GETARG_TEXT_PP(6),
							  PG_ARGISNULL(5) ? NULL : PG_GETARG_TEXT_PP(5));
		feed.multilingual = lang.source_id >= 0;
		feed.source_language = lang.source_id;
		feed.target_language = lang.target_id;
	}

	SPI_connect();
	read_model_row(model);
	{
		HeapTuple	tup = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		int32		model_id = DatumGetInt32(SPI_getbinval(tup, desc, 1, &isnull));
		Jsonb	   *config = DatumGetJsonbP(SPI_getbinval(tup, desc, 2, &isnull));
		int32		vocabulary_id = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
		int			vocab_size = DatumGetInt32(SPI_getbinval(tup, desc, 4, &isnull));

		feed.pad_id = DatumGetInt32(SPI_getbinval(tup, desc, 5, &isnull));
		feed.bos_id = DatumGetInt32(SPI_getbinval(tup, desc, 6, &isnull));
		feed.eos_id = DatumGetInt32(SPI_getbinval(tup, desc, 7, &isnull));
		attention_config_from_jsonb(config, vocab_size, feed.pad_id, &c);
		check_beam_fits(beam_size, vocab_size, model);
		if (SPI_execute_with_args("SELECT checkpoint_id, deployed FROM attention.checkpoints WHERE model_id = $1 "
								  "AND ($2::bigint IS NULL OR checkpoint_id = $2) "
								  "ORDER BY deployed DESC, step DESC, checkpoint_id DESC LIMIT 1", 2,
								  (Oid[]) {INT4OID, INT8OID},
								  (Datum[]) {Int32GetDatum(model_id), PG_ARGISNULL(3) ? 0 : PG_GETARG_DATUM(3)},
								  PG_ARGISNULL(3) ? " n" : "  ", true, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not read attention.checkpoints");
		if (SPI_processed == 0)
			ereport(ERROR, (errcode(PG_ARGISNULL(3) ? ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE : ERRCODE_INVALID_PARAMETER_VALUE),
							PG_ARGISNULL(3) ? errmsg("model \"%s\" has no checkpoints", model)
							: errmsg("checkpoint %lld is not a checkpoint of model \"%s\"",
									 (long long) PG_GETARG_INT64(3), model)));
		checkpoint_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		deployed = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
		if (!deployed)
			require_model_owner(model, "evaluate an undeployed checkpoint of");
		if (SPI_execute_with_args(psprintf("SELECT %s FROM attention.vocabularies v WHERE vocabulary_id = $1",
										   vocabulary_columns()), 1,
								  (Oid[]) {INT4OID}, (Datum[]) {Int32GetDatum(vocabulary_id)}, NULL, true, 1) != SPI_OK_SELECT ||
			SPI_processed != 1)
			elog(ERROR, "could not read the vocabulary of model \"%s\"", model);
		feed.source_language_last = vocabulary_source_language_last(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
		vocab = vocabulary_load(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
								psprintf("the vocabulary of model \"%s\"", model), ERRCODE_DATA_CORRUPTED);
	}
	PG_TRY();
	{
		tensors = read_tensors(checkpoint_id, deployed ? TENSORS_DEPLOYED : TENSORS_PARAMETERS, &count);
		engine = tf_model_create_for(&c, tensors, count, "cpu", 1, err, sizeof(err));
		if (engine == NULL)
			ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("could not create model \"%s\": %s", model, err)));
		if (tf_model_load(engine, tensors, count, err, sizeof(err)) != TF_OK)
			ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
							errmsg("could not load checkpoint %lld of model \"%s\": %s", (long long) checkpoint_id,
								   model, err)));
		data_load(&d, require_usable("corpus", corpus, "evaluate on"), split, vocab, c.max_positions, EVALUATE_BATCH_TOKENS, PG_INT32_MAX);
		if (d.num_references == 0)
			ereport(ERROR, (errcode(ERRCODE_NO_DATA),
							errmsg("split %s of corpus \"%s\" has no pairs", split, corpus)));
		data_feed_alloc(&feed, &d, NULL, c.max_positions);
		/* every pair scored, then the references' sources translated */
		progress_begin("evaluate", psprintf("%s on %s (%s)", model, corpus, split), "sentences",
					   (int64) d.num_pairs + d.num_references);
		loss = dataset_loss(engine, &d, &feed);
		bleu = dataset_bleu(engine, vocab, &d, &feed, beam_size, dm.max_output_tokens, c.max_positions);
		progress_end();
	}
	PG_FINALLY();
	{
		tf_model_free(engine);
		spm_free(vocab);
	}
	PG_END_TRY();
	SPI_finish();
	INSTR_TIME_SET_CURRENT(elapsed);
	INSTR_TIME_SUBTRACT(elapsed, start);
	values[0] = Float8GetDatum(bleu);
	values[1] = Float8GetDatum(loss);
	nulls[1] = isnan(loss);
	values[2] = Int32GetDatum(d.num_references);
	values[3] = Float8GetDatum(INSTR_TIME_GET_DOUBLE(elapsed));
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
}
