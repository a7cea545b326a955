/*
 * catalog.c - the extension's tables as the SQL functions and the training
 * worker read and write them (a leaf of the SQL glue: it calls no SQL
 * function file and no worker code): model configurations as jsonb, model,
 * corpus and vocabulary rows, the ownership check, and checkpoint tensors
 * as rows of attention.checkpoint_tensors.
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
#include "progress.h"
#include "rights.h"

int32
attention_corpus_id(const char *name)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	bool		isnull;
	Datum		id;

	values[0] = CStringGetTextDatum(name);
	if (SPI_execute_with_args("SELECT corpus_id FROM attention.corpora WHERE name = $1",
							  1, argtypes, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not look up corpus \"%s\"", name);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("corpus \"%s\" does not exist", name),
				 errhint("Create it with attention.create_corpus(name, source_lang, target_lang).")));
	id = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return DatumGetInt32(id);
}

/* Tensors larger than this are stored in several rows (bytea is limited to 1 GB). */
#define CHUNK_BYTES ((size_t) 256 << 20)

/* One configuration key: its name, whether it is an integer, and where it goes. */
typedef struct ConfigKey
{
	const char *name;
	bool		integer;
	size_t		offset;
} ConfigKey;

static const ConfigKey config_keys[] = {
	{"num_encoder_layers", true, offsetof(TfConfig, num_encoder_layers)},
	{"num_decoder_layers", true, offsetof(TfConfig, num_decoder_layers)},
	{"d_model", true, offsetof(TfConfig, d_model)},
	{"num_heads", true, offsetof(TfConfig, num_heads)},
	{"d_ff", true, offsetof(TfConfig, d_ff)},
	{"dropout", false, offsetof(TfConfig, dropout)},
	{"attention_dropout", false, offsetof(TfConfig, attention_dropout)},
	{"relu_dropout", false, offsetof(TfConfig, relu_dropout)},
	{"label_smoothing", false, offsetof(TfConfig, label_smoothing)},
	{"vocab_size", true, offsetof(TfConfig, vocab_size)},
	{"max_positions", true, offsetof(TfConfig, max_positions)},
	{"layer_norm_eps", false, offsetof(TfConfig, layer_norm_eps)},
};

#define NUM_CONFIG_KEYS lengthof(config_keys)

/* The text of a jsonb scalar key, NUL-terminated (palloc'd). */
static char *
jsonb_key(const JsonbValue *v)
{
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/* Names of TfActivation values, in order. */
static const char *const activation_names[] = {"relu", "swish", "gelu"};

/* Names of TfPositions values, in order. */
static const char *const positions_names[] = {"paper", "fairseq"};

/* The boolean configuration keys and their fields. */
static const struct
{
	const char *name;
	size_t		offset;
}			config_flags[] =
{
	{"logits_bias", offsetof(TfConfig, logits_bias)},
	{"normalize_before", offsetof(TfConfig, normalize_before)},
	{"scale_embedding", offsetof(TfConfig, scale_embedding)},
};

/* The index of v (a jsonb string) in names[n], or -1. */
static int
choice_index(const JsonbValue *v, const char *const *names, int n)
{
	int			i;

	if (v->type == jbvString)
		for (i = 0; i < n; i++)
			if (strlen(names[i]) == (size_t) v->val.string.len &&
				strncmp(names[i], v->val.string.val, v->val.string.len) == 0)
				return i;
	return -1;
}

/*
 * Sets a key that is not a number: "activation" (relu, swish or gelu: the
 * feed-forward network's), "positions" (paper or fairseq: TfPositions) or
 * a boolean of config_flags ("logits_bias": a bias on the output
 * projection, as Marian's final_logits_bias; "normalize_before": pre-norm
 * layers; "scale_embedding": embeddings times sqrt(d_model)). Returns
 * false for any other key; ERROR naming the key when the value does not
 * fit.
 */
static bool
apply_choice(TfConfig *c, const char *name, const JsonbValue *v)
{
	int			i;

	for (i = 0; i < (int) lengthof(config_flags); i++)
		if (strcmp(name, config_flags[i].name) == 0)
		{
			if (v->type != jbvBool)
				ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
								errmsg("model configuration key \"%s\" must be true or false", name)));
			*(bool *) ((char *) c + config_flags[i].offset) = v->val.boolean;
			return true;
		}
	if (strcmp(name, "activation") == 0)
	{
		if ((i = choice_index(v, activation_names, lengthof(activation_names))) < 0)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("model configuration key \"activation\" must be \"relu\", \"swish\" or \"gelu\"")));
		c->activation = (TfActivation) i;
		return true;
	}
	if (strcmp(name, "positions") == 0)
	{
		if ((i = choice_index(v, positions_names, lengthof(positions_names))) < 0)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("model configuration key \"positions\" must be \"paper\" or \"fairseq\"")));
		c->positions = (TfPositions) i;
		return true;
	}
	return false;
}

