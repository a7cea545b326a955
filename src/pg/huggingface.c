/*
 * huggingface.c - Hugging Face MarianMT models in and out, in the layout the
 * OPUS-MT project publishes (config.json, model.safetensors, vocab.json,
 * source.spm, target.spm).
 *
 * A MarianMT model is this engine's Transformer (post-norm, sqrt(d_model)
 * embedding scale, tied embeddings) with an activation of its own, a bias on
 * the logits, the pad id as decoder start, two SentencePiece models with one
 * table of pieces, and sinusoids laid out in halves: its parameters come in
 * (and go out) through the permutation of src/marian.h, so that a
 * re-import of an export is bitwise.
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/tuplestore.h"

#include "catalog.h"
#include "huggingface.h"
#include "marian.h"
#include "model_cache.h"
#include "progress.h"
#include "spm.h"
#include "tensor_file.h"
#include "transformer.h"

PG_FUNCTION_INFO_V1(attention_import_huggingface);
PG_FUNCTION_INFO_V1(attention_export_huggingface);

/* The names a MarianMT file may give its one embedding matrix (all equal when several are present). */
static const char *const embedding_names[] = {"model.shared.weight", "model.encoder.embed_tokens.weight",
"model.decoder.embed_tokens.weight", "lm_head.weight"};

/* Marian's LayerNorm epsilon (torch.nn.LayerNorm's default; not configurable there). */
#define MARIAN_LAYER_NORM_EPS 1e-5f

/* The value of config.json's key, or NULL (also for a JSON null). */
JsonbValue *
config_value(Jsonb *config, const char *key)
{
	JsonbValue *v = getKeyJsonValueFromContainer(&config->root, key, strlen(key), NULL);

	return v != NULL && v->type != jbvNull ? v : NULL;
}

/* An integer of config.json (dflt when absent: MarianConfig's default); ERROR naming the key otherwise. */
int
config_int(Jsonb *config, const char *key, int dflt)
{
	JsonbValue *v = config_value(config, key);
	double		x;

	if (v == NULL)
		return dflt;
	if (v->type != jbvNumeric)
		config_error("\"%s\" must be a number", key);
	x = DatumGetFloat8(DirectFunctionCall1(numeric_float8, NumericGetDatum(v->val.numeric)));
	if (x != floor(x) || x < 0 || x > PG_INT32_MAX)
		config_error("\"%s\" must be a non-negative integer, not %g", key, x);
	return (int) x;
}

/* A number of config.json (dflt when absent). */
double
config_number(Jsonb *config, const char *key, double dflt)
{
	JsonbValue *v = config_value(config, key);

	if (v == NULL)
		return dflt;
	if (v->type != jbvNumeric)
		config_error("\"%s\" must be a number", key);
	return DatumGetFloat8(DirectFunctionCall1(numeric_float8, NumericGetDatum(v->val.numeric)));
}

/* A boolean of config.json that must equal `needed` (dflt when absent); ERROR naming the key otherwise. */
void
config_require(Jsonb *config, const char *key, bool dflt, bool needed)
{
	JsonbValue *v = config_value(config, key);
	bool		b = dflt;

	if (v != NULL && v->type != jbvBool)
		config_error("\"%s\" must be true or false", key);
	if (v != NULL)
		b = v->val.boolean;
	if (b != needed)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("config.json: \"%s\" is %s; this engine's Transformer needs %s", key,
							   b ? "true" : "false", needed ? "true" : "false")));
}

/* A string of config.json (dflt when absent), palloc'd. */
char *
config_string(Jsonb *config, const char *key, const char *dflt)
{
	JsonbValue *v = config_value(config, key);

	if (v == NULL)
		return pstrdup(dflt);
	if (v->type != jbvString)
		config_error("\"%s\" must be a string", key);
	return pnstrdup(v->val.string.val, v->val.string.len);
}

int
config_vocab_size(Jsonb *config, int dflt)
{
	int			vocab_size = config_int(config, "vocab_size", dflt);

	if (vocab_size < 4 || vocab_size > (1 << 24))
		config_error("\"vocab_size\" %d is not between 4 and 16777216", vocab_size);
	return vocab_size;
}

