/*
 * inspect.c - looking into the model from SQL: attention_weights (every
 * attention probability of a teacher-forced pass), align (word alignment
 * from the last decoder layer's cross-attention), and the same as
 * pictures: plot_attention (one head's or one layer's heads' heatmaps, as
 * the paper's Figures 3-5 show them) and plot_alignment (svg.c draws).
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "catalog.h"
#include "model_cache.h"
#include "settings.h"
#include "svg.h"
#include "transformer.h"
#include "translation.h"

PG_FUNCTION_INFO_V1(attention_attention_weights);
PG_FUNCTION_INFO_V1(attention_align);
PG_FUNCTION_INFO_V1(attention_plot_attention);
PG_FUNCTION_INFO_V1(attention_plot_alignment);

/* The most pieces (with BOS or EOS) per axis of a readable picture: one heatmap, a layer's heads. */
#define PLOT_MAX_PIECES 100
#define PLOT_MAX_PIECES_HEADS 50

/* The text argument n, or NULL (also where the 0.2.0 definition has no such argument). */
#define TEXT_ARG_OR_NULL(n) (PG_NARGS() <= (n) || PG_ARGISNULL(n) ? NULL : PG_GETARG_TEXT_PP(n))

/*
 * The target for inspection: the given text's ids, or (NULL) the
 * translation's ids, as translate(source, model) makes it (d's decoding
 * defaults); after the target language's token for a multilingual model
 * (the decoder's forced first token).
 */
static Encoded
inspection_target(AttentionModel *am, const DeployedModel *d, const Encoded *source, text *target,
				  CallLanguages lang)
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
	opt = decode_options(am, call_beam_size(d, BEAM_SIZE_OF_MODEL), 1, TF_DEFAULT_LENGTH_PENALTY,
						 TF_DEFAULT_MAX_LENGTH_OFFSET, d->max_output_tokens, lang.target_id);
	translate_batch(am, (Encoded *) source, 1, &opt, &h);
	t.ids = palloc((h.length + t.prefix + 1) * sizeof(int32_t));
	t.ids[0] = lang.target_id;
	memcpy(t.ids + t.prefix, h.tokens, h.length * sizeof(int32_t));
	t.n = h.length + t.prefix;
	return t;
}

/*
 * The deployed model of argument `model` (NULL: the default), into *d as
 * looked up, and the languages of arguments `target`, `source`.
 */
static AttentionModel *
inspected_model(FunctionCallInfo fcinfo, int model, int target, int source, CallLanguages *lang, DeployedModel *d)
{
	attention_model_lookup(TEXT_ARG_OR_NULL(model), d);
	*lang = call_languages(d, TEXT_ARG_OR_NULL(source), TEXT_ARG_OR_NULL(target));
	return attention_model_load(d, "cpu", false);
}

