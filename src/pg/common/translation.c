/*
 * translation.c - what the translation functions, the batched-rows node,
 * the inspection functions, translate_column and the translation service
 * share (translation.h): text to subword ids and back, decoding options
 * from SQL arguments, and translation in engine batches, through the
 * model's service when attention.use_service lets it.
 *
 * The engine runs with its own threads (all signals blocked), as many as
 * the server-wide CPU budget gives each engine call; between
 * decoding steps it polls InterruptPending, so a cancel or
 * statement_timeout stops a long batch within a step, and the interrupt is
 * then serviced here with CHECK_FOR_INTERRUPTS().
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "libpq/pqformat.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "cpu_budget.h"
#include "model_cache.h"
#include "service_registry.h"
#include "settings.h"
#include "statistics.h"
#include "translation.h"

const char *const decode_option_names[3] = {"beam_size", "length_penalty", "max_length_offset"};

/*
 * Encodes text of a side under the model's vocabulary, after the language
 * token `language` (-1: none); with add_eos an EOS follows (space is always
 * reserved). A source of a model whose source language goes last
 * (am->source_language_last) is the text, EOS, then the language token in
 * EOS's place (translation.h's Encoded).
 */
Encoded
encode_text(AttentionModel *am, text *t, bool add_eos, SpmSide side, int32 language)
{
	Encoded		e;
	int		   *ids;
	size_t		n;
	char		err[512];
	const char *what = side == SPM_TARGET ? "target" : "source";
	int			prefix = language >= 0 ? 1 : 0;

	if (spm_encode(am->vocabulary, side, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), &ids, &n, err, sizeof(err)) != 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("could not encode the %s: %s", what, err)));
	if ((int64) n > attention_max_input_tokens || (int64) n + prefix + 1 > am->max_positions)
	{
		spm_free_buffer(ids);
		ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						errmsg("the %s has %zu tokens, over the limit of %d", what, n,
							   Min(attention_max_input_tokens, am->max_positions - 1 - prefix)),
						errhint("Split the text into sentences, or raise attention.max_input_tokens "
								"(the model takes at most %d).", am->max_positions - 1 - prefix)));
	}
	e.ids = palloc((n + prefix + 1) * sizeof(int32_t));
	e.n = (int) n + prefix;
	e.prefix = prefix;
	if (prefix && side == SPM_SOURCE && am->source_language_last)
	{
		memcpy(e.ids, ids, n * sizeof(int32_t));
		e.ids[n] = am->eos_id;
		e.ids[e.n] = language;
		spm_free_buffer(ids);
		return e;
	}
	if (prefix)
		e.ids[0] = language;
	memcpy(e.ids + prefix, ids, n * sizeof(int32_t));
	spm_free_buffer(ids);
	if (add_eos)
		e.ids[e.n] = am->eos_id;
	return e;
}

/* The id of language `code` of model d ("source" or "target": `which`); ERROR listing a few when unknown. */
static int32
language_id(const DeployedModel *d, const char *code, const char *which)
{
	StringInfoData some;
	int			i;

	for (i = 0; i < d->n_languages; i++)
		if (strcmp(d->languages[i], code) == 0)
			return d->language_ids[i];
	initStringInfo(&some);
	for (i = 0; i < Min(d->n_languages, 8); i++)
		appendStringInfo(&some, "%s%s", i > 0 ? ", " : "", d->languages[i]);
	ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					errmsg("model \"%s\" has no %s language \"%s\"", d->name, which, code),
					errhint("Its %d languages include %s%s (attention.vocabularies.languages lists them).",
							d->n_languages, some.data, d->n_languages > 8 ? ", ..." : "")));
	return -1;					/* not reached */
}