void
config_token_ids(Jsonb *config, int vocab_size, const int dflt[3], int *pad_id, int *eos_id, int *decoder_start_id)
{
	*pad_id = config_int(config, "pad_token_id", dflt[0]);
	*eos_id = config_int(config, "eos_token_id", dflt[1]);
	*decoder_start_id = config_int(config, "decoder_start_token_id", dflt[2]);
	if (*pad_id >= vocab_size || *eos_id >= vocab_size || *decoder_start_id >= vocab_size)
		config_error("\"pad_token_id\" %d, \"eos_token_id\" %d and \"decoder_start_token_id\" %d must be below "
					 "\"vocab_size\" %d", *pad_id, *eos_id, *decoder_start_id, vocab_size);
}

void
config_sizes(Jsonb *config, TfConfig *c, double attention_dropout)
{
	int			heads,
				ffn;

	c->d_model = config_int(config, "d_model", 1024);
	c->num_encoder_layers = config_int(config, "encoder_layers", 12);
	c->num_decoder_layers = config_int(config, "decoder_layers", 12);
	heads = config_int(config, "encoder_attention_heads", 16);
	ffn = config_int(config, "encoder_ffn_dim", 4096);
	if (config_int(config, "decoder_attention_heads", 16) != heads)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("config.json: \"decoder_attention_heads\" differs from \"encoder_attention_heads\" %d",
							   heads)));
	if (config_int(config, "decoder_ffn_dim", 4096) != ffn)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("config.json: \"decoder_ffn_dim\" differs from \"encoder_ffn_dim\" %d", ffn)));
	c->num_heads = heads;
	c->d_ff = ffn;
	c->dropout = (float) config_number(config, "dropout", 0.1);
	c->attention_dropout = (float) config_number(config, "attention_dropout", attention_dropout);
	c->relu_dropout = (float) config_number(config, "activation_dropout", 0.0);
	c->max_positions = config_int(config, "max_position_embeddings", 1024);
}

const char *
config_activation(Jsonb *config, const char *dflt)
{
	char	   *activation = config_string(config, "activation_function", dflt);

	if (strcmp(activation, "swish") == 0 || strcmp(activation, "silu") == 0)
		return "swish";
	if (strcmp(activation, "gelu") != 0 && strcmp(activation, "relu") != 0)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("config.json: \"activation_function\" \"%s\" is not supported", activation),
						errhint("Supported: swish (silu), gelu (exact) and relu.")));
	return activation;
}

/* A MarianMT configuration, as this engine needs it. */
typedef struct MarianConfig
{
	TfConfig	c;				/* vocab_size, layers, widths, dropouts, activation */
	int			pad_id,
				eos_id,
				decoder_start_id;
	const char *activation;		/* this engine's name for it */
} MarianConfig;

/*
 * Reads config.json with MarianConfig's defaults for absent keys (as
 * from_pretrained would); ERROR naming the key for anything this engine's
 * Transformer cannot be.
 */
static void
read_config(Jsonb *config, MarianConfig *mc)
{
	TfConfig   *c = &mc->c;
	char	   *model_type;

	if (!JB_ROOT_IS_OBJECT(config) || JB_ROOT_IS_SCALAR(config))
		config_error("the configuration must be a JSON object");
	model_type = config_string(config, "model_type", "");
	if (strcmp(model_type, "marian") != 0)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("config.json: \"model_type\" is \"%s\"; only \"marian\" models can be imported",
							   model_type)));
	config_require(config, "normalize_before", false, false);
	config_require(config, "normalize_embedding", false, false);
	config_require(config, "add_final_layer_norm", false, false);
	config_require(config, "scale_embedding", false, true);
	config_require(config, "static_position_embeddings", true, true);
	config_require(config, "share_encoder_decoder_embeddings", true, true);
	config_require(config, "tie_word_embeddings", true, true);
	memset(mc, 0, sizeof(*mc));
	c->vocab_size = config_vocab_size(config, 58101);
	if (config_int(config, "decoder_vocab_size", c->vocab_size) != c->vocab_size)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("config.json: \"decoder_vocab_size\" %d differs from \"vocab_size\" %d; "
							   "only shared vocabularies can be imported",
							   config_int(config, "decoder_vocab_size", 0), c->vocab_size)));
	config_sizes(config, c, 0.0);
	mc->activation = config_activation(config, "gelu");
	config_token_ids(config, c->vocab_size, (int[3]) {58100, 0, 58100}, &mc->pad_id, &mc->eos_id,
					 &mc->decoder_start_id);
}

