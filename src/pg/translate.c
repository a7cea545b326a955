/*
 * translate.c - translation in SQL: translate (one text, an array),
 * translate_nbest and score, through the model's translation service when
 * attention.use_service lets them (service_registry.c), else over the
 * deployed models this backend loads (model_cache.c), with the helpers of
 * translation.c.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "libpq/pqformat.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "model_cache.h"
#include "service_registry.h"
#include "settings.h"
#include "translation.h"

PG_FUNCTION_INFO_V1(attention_translate_default);
PG_FUNCTION_INFO_V1(attention_translate);
PG_FUNCTION_INFO_V1(attention_translate_array);
PG_FUNCTION_INFO_V1(attention_translate_nbest);
PG_FUNCTION_INFO_V1(attention_score);

/* ERROR when a decoding option argument is NULL. */
static void
require_arguments(FunctionCallInfo fcinfo, int first, const char *const *names, int n)
{
	int			i;

	for (i = 0; i < n; i++)
		if (PG_ARGISNULL(first + i))
			ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
							errmsg("%s must not be NULL", names[i])));
}

/* translate(source text) returns text: the default model, its beam (call_beam_size). */
Datum
attention_translate_default(PG_FUNCTION_ARGS)
{
	text	   *source = PG_GETARG_TEXT_PP(0),
			   *result;

	translate_texts(NULL, BEAM_SIZE_OF_MODEL, TF_DEFAULT_LENGTH_PENALTY, TF_DEFAULT_MAX_LENGTH_OFFSET, NULL, NULL,
					&source, 1, 1, &result);
	PG_RETURN_TEXT_P(result);
}

/* The beam_size argument n: BEAM_SIZE_OF_MODEL where NULL (beam_size_argument). */
#define BEAM_SIZE_ARG(n) beam_size_argument(PG_ARGISNULL(n), PG_ARGISNULL(n) ? 0 : PG_GETARG_INT32(n))

/* The text argument n, or NULL (also where the 0.2.0 definition has no such argument). */
#define TEXT_ARG_OR_NULL(n) (PG_NARGS() <= (n) || PG_ARGISNULL(n) ? NULL : PG_GETARG_TEXT_PP(n))

/*
 * translate(source, model, beam_size, length_penalty, max_length_offset,
 * target_language, source_language) returns text.
 */
Datum
attention_translate(PG_FUNCTION_ARGS)
{
	text	   *source,
			   *result;

	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	require_arguments(fcinfo, 3, decode_option_names + 1, 2);
	source = PG_GETARG_TEXT_PP(0);
	translate_texts(TEXT_ARG_OR_NULL(1), BEAM_SIZE_ARG(2), PG_GETARG_FLOAT8(3), PG_GETARG_INT32(4),
					TEXT_ARG_OR_NULL(5), TEXT_ARG_OR_NULL(6), &source, 1, 1, &result);
	PG_RETURN_TEXT_P(result);
}

/*
 * translate(sources text[], model, beam_size, length_penalty,
 * max_length_offset, target_language, source_language) returns text[].
 */
Datum
attention_translate_array(PG_FUNCTION_ARGS)
{
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	int			n,
				i;
	text	  **texts,
			  **results;
	int			dims[1],
				lbs[1] = {1};

	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	require_arguments(fcinfo, 3, decode_option_names + 1, 2);
	arr = PG_GETARG_ARRAYTYPE_P(0);
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR, (errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
						errmsg("sources must be a one-dimensional array, not %d-dimensional", ARR_NDIM(arr))));
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	texts = palloc(Max(n, 1) * sizeof(text *));
	results = palloc(Max(n, 1) * sizeof(text *));
	for (i = 0; i < n; i++)
		texts[i] = nulls[i] ? NULL : DatumGetTextPP(elems[i]);
	translate_texts(TEXT_ARG_OR_NULL(1), BEAM_SIZE_ARG(2), PG_GETARG_FLOAT8(3), PG_GETARG_INT32(4),
					TEXT_ARG_OR_NULL(5), TEXT_ARG_OR_NULL(6), texts, n, BATCH_SENTENCES, results);
	for (i = 0; i < n; i++)
		elems[i] = results[i] != NULL ? PointerGetDatum(results[i]) : (Datum) 0;
	dims[0] = n;
	if (n == 0)
		PG_RETURN_ARRAYTYPE_P(construct_empty_array(TEXTOID));
	PG_RETURN_ARRAYTYPE_P(construct_md_array(elems, nulls, 1, dims, lbs, TEXTOID, -1, false, TYPALIGN_INT));
}