/* Applies a "preset" value (base, big or small) to *c. */
static void
apply_preset(TfConfig *c, const JsonbValue *v, int vocab_size)
{
	char	   *preset;

	if (v->type != jbvString)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("model configuration key \"preset\" must be a string")));
	preset = jsonb_key(v);
	if (strcmp(preset, "base") == 0)
		tf_config_base(c, vocab_size);
	else if (strcmp(preset, "big") == 0)
		tf_config_big(c, vocab_size);
	else if (strcmp(preset, "small") == 0)
		tf_config_small(c, vocab_size);
	else
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("unknown model preset \"%s\"", preset),
						errhint("Presets are base, big and small.")));
}

/* Sets one configuration field from a jsonb number; ERROR naming the key when it does not fit. */
static void
apply_key(TfConfig *c, const ConfigKey *key, const JsonbValue *v)
{
	double		x;

	if (v->type != jbvNumeric)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("model configuration key \"%s\" must be a number", key->name)));
	x = DatumGetFloat8(DirectFunctionCall1(numeric_float8, NumericGetDatum(v->val.numeric)));
	if (key->integer)
	{
		if (x != floor(x) || x < INT_MIN || x > INT_MAX)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("model configuration key \"%s\" must be an integer, not %g", key->name, x)));
		*(int *) ((char *) c + key->offset) = (int) x;
	}
	else
		*(float *) ((char *) c + key->offset) = (float) x;
}

void
attention_config_from_jsonb(Jsonb *config, int vocab_size, int pad_id, TfConfig *c)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	char		err[TF_ERRLEN];
	JsonbValue *preset;

	if (!JB_ROOT_IS_OBJECT(config) || JB_ROOT_IS_SCALAR(config))
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("a model configuration must be a JSON object")));
	tf_config_base(c, vocab_size);
	preset = getKeyJsonValueFromContainer(&config->root, "preset", strlen("preset"), NULL);
	if (preset != NULL)
		apply_preset(c, preset, vocab_size);

	it = JsonbIteratorInit(&config->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		char	   *name;
		int			i;

		if (tok != WJB_KEY)
			continue;
		name = jsonb_key(&v);
		tok = JsonbIteratorNext(&it, &v, true);
		if (strcmp(name, "preset") == 0)
			continue;
		if (apply_choice(c, name, &v))
			continue;
		for (i = 0; i < (int) NUM_CONFIG_KEYS; i++)
			if (strcmp(name, config_keys[i].name) == 0)
				break;
		if (i == (int) NUM_CONFIG_KEYS)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("unknown model configuration key \"%s\"", name),
							errhint("Keys are preset, num_encoder_layers, num_decoder_layers, d_model, num_heads, "
									"d_ff, dropout, attention_dropout, relu_dropout, label_smoothing, "
									"vocab_size, max_positions, layer_norm_eps, activation, logits_bias, "
									"normalize_before, scale_embedding and positions.")));
		apply_key(c, &config_keys[i], &v);
		if (strcmp(name, "vocab_size") == 0 && c->vocab_size != vocab_size)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("model configuration key \"vocab_size\" is %d, but the vocabulary has %d pieces",
								   c->vocab_size, vocab_size)));
	}
	c->pad_id = pad_id;
	if (tf_config_validate(c, err, sizeof(err)) != TF_OK)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("invalid model configuration: %s", err)));
}