CallLanguages
call_languages(const DeployedModel *d, text *source_language, text *target_language)
{
	CallLanguages l = {-1, -1};
	char	   *source = source_language != NULL ? text_to_cstring(source_language) : d->source_language;
	char	   *target = target_language != NULL ? text_to_cstring(target_language) : d->target_language;

	if (d->n_languages == 0)
	{
		if (source_language != NULL || target_language != NULL)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("model \"%s\" is not multilingual: it takes no %s language", d->name,
								   target_language != NULL ? "target" : "source"),
							errhint("Pass NULL (the default) for source_language and target_language.")));
		return l;
	}
	if (source == NULL || target == NULL)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("model \"%s\" needs a %s language", d->name, target == NULL ? "target" : "source"),
						errhint("Pass %s, or give the model defaults with attention.set_languages('%s', source, target).",
								target == NULL ? "target_language" : "source_language", d->name)));
	l.source_id = language_id(d, source, "source");
	l.target_id = language_id(d, target, "target");
	return l;
}

/* Text of ids under the model's vocabulary (palloc'd text). */
text *
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
text *
piece_text(AttentionModel *am, int id)
{
	size_t		len;
	const char *p = spm_piece(am->vocabulary, id, &len);

	return cstring_to_text_with_len(p, len);
}

int
beam_size_argument(bool isnull, int32 value)
{
	if (isnull)
		return BEAM_SIZE_OF_MODEL;
	check_decode_options(value, 1, TF_DEFAULT_LENGTH_PENALTY, 0);
	return value;
}

int
call_beam_size(const DeployedModel *d, int beam_size)
{
	if (beam_size != BEAM_SIZE_OF_MODEL)
		return beam_size;
	return d->beam_size > 0 ? d->beam_size : attention_beam_size;
}

void
check_decode_options(int beam_size, int nbest, double length_penalty, int max_length_offset)
{
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
}

void
check_beam_fits(int beam_size, int vocab_size, const char *model)
{
	if (beam_size > vocab_size - 1)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("beam_size %d is out of range for model \"%s\"", beam_size, model),
						errhint("Its vocabulary has %d pieces, the pad id not among the candidates: "
								"beam_size must be below %d.", vocab_size, vocab_size)));
}

