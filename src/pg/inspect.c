/*
 * inspect.c - looking into the model from SQL: attention_weights (every
 * attention probability of a teacher-forced pass) and align (word
 * alignment from the last decoder layer's cross-attention).
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "catalog.h"
#include "model_cache.h"
#include "settings.h"
#include "transformer.h"
#include "translation.h"

PG_FUNCTION_INFO_V1(attention_attention_weights);
PG_FUNCTION_INFO_V1(attention_align);

/* The text argument n, or NULL (also where the 0.2.0 definition has no such argument). */
#define TEXT_ARG_OR_NULL(n) (PG_NARGS() <= (n) || PG_ARGISNULL(n) ? NULL : PG_GETARG_TEXT_PP(n))

/*
 * The target for inspection: the given text's ids, or (NULL) the
 * translation's ids; after the target language's token for a
 * multilingual model (the decoder's forced first token).
 */
static Encoded
inspection_target(AttentionModel *am, const Encoded *source, text *target, CallLanguages lang)
{
	Encoded		t;
	TfDecodeOptions opt;
	TfHypothesis h;

	if (target != NULL)
		return encode_text(am, target, false, SPM_TARGET, lang.target_id);
	t.prefix = lang.target_id >= 0 ? 1 : 0;
	t.ids = palloc0(2 * sizeof(int32_t));
	t.ids[0] = lang.target_id;
	t.n = t.prefix;
	if (source->n == source->prefix)
		return t;
	opt = decode_options(am, attention_beam_size, 1, TF_DEFAULT_LENGTH_PENALTY, TF_DEFAULT_MAX_LENGTH_OFFSET,
						 lang.target_id);
	translate_batch(am, (Encoded *) source, 1, &opt, &h);
	t.ids = palloc((h.length + t.prefix + 1) * sizeof(int32_t));
	t.ids[0] = lang.target_id;
	memcpy(t.ids + t.prefix, h.tokens, h.length * sizeof(int32_t));
	t.n = h.length + t.prefix;
	return t;
}

/* The deployed model of argument `model` (NULL: the default) and the languages of arguments `target`, `source`. */
static AttentionModel *
inspected_model(FunctionCallInfo fcinfo, int model, int target, int source, CallLanguages *lang)
{
	DeployedModel d;

	attention_model_lookup(TEXT_ARG_OR_NULL(model), &d);
	*lang = call_languages(&d, TEXT_ARG_OR_NULL(source), TEXT_ARG_OR_NULL(target));
	return attention_model_load(&d, "cpu", false);
}

/* Pieces of source + EOS and of BOS + target (queries of the decoder), as text datums. */
static Datum *
token_texts(AttentionModel *am, const Encoded *e, int first_id, int last_id)
{
	int			n = e->n + 1;
	Datum	   *d = palloc(n * sizeof(Datum));
	int			i;

	for (i = 0; i < n; i++)
	{
		int			id = first_id >= 0 ? (i == 0 ? first_id : e->ids[i - 1]) : (i < e->n ? e->ids[i] : last_id);

		d[i] = PointerGetDatum(piece_text(am, id));
	}
	return d;
}

/* Fetches attention probabilities [heads, q, k] of the last pass; ERROR on engine failure. */
static float *
fetch_attention(AttentionModel *am, TfAttentionKind kind, int layer, int *q, int *k)
{
	char		err[TF_ERRLEN];
	float	   *p;

	if (tf_model_attention(am->engine, kind, layer, 0, NULL, q, k, err, sizeof(err)) != TF_OK)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("%s", err)));
	p = palloc(Max((size_t) tf_model_config(am->engine)->num_heads * *q * *k, 1) * sizeof(float));
	tf_model_attention(am->engine, kind, layer, 0, p, q, k, err, sizeof(err));
	return p;
}

/*
 * attention_weights(source, target, model, target_language,
 * source_language) returns table (kind, layer, head, query_pos,
 * query_token, key_pos, key_token, weight): every attention probability of
 * the teacher-forced pass. Encoder tokens are the source's pieces and EOS
 * (after the source language's token); decoder queries are BOS and the
 * target's pieces (after the target language's token).
 */