/*
 * Pieces of e + last_id (a source's: its last id, EOS or a language token
 * that goes last) and of BOS + e (queries of the decoder), as text datums.
 */
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
	DeployedModel d;
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
	am = inspected_model(fcinfo, 2, 3, 4, &lang, &d);
	c = tf_model_config(am->engine);
	source = encode_text(am, PG_GETARG_TEXT_PP(0), true, SPM_SOURCE, lang.source_id);
	target = inspection_target(am, &d, &source, TEXT_ARG_OR_NULL(1), lang);
	teacher_forced(am, &source, &target, true);
	src_tokens = token_texts(am, &source, -1, source.ids[source.n]);
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
 * The alignment of source and target: the last decoder layer's
 * cross-attention averaged over heads, [q = target ids + EOS, k = source
 * ids + EOS] (a multilingual model's language tokens first).
 */
static float *
alignment(AttentionModel *am, Encoded *source, Encoded *target, int *q, int *k)
{
	const TfConfig *c = tf_model_config(am->engine);
	float	   *p,
			   *a;
	int			i,
				h;

	teacher_forced(am, source, target, true);
	p = fetch_attention(am, TF_CROSS, c->num_decoder_layers - 1, q, k);
	a = palloc0(Max((size_t) *q * *k, 1) * sizeof(float));
	for (i = 0; i < *q * *k; i++)
	{
		double		w = 0.0;

		for (h = 0; h < c->num_heads; h++)
			w += p[(size_t) h * *q * *k + i];
		a[i] = (float) (w / c->num_heads);
	}
	pfree(p);
	return a;
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
	DeployedModel d;
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	AttentionModel *am;
	Encoded		source,
				target;
	Datum	   *src_tokens,
			   *tgt_tokens;
	float	   *a;
	CallLanguages lang;
	int			q,
				k,
				i,
				j;

	InitMaterializedSRF(fcinfo, 0);
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		return (Datum) 0;
	am = inspected_model(fcinfo, 2, 3, 4, &lang, &d);
	source = encode_text(am, PG_GETARG_TEXT_PP(0), true, SPM_SOURCE, lang.source_id);
	target = encode_text(am, PG_GETARG_TEXT_PP(1), false, SPM_TARGET, lang.target_id);
	a = alignment(am, &source, &target, &q, &k);
	src_tokens = token_texts(am, &source, -1, source.ids[source.n]);
	tgt_tokens = token_texts(am, &target, -1, am->eos_id);
	for (i = 0; i < q; i++)
		for (j = 0; j < k; j++)
		{
			Datum		values[5];
			bool		nulls[5] = {false, false, false, false, false};

			values[0] = Int32GetDatum(i);
			values[1] = tgt_tokens[i];
			values[2] = Int32GetDatum(j);
			values[3] = src_tokens[j];
			values[4] = Float4GetDatum(a[(size_t) i * k + j]);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	return (Datum) 0;
}

/* The pieces of token_texts as C strings (labels). */
static const char **
label_strings(const Datum *texts, int n)
{
	const char **s = palloc(Max(n, 1) * sizeof(char *));
	int			i;

	for (i = 0; i < n; i++)
		s[i] = text_to_cstring(DatumGetTextPP(texts[i]));
	return s;
}

/*
 * ERROR (54000) when a picture of `function` would have more than `limit`
 * pieces along an axis; the hint names `rows`, the function giving the
 * same weights as rows.
 */
static void
check_plot_size(const char *what, int pieces, int limit, const char *function, const char *rows)
{
	if (pieces > limit)
		ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						errmsg("the %s has %d pieces: %s draws at most %d along an axis", what, pieces, function,
							   limit),
						errhint("Plot a shorter sentence, or read the weights as rows with attention.%s().", rows)));
}

/* The attention kind named by plot_attention's kind argument; ERROR (22023) for another name. */
static TfAttentionKind
attention_kind(const char *name)
{
	if (strcmp(name, "encoder") == 0 || strcmp(name, "encoder_self") == 0)
		return TF_ENCODER_SELF;
	if (strcmp(name, "decoder") == 0 || strcmp(name, "decoder_self") == 0)
		return TF_DECODER_SELF;
	if (strcmp(name, "cross") == 0)
		return TF_CROSS;
	ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					errmsg("unknown attention kind \"%s\"", name),
					errhint("The kinds are encoder (self-attention of the source), decoder (masked self-attention "
							"of the target) and cross (the target's attention over the source).")));
	return TF_CROSS;			/* not reached */
}

/*
 * plot_attention(source, target, model, kind, layer, head,
 * target_language, source_language) returns text: an SVG heatmap of one
 * head's attention probabilities (queries down, keys across, pieces as
 * labels), or with head NULL of every head of the layer in a grid; layers
 * and heads from 0 as attention_weights numbers them; target NULL: the
 * model's own translation. NULL for a NULL source.
 */
