/*
 * translate.c - translation in SQL: translate (one text, an array),
 * translate_nbest, score, attention_weights, align, and the
 * translate_column procedure, over the deployed models of model.c.
 *
 * The engine runs with its own threads (all signals blocked); between
 * decoding steps it polls InterruptPending, so a cancel or
 * statement_timeout stops a long batch within a step, and the interrupt is
 * then serviced here with CHECK_FOR_INTERRUPTS().
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "commands/defrem.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "portability/instr_time.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "attention.h"

PG_FUNCTION_INFO_V1(attention_translate_default);
PG_FUNCTION_INFO_V1(attention_translate);
PG_FUNCTION_INFO_V1(attention_translate_array);
PG_FUNCTION_INFO_V1(attention_translate_nbest);
PG_FUNCTION_INFO_V1(attention_score);
PG_FUNCTION_INFO_V1(attention_attention_weights);
PG_FUNCTION_INFO_V1(attention_align);
PG_FUNCTION_INFO_V1(attention_translate_column);

/* Sentences per engine call when translating many. */
#define BATCH_SENTENCES 32

/* Seconds between translate_column's progress notices. */
#define NOTICE_SECONDS 5.0

/* A source (or target) as subword ids. */
typedef struct Encoded
{
	int32_t    *ids;			/* the text's ids, then EOS when add_eos */
	int			n;				/* ids without EOS */
} Encoded;

/* Encodes text under the model's vocabulary; with add_eos an EOS follows (space is always reserved). */
static Encoded
encode_text(AttentionModel *am, text *t, bool add_eos, const char *what)
{
	Encoded		e;
	int		   *ids;
	size_t		n;
	char		err[512];

	if (spm_encode(am->vocabulary, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), &ids, &n, err, sizeof(err)) != 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("could not encode the %s: %s", what, err)));
	if ((int64) n > attention_max_input_tokens || (int64) n + 1 > am->max_positions)
	{
		spm_free_buffer(ids);
		ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						errmsg("the %s has %zu tokens, over the limit of %d", what, n,
							   Min(attention_max_input_tokens, am->max_positions - 1)),
						errhint("Split the text into sentences, or raise attention.max_input_tokens "
								"(the model takes at most %d).", am->max_positions - 1)));
	}
	e.ids = palloc((n + 1) * sizeof(int32_t));
	memcpy(e.ids, ids, n * sizeof(int32_t));
	spm_free_buffer(ids);
	e.n = (int) n;
	if (add_eos)
		e.ids[n] = am->eos_id;
	return e;
}

/* Text of ids under the model's vocabulary (palloc'd text). */
static text *
decode_ids(AttentionModel *am, const int32_t *ids, int n)
{
	char	   *out;
	size_t		len;
	char		err[512];
	text	   *t;

	if (spm_decode(am->vocabulary, ids, n, &out, &len, err, sizeof(err)) != 0)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("could not decode a translation: %s", err)));
	t = cstring_to_text_with_len(out, len);
	spm_free_buffer(out);
	return t;
}

/* The piece of id as text. */
static text *
piece_text(AttentionModel *am, int id)
{
	size_t		len;
	const char *p = spm_piece(am->vocabulary, id, &len);

	return cstring_to_text_with_len(p, len);
}

/* Decoding options from SQL arguments; ERROR naming a bad one. */
static TfDecodeOptions
decode_options(AttentionModel *am, int beam_size, int nbest, double length_penalty, int max_length_offset)
{
	TfDecodeOptions opt;

	if (beam_size < 1 || beam_size > 64)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("beam_size %d is out of range", beam_size),
						errhint("beam_size must be between 1 (greedy) and 64.")));
	if (nbest < 1 || nbest > beam_size)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("n %d is out of range", nbest),
						errhint("n must be between 1 and beam_size (%d).", beam_size)));
	if (!(length_penalty >= 0.0 && length_penalty <= 100.0))
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("length_penalty %g is out of range", length_penalty),
						errhint("length_penalty (alpha) must be between 0 (none) and 100; 0.6 is usual.")));
	if (max_length_offset < 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("max_length_offset %d must not be negative", max_length_offset)));
	tf_decode_options_default(&opt);
	opt.beam_size = beam_size;
	opt.nbest = nbest;
	opt.length_penalty = (float) length_penalty;
	opt.max_length_offset = max_length_offset;
	opt.bos_id = am->bos_id;
	opt.eos_id = am->eos_id;
	return opt;
}