/*
 * vocab.json (an object piece -> id) as the piece of every id [vocab_size];
 * *unk_id receives the id of "<unk>". ERROR naming the problem.
 */
Datum *
read_vocab(Jsonb *vocab, int vocab_size, int *unk_id)
{
	Datum	   *pieces = palloc0(vocab_size * sizeof(Datum));
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	int			n = 0,
				id;

	if (!JB_ROOT_IS_OBJECT(vocab) || JB_ROOT_IS_SCALAR(vocab))
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("vocab.json must be a JSON object")));
	*unk_id = -1;
	it = JsonbIteratorInit(&vocab->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		text	   *piece;
		double		x;

		if (tok != WJB_KEY)
			continue;
		piece = cstring_to_text_with_len(v.val.string.val, v.val.string.len);
		tok = JsonbIteratorNext(&it, &v, true);
		x = v.type == jbvNumeric ? DatumGetFloat8(DirectFunctionCall1(numeric_float8,
																	  NumericGetDatum(v.val.numeric))) : -1;
		if (x != floor(x) || x < 0 || x >= vocab_size)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("vocab.json: the id of piece \"%s\" is not an integer in [0, %d), "
								   "the model's vocab_size", text_to_cstring(piece), vocab_size)));
		id = (int) x;
		if (pieces[id] != (Datum) 0)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("vocab.json gives id %d to two pieces, \"%s\" and \"%s\"", id,
								   TextDatumGetCString(pieces[id]), text_to_cstring(piece))));
		pieces[id] = PointerGetDatum(piece);
		if (VARSIZE_ANY_EXHDR(piece) == 5 && memcmp(VARDATA_ANY(piece), "<unk>", 5) == 0)
			*unk_id = id;
		n++;
	}
	if (n != vocab_size)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("vocab.json has %d pieces, but the model's vocab_size is %d", n, vocab_size)));
	if (*unk_id < 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("vocab.json has no piece \"<unk>\"")));
	return pieces;
}

/* Checks that both SentencePiece models load as a pair with the table; ERROR naming the file otherwise. */
void
check_vocabulary(bytea *source, bytea *target, Datum *pieces, int n, const int special[4])
{
	const char **table = palloc(n * sizeof(char *));
	size_t	   *lengths = palloc(n * sizeof(size_t));
	SpmModel   *vocab = NULL;
	char		err[512];
	int			i;

	for (i = 0; i < n; i++)
	{
		table[i] = VARDATA_ANY(DatumGetPointer(pieces[i]));
		lengths[i] = VARSIZE_ANY_EXHDR(DatumGetPointer(pieces[i]));
	}
	if (spm_load_pair(VARDATA_ANY(source), VARSIZE_ANY_EXHDR(source), VARDATA_ANY(target),
					  VARSIZE_ANY_EXHDR(target), table, lengths, n, special, &vocab, err, sizeof(err)) != 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
						errmsg("source.spm, target.spm and vocab.json do not make a vocabulary: %s", err)));
	spm_free(vocab);
}

/* Fills t as a zero final_logits_bias [1, vocab_size] (palloc'd). */
static void
zero_logits_bias(TfTensor *t, int vocab_size)
{
	snprintf(t->name, sizeof(t->name), "final_logits_bias");
	t->dtype = TF_FLOAT32;
	t->ndim = 2;
	t->shape[0] = 1;
	t->shape[1] = vocab_size;
	t->bytes = (size_t) vocab_size * sizeof(float);
	t->data = palloc0(t->bytes);
}