Datum
attention_config_to_jsonb(const TfConfig *c)
{
	char		buf[1024];
	size_t		n;

	n = snprintf(buf, sizeof(buf),
			 "{\"num_encoder_layers\": %d, \"num_decoder_layers\": %d, \"d_model\": %d, \"num_heads\": %d, "
			 "\"d_ff\": %d, \"dropout\": %.7g, \"attention_dropout\": %.7g, \"relu_dropout\": %.7g, "
			 "\"label_smoothing\": %.7g, \"vocab_size\": %d, \"max_positions\": %d, \"layer_norm_eps\": %.7g, "
			 "\"activation\": \"%s\", \"logits_bias\": %s}",
			 c->num_encoder_layers, c->num_decoder_layers, c->d_model, c->num_heads, c->d_ff,
			 c->dropout, c->attention_dropout, c->relu_dropout, c->label_smoothing, c->vocab_size,
			 c->max_positions, c->layer_norm_eps, activation_names[c->activation], c->logits_bias ? "true" : "false");
	/* the keys added in 0.3.0 only where they differ from their defaults: earlier configurations read the same */
	buf[n - 1] = '\0';
	snprintf(buf + n - 1, sizeof(buf) - n + 1, "%s%s%s%s%s}",
			 c->normalize_before ? ", \"normalize_before\": true" : "",
			 c->scale_embedding ? "" : ", \"scale_embedding\": false",
			 c->positions != TF_POSITIONS_PAPER ? ", \"positions\": \"" : "",
			 c->positions != TF_POSITIONS_PAPER ? positions_names[c->positions] : "",
			 c->positions != TF_POSITIONS_PAPER ? "\"" : "");
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(buf));
}

void
read_model_row(const char *name)
{
	Oid			types[1] = {TEXTOID};

	if (SPI_execute_with_args("SELECT m.model_id, m.config, v.vocabulary_id, v.vocab_size, v.pad_id, v.bos_id, "
							  "v.eos_id FROM attention.models m JOIN attention.vocabularies v USING (vocabulary_id) "
							  "WHERE m.name = $1", 1, types, (Datum[]) {CStringGetTextDatum(name)}, NULL,
							  true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read attention.models");
	if (SPI_processed == 0)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
						errmsg("model \"%s\" does not exist", name),
						errhint("Create it with attention.create_model(name, vocabulary, config).")));
}