Datum
attention_attention_weights(PG_FUNCTION_ARGS)
{
	static const char *const kinds[] = {"encoder_self", "decoder_self", "cross"};
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	AttentionModel *am;
	Encoded		source,
				target;
	Datum	   *src_tokens,
			   *dec_tokens;
	const TfConfig *c;
	CallLanguages lang;
	int			kind;

	InitMaterializedSRF(fcinfo, 0);
	if (PG_ARGISNULL(0))
		return (Datum) 0;
	am = inspected_model(fcinfo, 2, 3, 4, &lang);
	c = tf_model_config(am->engine);
	source = encode_text(am, PG_GETARG_TEXT_PP(0), true, SPM_SOURCE, lang.source_id);
	target = inspection_target(am, &source, TEXT_ARG_OR_NULL(1), lang);
	teacher_forced(am, &source, &target);
	src_tokens = token_texts(am, &source, -1, am->eos_id);
	dec_tokens = token_texts(am, &target, am->bos_id, -1);
	for (kind = 0; kind < 3; kind++)
	{
		int			layers = kind == TF_ENCODER_SELF ? c->num_encoder_layers : c->num_decoder_layers;
		int			layer;

		for (layer = 0; layer < layers; layer++)
		{
			int			q,
						k,
						h,
						i,
						j;
			float	   *p = fetch_attention(am, (TfAttentionKind) kind, layer, &q, &k);
			Datum	   *qt = kind == TF_ENCODER_SELF ? src_tokens : dec_tokens;
			Datum	   *kt = kind == TF_DECODER_SELF ? dec_tokens : src_tokens;

			for (h = 0; h < c->num_heads; h++)
				for (i = 0; i < q; i++)
				{
					CHECK_FOR_INTERRUPTS();
					for (j = 0; j < k; j++)
					{
						Datum		values[8];
						bool		nulls[8] = {false, false, false, false, false, false, false, false};

						values[0] = CStringGetTextDatum(kinds[kind]);
						values[1] = Int32GetDatum(layer);
						values[2] = Int32GetDatum(h);
						values[3] = Int32GetDatum(i);
						values[4] = qt[i];
						values[5] = Int32GetDatum(j);
						values[6] = kt[j];
						values[7] = Float4GetDatum(p[((size_t) h * q + i) * k + j]);
						tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
					}
				}
			pfree(p);
		}
	}
	return (Datum) 0;
}

/*
 * align(source, target, model, target_language, source_language) returns
 * table (target_pos, target_token, source_pos, source_token, weight): for
 * each target token (and EOS; a multilingual model's target language token
 * first), the last decoder layer's cross-attention of the position that
 * predicts it, averaged over heads.
 */
Datum
attention_align(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	AttentionModel *am;
	Encoded		source,
				target;
	Datum	   *src_tokens,
			   *tgt_tokens;
	const TfConfig *c;
	float	   *p;
	CallLanguages lang;
	int			q,
				k,
				i,
				j,
				h;

	InitMaterializedSRF(fcinfo, 0);
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		return (Datum) 0;
	am = inspected_model(fcinfo, 2, 3, 4, &lang);
	c = tf_model_config(am->engine);
	source = encode_text(am, PG_GETARG_TEXT_PP(0), true, SPM_SOURCE, lang.source_id);
	target = encode_text(am, PG_GETARG_TEXT_PP(1), false, SPM_TARGET, lang.target_id);
	teacher_forced(am, &source, &target);
	src_tokens = token_texts(am, &source, -1, am->eos_id);
	tgt_tokens = token_texts(am, &target, -1, am->eos_id);
	p = fetch_attention(am, TF_CROSS, c->num_decoder_layers - 1, &q, &k);
	for (i = 0; i < q; i++)
		for (j = 0; j < k; j++)
		{
			Datum		values[5];
			bool		nulls[5] = {false, false, false, false, false};
			double		w = 0.0;

			for (h = 0; h < c->num_heads; h++)
				w += p[((size_t) h * q + i) * k + j];
			values[0] = Int32GetDatum(i);
			values[1] = tgt_tokens[i];
			values[2] = Int32GetDatum(j);
			values[3] = src_tokens[j];
			values[4] = Float4GetDatum((float) (w / c->num_heads));
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	return (Datum) 0;
}