/*
 * Engine interrupt poll: a pending cancel, timeout or termination that
 * CHECK_FOR_INTERRUPTS can service now (not while interrupts are held off,
 * which would retry the batch forever).
 */
static bool
interrupt_pending(void *arg)
{
	bool		pending = InterruptPending && INTERRUPTS_CAN_BE_PROCESSED();

	*(bool *) arg = pending;
	return pending;
}

/*
 * Translates n encoded non-empty sources (at most BATCH_SENTENCES) into
 * out [n, opt->nbest], whose tokens are then palloc'd (the engine's copies
 * are freed at once, so an ERROR later leaks nothing). Services interrupts
 * (an ERROR for a cancel) and retries the batch after one that was not.
 */
static void
translate_batch(AttentionModel *am, Encoded *src, int n, TfDecodeOptions *opt, TfHypothesis *out)
{
	int			len = 0,
				i;
	int32_t    *ids;
	char		err[TF_ERRLEN];
	bool		interrupted;

	for (i = 0; i < n; i++)
		len = Max(len, src[i].n + 1);
	ids = palloc0((size_t) n * len * sizeof(int32_t));
	for (i = 0; i < n; i++)
	{
		int			t;

		memcpy(ids + (size_t) i * len, src[i].ids, (src[i].n + 1) * sizeof(int32_t));
		for (t = src[i].n + 1; t < len; t++)
			ids[(size_t) i * len + t] = am->pad_id;
	}
	opt->interrupted = interrupt_pending;
	opt->interrupt_arg = &interrupted;
	for (;;)
	{
		interrupted = false;
		if (tf_model_translate(am->engine, ids, n, len, opt, out, err, sizeof(err)) == TF_OK)
			break;
		if (!interrupted)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
							errmsg("translation with model \"%s\" failed: %s", am->name, err)));
		CHECK_FOR_INTERRUPTS();
	}
	pfree(ids);
	for (i = 0; i < n * opt->nbest; i++)
	{
		int32_t    *tokens = palloc((out[i].length + 1) * sizeof(int32_t));

		memcpy(tokens, out[i].tokens, out[i].length * sizeof(int32_t));
		free(out[i].tokens);
		out[i].tokens = tokens;
	}
}

/* Translates one text; '' (no tokens) gives ''. */
static text *
translate_one(AttentionModel *am, text *source, TfDecodeOptions *opt)
{
	Encoded		e = encode_text(am, source, true, "source");
	TfHypothesis h;

	if (e.n == 0)
		return cstring_to_text("");
	translate_batch(am, &e, 1, opt, &h);
	return decode_ids(am, h.tokens, h.length);
}

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

static const char *const option_names[] = {"beam_size", "length_penalty", "max_length_offset"};

/* translate(source text) returns text: the default model, beam attention.beam_size. */
Datum
attention_translate_default(PG_FUNCTION_ARGS)
{
	AttentionModel *am = attention_model_get(NULL);
	TfDecodeOptions opt = decode_options(am, attention_beam_size, 1, 0.6, 50);

	PG_RETURN_TEXT_P(translate_one(am, PG_GETARG_TEXT_PP(0), &opt));
}

/* translate(source, model, beam_size, length_penalty, max_length_offset) returns text. */
Datum
attention_translate(PG_FUNCTION_ARGS)
{
	AttentionModel *am;
	TfDecodeOptions opt;

	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	require_arguments(fcinfo, 2, option_names, 3);
	am = attention_model_get(PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1));
	opt = decode_options(am, PG_GETARG_INT32(2), 1, PG_GETARG_FLOAT8(3), PG_GETARG_INT32(4));
	PG_RETURN_TEXT_P(translate_one(am, PG_GETARG_TEXT_PP(0), &opt));
}

/* Sorts sentence indexes by source length. */
static int
length_cmp(const void *a, const void *b, void *arg)
{
	const Encoded *e = arg;
	int			x = *(const int *) a,
				y = *(const int *) b;

	if (e[x].n != e[y].n)
		return e[x].n < e[y].n ? -1 : 1;
	return x < y ? -1 : x > y;
}

/*
 * Translates texts[0 .. n) (NULL entries stay NULL, empty ones become '')
 * in length-sorted batches; results[i] receives the translation of texts[i].
 */