Datum
attention_plot_attention(PG_FUNCTION_ARGS)
{
	DeployedModel d;
	static const char *const titles[] = {"Encoder self-attention", "Decoder self-attention",
	"Encoder-decoder attention"};
	static const char *const source_axis = "keys: source pieces";
	AttentionModel *am;
	Encoded		source,
				target;
	const TfConfig *c;
	CallLanguages lang;
	TfAttentionKind kind;
	int			layer,
				layers,
				head = -1,
				heads,
				rows,
				cols,
				q,
				k,
				h;
	float	   *p;
	const char **src_labels,
			  **dec_labels,
			  **panel_titles = NULL;
	SvgHeatmap	map;

	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	if (PG_ARGISNULL(3) || PG_ARGISNULL(4))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						errmsg("%s must not be NULL", PG_ARGISNULL(3) ? "kind" : "layer")));
	kind = attention_kind(text_to_cstring(PG_GETARG_TEXT_PP(3)));
	layer = PG_GETARG_INT32(4);
	am = inspected_model(fcinfo, 2, 6, 7, &lang, &d);
	c = tf_model_config(am->engine);
	layers = kind == TF_ENCODER_SELF ? c->num_encoder_layers : c->num_decoder_layers;
	if (layer < 0 || layer >= layers)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("layer %d is out of range: the %s layers of model \"%s\" are numbered 0 to %d", layer,
							   kind == TF_ENCODER_SELF ? "encoder" : "decoder", am->name, layers - 1)));
	if (!PG_ARGISNULL(5))
	{
		head = PG_GETARG_INT32(5);
		if (head < 0 || head >= c->num_heads)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("head %d is out of range: the heads of model \"%s\" are numbered 0 to %d", head,
								   am->name, c->num_heads - 1),
							errhint("A NULL head draws every head of the layer.")));
	}
	heads = head >= 0 ? 1 : c->num_heads;
	source = encode_text(am, PG_GETARG_TEXT_PP(0), true, SPM_SOURCE, lang.source_id);
	check_plot_size("source", source.n + 1, head >= 0 ? PLOT_MAX_PIECES : PLOT_MAX_PIECES_HEADS, "plot_attention",
					"attention_weights");
	target = inspection_target(am, &d, &source, PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1), lang);
	if (kind != TF_ENCODER_SELF)
		check_plot_size("target", target.n + 1, head >= 0 ? PLOT_MAX_PIECES : PLOT_MAX_PIECES_HEADS,
						"plot_attention", "attention_weights");
	teacher_forced(am, &source, &target, true);
	p = fetch_attention(am, kind, layer, &q, &k);
	src_labels = label_strings(token_texts(am, &source, -1, source.ids[source.n]), source.n + 1);
	dec_labels = label_strings(token_texts(am, &target, am->bos_id, -1), target.n + 1);
	rows = q;
	cols = k;
	if (head < 0)
	{
		panel_titles = palloc(heads * sizeof(char *));
		for (h = 0; h < heads; h++)
			panel_titles[h] = psprintf("head %d", h);
	}
	map.title = head >= 0 ? psprintf("%s, layer %d, head %d: model %s", titles[kind], layer, head, am->name)
		: psprintf("%s, layer %d, all %d heads: model %s", titles[kind], layer, heads, am->name);
	map.row_axis = kind == TF_ENCODER_SELF ? "queries: source pieces" : "queries: target pieces (from BOS)";
	map.col_axis = kind == TF_DECODER_SELF ? "keys: target pieces (from BOS)" : source_axis;
	map.rows = rows;
	map.cols = cols;
	map.row_labels = kind == TF_ENCODER_SELF ? src_labels : dec_labels;
	map.col_labels = kind == TF_DECODER_SELF ? dec_labels : src_labels;
	map.panels = heads;
	map.panel_titles = panel_titles;
	map.weights = head >= 0 ? p + (size_t) head * q * k : p;
	PG_RETURN_TEXT_P(cstring_to_text(svg_heatmap(&map)));
}

/*
 * plot_alignment(source, target, model, target_language,
 * source_language) returns text: align's weights as an SVG heatmap
 * (target pieces and EOS down, source pieces and EOS across). NULL when
 * source or target is NULL.
 */
Datum
attention_plot_alignment(PG_FUNCTION_ARGS)
{
	DeployedModel d;
	AttentionModel *am;
	Encoded		source,
				target;
	CallLanguages lang;
	float	   *a;
	int			q,
				k;
	SvgHeatmap	map;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		PG_RETURN_NULL();
	am = inspected_model(fcinfo, 2, 3, 4, &lang, &d);
	source = encode_text(am, PG_GETARG_TEXT_PP(0), true, SPM_SOURCE, lang.source_id);
	target = encode_text(am, PG_GETARG_TEXT_PP(1), false, SPM_TARGET, lang.target_id);
	check_plot_size("source", source.n + 1, PLOT_MAX_PIECES, "plot_alignment", "align");
	check_plot_size("target", target.n + 1, PLOT_MAX_PIECES, "plot_alignment", "align");
	a = alignment(am, &source, &target, &q, &k);
	map.title = psprintf("Alignment (last decoder layer's cross-attention, mean of heads): model %s", am->name);
	map.row_axis = "target pieces";
	map.col_axis = "source pieces";
	map.rows = q;
	map.cols = k;
	map.row_labels = label_strings(token_texts(am, &target, -1, am->eos_id), q);
	map.col_labels = label_strings(token_texts(am, &source, -1, source.ids[source.n]), k);
	map.panels = 1;
	map.panel_titles = NULL;
	map.weights = a;
	PG_RETURN_TEXT_P(cstring_to_text(svg_heatmap(&map)));
}