/* True when tensors a and b have the same shape and bits. */
static bool
same_tensor(const TfTensor *a, const TfTensor *b)
{
	return a->ndim == b->ndim && a->shape[0] == b->shape[0] && a->shape[1] == b->shape[1] &&
		a->bytes == b->bytes && memcmp(a->data, b->data, a->bytes) == 0;
}

/* ERROR unless t ([positions, d_model]) is Marian's sinusoid table. */
static void
check_positions(const TfTensor *t, int d_model)
{
	const float *x = t->data;
	int64		pos;
	int			j;

	if (t->ndim != 2 || t->shape[1] != d_model)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("tensor \"%s\" is not [positions, d_model %d]", t->name, d_model)));
	for (pos = 0; pos < t->shape[0]; pos++)
		for (j = 0; j < d_model; j++)
			if (fabsf(x[pos * d_model + j] - tf_marian_sinusoid((int) pos, j, d_model)) > 1e-4f)
				ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
								errmsg("tensor \"%s\" is not Marian's sinusoid table (position %lld, column %d)",
									   t->name, (long long) pos, j),
								errhint("Models with learned position embeddings cannot be imported.")));
}

/*
 * The engine's parameters from a MarianMT file's tensors in[n]: the one
 * embedding (its copies must be equal), Marian's sinusoids checked and
 * dropped, final_logits_bias (zeros when absent), everything permuted into
 * this engine's coordinate order. *count receives their number.
 */
static TfTensor *
engine_tensors(TfTensor *in, int n, const TfConfig *c, int *count)
{
	TfTensor   *out = palloc0((n + 1) * sizeof(TfTensor));
	const TfTensor *embedding = NULL;
	bool		logits_bias = false;
	int			k = 0,
				i;
	char		err[TF_ERRLEN];

	for (i = 0; i < n; i++)
	{
		const char *name = in[i].name;
		int			e;

		for (e = 0; e < (int) lengthof(embedding_names); e++)
			if (strcmp(name, embedding_names[e]) == 0)
				break;
		if (e < (int) lengthof(embedding_names))
		{
			if (embedding == NULL)
			{
				embedding = &in[i];
				out[k] = in[i];
				strlcpy(out[k++].name, "model.shared.weight", sizeof(out[0].name));
			}
			else if (!same_tensor(embedding, &in[i]))
				ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
								errmsg("tensors \"%s\" and \"%s\" differ: only models with one shared, tied "
									   "embedding can be imported", embedding->name, name)));
			continue;
		}
		if (strcmp(name, "model.encoder.embed_positions.weight") == 0 ||
			strcmp(name, "model.decoder.embed_positions.weight") == 0)
		{
			check_positions(&in[i], c->d_model);
			continue;
		}
		logits_bias |= strcmp(name, "final_logits_bias") == 0;
		out[k++] = in[i];
	}
	if (!logits_bias)
	{
		/* MarianMTModel's buffer starts at zero */
		zero_logits_bias(&out[k++], c->vocab_size);
	}
	for (i = 0; i < k; i++)
	{
		/* permuted in a copy: F32 data points into the caller's file */
		void	   *copy = palloc_extended(Max(out[i].bytes, 1), MCXT_ALLOC_HUGE);

		memcpy(copy, out[i].data, out[i].bytes);
		out[i].data = copy;
		if (tf_marian_permute(&out[i], c->d_model, false, err, sizeof(err)) != TF_OK)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("model.safetensors: %s", err),
							errhint("A MarianMT file holds model.shared.weight (or its tied copies), "
									"final_logits_bias and the layers' parameters.")));
	}
	*count = k;
	return out;
}

/*
 * ERROR unless no vocabulary and no model is named name; with replace, drops
 * them first (drop_model, then drop_vocabulary: both refuse what the caller
 * does not own, a model whose job is queued or running, and a vocabulary that
 * another model still uses).
 */