/* Decoding options from SQL arguments; ERROR naming a bad one. */
TfDecodeOptions
decode_options(AttentionModel *am, int beam_size, int nbest, double length_penalty, int max_length_offset,
			   int max_output_tokens, int32 target_language)
{
	TfDecodeOptions opt;

	check_decode_options(beam_size, nbest, length_penalty, max_length_offset);
	check_beam_fits(beam_size, spm_size(am->vocabulary), am->name);
	tf_decode_options_default(&opt);
	opt.beam_size = beam_size;
	opt.nbest = nbest;
	opt.length_penalty = (float) length_penalty;
	opt.max_length_offset = max_length_offset;
	opt.max_output_tokens = max_output_tokens;
	opt.bos_id = am->bos_id;
	opt.eos_id = am->eos_id;
	opt.forced_id = target_language;
	opt.source_prefix = target_language >= 0 ? 1 : 0;	/* multilingual sources begin with their language */
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
void
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
		int			threads = cpu_budget_take_for(am->engine, 0);
		int			rc;

		interrupted = false;
		rc = tf_model_translate(am->engine, ids, n, len, opt, out, err, sizeof(err));
		cpu_budget_give(threads);
		if (rc == TF_OK)
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

/*
 * Translations of texts[0 .. n) with the deployed checkpoint of `model`
 * (NULL: the default model) into results: through the model's translation
 * service when attention.use_service lets it (one request), else loaded in
 * this backend (engine calls of at most max_batch distinct sentences).
 * Returns the number of engine calls or service requests.
 */
int
translate_texts(text *model, int beam_size, double length_penalty, int max_length_offset, text *target_language,
				text *source_language, text **texts, int n, int max_batch, text **results)
{
	DeployedModel d;
	AttentionModel *am;
	TfDecodeOptions opt;
	ServiceRequest req;
	StringInfoData answer;
	CallLanguages lang;
	int			i;

	attention_model_lookup(model, &d);
	lang = call_languages(&d, source_language, target_language);
	beam_size = call_beam_size(&d, beam_size);
	check_decode_options(beam_size, 1, length_penalty, max_length_offset);
	req = service_request(SERVICE_TRANSLATE, &d, lang, beam_size, 1, length_penalty, max_length_offset, texts, n);
	if (service_send(&d, &req, &answer))
	{
		service_raise(&answer);
		for (i = 0; i < n; i++)
			results[i] = service_get_text(&answer);
		return 1;
	}
	am = attention_model_load(&d, "cpu", false);
	opt = decode_options(am, beam_size, 1, length_penalty, max_length_offset, d.max_output_tokens, lang.target_id);
	return translate_many(am, texts, n, &opt, lang.source_id, max_batch, results);
}

/* Orders sentence indexes by source length, then ids (identical sources side by side), then index. */
static int
source_cmp(const void *a, const void *b, void *arg)
{
	const Encoded *e = arg;
	int			x = *(const int *) a,
				y = *(const int *) b;
	int			c;

	if (e[x].n != e[y].n)
		return e[x].n < e[y].n ? -1 : 1;
	c = memcmp(e[x].ids, e[y].ids, e[x].n * sizeof(int32_t));
	if (c != 0)
		return c;
	return x < y ? -1 : x > y;
}

int
translate_encoded(AttentionModel *am, const Encoded *e, int n, TfDecodeOptions *opt, int max_batch,
				  text **results, int64 *tokens)
{
	int		   *order = palloc(Max(n, 1) * sizeof(int));
	int		   *first = palloc(Max(n, 1) * sizeof(int));	/* distinct sources, as indexes */
	int			m = 0,
				distinct = 0,
				calls = 0,
				i;
	TfHypothesis *h = palloc0(max_batch * sizeof(TfHypothesis));
	Encoded    *batch = palloc(max_batch * sizeof(Encoded));
	int64		counts[STAT_COUNTERS] = {[STAT_CALLS] = 1, [STAT_SENTENCES] = n};
	instr_time	start,
				elapsed;

	/* the model's entry found (or placed) now: never inside the handler below, which must not raise */
	statistics_add(am->model_id, (int64[STAT_COUNTERS]) {0});
	INSTR_TIME_SET_CURRENT(start);
	for (i = 0; i < n; i++)
	{
		results[i] = NULL;
		if (e[i].ids == NULL)
			continue;
		counts[STAT_TOKENS_IN] += e[i].n;
		if (e[i].n == e[i].prefix)
			results[i] = cstring_to_text("");
		else
			order[m++] = i;
	}
	qsort_arg(order, m, sizeof(int), source_cmp, (void *) e);
	for (i = 0; i < m; i++)
		if (i == 0 || e[order[i]].n != e[order[i - 1]].n ||
			memcmp(e[order[i]].ids, e[order[i - 1]].ids, e[order[i]].n * sizeof(int32_t)) != 0)
			first[distinct++] = order[i];
	PG_TRY();
	{
		for (i = 0; i < distinct; i += max_batch)
		{
			int			b = Min(max_batch, distinct - i);
			int			j;

			CHECK_FOR_INTERRUPTS();
			for (j = 0; j < b; j++)
				batch[j] = e[first[i + j]];
			translate_batch(am, batch, b, opt, h);
			calls++;
			for (j = 0; j < b; j++)
			{
				results[first[i + j]] = decode_ids(am, h[j].tokens, h[j].length);
				counts[STAT_TOKENS_OUT] += h[j].length;
				pfree(h[j].tokens);
			}
		}
	}
	PG_CATCH();
	{
		/* an ERROR or a cancel: counted as a call that failed */
		statistics_add(am->model_id, (int64[STAT_COUNTERS]) {[STAT_CALLS] = 1, [STAT_ERRORS] = 1});
		PG_RE_THROW();
	}
	PG_END_TRY();
	INSTR_TIME_SET_CURRENT(elapsed);
	INSTR_TIME_SUBTRACT(elapsed, start);
	counts[STAT_ENGINE_US] = (int64) INSTR_TIME_GET_MICROSEC(elapsed);
	statistics_add(am->model_id, counts);
	if (tokens != NULL)
		*tokens += counts[STAT_TOKENS_OUT];
	/* the duplicates share their first occurrence's translation */
	for (i = 1; i < m; i++)
		if (results[order[i]] == NULL)
			results[order[i]] = results[order[i - 1]];
	pfree(order);
	pfree(first);
	pfree(h);
	pfree(batch);
	return calls;
}

int
translate_many(AttentionModel *am, text **texts, int n, TfDecodeOptions *opt, int32 source_language, int max_batch,
			   text **results)
{
	Encoded    *e = palloc0(Max(n, 1) * sizeof(Encoded));
	int			i;

	for (i = 0; i < n; i++)
		if (texts[i] != NULL)
			e[i] = encode_text(am, texts[i], true, SPM_SOURCE, source_language);
	return translate_encoded(am, e, n, opt, max_batch, results, NULL);
}

int
translate_rows(bool one_arg, const NullableDatum *options, text **texts, int n, int max_batch, text **results)
{
	int			i;

	for (i = 0; i < n && texts[i] == NULL; i++)
		results[i] = NULL;
	if (i == n)
		return 0;
	if (one_arg)
		return translate_texts(NULL, BEAM_SIZE_OF_MODEL, TF_DEFAULT_LENGTH_PENALTY, TF_DEFAULT_MAX_LENGTH_OFFSET,
							   NULL, NULL, texts, n, max_batch, results);
	for (i = 1; i < 3; i++)
		if (options[i + 1].isnull)
			ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
							errmsg("%s must not be NULL", decode_option_names[i])));
	return translate_texts(options[0].isnull ? NULL : DatumGetTextPP(options[0].value),
						   beam_size_argument(options[1].isnull, DatumGetInt32(options[1].value)),
						   DatumGetFloat8(options[2].value),
						   DatumGetInt32(options[3].value),
						   options[4].isnull ? NULL : DatumGetTextPP(options[4].value),
						   options[5].isnull ? NULL : DatumGetTextPP(options[5].value), texts, n, max_batch, results);
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