static void
translate_many(AttentionModel *am, text **texts, int n, TfDecodeOptions *opt, text **results)
{
	Encoded    *e = palloc0(Max(n, 1) * sizeof(Encoded));
	int		   *order = palloc(Max(n, 1) * sizeof(int));
	int			m = 0,
				i;
	TfHypothesis *h = palloc0(BATCH_SENTENCES * sizeof(TfHypothesis));

	for (i = 0; i < n; i++)
	{
		results[i] = NULL;
		if (texts[i] == NULL)
			continue;
		e[i] = encode_text(am, texts[i], true, "source");
		if (e[i].n == 0)
			results[i] = cstring_to_text("");
		else
			order[m++] = i;
	}
	qsort_arg(order, m, sizeof(int), length_cmp, e);
	for (i = 0; i < m; i += BATCH_SENTENCES)
	{
		int			b = Min(BATCH_SENTENCES, m - i);
		Encoded    *batch = palloc(b * sizeof(Encoded));
		int			j;

		CHECK_FOR_INTERRUPTS();
		for (j = 0; j < b; j++)
			batch[j] = e[order[i + j]];
		translate_batch(am, batch, b, opt, h);
		for (j = 0; j < b; j++)
		{
			results[order[i + j]] = decode_ids(am, h[j].tokens, h[j].length);
			pfree(h[j].tokens);
		}
		pfree(batch);
	}
}

/* translate(sources text[], model, beam_size, length_penalty, max_length_offset) returns text[]. */
Datum
attention_translate_array(PG_FUNCTION_ARGS)
{
	ArrayType  *arr;
	AttentionModel *am;
	TfDecodeOptions opt;
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
	require_arguments(fcinfo, 2, option_names, 3);
	arr = PG_GETARG_ARRAYTYPE_P(0);
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR, (errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
						errmsg("sources must be a one-dimensional array, not %d-dimensional", ARR_NDIM(arr))));
	am = attention_model_get(PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1));
	opt = decode_options(am, PG_GETARG_INT32(2), 1, PG_GETARG_FLOAT8(3), PG_GETARG_INT32(4));
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	texts = palloc(Max(n, 1) * sizeof(text *));
	results = palloc(Max(n, 1) * sizeof(text *));
	for (i = 0; i < n; i++)
		texts[i] = nulls[i] ? NULL : DatumGetTextPP(elems[i]);
	translate_many(am, texts, n, &opt, results);
	for (i = 0; i < n; i++)
		elems[i] = results[i] != NULL ? PointerGetDatum(results[i]) : (Datum) 0;
	dims[0] = n;
	if (n == 0)
		PG_RETURN_ARRAYTYPE_P(construct_empty_array(TEXTOID));
	PG_RETURN_ARRAYTYPE_P(construct_md_array(elems, nulls, 1, dims, lbs, TEXTOID, -1, false, TYPALIGN_INT));
}

/* The pieces of ids as a text[]. */
static ArrayType *
pieces_array(AttentionModel *am, const int32_t *ids, int n)
{
	Datum	   *d = palloc(Max(n, 1) * sizeof(Datum));
	int			i;

	if (n == 0)
		return construct_empty_array(TEXTOID);
	for (i = 0; i < n; i++)
		d[i] = PointerGetDatum(piece_text(am, ids[i]));
	return construct_array(d, n, TEXTOID, -1, false, TYPALIGN_INT);
}

/*
 * translate_nbest(source, model, n, beam_size, length_penalty,
 * max_length_offset) returns table (rank, translation, score, tokens): the
 * n best hypotheses, best first; score is the log-probability of the
 * tokens and EOS (what attention.score gives for them).
 */