void
free_import_name(const char *name, bool replace)
{
	static const char *const kinds[2] = {"model", "vocabulary"};
	static const char *const lookups[2] = {"SELECT 1 FROM attention.models WHERE name = $1",
	"SELECT 1 FROM attention.vocabularies WHERE name = $1"};
	static const char *const drops[2] = {"SELECT attention.drop_model($1)",
	"SELECT attention.drop_vocabulary($1)"};
	Datum		arg = CStringGetTextDatum(name);

	for (int i = 0; i < 2; i++)
	{
		if (SPI_execute_with_args(lookups[i], 1, (Oid[]) {TEXTOID}, &arg, NULL, true, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not read the %s of name \"%s\"", kinds[i], name);
		if (SPI_processed == 0)
			continue;
		if (!replace)
			ereport(ERROR, (errcode(ERRCODE_DUPLICATE_OBJECT),
							errmsg("%s \"%s\" already exists", kinds[i], name),
							errhint("The import creates a vocabulary and a model of the name it is given; choose another, "
									"or replace them with replace => true (scripts/import-hf --replace).")));
		if (SPI_execute_with_args(drops[i], 1, (Oid[]) {TEXTOID}, &arg, NULL, false, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not drop the %s \"%s\"", kinds[i], name);
	}
}

/*
 * import_huggingface(model, config, safetensors, vocab, source_spm,
 * target_spm, replace DEFAULT false) returns bigint: a new vocabulary and
 * model, both named model, and the file's parameters as their first
 * checkpoint (kind imported, step 0, not deployed). With replace, a model
 * and a vocabulary of that name are dropped first (free_import_name). The
 * 0.2.0 definition passes six arguments (no replace).
 */
Datum
attention_import_huggingface(PG_FUNCTION_ARGS)
{
	char	   *model = text_to_cstring(PG_GETARG_TEXT_PP(0));
	Jsonb	   *config = PG_GETARG_JSONB_P(1);
	bytea	   *file = PG_GETARG_BYTEA_PP(2);
	Jsonb	   *vocab = PG_GETARG_JSONB_P(3);
	bytea	   *source = PG_GETARG_BYTEA_PP(4);
	bytea	   *target = PG_GETARG_BYTEA_PP(5);
	MarianConfig mc;
	TfConfig	c;
	Datum	   *pieces;
	TfTensor   *in,
			   *t;
	int			n,
				count,
				unk_id;
	int32		model_id;
	int64		checkpoint_id;
	bool		isnull;
	StringInfoData engine_config;

	read_config(config, &mc);
	pieces = read_vocab(vocab, mc.c.vocab_size, &unk_id);
	check_vocabulary(source, target, pieces, mc.c.vocab_size,
					 (int[4]) {mc.pad_id, unk_id, mc.decoder_start_id, mc.eos_id});
	in = tensor_file_read(file, &n, NULL, NULL, 0);

	initStringInfo(&engine_config);
	appendStringInfo(&engine_config,
					 "{\"num_encoder_layers\": %d, \"num_decoder_layers\": %d, \"d_model\": %d, \"num_heads\": %d, "
					 "\"d_ff\": %d, \"dropout\": %.9g, \"attention_dropout\": %.9g, \"relu_dropout\": %.9g, "
					 "\"vocab_size\": %d, \"max_positions\": %d, \"layer_norm_eps\": %.9g, "
					 "\"activation\": \"%s\", \"logits_bias\": true}",
					 mc.c.num_encoder_layers, mc.c.num_decoder_layers, mc.c.d_model, mc.c.num_heads, mc.c.d_ff,
					 mc.c.dropout, mc.c.attention_dropout, mc.c.relu_dropout, mc.c.vocab_size, mc.c.max_positions,
					 MARIAN_LAYER_NORM_EPS, mc.activation);

	SPI_connect();
	free_import_name(model, PG_NARGS() > 6 && PG_GETARG_BOOL(6));
	if (SPI_execute_with_args("INSERT INTO attention.vocabularies (name, vocab_size, pad_id, unk_id, bos_id, eos_id, "
							  "model, target_model, pieces) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)", 9,
							  (Oid[]) {TEXTOID, INT4OID, INT4OID, INT4OID, INT4OID, INT4OID, BYTEAOID, BYTEAOID,
							  TEXTARRAYOID},
							  (Datum[]) {CStringGetTextDatum(model), Int32GetDatum(mc.c.vocab_size),
								  Int32GetDatum(mc.pad_id), Int32GetDatum(unk_id), Int32GetDatum(mc.decoder_start_id),
								  Int32GetDatum(mc.eos_id), PointerGetDatum(source), PointerGetDatum(target),
							  PointerGetDatum(construct_array(pieces, mc.c.vocab_size, TEXTOID, -1, false, TYPALIGN_INT))},
							  NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not insert vocabulary \"%s\"", model);
	if (SPI_execute_with_args("SELECT attention.create_model($1, $1, $2::jsonb)", 2, (Oid[]) {TEXTOID, TEXTOID},
							  (Datum[]) {CStringGetTextDatum(model), CStringGetTextDatum(engine_config.data)},
							  NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not create model \"%s\"", model);
	model_id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	attention_config_from_jsonb(DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(engine_config.data))),
								mc.c.vocab_size, mc.pad_id, &c);

	t = engine_tensors(in, n, &c, &count);
	tensor_file_check(&c, t, count, "model.safetensors does not fit its config.json");
	if (SPI_execute_with_args("INSERT INTO attention.checkpoints (model_id, kind, step) VALUES ($1, 'imported', 0) "
							  "RETURNING checkpoint_id", 1, (Oid[]) {INT4OID}, (Datum[]) {Int32GetDatum(model_id)},
							  NULL, false, 1) != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "could not insert a checkpoint of model \"%s\"", model);
	checkpoint_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	progress_begin("import_huggingface", model, "tensors", count);
	write_tensors(checkpoint_id, t, count);
	progress_end();
	SPI_finish();
	PG_RETURN_INT64(checkpoint_id);
}

/* Appends piece p of the vocabulary as a JSON string. */
void
append_piece(StringInfo s, const SpmModel *vocab, int id)
{
	size_t		len;
	const char *p = spm_piece(vocab, id, &len);

	escape_json(s, pnstrdup(p, len));
}

/* Adds one row (file, data) to the result (a third column, export_huggingface_m2m100's large_object, NULL). */
void
put_file(ReturnSetInfo *rsinfo, const char *name, const char *data, size_t len)
{
	bytea	   *b = palloc(VARHDRSZ + len);

	SET_VARSIZE(b, VARHDRSZ + len);
	memcpy(VARDATA(b), data, len);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
						 (Datum[]) {CStringGetTextDatum(name), PointerGetDatum(b), (Datum) 0},
						 (bool[]) {false, false, true});
	pfree(b);
}

/* Adds a JSON file built in s. */
void
put_json(ReturnSetInfo *rsinfo, const char *name, StringInfo s)
{
	put_file(rsinfo, name, s->data, s->len);
	resetStringInfo(s);
}

void
append_generation_defaults(StringInfo s, const char *model, int forced, int max_positions)
{
	DeployedModel d;

	attention_model_languages(model, &d);
	appendStringInfo(s, "\"max_length\": %d, \"num_beams\": %d",
					 d.max_output_tokens > 0 ? d.max_output_tokens + 1 + forced : max_positions,
					 d.beam_size > 0 ? d.beam_size : TF_DEFAULT_BEAM_SIZE);
}

/*
 * export_huggingface(checkpoint) returns table (file, data): the files of a
 * MarianMT model directory.
 */
Datum
attention_export_huggingface(PG_FUNCTION_ARGS)
{
	int64		checkpoint_id = PG_GETARG_INT64(0);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HeapTuple	tup;
	TupleDesc	desc;
	char	   *model;
	TfConfig	c;
	SpmModel   *vocab;
	TfTensor   *t,
			   *all;
	int			count,
				i,
				pad,
				eos,
				bos,
				unk;
	Datum		datum;
	bool		isnull,
				no_start,
				no_target;
	bytea	   *source,
			   *target,
			   *weights;
	StringInfoData s;
	char		err[TF_ERRLEN];
	static const char *const activations[] = {"relu", "swish", "gelu"};

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	if (SPI_execute_with_args(psprintf("SELECT m.name, m.config, v.vocab_size, %s FROM attention.checkpoints c "
									   "JOIN attention.models m USING (model_id) JOIN attention.vocabularies v "
									   "USING (vocabulary_id) WHERE c.checkpoint_id = $1", vocabulary_columns()), 1,
							  (Oid[]) {INT8OID}, (Datum[]) {Int64GetDatum(checkpoint_id)}, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read attention.checkpoints");
	if (SPI_processed == 0)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
						errmsg("checkpoint %lld does not exist", (long long) checkpoint_id)));
	tup = SPI_copytuple(SPI_tuptable->vals[0]);
	desc = CreateTupleDescCopy(SPI_tuptable->tupdesc);
	model = SPI_getvalue(tup, desc, 1);
	require_model_owner(model, "export a checkpoint of");
	pad = DatumGetInt32(SPI_getbinval(tup, desc, 7, &isnull));
	if (isnull)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("the vocabulary of model \"%s\" has no padding id, which MarianMT needs", model)));
	attention_config_from_jsonb(DatumGetJsonbP(SPI_getbinval(tup, desc, 2, &isnull)),
								DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull)), pad, &c);
	if (c.layer_norm_eps != MARIAN_LAYER_NORM_EPS)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("model \"%s\" has layer_norm_eps %g; MarianMT's is fixed at 1e-05", model,
							   c.layer_norm_eps)));
	if (c.normalize_before || c.positions != TF_POSITIONS_PAPER || !c.scale_embedding)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("model \"%s\" is %s; a MarianMT model is post-norm with the paper's sinusoids and "
							   "scaled embeddings", model, c.normalize_before ? "pre-norm (normalize_before)" :
							   c.positions != TF_POSITIONS_PAPER ? "of fairseq's positions" : "of unscaled embeddings"),
						errhint("Multilingual M2M-100 and NLLB-200 models go out through export_huggingface_m2m100.")));
	unk = DatumGetInt32(SPI_getbinval(tup, desc, 8, &isnull));
	bos = DatumGetInt32(SPI_getbinval(tup, desc, 9, &isnull));
	no_start = isnull;
	eos = DatumGetInt32(SPI_getbinval(tup, desc, 10, &isnull));
	if (no_start || isnull)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("the vocabulary of model \"%s\" has no %s id, which MarianMT needs", model,
							   no_start ? "begin-of-sentence (decoder start)" : "end-of-sentence")));
	source = DatumGetByteaPP(SPI_getbinval(tup, desc, 4, &isnull));
	datum = SPI_getbinval(tup, desc, 5, &no_target);
	target = no_target ? source : DatumGetByteaPP(datum);

	require_float_checkpoint(checkpoint_id, "exported");
	t = read_tensors(checkpoint_id, TENSORS_PARAMETERS, &count);
	if (count == 0)
		ereport(ERROR, (errcode(ERRCODE_NO_DATA),
						errmsg("checkpoint %lld has no parameter tensors", (long long) checkpoint_id)));
	all = palloc0((count + 1) * sizeof(TfTensor));
	memcpy(all, t, count * sizeof(TfTensor));
	if (!c.logits_bias)
	{
		/* MarianMTModel always has one */
		zero_logits_bias(&all[count++], c.vocab_size);
	}
	for (i = 0; i < count; i++)
		if (tf_marian_permute(&all[i], c.d_model, true, err, sizeof(err)) != TF_OK)
			ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED), errmsg("checkpoint %lld: %s", (long long) checkpoint_id,
																	err)));
	initStringInfo(&s);
	tensor_file_meta(&s, "format", "pt");
	weights = tensor_file_write(all, count, s.data, psprintf("checkpoint %lld", (long long) checkpoint_id));
	resetStringInfo(&s);

	appendStringInfo(&s, "{\"architectures\": [\"MarianMTModel\"], \"model_type\": \"marian\", "
					 "\"vocab_size\": %d, \"decoder_vocab_size\": %d, \"d_model\": %d, "
					 "\"encoder_layers\": %d, \"decoder_layers\": %d, "
					 "\"encoder_attention_heads\": %d, \"decoder_attention_heads\": %d, "
					 "\"encoder_ffn_dim\": %d, \"decoder_ffn_dim\": %d, \"activation_function\": \"%s\", "
					 "\"dropout\": %.9g, \"attention_dropout\": %.9g, \"activation_dropout\": %.9g, "
					 "\"max_position_embeddings\": %d, \"scale_embedding\": true, \"normalize_embedding\": false, "
					 "\"normalize_before\": false, \"static_position_embeddings\": true, "
					 "\"share_encoder_decoder_embeddings\": true, \"tie_word_embeddings\": true, "
					 "\"is_encoder_decoder\": true, \"pad_token_id\": %d, \"eos_token_id\": %d, "
					 "\"decoder_start_token_id\": %d, \"forced_eos_token_id\": %d, \"init_std\": 0.02, "
					 "\"encoder_layerdrop\": 0.0, \"decoder_layerdrop\": 0.0, \"use_cache\": true, "
					 "\"torch_dtype\": \"float32\"}",
					 c.vocab_size, c.vocab_size, c.d_model, c.num_encoder_layers, c.num_decoder_layers,
					 c.num_heads, c.num_heads, c.d_ff, c.d_ff, activations[c.activation], c.dropout,
					 c.attention_dropout, c.relu_dropout, c.max_positions, pad, eos, bos, eos);
	put_json(rsinfo, "config.json", &s);
	put_file(rsinfo, "model.safetensors", VARDATA(weights), VARSIZE(weights) - VARHDRSZ);
	put_file(rsinfo, "source.spm", VARDATA_ANY(source), VARSIZE_ANY_EXHDR(source));
	put_file(rsinfo, "target.spm", VARDATA_ANY(target), VARSIZE_ANY_EXHDR(target));

	/* no ERROR from here until spm_free but out of memory */
	vocab = vocabulary_load(tup, desc, 4, psprintf("the vocabulary of model \"%s\"", model), ERRCODE_DATA_CORRUPTED);

	appendStringInfoChar(&s, '{');
	for (i = 0; i < spm_size(vocab); i++)
	{
		if (i > 0)
			appendStringInfoString(&s, ", ");
		append_piece(&s, vocab, i);
		appendStringInfo(&s, ": %d", i);
	}
	appendStringInfoChar(&s, '}');
	put_json(rsinfo, "vocab.json", &s);

	appendStringInfoString(&s, "{\"tokenizer_class\": \"MarianTokenizer\", \"unk_token\": ");
	append_piece(&s, vocab, unk);
	appendStringInfoString(&s, ", \"eos_token\": ");
	append_piece(&s, vocab, eos);
	appendStringInfoString(&s, ", \"pad_token\": ");
	append_piece(&s, vocab, pad);
	appendStringInfo(&s, ", \"model_max_length\": %d, \"separate_vocabs\": false}", c.max_positions);
	put_json(rsinfo, "tokenizer_config.json", &s);

	appendStringInfo(&s, "{\"bad_words_ids\": [[%d]], \"decoder_start_token_id\": %d, \"eos_token_id\": %d, "
					 "\"forced_eos_token_id\": %d, \"pad_token_id\": %d, ", pad, bos, eos, eos, pad);
	append_generation_defaults(&s, model, 1, c.max_positions);	/* forced_eos_token_id */
	appendStringInfoChar(&s, '}');
	put_json(rsinfo, "generation_config.json", &s);
	spm_free(vocab);
	SPI_finish();
	return (Datum) 0;
}