const char *
vocabulary_columns(void)
{
	/* the columns of 0.2.0, 0.3.0 and 0.4.0, present since those versions */
	if (SPI_execute("SELECT attname FROM pg_catalog.pg_attribute WHERE attrelid = 'attention.vocabularies'::pg_catalog.regclass "
					"AND attname IN ('pieces', 'language_ids', 'language_tokens_special', 'source_language_last') "
					"AND NOT attisdropped",
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the columns of attention.vocabularies");
	switch (SPI_processed)
	{
		case 4:
			return "v.model, v.target_model, v.pieces, v.pad_id, v.unk_id, v.bos_id, v.eos_id, v.language_ids, "
				"v.language_tokens_special, v.source_language_last";
		case 3:
			/* a development 0.4.0 that had language_tokens_special only */
			return "v.model, v.target_model, v.pieces, v.pad_id, v.unk_id, v.bos_id, v.eos_id, v.language_ids, "
				"v.language_tokens_special, false";
		case 2:
			return "v.model, v.target_model, v.pieces, v.pad_id, v.unk_id, v.bos_id, v.eos_id, v.language_ids, true, false";
		case 1:
			return "v.model, v.target_model, v.pieces, v.pad_id, v.unk_id, v.bos_id, v.eos_id, NULL::integer[], true, false";
		default:
			return "v.model, NULL::bytea, NULL::text[], v.pad_id, v.unk_id, v.bos_id, v.eos_id, NULL::integer[], true, false";
	}
}

bool
vocabulary_has_column(const char *column)
{
	if (SPI_execute_with_args("SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = "
							  "'attention.vocabularies'::pg_catalog.regclass AND attname = $1 AND NOT attisdropped",
							  1, (Oid[]) {NAMEOID}, (Datum[]) {CStringGetDatum(column)}, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the columns of attention.vocabularies");
	return SPI_processed == 1;
}

bool
vocabulary_source_language_last(HeapTuple tup, TupleDesc desc, int first)
{
	bool		isnull;
	Datum		last = SPI_getbinval(tup, desc, first + 9, &isnull);

	return !isnull && DatumGetBool(last);
}

SpmModel *
vocabulary_load(HeapTuple tup, TupleDesc desc, int first, const char *what, int sqlerrcode)
{
	SpmModel   *vocab = NULL;
	char		err[512];
	bool		isnull,
				no_target,
				no_pieces;
	bytea	   *source = DatumGetByteaPP(SPI_getbinval(tup, desc, first, &isnull));
	Datum		target = SPI_getbinval(tup, desc, first + 1, &no_target);
	Datum		pieces = SPI_getbinval(tup, desc, first + 2, &no_pieces);
	int			rc;

	if (no_target != no_pieces)
		ereport(ERROR, (errcode(sqlerrcode),
						errmsg("%s has %s but no %s", what, no_target ? "pieces" : "a target model",
							   no_target ? "target model" : "pieces")));
	if (no_target)
		rc = spm_load(VARDATA_ANY(source), VARSIZE_ANY_EXHDR(source), &vocab, err, sizeof(err));
	else
	{
		bytea	   *t = DatumGetByteaPP(target);
		Datum	   *elems;
		bool	   *nulls;
		int			n,
					i,
					special[4];
		const char **table;
		size_t	   *lengths;
		Datum		languages;

		deconstruct_array(DatumGetArrayTypeP(pieces), TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
		table = palloc(Max(n, 1) * sizeof(char *));
		lengths = palloc(Max(n, 1) * sizeof(size_t));
		for (i = 0; i < n; i++)
		{
			text	   *piece;

			if (nulls[i])
				ereport(ERROR, (errcode(sqlerrcode), errmsg("%s has a NULL piece (id %d)", what, i)));
			piece = DatumGetTextPP(elems[i]);
			table[i] = VARDATA_ANY(piece);
			lengths[i] = VARSIZE_ANY_EXHDR(piece);
		}
		for (i = 0; i < 4; i++)
		{
			special[i] = DatumGetInt32(SPI_getbinval(tup, desc, first + 3 + i, &isnull));
			if (isnull)
				special[i] = -1;
		}
		rc = spm_load_pair(VARDATA_ANY(source), VARSIZE_ANY_EXHDR(source), VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t),
						   table, lengths, n, special, &vocab, err, sizeof(err));
		languages = SPI_getbinval(tup, desc, first + 7, &isnull);
		if (rc == 0 && !isnull)
		{
			/*
			 * A multilingual vocabulary: the ids from its first language token
			 * on are added tokens (language tokens, NLLB's <mask>, M2M-100's
			 * made-up words), which decoding skips, and so is NLLB's <mask>
			 * just below them (where NllbTokenizer puts it when built from
			 * its files: transformers 4.40); but language tokens that are not
			 * special tokens (language_tokens_special) decode as their text
			 */
			ArrayType  *a = DatumGetArrayTypeP(languages);
			int			k = ARR_HASNULL(a) ? -1 : ArrayGetNItems(ARR_NDIM(a), ARR_DIMS(a));
			bool		special_tokens = DatumGetBool(SPI_getbinval(tup, desc, first + 8, &isnull));
			bool	   *language = palloc0(Max(n, 1) * sizeof(bool));
			bool		valid = k >= 0;
			int			lowest = n,
						count = 0,
					   *skip;

			for (i = 0; i < k; i++)
			{
				int			id = ((int *) ARR_DATA_PTR(a))[i];

				if (id < 0 || id >= n)
					valid = false;
				else
				{
					language[id] = true;
					lowest = Min(lowest, id);
				}
			}
			if (lowest > 0 && lowest < n && lengths[lowest - 1] == 6 && memcmp(table[lowest - 1], "<mask>", 6) == 0)
				lowest--;
			skip = palloc(Max(n - lowest, 1) * sizeof(int));
			for (i = lowest; i < n; i++)
				if (special_tokens || !language[i])
					skip[count++] = i;
			if (valid && spm_set_skipped(vocab, skip, count, err, sizeof(err)) == 0)
			{
				/*
				 * The tokens its tokenizer cuts out of text: fairseq's
				 * specials <s> <pad> </s> <unk> (the engine takes a pad id
				 * before a sentence's end as a token: batch.c), the language
				 * tokens where they are special tokens, and <mask>; made-up
				 * words decode as "<unk>" (spm_set_added)
				 */
				int		   *added = palloc((4 + k + 1) * sizeof(int)),
						   *madeup = palloc(Max(n - lowest, 1) * sizeof(int));
				int			n_added = 0,
							n_madeup = 0;
				static const char *const fairseq[4] = {"<s>", "<pad>", "</s>", "<unk>"};

				for (i = 0; i < 4 && i < n; i++)
					if (lengths[i] == strlen(fairseq[i]) && memcmp(table[i], fairseq[i], lengths[i]) == 0)
						added[n_added++] = i;
				for (i = 0; i < k && special_tokens; i++)
					added[n_added++] = ((int *) ARR_DATA_PTR(a))[i];
				for (i = lowest; i < n; i++)
				{
					if (lengths[i] == 6 && memcmp(table[i], "<mask>", 6) == 0)
						added[n_added++] = i;
					else if (lengths[i] > 10 && memcmp(table[i], "madeupword", 10) == 0)
						madeup[n_madeup++] = i;
				}
				rc = spm_set_added(vocab, added, n_added, madeup, n_madeup, err, sizeof(err));
			}
			else
				rc = -1;
			if (rc != 0)
			{
				spm_free(vocab);
				ereport(ERROR, (errcode(sqlerrcode),
								errmsg("%s has language ids that are not ids of its pieces", what)));
			}
		}
		else if (rc == 0)
		{
			/*
			 * A MarianMT pair: MarianTokenizer cuts its special tokens, </s>,
			 * <unk> and <pad> (not the decoder start: the pad, or an export's
			 * <s>, which is text to it), out of text before SentencePiece
			 */
			int			added[3],
						n_added = 0;

			for (i = 0; i < 4; i++)
				if (i != 2 && special[i] >= 0)
					added[n_added++] = special[i];
			rc = spm_set_added(vocab, added, n_added, NULL, 0, err, sizeof(err));
			if (rc != 0)
			{
				spm_free(vocab);
				vocab = NULL;
			}
		}
	}
	if (rc != 0)
		ereport(ERROR, (errcode(sqlerrcode),
						errmsg("%s is not a valid %s", what,
							   no_target ? "SentencePiece model" : "vocabulary pair"),
						errdetail("SentencePiece: %s", err)));
	return vocab;
}

void
require_model_checkpoint(int64 checkpoint_id, int32 model_id, const char *model)
{
	if (SPI_execute_with_args("SELECT 1 FROM attention.checkpoints WHERE checkpoint_id = $1 AND model_id = $2", 2,
							  (Oid[]) {INT8OID, INT4OID}, (Datum[]) {Int64GetDatum(checkpoint_id), Int32GetDatum(model_id)},
							  NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read attention.checkpoints");
	if (SPI_processed == 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("checkpoint %lld is not a checkpoint of model \"%s\"", (long long) checkpoint_id, model)));
	require_float_checkpoint(checkpoint_id, "trained from");
}

void
require_float_checkpoint(int64 checkpoint_id, const char *action)
{
	bool		isnull;
	int64		from;

	/* through to_jsonb: a schema before 0.3.0 has no quantized_from column, and no int8 checkpoints */
	if (SPI_execute_with_args("SELECT (to_jsonb(c) ->> 'quantized_from')::bigint FROM attention.checkpoints c "
							  "WHERE c.checkpoint_id = $1 AND c.kind = 'quantized'", 1, (Oid[]) {INT8OID},
							  (Datum[]) {Int64GetDatum(checkpoint_id)}, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read attention.checkpoints");
	if (SPI_processed == 0)
		return;
	from = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	ereport(ERROR, (errcode(ERRCODE_WRONG_OBJECT_TYPE),
					errmsg("checkpoint %lld is an int8 checkpoint (kind quantized): it translates but cannot be %s",
						   (long long) checkpoint_id, action),
					errhint("Use the float32 checkpoint %lld it was quantized from.", (long long) from)));
}

int32
require_model_owner(const char *name, const char *action)
{
	bool		isnull;

	if (SPI_execute_with_args("SELECT attention.require_model_owner($1, $2)", 2, (Oid[]) {TEXTOID, TEXTOID},
							  (Datum[]) {CStringGetTextDatum(name), CStringGetTextDatum(action)}, NULL,
							  false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not check the owner of model \"%s\"", name);
	return DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

void
write_tensors(int64 checkpoint_id, const TfTensor *tensors, int count)
{
	Oid			types[6] = {INT8OID, TEXTOID, INT4OID, TEXTOID, INT8ARRAYOID, BYTEAOID};
	SPIPlanPtr	plan = SPI_prepare("INSERT INTO attention.checkpoint_tensors (checkpoint_id, name, chunk, dtype, "
								   "shape, bytes) VALUES ($1, $2, $3, $4, $5, $6)", 6, types);
	int			i;

	if (plan == NULL)
		elog(ERROR, "could not prepare the checkpoint tensor insert");
	for (i = 0; i < count; i++)
	{
		const TfTensor *t = &tensors[i];
		Datum		dims[TF_MAX_DIMS];
		size_t		done = 0;
		int			chunk = 0,
					d;

		for (d = 0; d < t->ndim; d++)
			dims[d] = Int64GetDatum(t->shape[d]);
		do
		{
			size_t		n = Min(t->bytes - done, CHUNK_BYTES);
			bytea	   *data = palloc(VARHDRSZ + n);
			Datum		values[6];

			CHECK_FOR_INTERRUPTS();
			SET_VARSIZE(data, VARHDRSZ + n);
			memcpy(VARDATA(data), (const char *) t->data + done, n);
			values[0] = Int64GetDatum(checkpoint_id);
			values[1] = CStringGetTextDatum(t->name);
			values[2] = Int32GetDatum(chunk);
			values[3] = CStringGetTextDatum(tf_dtype_name(t->dtype));
			values[4] = PointerGetDatum(construct_array(dims, t->ndim, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
			values[5] = PointerGetDatum(data);
			if (SPI_execute_plan(plan, values, NULL, false, 0) != SPI_OK_INSERT)
				elog(ERROR, "could not insert tensor \"%s\"", t->name);
			pfree(data);
			done += n;
			chunk++;
		} while (done < t->bytes);
		progress_add(1);
	}
	SPI_freeplan(plan);
}

TfTensor *
read_tensors_from(Remote *remote, int64 checkpoint_id, TensorSet set, int *count)
{
	static const char *const queries[] = {
		[TENSORS_DEPLOYED] = "SELECT t.name, t.chunk, t.dtype, t.shape, t.bytes FROM attention.checkpoint_tensors t "
		"JOIN attention.checkpoints c ON c.checkpoint_id = t.checkpoint_id WHERE t.checkpoint_id = $1 AND c.deployed "
		"AND t.name NOT LIKE 'optimizer.%' AND t.name NOT LIKE 'rng.%' AND t.name NOT LIKE 'data.%' "
		"ORDER BY t.name, t.chunk",
		[TENSORS_PARAMETERS] = "SELECT name, chunk, dtype, shape, bytes FROM attention.checkpoint_tensors "
		"WHERE checkpoint_id = $1 AND name NOT LIKE 'optimizer.%' AND name NOT LIKE 'rng.%' "
		"AND name NOT LIKE 'data.%' ORDER BY name, chunk",
		[TENSORS_ALL] = "SELECT name, chunk, dtype, shape, bytes FROM attention.checkpoint_tensors "
		"WHERE checkpoint_id = $1 ORDER BY name, chunk",
	};
	Oid			types[1] = {INT8OID};
	TfTensor   *t;
	uint64		r;
	int			n = -1;
	bool		isnull = true;
	int32		format;
	Rows		rows;
	MemoryContext caller = CurrentMemoryContext,
				answer = NULL;

	/* the row's format (through to_jsonb: a schema still at 0.1.0 has no such column, and format 1) */
	rows_query(remote, &rows, "SELECT (to_jsonb(c) ->> 'format')::integer FROM attention.checkpoints c "
			   "WHERE c.checkpoint_id = $1", 1, types, (Datum[]) {Int64GetDatum(checkpoint_id)}, NULL, true, 1);
	format = rows.n == 1 ? DatumGetInt32(SPI_getbinval(rows.vals[0], rows.desc, 1, &isnull)) : 0;
	if (rows.n == 1 && !isnull && format != CHECKPOINT_FORMAT && format != CHECKPOINT_FORMAT_INT8)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("checkpoint %lld has format %d; this library reads formats %d and %d",
							   (long long) checkpoint_id, format, CHECKPOINT_FORMAT, CHECKPOINT_FORMAT_INT8),
						errhint("Install the attention library that wrote it, or a newer one.")));

	/* another server's tuples in a context of their own, freed once copied out */
	if (remote != NULL)
	{
		answer = AllocSetContextCreate(caller, "checkpoint rows from the coordinator", ALLOCSET_DEFAULT_SIZES);
		MemoryContextSwitchTo(answer);
	}
	if (set == TENSORS_DEPLOYED)
	{
		/* deployed parameters are every role's to translate with, read as the tables' owner (rights.h) */
		AsTableOwner saved;

		Assert(remote == NULL);
		as_table_owner(&saved);
		rows_query(NULL, &rows, queries[set], 1, types, (Datum[]) {Int64GetDatum(checkpoint_id)}, NULL, true, 0);
		end_as_table_owner(&saved);
	}
	else
		rows_query(remote, &rows, queries[set], 1, types, (Datum[]) {Int64GetDatum(checkpoint_id)}, NULL, true, 0);
	if (remote != NULL)
		rows_require(&rows, 5, (Oid[]) {TEXTOID, INT4OID, TEXTOID, INT8ARRAYOID, BYTEAOID},
					 "the coordinator's checkpoint tensors");
	MemoryContextSwitchTo(caller);
	t = palloc0(Max(rows.n, 1) * sizeof(TfTensor));
	for (r = 0; r < rows.n; r++)
	{
		HeapTuple	tup = rows.vals[r];
		TupleDesc	desc = rows.desc;
		char	   *name = SPI_getvalue(tup, desc, 1);
		bool		null;
		int32		chunk = DatumGetInt32(SPI_getbinval(tup, desc, 2, &null));
		char	   *dtype = SPI_getvalue(tup, desc, 3);
		bytea	   *data = DatumGetByteaPP(SPI_getbinval(tup, desc, 5, &null));
		size_t		len = VARSIZE_ANY_EXHDR(data);
		TfTensor   *x;

		CHECK_FOR_INTERRUPTS();
		if (chunk == 0)
		{
			ArrayType  *shape = DatumGetArrayTypeP(SPI_getbinval(tup, desc, 4, &null));
			int			ndim = ArrayGetNItems(ARR_NDIM(shape), ARR_DIMS(shape));
			int64	   *dims = (int64 *) ARR_DATA_PTR(shape);
			int			d;

			x = &t[++n];
			if (strlen(name) >= sizeof(x->name) || ndim > TF_MAX_DIMS || ARR_HASNULL(shape) ||
				(strcmp(dtype, "float32") != 0 && strcmp(dtype, "int64") != 0 && strcmp(dtype, "int8") != 0))
				ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
								errmsg("checkpoint %lld: tensor \"%s\" has an unsupported name, dtype %s or shape",
									   (long long) checkpoint_id, name, dtype)));
			strlcpy(x->name, name, sizeof(x->name));
			x->dtype = strcmp(dtype, "float32") == 0 ? TF_FLOAT32 : strcmp(dtype, "int8") == 0 ? TF_INT8 : TF_INT64;
			x->ndim = ndim;
			for (d = 0; d < ndim; d++)
				x->shape[d] = dims[d];
			x->data = palloc(len);
			memcpy(x->data, VARDATA_ANY(data), len);
			x->bytes = len;
		}
		else
		{
			x = &t[n];
			if (n < 0 || strcmp(x->name, name) != 0)
				ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
								errmsg("checkpoint %lld: tensor \"%s\" lacks its chunk 0", (long long) checkpoint_id, name)));
			x->data = repalloc_huge(x->data, x->bytes + len);
			memcpy((char *) x->data + x->bytes, VARDATA_ANY(data), len);
			x->bytes += len;
		}
	}
	if (answer != NULL)
		MemoryContextDelete(answer);
	*count = n + 1;
	return t;
}

char *
attention_extension_version(Remote *remote)
{
	Rows		rows;

	rows_query(remote, &rows, "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'attention'", 0, NULL,
			   NULL, NULL, true, 1);
	return rows.n == 1 ? SPI_getvalue(rows.vals[0], rows.desc, 1) : NULL;
}

VocabInfo
catalog_vocab_info(int first, const char *vocabulary)
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