Datum
attention_translate_nbest(PG_FUNCTION_ARGS)
{
	static const char *const names[] = {"n", "beam_size", "length_penalty", "max_length_offset"};
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	AttentionModel *am;
	TfDecodeOptions opt;
	Encoded		e;
	TfHypothesis *h;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	if (PG_ARGISNULL(0))
		return (Datum) 0;
	require_arguments(fcinfo, 2, names, 4);
	am = attention_model_get(PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1));
	opt = decode_options(am, PG_GETARG_INT32(3), PG_GETARG_INT32(2), PG_GETARG_FLOAT8(4), PG_GETARG_INT32(5));
	e = encode_text(am, PG_GETARG_TEXT_PP(0), true, "source");
	if (e.n == 0)
	{
		Datum		values[4] = {Int32GetDatum(1), CStringGetTextDatum(""), Float8GetDatum(0.0),
		PointerGetDatum(construct_empty_array(TEXTOID))};
		bool		nulls[4] = {false, false, false, false};

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		return (Datum) 0;
	}
	h = palloc0(opt.nbest * sizeof(TfHypothesis));
	translate_batch(am, &e, 1, &opt, h);
	for (i = 0; i < opt.nbest; i++)
	{
		Datum		values[4];
		bool		nulls[4] = {false, false, false, false};

		values[0] = Int32GetDatum(i + 1);
		values[1] = PointerGetDatum(decode_ids(am, h[i].tokens, h[i].length));
		values[2] = Float8GetDatum(h[i].log_prob);
		values[3] = PointerGetDatum(pieces_array(am, h[i].tokens, h[i].length));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * Runs one teacher-forced pass of source -> target ids (no EOS in
 * target->ids): afterwards the engine holds the attention probabilities.
 * Returns the log-probability of the target's tokens and EOS.
 */
static double
teacher_forced(AttentionModel *am, const Encoded *source, const Encoded *target)
{
	int			n = target->n + 1;
	int32_t    *tgt = palloc(2 * (size_t) n * sizeof(int32_t));
	TfBatch		b = {0};
	double		log_prob;
	char		err[TF_ERRLEN];

	if (n > am->max_positions)
		ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						errmsg("the target has %d tokens, over the model's limit of %d", target->n,
							   am->max_positions - 1)));
	tgt[0] = am->bos_id;
	memcpy(tgt + 1, target->ids, target->n * sizeof(int32_t));
	memcpy(tgt + n, target->ids, target->n * sizeof(int32_t));
	tgt[2 * n - 1] = am->eos_id;
	b.batch_size = 1;
	b.src_len = source->n + 1;
	b.tgt_len = n;
	b.src = source->ids;
	b.tgt_in = tgt;
	b.labels = tgt + n;
	if (tf_model_score(am->engine, &b, &log_prob, err, sizeof(err)) != TF_OK)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
						errmsg("scoring with model \"%s\" failed: %s", am->name, err)));
	pfree(tgt);
	return log_prob;
}

/* score(source, target, model) returns float8: log P(target tokens + EOS | source) in nats. */
Datum
attention_score(PG_FUNCTION_ARGS)
{
	AttentionModel *am;
	Encoded		source,
				target;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		PG_RETURN_NULL();
	am = attention_model_get(PG_ARGISNULL(2) ? NULL : PG_GETARG_TEXT_PP(2));
	source = encode_text(am, PG_GETARG_TEXT_PP(0), true, "source");
	target = encode_text(am, PG_GETARG_TEXT_PP(1), false, "target");
	PG_RETURN_FLOAT8(teacher_forced(am, &source, &target));
}

/* The target for inspection: the given text's ids, or (NULL) the translation's ids. */
static Encoded
inspection_target(AttentionModel *am, const Encoded *source, text *target)
{
	Encoded		t;
	TfDecodeOptions opt;
	TfHypothesis h;

	if (target != NULL)
		return encode_text(am, target, false, "target");
	t.ids = palloc0(sizeof(int32_t));
	t.n = 0;
	if (source->n == 0)
		return t;
	opt = decode_options(am, attention_beam_size, 1, 0.6, 50);
	translate_batch(am, (Encoded *) source, 1, &opt, &h);
	t.ids = h.tokens;
	t.n = h.length;
	return t;
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
 * attention_weights(source, target, model) returns table (kind, layer,
 * head, query_pos, query_token, key_pos, key_token, weight): every
 * attention probability of the teacher-forced pass. Encoder tokens are the
 * source's pieces and EOS; decoder queries are BOS and the target's pieces.
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
	int			kind;

	InitMaterializedSRF(fcinfo, 0);
	if (PG_ARGISNULL(0))
		return (Datum) 0;
	am = attention_model_get(PG_ARGISNULL(2) ? NULL : PG_GETARG_TEXT_PP(2));
	c = tf_model_config(am->engine);
	source = encode_text(am, PG_GETARG_TEXT_PP(0), true, "source");
	target = inspection_target(am, &source, PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1));
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
 * align(source, target, model) returns table (target_pos, target_token,
 * source_pos, source_token, weight): for each target token (and EOS), the
 * last decoder layer's cross-attention of the position that predicts it,
 * averaged over heads.
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
	int			q,
				k,
				i,
				j,
				h;

	InitMaterializedSRF(fcinfo, 0);
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		return (Datum) 0;
	am = attention_model_get(PG_ARGISNULL(2) ? NULL : PG_GETARG_TEXT_PP(2));
	c = tf_model_config(am->engine);
	source = encode_text(am, PG_GETARG_TEXT_PP(0), true, "source");
	target = encode_text(am, PG_GETARG_TEXT_PP(1), false, "target");
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