/* Emits a hypothesis as a row of translate_nbest's result (arg: the ReturnSetInfo). */
static void
nbest_row(void *arg, text *translation, double score, ArrayType *pieces)
{
	ReturnSetInfo *rsinfo = arg;
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};

	values[0] = Int32GetDatum((int32) tuplestore_tuple_count(rsinfo->setResult) + 1);
	values[1] = PointerGetDatum(translation);
	values[2] = Float8GetDatum(score);
	values[3] = PointerGetDatum(pieces);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * translate_nbest(source, model, n, beam_size, length_penalty,
 * max_length_offset, target_language, source_language) returns table
 * (rank, translation, score, tokens): the
 * n best hypotheses (NULL: the whole beam; beam_size NULL: the model's,
 * call_beam_size), best first; score is the log-probability of the
 * tokens and EOS (what attention.score gives for them).
 */
Datum
attention_translate_nbest(PG_FUNCTION_ARGS)
{
	static const char *const names[] = {"length_penalty", "max_length_offset"};
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	DeployedModel d;
	ServiceRequest req;
	StringInfoData answer;
	AttentionModel *am;
	TfDecodeOptions opt;
	CallLanguages lang;
	text	   *source;
	int			nbest,
				beam_size,
				max_length_offset;
	double		length_penalty;

	InitMaterializedSRF(fcinfo, 0);
	if (PG_ARGISNULL(0))
		return (Datum) 0;
	require_arguments(fcinfo, 4, names, 2);
	source = PG_GETARG_TEXT_PP(0);
	beam_size = BEAM_SIZE_ARG(3);
	length_penalty = PG_GETARG_FLOAT8(4);
	max_length_offset = PG_GETARG_INT32(5);
	attention_model_lookup(TEXT_ARG_OR_NULL(1), &d);
	lang = call_languages(&d, TEXT_ARG_OR_NULL(7), TEXT_ARG_OR_NULL(6));
	beam_size = call_beam_size(&d, beam_size);
	/* n NULL: the whole beam */
	nbest = PG_ARGISNULL(2) ? beam_size : PG_GETARG_INT32(2);
	check_decode_options(beam_size, nbest, length_penalty, max_length_offset);
	req = service_request(SERVICE_NBEST, &d, lang, beam_size, nbest, length_penalty, max_length_offset, &source, 1);
	if (service_send(&d, &req, &answer))
	{
		int			count,
					i;

		service_raise(&answer);
		count = pq_getmsgint(&answer, 4);
		for (i = 0; i < count; i++)
		{
			text	   *translation = service_get_text(&answer);
			double		score = pq_getmsgfloat8(&answer);
			int			pieces = pq_getmsgint(&answer, 4),
						j;
			Datum	   *p = palloc(Max(pieces, 1) * sizeof(Datum));

			for (j = 0; j < pieces; j++)
				p[j] = PointerGetDatum(service_get_text(&answer));
			nbest_row(rsinfo, translation, score,
					  pieces == 0 ? construct_empty_array(TEXTOID) :
					  construct_array(p, pieces, TEXTOID, -1, false, TYPALIGN_INT));
		}
		return (Datum) 0;
	}
	am = attention_model_load(&d, "cpu", false);
	opt = decode_options(am, beam_size, nbest, length_penalty, max_length_offset, d.max_output_tokens,
						 lang.target_id);
	nbest_hypotheses(am, source, lang.source_id, &opt, nbest_row, rsinfo);
	return (Datum) 0;
}

/*
 * score(source, target, model, target_language, source_language) returns
 * float8: log P(target tokens + EOS | source) in nats (for a multilingual
 * model, given the target language's token, which decoding forces).
 */
Datum
attention_score(PG_FUNCTION_ARGS)
{
	DeployedModel d;
	ServiceRequest req;
	StringInfoData answer;
	CallLanguages lang;
	text	   *pair[2];

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		PG_RETURN_NULL();
	pair[0] = PG_GETARG_TEXT_PP(0);
	pair[1] = PG_GETARG_TEXT_PP(1);
	attention_model_lookup(TEXT_ARG_OR_NULL(2), &d);
	lang = call_languages(&d, TEXT_ARG_OR_NULL(4), TEXT_ARG_OR_NULL(3));
	req = service_request(SERVICE_SCORE, &d, lang, 1, 1, 0.0, 0, pair, 1);
	if (service_send(&d, &req, &answer))
	{
		service_raise(&answer);
		PG_RETURN_FLOAT8(pq_getmsgfloat8(&answer));
	}
	PG_RETURN_FLOAT8(score_text(attention_model_load(&d, "cpu", false), pair[0], pair[1], lang));
}