void
nbest_hypotheses(AttentionModel *am, text *source, int32 source_language, TfDecodeOptions *opt, NbestFn emit,
				 void *arg)
{
	Encoded		e = encode_text(am, source, true, SPM_SOURCE, source_language);
	TfHypothesis *h;
	int			i;

	if (e.n == e.prefix)
	{
		emit(arg, cstring_to_text(""), 0.0, construct_empty_array(TEXTOID));
		return;
	}
	h = palloc0(opt->nbest * sizeof(TfHypothesis));
	translate_batch(am, &e, 1, opt, h);
	for (i = 0; i < opt->nbest; i++)
		emit(arg, decode_ids(am, h[i].tokens, h[i].length), h[i].log_prob,
			 pieces_array(am, h[i].tokens, h[i].length));
}

/*
 * Runs one teacher-forced pass of source -> target ids (no EOS in
 * target->ids): afterwards, with keep_attention, the engine holds the
 * attention probabilities. Returns the log-probability of the target's
 * tokens and EOS (without its prefix, the forced language token).
 */
double
teacher_forced(AttentionModel *am, const Encoded *source, const Encoded *target, bool keep_attention)
{
	int			n = target->n + 1;
	int32_t    *tgt = palloc(2 * (size_t) n * sizeof(int32_t));
	TfBatch		b = {0};
	double		log_prob;
	char		err[TF_ERRLEN];
	int			threads,
				rc;

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
	threads = cpu_budget_take_for(am->engine, 0);
	if (keep_attention)
		tf_model_keep_attention(am->engine);
	rc = tf_model_score_prefixed(am->engine, &b, target->prefix, &log_prob, err, sizeof(err));
	cpu_budget_give(threads);
	if (rc != TF_OK)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
						errmsg("scoring with model \"%s\" failed: %s", am->name, err)));
	pfree(tgt);
	return log_prob;
}

double
score_text(AttentionModel *am, text *source, text *target, CallLanguages lang)
{
	Encoded		s = encode_text(am, source, true, SPM_SOURCE, lang.source_id),
				t = encode_text(am, target, false, SPM_TARGET, lang.target_id);

	return teacher_forced(am, &s, &t, false);
}