/* ------------------------------------------------------------------------
 * translate_column
 * ------------------------------------------------------------------------ */

/* Attribute number of a text-typed column; ERROR when missing or not text/varchar. */
static AttrNumber
text_column(Oid relid, const char *column, const char *role)
{
	AttrNumber	att = get_attnum(relid, column);
	Oid			type;

	if (att == InvalidAttrNumber)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_COLUMN),
						errmsg("column \"%s\" of relation \"%s\" does not exist", column, get_rel_name(relid))));
	type = getBaseType(get_atttype(relid, att));
	if (type != TEXTOID && type != VARCHAROID)
		ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
						errmsg("%s column \"%s\" is of type %s, not text", role, column, format_type_be(type)),
						errhint("translate_column reads and writes text or varchar columns.")));
	return att;
}

/*
 * translate_column(relation, source_column, target_column, model, batch_size):
 * translates the rows whose target is NULL and source is not, in
 * length-sorted batches, committing after each batch when called with CALL
 * outside a transaction block (so a cancel loses at most one batch and a
 * new call resumes). Rows are addressed by the primary key.
 */
Datum
attention_translate_column(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *source_column,
			   *target_column;
	int			batch_size;
	bool		atomic = !(fcinfo->context != NULL && IsA(fcinfo->context, CallContext) &&
						   !castNode(CallContext, fcinfo->context)->atomic);
	StringInfoData select,
				update;
	int			pk_count,
				i;
	Oid		   *types;
	SPIPlanPtr	update_plan;
	char	   *rel;
	AttentionModel *am;
	TfDecodeOptions opt;
	MemoryContext batch_cxt,
				old;
	int64		total,
				done = 0;
	instr_time	start,
				last_notice,
				now;
	bool		isnull;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2) || PG_ARGISNULL(4))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						errmsg("relation, source_column, target_column and batch_size must not be NULL")));
	relid = PG_GETARG_OID(0);
	source_column = NameStr(*PG_GETARG_NAME(1));
	target_column = NameStr(*PG_GETARG_NAME(2));
	batch_size = PG_GETARG_INT32(4);
	if (batch_size < 1 || batch_size > 10000)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("batch_size %d is out of range", batch_size),
						errhint("batch_size must be between 1 and 10000.")));
	text_column(relid, source_column, "source");
	text_column(relid, target_column, "target");
	if (strcmp(source_column, target_column) == 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("source_column and target_column are both \"%s\"", source_column)));

	SPI_connect_ext(atomic ? 0 : SPI_OPT_NONATOMIC);
	batch_cxt = AllocSetContextCreate(CurrentMemoryContext, "translate_column batch", ALLOCSET_DEFAULT_SIZES);
	rel = pstrdup(DatumGetCString(DirectFunctionCall1(regclassout, ObjectIdGetDatum(relid))));

	/* the primary key, in key order */
	if (SPI_execute_with_args("SELECT a.attname, a.atttypid FROM pg_catalog.pg_index i "
							  "JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid "
							  "AND a.attnum = ANY (i.indkey::int2[]) "
							  "WHERE i.indrelid = $1 AND i.indisprimary "
							  "ORDER BY array_position(i.indkey::int2[], a.attnum)",
							  1, (Oid[]) {OIDOID}, (Datum[]) {ObjectIdGetDatum(relid)}, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the primary key of %s", rel);
	pk_count = (int) SPI_processed;
	if (pk_count == 0)
		ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						errmsg("relation %s has no primary key", rel),
						errhint("translate_column addresses rows by their primary key; add one, e.g. "
								"ALTER TABLE %s ADD COLUMN id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY.", rel)));
	types = palloc((pk_count + 1) * sizeof(Oid));
	types[0] = TEXTOID;
	initStringInfo(&select);
	initStringInfo(&update);
	appendStringInfoString(&select, "SELECT ");
	appendStringInfo(&update, "UPDATE %s SET %s = $1 WHERE ", rel, quote_identifier(target_column));
	for (i = 0; i < pk_count; i++)
	{
		const char *col = quote_identifier(SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));

		types[i + 1] = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
		appendStringInfo(&select, "%s, ", col);
		appendStringInfo(&update, "%s%s = $%d", i > 0 ? " AND " : "", col, i + 2);
	}
	appendStringInfo(&select, "%s::text FROM %s WHERE %s IS NULL AND %s IS NOT NULL",
					 quote_identifier(source_column), rel, quote_identifier(target_column),
					 quote_identifier(source_column));

	/* how many to do (for the ETA) */
	{
		StringInfoData count;

		initStringInfo(&count);
		appendStringInfo(&count, "SELECT count(*) FROM (%s) AS todo", select.data);
		if (SPI_execute(count.data, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not count the rows to translate");
		total = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}
	appendStringInfo(&select, " ORDER BY length(%s) LIMIT %d", quote_identifier(source_column), batch_size);

	/* planned once; the plan lives in SPI's procedure memory, which survives the commits */
	update_plan = SPI_prepare(update.data, pk_count + 1, types);
	if (update_plan == NULL)
		elog(ERROR, "could not prepare \"%s\": %s", update.data, SPI_result_code_string(SPI_result));

	am = attention_model_get(PG_ARGISNULL(3) ? NULL : PG_GETARG_TEXT_PP(3));
	opt = decode_options(am, attention_beam_size, 1, 0.6, 50);
	INSTR_TIME_SET_CURRENT(start);
	last_notice = start;
	for (;;)
	{
		int			n;
		text	  **texts,
				  **results;
		Datum	   *keys;

		CHECK_FOR_INTERRUPTS();
		MemoryContextReset(batch_cxt);
		if (SPI_execute(select.data, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not read the rows to translate from %s", rel);
		n = (int) SPI_processed;
		if (n == 0)
			break;
		old = MemoryContextSwitchTo(batch_cxt);
		texts = palloc(n * sizeof(text *));
		results = palloc(n * sizeof(text *));
		keys = palloc((size_t) n * pk_count * sizeof(Datum));
		for (i = 0; i < n; i++)
		{
			int			k;

			for (k = 0; k < pk_count; k++)
			{
				Form_pg_attribute att = TupleDescAttr(SPI_tuptable->tupdesc, k);

				keys[(size_t) i * pk_count + k] =
					datumCopy(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, k + 1, &isnull),
							  att->attbyval, att->attlen);
			}
			texts[i] = DatumGetTextPCopy(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc,
													   pk_count + 1, &isnull));
		}
		translate_many(am, texts, n, &opt, results);
		for (i = 0; i < n; i++)
		{
			Datum	   *values = palloc((pk_count + 1) * sizeof(Datum));

			values[0] = PointerGetDatum(results[i]);
			memcpy(values + 1, keys + (size_t) i * pk_count, pk_count * sizeof(Datum));
			if (SPI_execute_plan(update_plan, values, NULL, false, 0) != SPI_OK_UPDATE)
				elog(ERROR, "could not update %s", rel);
		}
		MemoryContextSwitchTo(old);
		done += n;
		if (!atomic)
			SPI_commit();
		INSTR_TIME_SET_CURRENT(now);
		INSTR_TIME_SUBTRACT(now, last_notice);
		if (INSTR_TIME_GET_DOUBLE(now) >= NOTICE_SECONDS)
		{
			double		elapsed;
			double		rate;

			INSTR_TIME_SET_CURRENT(last_notice);
			now = last_notice;
			INSTR_TIME_SUBTRACT(now, start);
			elapsed = INSTR_TIME_GET_DOUBLE(now);
			rate = done / Max(elapsed, 1e-9);
			ereport(NOTICE, (errmsg("translate_column: %lld of %lld rows, %.1f rows/s, ETA %.0f s",
									(long long) done, (long long) Max(total, done), rate,
									Max(total - done, 0) / Max(rate, 1e-9))));
		}
	}
	SPI_finish();
	PG_RETURN_VOID();
}
