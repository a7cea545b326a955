/*
 * huggingface_m2m100.c - Hugging Face M2M-100 and NLLB-200 models
 * (model_type m2m_100) in and out, as transformers' modeling_m2m_100.py
 * defines them: this engine's Transformer with pre-norm layers and a final
 * LayerNorm per stack (normalize_before), fairseq's sinusoids from
 * padding_idx + 1 (TF_POSITIONS_FAIRSEQ), embeddings scaled by
 * sqrt(d_model) when scale_embedding, one tied embedding, no logits bias;
 * the source is [source language] + pieces + [</s>], decoding starts from
 * </s> (decoder_start_token_id) then the target language's token.
 *
 * Two tokenizer layouts make the piece table (a vocabulary pair whose two
 * SentencePiece models are the one sentencepiece.bpe.model):
 * M2M100Tokenizer, ids from vocab.json, then the language tokens __xx__,
 * then made-up words; NllbTokenizer, <s> <pad> </s> <unk>, then
 * SentencePiece id + 1, then the language codes, then <mask>. The language
 * codes are tokenizer_config.json's additional_special_tokens, in id order,
 * or an M2M100Tokenizer's "language_codes" table where it lists none (as
 * transformers' save_pretrained writes it).
 *
 * model.safetensors travels as a large object, read and written tensor by
 * tensor, so files over PostgreSQL's 1 GB value limit come in and go out
 * in the memory of their largest tensor.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "libpq/libpq-fs.h"
#include "miscadmin.h"
#include "storage/large_object.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"

#include "catalog.h"
#include "huggingface.h"
#include "progress.h"
#include "safetensors.h"
#include "spm.h"
#include "tensor_file.h"
#include "transformer.h"

PG_FUNCTION_INFO_V1(attention_import_huggingface_m2m100);
PG_FUNCTION_INFO_V1(attention_import_huggingface_m2m100_shards);
PG_FUNCTION_INFO_V1(attention_export_huggingface_m2m100);

/* M2M100's LayerNorm epsilon (torch.nn.LayerNorm's default; not configurable there). */
#define M2M_LAYER_NORM_EPS 1e-5f

/* Bytes per large-object read or write. */
#define LO_PIECE (64 << 20)

/* The largest safetensors header read. */
#define MAX_HEADER_BYTES (64 << 20)

/* The special tokens of both layouts (fairseq's dictionary). */
static const char *const fairseq_specials[4] = {"<s>", "<pad>", "</s>", "<unk>"};

/* The tokenizer layouts. */
typedef enum Layout
{
	LAYOUT_M2M100,				/* M2M100Tokenizer */
	LAYOUT_NLLB					/* NllbTokenizer */
} Layout;

/* An M2M100Config as this engine needs it. */
typedef struct M2mConfig
{
	TfConfig	c;
	int			pad_id,
				eos_id,
				decoder_start_id;
	const char *activation;		/* this engine's name for it */
} M2mConfig;

/*
 * Reads config.json with M2M100Config's defaults for absent keys; ERROR
 * naming the key for anything this engine's Transformer cannot be.
 */
static void
read_config(Jsonb *config, M2mConfig *mc)
{
	TfConfig   *c = &mc->c;
	char	   *model_type;
	JsonbValue *scale;

	if (!JB_ROOT_IS_OBJECT(config) || JB_ROOT_IS_SCALAR(config))
		config_error("the configuration must be a JSON object");
	model_type = config_string(config, "model_type", "");
	if (strcmp(model_type, "m2m_100") != 0)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("config.json: \"model_type\" is \"%s\"; import_huggingface_m2m100 reads \"m2m_100\" "
							   "models (M2M-100, NLLB-200)", model_type),
						errhint("MarianMT models come in through import_huggingface.")));
	config_require(config, "tie_word_embeddings", true, true);
	memset(mc, 0, sizeof(*mc));
	tf_config_base(c, 4);
	c->vocab_size = config_vocab_size(config, 128112);
	config_sizes(config, c, 0.1);
	c->normalize_before = true;
	c->positions = TF_POSITIONS_FAIRSEQ;
	scale = config_value(config, "scale_embedding");
	if (scale != NULL && scale->type != jbvBool)
		config_error("\"scale_embedding\" must be true or false");
	c->scale_embedding = scale == NULL || scale->val.boolean;
	mc->activation = config_activation(config, "relu");
	config_token_ids(config, c->vocab_size, (int[3]) {1, 2, 2}, &mc->pad_id, &mc->eos_id, &mc->decoder_start_id);
}

/* The tokenizer layout tokenizer_config.json names; ERROR for another. */
static Layout
read_layout(Jsonb *tokenizer)
{
	char	   *cls = config_string(tokenizer, "tokenizer_class", "");

	if (strcmp(cls, "M2M100Tokenizer") == 0)
		return LAYOUT_M2M100;
	if (strcmp(cls, "NllbTokenizer") == 0 || strcmp(cls, "NllbTokenizerFast") == 0)
		return LAYOUT_NLLB;
	ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					errmsg("tokenizer_config.json: \"tokenizer_class\" is \"%s\"", cls),
					errhint("M2M100Tokenizer (vocab.json) and NllbTokenizer layouts can be imported.")));
	return LAYOUT_M2M100;		/* not reached */
}

/*
 * The language codes an M2M100Tokenizer derives from tokenizer_config.json's
 * "language_codes" (transformers' FAIRSEQ_LANGUAGE_CODES in
 * tokenization_m2m_100.py; "m2m100" when the key is absent), in id order:
 * token "__xx__" of code i has id len(vocab.json) + i.
 */
static const char *const m2m100_codes[] = {
	"af", "am", "ar", "ast", "az", "ba", "be", "bg", "bn", "br", "bs", "ca", "ceb", "cs", "cy", "da", "de", "el",
	"en", "es", "et", "fa", "ff", "fi", "fr", "fy", "ga", "gd", "gl", "gu", "ha", "he", "hi", "hr", "ht", "hu", "hy",
	"id", "ig", "ilo", "is", "it", "ja", "jv", "ka", "kk", "km", "kn", "ko", "lb", "lg", "ln", "lo", "lt", "lv", "mg",
	"mk", "ml", "mn", "mr", "ms", "my", "ne", "nl", "no", "ns", "oc", "or", "pa", "pl", "ps", "pt", "ro", "ru", "sd",
	"si", "sk", "sl", "so", "sq", "sr", "ss", "su", "sv", "sw", "ta", "th", "tl", "tn", "tr", "uk", "ur", "uz", "vi",
	"wo", "xh", "yi", "yo", "zh", "zu"
};
static const char *const wmt21_codes[] = {"en", "ha", "is", "ja", "cs", "ru", "zh", "de"};

/*
 * An M2M100Tokenizer's language tokens "__xx__" from "language_codes", as
 * transformers makes them when tokenizer_config.json lists none (its
 * save_pretrained leaves them out unless they were given); *n their number.
 */
static char **
derived_language_tokens(Jsonb *tokenizer, int *n)
{
	JsonbValue *v = config_value(tokenizer, "language_codes");
	const char *name = "m2m100";
	const char *const *codes;
	char	  **out;
	int			i;

	if (v != NULL && v->type != jbvString)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("tokenizer_config.json: \"language_codes\" must be a string")));
	if (v != NULL)
		name = pnstrdup(v->val.string.val, v->val.string.len);
	if (strcmp(name, "m2m100") == 0)
	{
		codes = m2m100_codes;
		*n = lengthof(m2m100_codes);
	}
	else if (strcmp(name, "wmt21") == 0)
	{
		codes = wmt21_codes;
		*n = lengthof(wmt21_codes);
	}
	else
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("tokenizer_config.json: \"language_codes\" is \"%s\"", name),
						errhint("M2M100Tokenizer knows \"m2m100\" and \"wmt21\"; or list the language tokens in "
								"\"additional_special_tokens\".")));
	out = palloc(*n * sizeof(char *));
	for (i = 0; i < *n; i++)
		out[i] = psprintf("__%s__", codes[i]);
	return out;
}

/*
 * The "language_codes" an M2M100Tokenizer of codes[n] (text datums) names:
 * "wmt21" for that table's codes in its order, else "m2m100".
 */
static const char *
language_codes_name(const Datum *codes, int n)
{
	int			i;

	for (i = 0; n == lengthof(wmt21_codes) && i < n; i++)
		if (strcmp(TextDatumGetCString(codes[i]), wmt21_codes[i]) != 0)
			break;
	return n == lengthof(wmt21_codes) && i == n ? "wmt21" : "m2m100";
}

/*
 * The language tokens, in id order: tokenizer_config.json's
 * additional_special_tokens, or for an M2M100Tokenizer that lists none, the
 * ones "language_codes" names (derived_language_tokens); *n their number,
 * *special whether they are special tokens (listed), which transformers cuts
 * out of text and skips in decode, or (derived) ordinary text to it.
 */
static char **
read_language_tokens(Jsonb *tokenizer, Layout layout, int *n, bool *special)
{
	JsonbValue *v = config_value(tokenizer, "additional_special_tokens");
	JsonbIterator *it;
	JsonbValue	e;
	JsonbIteratorToken tok;
	char	  **out;
	int			k = 0;

	if (v != NULL && v->type == jbvNull)
		v = NULL;				/* null: no list (transformers 4.40 raises on it; read leniently) */
	*special = !((v == NULL || (v->type == jbvBinary && JsonContainerIsArray(v->val.binary.data) &&
								JsonContainerSize(v->val.binary.data) == 0)) && layout == LAYOUT_M2M100);
	if (!*special)
		return derived_language_tokens(tokenizer, n);
	if (v == NULL || v->type != jbvBinary || !JsonContainerIsArray(v->val.binary.data) ||
		JsonContainerSize(v->val.binary.data) == 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("tokenizer_config.json has no \"additional_special_tokens\": the language tokens"),
						errhint("An NllbTokenizer's tokenizer_config.json lists them as NLLB-200 publishes it.")));
	out = palloc(JsonContainerSize(v->val.binary.data) * sizeof(char *));
	it = JsonbIteratorInit(v->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &e, true)) != WJB_DONE)
	{
		JsonbValue *content = &e;

		if (tok != WJB_ELEM)
			continue;
		/* a token is a string, or an AddedToken saved as an object with its "content" */
		if (e.type == jbvBinary && JsonContainerIsObject(e.val.binary.data))
			content = getKeyJsonValueFromContainer(e.val.binary.data, "content", 7, NULL);
		if (content == NULL || content->type != jbvString)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("tokenizer_config.json: \"additional_special_tokens\" must hold strings or "
								   "objects with a string \"content\"")));
		out[k++] = pnstrdup(content->val.string.val, content->val.string.len);
	}
	*n = k;
	return out;
}

/* The language code of token t: M2M-100's "__xx__" is "xx"; NLLB's tokens are the codes. */
static char *
language_code(Layout layout, const char *t)
{
	size_t		len = strlen(t);

	if (layout == LAYOUT_NLLB)
		return pstrdup(t);
	if (len < 5 || strncmp(t, "__", 2) != 0 || strcmp(t + len - 2, "__") != 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("tokenizer_config.json: language token \"%s\" is not of the form __xx__", t)));
	return pnstrdup(t + 2, len - 4);
}

/* An entry of tokenizer_config.json's "added_tokens_decoder": a token and the id transformers gives it. */
typedef struct AddedToken
{
	char	   *content;
	int			id;
	int			order;			/* in the file */
} AddedToken;

/* The entries, sorted by content (the first of equal contents kept), for added_token_id. */
typedef struct AddedTokens
{
	AddedToken *entry;
	int			n;
} AddedTokens;

/* bsearch order of AddedToken: by content. */
static int
added_token_cmp_content(const void *a, const void *b)
{
	return strcmp(((const AddedToken *) a)->content, ((const AddedToken *) b)->content);
}

/* qsort order of AddedToken: by content, then by order in the file. */
static int
added_token_cmp(const void *a, const void *b)
{
	const AddedToken *x = a,
			   *y = b;
	int			c = added_token_cmp_content(a, b);

	return c != 0 ? c : (x->order > y->order) - (x->order < y->order);
}

/*
 * Reads "added_tokens_decoder" ({"id": {"content": "...", ...}, ...}, which
 * transformers 4.34 and later save for every tokenizer) into *out, sorted for
 * added_token_id (a content listed twice keeps its last id: jsonb reads the
 * ids in numeric order, the highest last); none when
 * absent (older files: ids by order). ERROR naming the entry for an id that
 * is not a non-negative integer or an entry without a string content (an id
 * past the model's vocabulary is refused where a token is placed).
 */
static void
read_added_tokens(Jsonb *tokenizer, AddedTokens *out)
{
	JsonbValue *v = config_value(tokenizer, "added_tokens_decoder");
	JsonbIterator *it;
	JsonbValue	e;
	JsonbIteratorToken tok;
	char	   *key = NULL;
	int			depth = 0,
				kept,
				i;

	memset(out, 0, sizeof(*out));
	if (v == NULL)
		return;
	if (v->type != jbvBinary || !JsonContainerIsObject(v->val.binary.data))
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("tokenizer_config.json: \"added_tokens_decoder\" must be an object")));
	out->entry = palloc_extended(Max(JsonContainerSize(v->val.binary.data), 1) * sizeof(AddedToken),
								 MCXT_ALLOC_HUGE);
	it = JsonbIteratorInit(v->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &e, false)) != WJB_DONE)
	{
		CHECK_FOR_INTERRUPTS();
		if (tok == WJB_BEGIN_OBJECT || tok == WJB_BEGIN_ARRAY)
			depth++;
		else if (tok == WJB_END_OBJECT || tok == WJB_END_ARRAY)
		{
			/* an entry's object ends: it had a content (which clears key) */
			if (--depth == 1 && key != NULL)
				ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
								errmsg("tokenizer_config.json: \"added_tokens_decoder\" entry \"%s\" has no string "
									   "\"content\"", key)));
		}
		else if (tok == WJB_KEY && depth == 1)
		{
			char	   *end;
			long		id;

			key = pnstrdup(e.val.string.val, e.val.string.len);
			errno = 0;
			id = strtol(key, &end, 10);
			if (*key == '\0' || *end != '\0' || errno != 0 || id < 0 || id > PG_INT32_MAX)
				ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
								errmsg("tokenizer_config.json: \"added_tokens_decoder\" has id \"%s\", not a token id",
									   key)));
			out->entry[out->n].id = (int) id;
			out->entry[out->n].order = out->n;
		}
		else if (tok == WJB_KEY && depth == 2 && key != NULL && e.val.string.len == 7 &&
				 memcmp(e.val.string.val, "content", 7) == 0)
		{
			tok = JsonbIteratorNext(&it, &e, false);
			if (tok != WJB_VALUE || e.type != jbvString)
				ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
								errmsg("tokenizer_config.json: \"added_tokens_decoder\" entry \"%s\" has no string "
									   "\"content\"", key)));
			out->entry[out->n++].content = pnstrdup(e.val.string.val, e.val.string.len);
			pfree(key);
			key = NULL;
		}
		else if (tok == WJB_VALUE && depth == 1)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("tokenizer_config.json: \"added_tokens_decoder\" entry \"%s\" is not an object",
								   key)));
	}
	qsort(out->entry, out->n, sizeof(AddedToken), added_token_cmp);
	/* of equal contents the last read (the highest id) stays, as transformers' encoder keeps the last */
	for (i = 0, kept = 0; i < out->n; i++)
	{
		if (kept > 0 && strcmp(out->entry[kept - 1].content, out->entry[i].content) == 0)
			kept--;
		out->entry[kept++] = out->entry[i];
	}
	out->n = kept;
}

/* The id the added tokens give content, or dflt when they do not list it (a binary search). */
static int
added_token_id(const AddedTokens *added, const char *content, int dflt)
{
	AddedToken	key = {.content = (char *) content};
	AddedToken *found;

	if (added->n == 0)
		return dflt;
	found = bsearch(&key, added->entry, added->n, sizeof(AddedToken), added_token_cmp_content);
	return found != NULL ? found->id : dflt;
}

/*
 * Puts added token `content` at id in table[vocab_size], ERROR naming it
 * when the id is one of the tokenizer's own pieces (below first) or already
 * taken.
 */
static void
place_added_token(Datum *table, int vocab_size, int first, const char *content, int id)
{
	if (id < first || id >= vocab_size || table[id] != (Datum) 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("tokenizer_config.json gives added token \"%s\" id %d, which %s", content, id,
							   id < first ? "belongs to a SentencePiece piece" :
							   id >= vocab_size ? "is past the model's vocab_size" : "another added token has"),
						errhint("The ids are \"added_tokens_decoder\"'s, else the language tokens' order after the "
								"pieces.")));
	table[id] = CStringGetTextDatum(content);
}

/* A piece as a text datum. */
static Datum
piece(const char *p, size_t len)
{
	return PointerGetDatum(cstring_to_text_with_len(p, len));
}

/*
 * The piece table [vocab_size] of the layout, the language tokens' ids
 * (ids[n_languages]) and the unknown id. The language tokens and NLLB's
 * <mask> take the ids the added tokens give them, else (files saved before
 * transformers 4.34) the order after the pieces: languages, then <mask>.
 * ERROR when the parts do not fit vocab_size or an added token's id is a
 * piece's or another's.
 */
static Datum *
piece_table(Layout layout, Jsonb *vocab, bytea *spm, char **tokens, int n_languages, const AddedTokens *added,
			int vocab_size, int32 *ids, int *unk_id)
{
	Datum	   *table = palloc0(vocab_size * sizeof(Datum));
	int			first,
				unused = 0,
				i;

	if (layout == LAYOUT_M2M100)
	{
		Datum	   *pieces;

		if (vocab == NULL)
			ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
							errmsg("an M2M100Tokenizer needs its vocab.json")));
		if (!JB_ROOT_IS_OBJECT(vocab) || JB_ROOT_IS_SCALAR(vocab))
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("vocab.json must be a JSON object")));
		first = JB_ROOT_COUNT(vocab);
		if (first + n_languages > vocab_size)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("vocab.json's %d pieces and %d language tokens exceed the model's vocab_size %d",
								   first, n_languages, vocab_size)));
		pieces = read_vocab(vocab, first, unk_id);
		memcpy(table, pieces, first * sizeof(Datum));
		for (i = 0; i < n_languages; i++)
		{
			ids[i] = added_token_id(added, tokens[i], first + i);
			place_added_token(table, vocab_size, first, tokens[i], ids[i]);
		}
		/* M2M100Tokenizer's made-up words fill the rest (fairseq's dictionary padding) */
		for (i = first; i < vocab_size; i++)
			if (table[i] == (Datum) 0)
				table[i] = CStringGetTextDatum(psprintf("madeupword%04d", unused++));
	}
	else
	{
		SpmModel   *sp;
		char		err[512];
		int			size;

		if (spm_load(VARDATA_ANY(spm), VARSIZE_ANY_EXHDR(spm), &sp, err, sizeof(err)) != 0)
			ereport(ERROR, (errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
							errmsg("sentencepiece.bpe.model is not a SentencePiece model: %s", err)));
		size = spm_size(sp);
		first = size + 1;
		if (size < 3 || first + n_languages + 1 > vocab_size)
		{
			spm_free(sp);
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("the SentencePiece model's %d pieces, %d language codes and <mask> exceed the "
								   "model's vocab_size %d", size, n_languages, vocab_size)));
		}
		/* NllbTokenizer: fairseq's four specials, then SentencePiece id + 1 (its <unk> <s> </s> are those) */
		for (i = 0; i < 4; i++)
		{
			if (added_token_id(added, fairseq_specials[i], i) != i)
				ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
								errmsg("tokenizer_config.json gives \"%s\" id %d; an NllbTokenizer's is %d",
									   fairseq_specials[i], added_token_id(added, fairseq_specials[i], i), i)));
			table[i] = CStringGetTextDatum(fairseq_specials[i]);
		}
		for (i = 3; i < size; i++)
		{
			size_t		len;
			const char *p = spm_piece(sp, i, &len);

			table[i + 1] = piece(p, len);
		}
		spm_free(sp);
		for (i = 0; i < n_languages; i++)
		{
			ids[i] = added_token_id(added, tokens[i], first + i);
			place_added_token(table, vocab_size, first, tokens[i], ids[i]);
		}
		place_added_token(table, vocab_size, first, "<mask>", added_token_id(added, "<mask>", first + n_languages));
		for (i = first; i < vocab_size; i++)
			if (table[i] == (Datum) 0)
				table[i] = CStringGetTextDatum(psprintf("<unused%d>", unused++));
		*unk_id = 3;
	}
	return table;
}

/* Reads exactly n bytes at offset of the large object fd (`file` in messages) into buf; ERROR when it ends first. */
static void
lo_read_at(LargeObjectDesc *fd, const char *file, int64 offset, char *buf, size_t n)
{
	size_t		done = 0;

	inv_seek(fd, offset, SEEK_SET);
	while (done < n)
	{
		int			want = (int) Min(n - done, (size_t) LO_PIECE);
		int			got;

		CHECK_FOR_INTERRUPTS();
		got = inv_read(fd, buf + done, want);
		if (got <= 0)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("%s ends at byte %lld, inside a tensor", file,
								   (long long) (offset + (int64) done))));
		done += got;
	}
}

/* A 64-bit hash of n bytes (in pieces: hash_bytes_extended takes an int length). */
static uint64
bytes_hash(const char *data, size_t n)
{
	uint64		h = 0;
	size_t		done = 0;

	do
	{
		int			len = (int) Min(n - done, (size_t) (1 << 30));

		h = hash_bytes_extended((const unsigned char *) data + done, len, h);
		done += len;
	} while (done < n);
	return h;
}

/* True for a name transformers gives the one tied embedding. */
static bool
embedding_name(const char *name)
{
	return strcmp(name, "model.shared.weight") == 0 || strcmp(name, "model.encoder.embed_tokens.weight") == 0 ||
		strcmp(name, "model.decoder.embed_tokens.weight") == 0 || strcmp(name, "lm_head.weight") == 0;
}

/* The parameters a model of configuration c takes, and which of them the files gave. */
typedef struct Wanted
{
	TfTensor   *want;			/* [n]: names and shapes */
	bool	   *seen;			/* [n] */
	int			n;
	uint64		embedding_hash; /* of model.shared.weight, once seen */
} Wanted;

/*
 * Writes the tensors of the safetensors file in large object lo (`file`
 * names it in messages) as parameters of checkpoint_id, one tensor in memory
 * at a time: the tied embedding's copies (equal, or ERROR) as
 * model.shared.weight, sinusoid tables dropped, every other tensor under its
 * own name, which must be a parameter of w's of that shape not given
 * before, in F32, F16 or BF16 (widened to float32: the checkpoint and an
 * export are float32). ERROR naming the problem.
 */
static void
import_file(Oid lo, const char *file, Wanted *w, int64 checkpoint_id)
{
	LargeObjectDesc *fd = inv_open(lo, INV_READ, CurrentMemoryContext);
	int64		size = inv_seek(fd, 0, SEEK_END);
	uint64		header_len = 0;
	char		prefix[8];
	char	   *header;
	StHeader	h;
	int			i,
				k;
	char		err[TF_ERRLEN];

	if (size < 8)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("%s has %lld bytes: not a safetensors file", file, (long long) size)));
	lo_read_at(fd, file, 0, prefix, 8);
	for (k = 7; k >= 0; k--)
		header_len = (header_len << 8) | (unsigned char) prefix[k];
	if (header_len > MAX_HEADER_BYTES || header_len > (uint64) size - 8)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("%s: a header of %llu bytes in a file of %lld", file,
							   (unsigned long long) header_len, (long long) size)));
	header = palloc(8 + header_len);
	lo_read_at(fd, file, 0, header, 8 + header_len);
	/* st_parse reads the first 8 + header_len bytes; the data stays in the large object */
	if (st_parse(header, (size_t) size, &h, err, sizeof(err)) != 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("%s: %s", file, err)));
	pfree(header);				/* st_parse copied what it keeps */
	PG_TRY();
	{
		for (i = 0; i < h.count; i++)
		{
			const StTensor *s = &h.tensors[i];
			const char *name = embedding_name(s->name) ? "model.shared.weight" : s->name;
			TfTensor	t;
			int64		count = 1;
			int			width = tensor_file_dtype_width(s->dtype);
			int			d;
			char	   *raw;

			CHECK_FOR_INTERRUPTS();
			if (strstr(s->name, "embed_positions") != NULL)
				continue;		/* the sinusoids, computed (TF_POSITIONS_FAIRSEQ) */
			for (k = 0; k < w->n && strcmp(w->want[k].name, name) != 0; k++)
				;
			if (k == w->n)
				ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
								errmsg("%s: tensor \"%s\" is not a parameter of this model", file, s->name),
								errhint("An M2M-100 file holds model.shared.weight (or its tied copies) and the "
										"layers' and final LayerNorms' parameters.")));
			if (w->seen[k] && strcmp(name, "model.shared.weight") != 0)
				ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
								errmsg("%s: tensor \"%s\" was given by an earlier file too", file, s->name)));
			for (d = 0; d < s->ndim; d++)
				count *= s->shape[d];
			if (width == 0)
				ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
								errmsg("%s: tensor \"%s\" is %s; F32, F16 and BF16 can be imported", file, s->name,
									   s->dtype)));
			if (s->ndim != w->want[k].ndim || s->shape[0] != w->want[k].shape[0] ||
				(s->ndim == 2 && s->shape[1] != w->want[k].shape[1]))
				ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
								errmsg("%s: tensor \"%s\" does not have the shape config.json gives it", file,
									   s->name)));
			if (s->end - s->begin != (uint64) count * width)
				ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
								errmsg("%s: tensor \"%s\": data_offsets [%llu, %llu] do not hold its %lld %s values",
									   file, s->name, (unsigned long long) s->begin, (unsigned long long) s->end,
									   (long long) count, s->dtype)));
			/* read as stored, widened to float32 (F16 and BF16: half again the tensor's bytes in memory) */
			t = w->want[k];
			t.bytes = (size_t) count * 4;
			t.data = palloc_extended(Max(t.bytes, 1), MCXT_ALLOC_HUGE);
			raw = width == 4 ? t.data : palloc_extended(Max((size_t) count * width, 1), MCXT_ALLOC_HUGE);
			lo_read_at(fd, file, 8 + (int64) header_len + (int64) s->begin, raw, (size_t) count * width);
			if (width != 4)
			{
				tensor_file_widen(s->dtype, raw, count, t.data);
				pfree(raw);
			}
			if (w->seen[k])
			{
				/* a tied copy of the embedding: equal to the first (up to a 64-bit hash) */
				if (bytes_hash(t.data, t.bytes) != w->embedding_hash)
					ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
									errmsg("%s: tensor \"%s\" differs from the embedding: only models with one "
										   "shared, tied embedding can be imported", file, s->name)));
			}
			else
			{
				if (strcmp(name, "model.shared.weight") == 0)
					w->embedding_hash = bytes_hash(t.data, t.bytes);
				write_tensors(checkpoint_id, &t, 1);
				w->seen[k] = true;
			}
			pfree(t.data);
		}
	}
	PG_FINALLY();
	{
		st_free(&h);
	}
	PG_END_TRY();
	inv_close(fd);
}

/*
 * Writes the tensors of the safetensors files in large objects lo[n_files]
 * (one model.safetensors, or the shards of model.safetensors.index.json) as
 * the parameters of checkpoint_id, a model of configuration c (import_file),
 * reported as operation import_huggingface_m2m100 of model `model`. ERROR
 * naming the problem, or a parameter no file gives.
 */
static void
import_tensors(const char *model, const Oid *lo, int n_files, const TfConfig *c, int64 checkpoint_id)
{
	TfModel    *shape_model;
	Wanted		w = {0};
	MemoryContext file_context = AllocSetContextCreate(CurrentMemoryContext, "m2m100 import file",
													   ALLOCSET_DEFAULT_SIZES),
				old;
	char		err[TF_ERRLEN];
	int			f,
				k;

	/* the names and shapes the model takes (an inference model: parameters only) */
	shape_model = tf_model_create_inference(c, "cpu", 1, err, sizeof(err));
	if (shape_model == NULL || tf_model_tensors(shape_model, &w.want, &w.n, err, sizeof(err)) != TF_OK)
	{
		tf_model_free(shape_model);
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("could not lay out the model: %s", err)));
	}
	w.seen = palloc0(w.n * sizeof(bool));
	progress_begin("import_huggingface_m2m100", model, "tensors", w.n);
	PG_TRY();
	{
		for (f = 0; f < n_files; f++)
		{
			/* what one file's header and tensors take, freed before the next (shards may be many) */
			old = MemoryContextSwitchTo(file_context);
			import_file(lo[f], n_files == 1 ? "model.safetensors" : psprintf("shard %d of %d (large object %u)",
																		   f + 1, n_files, lo[f]),
						&w, checkpoint_id);
			MemoryContextSwitchTo(old);
			MemoryContextReset(file_context);
		}
		for (k = 0; k < w.n; k++)
			if (!w.seen[k])
				ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
								errmsg("%s tensor \"%s\"", n_files == 1 ? "model.safetensors lacks" :
									   "model.safetensors's shards lack", w.want[k].name)));
	}
	PG_FINALLY();
	{
		tf_tensors_free(w.want);
		tf_model_free(shape_model);
	}
	PG_END_TRY();
	progress_end();
	/* pg_largeobject, which inv_open opened for the transaction: lo_open's end-of-transaction close runs only after an lo_* call */
	close_lo_relation(true);
}

/* The text argument n, or NULL. */
#define TEXT_ARG_OR_NULL(n) (PG_ARGISNULL(n) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(n)))

/* The most shards import_huggingface_m2m100 takes (NLLB-200 3.3B has 3; the largest published checkpoints tens). */
#define MAX_SHARDS 1024

static int64 import_m2m100(FunctionCallInfo fcinfo, const Oid *lo, int n_files);

/*
 * import_huggingface_m2m100(model, config, safetensors oid, sentencepiece,
 * vocab, tokenizer_config, source_language, target_language, replace)
 * returns bigint: a new vocabulary (the layout's piece table, the language
 * codes and their ids) and model, both named model, with its default
 * languages (the arguments, else tokenizer_config.json's src_lang and
 * tgt_lang), and the file's parameters as their first checkpoint (kind
 * imported, step 0, not deployed). vocab may be NULL (NllbTokenizer).
 */
Datum
attention_import_huggingface_m2m100(PG_FUNCTION_ARGS)
{
	Oid			lo;

	/* the oid[] form where an earlier 0.4.0 install declared it with this symbol */
	if (get_fn_expr_argtype(fcinfo->flinfo, 2) == OIDARRAYOID)
		return attention_import_huggingface_m2m100_shards(fcinfo);
	if (PG_ARGISNULL(2))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("safetensors must not be NULL")));
	lo = PG_GETARG_OID(2);
	PG_RETURN_INT64(import_m2m100(fcinfo, &lo, 1));
}

/*
 * import_huggingface_m2m100(model, config, safetensors oid[], ...): as
 * above with the shards of a model.safetensors.index.json, in any order.
 * ERROR on an empty list, a NULL, a large object listed twice or more than
 * MAX_SHARDS.
 */
Datum
attention_import_huggingface_m2m100_shards(PG_FUNCTION_ARGS)
{
	ArrayType  *a;
	Datum	   *elems;
	bool	   *nulls;
	Oid		   *lo;
	int			n_files,
				i,
				j;

	if (PG_ARGISNULL(2))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("safetensors must not be NULL")));
	a = PG_GETARG_ARRAYTYPE_P(2);
	if (ArrayGetNItems(ARR_NDIM(a), ARR_DIMS(a)) > MAX_SHARDS)
		ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						errmsg("safetensors lists %d large objects; at most %d shards are imported",
							   ArrayGetNItems(ARR_NDIM(a), ARR_DIMS(a)), MAX_SHARDS)));
	deconstruct_array(a, OIDOID, sizeof(Oid), true, TYPALIGN_INT, &elems, &nulls, &n_files);
	if (n_files == 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("safetensors lists no large object")));
	lo = palloc(n_files * sizeof(Oid));
	for (i = 0; i < n_files; i++)
	{
		if (nulls[i])
			ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("safetensors must not hold NULL")));
		lo[i] = DatumGetObjectId(elems[i]);
		for (j = 0; j < i; j++)
			if (lo[j] == lo[i])
				ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
								errmsg("safetensors lists large object %u twice", lo[i])));
	}
	PG_RETURN_INT64(import_m2m100(fcinfo, lo, n_files));
}

/*
 * The import of both import_huggingface_m2m100 forms, from fcinfo's other
 * arguments and the safetensors files in large objects lo[n_files]: the
 * new checkpoint's id.
 */
static int64
import_m2m100(FunctionCallInfo fcinfo, const Oid *lo, int n_files)
{
	static const char *const required[] = {"model", "config", NULL, "sentencepiece", NULL, "tokenizer_config"};
	char	   *model;
	Jsonb	   *config,
			   *tokenizer;
	bytea	   *spm;
	M2mConfig	mc;
	TfConfig	c;
	Layout		layout;
	AddedTokens added;
	char	  **tokens,
			  **codes,
			   *source,
			   *target;
	Datum	   *table,
			   *code_datums,
			   *id_datums;
	int32	   *ids;
	int			n_languages,
				unk_id,
				nargs,
				i;
	int32		model_id;
	int64		checkpoint_id;
	bool		isnull,
				special,
				has_special,
				has_last,
				source_language_last = false;
	Datum		values[12];
	StringInfoData engine_config,
				insert;

	for (i = 0; i < 6; i++)
		if (required[i] != NULL && PG_ARGISNULL(i))
			ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("%s must not be NULL", required[i])));
	model = text_to_cstring(PG_GETARG_TEXT_PP(0));
	config = PG_GETARG_JSONB_P(1);
	spm = PG_GETARG_BYTEA_PP(3);
	tokenizer = PG_GETARG_JSONB_P(5);
	read_config(config, &mc);
	if (!JB_ROOT_IS_OBJECT(tokenizer) || JB_ROOT_IS_SCALAR(tokenizer))
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("tokenizer_config.json must be a JSON object")));
	layout = read_layout(tokenizer);
	/* NllbTokenizer's legacy_behaviour: the source's language token after its </s> (absent: false) */
	if (layout == LAYOUT_NLLB && config_value(tokenizer, "legacy_behaviour") != NULL)
	{
		if (config_value(tokenizer, "legacy_behaviour")->type != jbvBool)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("tokenizer_config.json: \"legacy_behaviour\" is not true or false")));
		source_language_last = config_value(tokenizer, "legacy_behaviour")->val.boolean;
	}
	tokens = read_language_tokens(tokenizer, layout, &n_languages, &special);
	codes = palloc(n_languages * sizeof(char *));
	ids = palloc(n_languages * sizeof(int32));
	for (i = 0; i < n_languages; i++)
		codes[i] = language_code(layout, tokens[i]);
	read_added_tokens(tokenizer, &added);
	table = piece_table(layout, PG_ARGISNULL(4) ? NULL : PG_GETARG_JSONB_P(4), spm, tokens, n_languages, &added,
						mc.c.vocab_size, ids, &unk_id);
	check_vocabulary(spm, spm, table, mc.c.vocab_size, (int[4]) {mc.pad_id, unk_id, mc.decoder_start_id, mc.eos_id});
	source = TEXT_ARG_OR_NULL(6);
	target = TEXT_ARG_OR_NULL(7);
	if (source == NULL)
		source = config_string(tokenizer, "src_lang", "");
	if (target == NULL)
		target = config_string(tokenizer, "tgt_lang", "");
	code_datums = palloc(n_languages * sizeof(Datum));
	id_datums = palloc(n_languages * sizeof(Datum));
	for (i = 0; i < n_languages; i++)
	{
		code_datums[i] = CStringGetTextDatum(codes[i]);
		id_datums[i] = Int32GetDatum(ids[i]);
	}

	initStringInfo(&engine_config);
	appendStringInfo(&engine_config,
					 "{\"num_encoder_layers\": %d, \"num_decoder_layers\": %d, \"d_model\": %d, \"num_heads\": %d, "
					 "\"d_ff\": %d, \"dropout\": %.9g, \"attention_dropout\": %.9g, \"relu_dropout\": %.9g, "
					 "\"vocab_size\": %d, \"max_positions\": %d, \"layer_norm_eps\": %.9g, "
					 "\"activation\": \"%s\", \"logits_bias\": false, \"normalize_before\": true, "
					 "\"scale_embedding\": %s, \"positions\": \"fairseq\"}",
					 mc.c.num_encoder_layers, mc.c.num_decoder_layers, mc.c.d_model, mc.c.num_heads, mc.c.d_ff,
					 mc.c.dropout, mc.c.attention_dropout, mc.c.relu_dropout, mc.c.vocab_size, mc.c.max_positions,
					 M2M_LAYER_NORM_EPS, mc.activation, mc.c.scale_embedding ? "true" : "false");

	SPI_connect();
	free_import_name(model, !PG_ARGISNULL(8) && PG_GETARG_BOOL(8));
	/* a 0.3.0 schema (a library newer than its schema) has neither column: their defaults, true and false */
	has_special = vocabulary_has_column("language_tokens_special");
	has_last = vocabulary_has_column("source_language_last");
	if ((!has_special && !special) || (!has_last && source_language_last))
		ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						errmsg("this database's attention schema cannot hold %s",
							   !special ? "a tokenizer whose language tokens are text (an M2M100Tokenizer saved "
							   "without listing them)" : "NllbTokenizer's legacy_behaviour (the source language last)"),
						errhint("Run ALTER EXTENSION attention UPDATE.")));
	initStringInfo(&insert);
	appendStringInfo(&insert, "INSERT INTO attention.vocabularies (name, vocab_size, pad_id, unk_id, bos_id, eos_id, "
					 "model, target_model, pieces, languages, language_ids%s%s) "
					 "VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8, $9, $10%s%s)",
					 has_special ? ", language_tokens_special" : "", has_last ? ", source_language_last" : "",
					 has_special ? ", $11" : "", has_last ? (has_special ? ", $12" : ", $11") : "");
	values[0] = CStringGetTextDatum(model);
	values[1] = Int32GetDatum(mc.c.vocab_size);
	values[2] = Int32GetDatum(mc.pad_id);
	values[3] = Int32GetDatum(unk_id);
	values[4] = Int32GetDatum(mc.decoder_start_id);
	values[5] = Int32GetDatum(mc.eos_id);
	values[6] = PointerGetDatum(spm);
	values[7] = PointerGetDatum(construct_array(table, mc.c.vocab_size, TEXTOID, -1, false, TYPALIGN_INT));
	values[8] = PointerGetDatum(construct_array(code_datums, n_languages, TEXTOID, -1, false, TYPALIGN_INT));
	values[9] = PointerGetDatum(construct_array(id_datums, n_languages, INT4OID, 4, true, TYPALIGN_INT));
	nargs = 10;
	if (has_special)
		values[nargs++] = BoolGetDatum(special);
	if (has_last)
		values[nargs++] = BoolGetDatum(source_language_last);
	if (SPI_execute_with_args(insert.data, nargs,
							  (Oid[]) {TEXTOID, INT4OID, INT4OID, INT4OID, INT4OID, INT4OID, BYTEAOID, TEXTARRAYOID,
							  TEXTARRAYOID, INT4ARRAYOID, BOOLOID, BOOLOID},
							  values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not insert vocabulary \"%s\"", model);
	if (SPI_execute_with_args("SELECT attention.create_model($1, $1, $2::jsonb)", 2, (Oid[]) {TEXTOID, TEXTOID},
							  (Datum[]) {CStringGetTextDatum(model), CStringGetTextDatum(engine_config.data)},
							  NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not create model \"%s\"", model);
	model_id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (SPI_execute_with_args("SELECT attention.set_languages($1, NULLIF($2, ''), NULLIF($3, ''))", 3,
							  (Oid[]) {TEXTOID, TEXTOID, TEXTOID},
							  (Datum[]) {CStringGetTextDatum(model), CStringGetTextDatum(source),
							  CStringGetTextDatum(target)}, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not set the languages of model \"%s\"", model);
	attention_config_from_jsonb(DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(engine_config.data))),
								mc.c.vocab_size, mc.pad_id, &c);
	if (SPI_execute_with_args("INSERT INTO attention.checkpoints (model_id, kind, step) VALUES ($1, 'imported', 0) "
							  "RETURNING checkpoint_id", 1, (Oid[]) {INT4OID}, (Datum[]) {Int32GetDatum(model_id)},
							  NULL, false, 1) != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "could not insert a checkpoint of model \"%s\"", model);
	checkpoint_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	import_tensors(model, lo, n_files, &c, checkpoint_id);
	SPI_finish();
	return checkpoint_id;
}

/* Writes n bytes to the large object fd; ERROR when it takes fewer. */
static void
lo_write_all(LargeObjectDesc *fd, const char *buf, size_t n)
{
	size_t		done = 0;

	while (done < n)
	{
		int			want = (int) Min(n - done, (size_t) LO_PIECE);

		CHECK_FOR_INTERRUPTS();
		if (inv_write(fd, buf + done, want) != want)
			ereport(ERROR, (errcode(ERRCODE_IO_ERROR), errmsg("could not write model.safetensors")));
		done += want;
	}
}

/*
 * A new large object holding checkpoint_id's parameters as a safetensors
 * file (transformers' names: the engine's; float32; metadata format pt),
 * written one stored chunk at a time. Inside SPI.
 */
static Oid
export_tensors(int64 checkpoint_id)
{
	StringInfoData header;
	Oid			lo;
	LargeObjectDesc *fd;
	uint64		offset = 0,
				len;
	char		prefix[8];
	int			n,
				i,
				k;
	char	  **names;
	SPITupleTable *list;

	if (SPI_execute_with_args("SELECT name, shape, dtype FROM attention.checkpoint_tensors WHERE checkpoint_id = $1 "
							  "AND chunk = 0 AND name NOT LIKE 'optimizer.%' AND name NOT LIKE 'rng.%' "
							  "AND name NOT LIKE 'data.%' ORDER BY name", 1, (Oid[]) {INT8OID},
							  (Datum[]) {Int64GetDatum(checkpoint_id)}, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the tensors of checkpoint %lld", (long long) checkpoint_id);
	list = SPI_tuptable;
	n = (int) SPI_processed;
	if (n == 0)
		ereport(ERROR, (errcode(ERRCODE_NO_DATA),
						errmsg("checkpoint %lld has no parameter tensors", (long long) checkpoint_id)));
	names = palloc(n * sizeof(char *));
	initStringInfo(&header);
	appendStringInfoString(&header, "{\"__metadata__\":{\"format\":\"pt\"}");
	for (i = 0; i < n; i++)
	{
		bool		isnull;
		Datum	   *dims;
		int			ndims;
		uint64		count = 1;

		names[i] = SPI_getvalue(list->vals[i], list->tupdesc, 1);
		if (strcmp(SPI_getvalue(list->vals[i], list->tupdesc, 3), "float32") != 0)
			ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
							errmsg("checkpoint %lld: tensor \"%s\" is not float32", (long long) checkpoint_id,
								   names[i])));
		deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(list->vals[i], list->tupdesc, 2, &isnull)), INT8OID, 8,
						  true, TYPALIGN_DOUBLE, &dims, NULL, &ndims);
		appendStringInfoChar(&header, ',');
		escape_json(&header, names[i]);
		appendStringInfoString(&header, ":{\"dtype\":\"F32\",\"shape\":[");
		for (k = 0; k < ndims; k++)
		{
			appendStringInfo(&header, "%s%lld", k > 0 ? "," : "", (long long) DatumGetInt64(dims[k]));
			count *= (uint64) DatumGetInt64(dims[k]);
		}
		appendStringInfo(&header, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long) offset,
						 (unsigned long long) (offset + 4 * count));
		offset += 4 * count;
	}
	appendStringInfoChar(&header, '}');
	/* the data 8-byte aligned, as safetensors writes it */
	while (header.len % 8 != 0)
		appendStringInfoChar(&header, ' ');
	len = header.len;
	for (k = 0; k < 8; k++)
		prefix[k] = (char) ((len >> (8 * k)) & 0xFF);

	lo = inv_create(InvalidOid);
	fd = inv_open(lo, INV_WRITE, CurrentMemoryContext);
	lo_write_all(fd, prefix, 8);
	lo_write_all(fd, header.data, header.len);
	for (i = 0; i < n; i++)
	{
		if (SPI_execute_with_args("SELECT bytes FROM attention.checkpoint_tensors WHERE checkpoint_id = $1 "
								  "AND name = $2 ORDER BY chunk", 2, (Oid[]) {INT8OID, TEXTOID},
								  (Datum[]) {Int64GetDatum(checkpoint_id), CStringGetTextDatum(names[i])}, NULL,
								  true, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not read tensor \"%s\"", names[i]);
		for (k = 0; k < (int) SPI_processed; k++)
		{
			bool		isnull;
			bytea	   *b = DatumGetByteaPP(SPI_getbinval(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 1, &isnull));

			lo_write_all(fd, VARDATA_ANY(b), VARSIZE_ANY_EXHDR(b));
		}
		SPI_freetuptable(SPI_tuptable);
	}
	inv_close(fd);
	close_lo_relation(true);	/* as import_tensors does */
	return lo;
}

/* Appends a JSON array of the texts in a (a text[]) to s. */
static void
append_text_array(StringInfo s, Datum *texts, int n, const char *before, const char *after)
{
	int			i;

	appendStringInfoChar(s, '[');
	for (i = 0; i < n; i++)
	{
		if (i > 0)
			appendStringInfoString(s, ", ");
		escape_json(s, psprintf("%s%s%s", before, TextDatumGetCString(texts[i]), after));
	}
	appendStringInfoChar(s, ']');
}

/*
 * export_huggingface_m2m100(checkpoint) returns table (file, data,
 * large_object): the files of an M2M-100 (M2M100Tokenizer) or NLLB-200
 * (NllbTokenizer) model directory, the layout told by the language tokens'
 * pieces; model.safetensors as a new large object.
 */
Datum
attention_export_huggingface_m2m100(PG_FUNCTION_ARGS)
{
	int64		checkpoint_id = PG_GETARG_INT64(0);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HeapTuple	tup;
	TupleDesc	desc;
	char	   *model,
			   *source,
			   *target;
	TfConfig	c;
	Datum	   *pieces,
			   *codes,
			   *ids;
	int			n_pieces,
				n_languages,
				first,
				mask,
				pad,
				bos,
				eos,
				i;
	bool		isnull,
				nllb,
				special,
				legacy;
	bytea	   *spm;
	Oid			lo;
	StringInfoData s;
	static const char *const activations[] = {"relu", "swish", "gelu"};

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	if (SPI_execute_with_args(psprintf("SELECT m.name, m.config, v.vocab_size, v.pad_id, v.bos_id, v.eos_id, v.model, "
									   "v.pieces, v.languages, v.language_ids, m.source_language, m.target_language, "
									   "%s, %s FROM attention.checkpoints c JOIN attention.models m USING (model_id) "
									   "JOIN attention.vocabularies v USING (vocabulary_id) WHERE c.checkpoint_id = $1",
									   /* a 0.3.0 schema: special language tokens, the source language first */
									   vocabulary_has_column("language_tokens_special") ?
									   "v.language_tokens_special" : "true",
									   vocabulary_has_column("source_language_last") ?
									   "v.source_language_last" : "false"), 1,
							  (Oid[]) {INT8OID}, (Datum[]) {Int64GetDatum(checkpoint_id)}, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read attention.checkpoints");
	if (SPI_processed == 0)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
						errmsg("checkpoint %lld does not exist", (long long) checkpoint_id)));
	tup = SPI_copytuple(SPI_tuptable->vals[0]);
	desc = CreateTupleDescCopy(SPI_tuptable->tupdesc);
	model = SPI_getvalue(tup, desc, 1);
	require_model_owner(model, "export a checkpoint of");
	pad = DatumGetInt32(SPI_getbinval(tup, desc, 4, &isnull));
	attention_config_from_jsonb(DatumGetJsonbP(SPI_getbinval(tup, desc, 2, &isnull)),
								DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull)), pad, &c);
	SPI_getbinval(tup, desc, 9, &isnull);
	if (isnull || !c.normalize_before || c.positions != TF_POSITIONS_FAIRSEQ || c.logits_bias ||
		c.layer_norm_eps != M2M_LAYER_NORM_EPS)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("model \"%s\" is not an M2M-100 model (multilingual, pre-norm, fairseq positions, "
							   "no logits bias, layer_norm_eps 1e-05)", model),
						errhint("MarianMT-shaped models go out through export_huggingface.")));
	bos = DatumGetInt32(SPI_getbinval(tup, desc, 5, &isnull));
	eos = DatumGetInt32(SPI_getbinval(tup, desc, 6, &isnull));
	spm = DatumGetByteaPP(SPI_getbinval(tup, desc, 7, &isnull));
	deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tup, desc, 8, &isnull)), TEXTOID, -1, false, TYPALIGN_INT,
					  &pieces, NULL, &n_pieces);
	deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tup, desc, 9, &isnull)), TEXTOID, -1, false, TYPALIGN_INT,
					  &codes, NULL, &n_languages);
	deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tup, desc, 10, &isnull)), INT4OID, 4, true, TYPALIGN_INT,
					  &ids, NULL, &n_languages);
	source = SPI_getvalue(tup, desc, 11);
	target = SPI_getvalue(tup, desc, 12);
	special = DatumGetBool(SPI_getbinval(tup, desc, 13, &isnull));
	legacy = DatumGetBool(SPI_getbinval(tup, desc, 14, &isnull));
	if (n_languages == 0 || DatumGetInt32(ids[0]) < 0 || DatumGetInt32(ids[0]) >= n_pieces)
		ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
						errmsg("the vocabulary of model \"%s\" has no valid language tokens", model)));
	nllb = strcmp(TextDatumGetCString(pieces[DatumGetInt32(ids[0])]), TextDatumGetCString(codes[0])) == 0;
	/* the first added token: the lowest language id, or NLLB's <mask> just below it */
	first = DatumGetInt32(ids[0]);
	for (i = 1; i < n_languages; i++)
	{
		if (DatumGetInt32(ids[i]) < 0 || DatumGetInt32(ids[i]) >= n_pieces)
			ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
							errmsg("the vocabulary of model \"%s\" has no valid language tokens", model)));
		first = Min(first, DatumGetInt32(ids[i]));
	}
	mask = -1;
	for (i = Max(first - 1, 0); nllb && i < n_pieces && mask < 0; i++)
		if (strcmp(TextDatumGetCString(pieces[i]), "<mask>") == 0)
			mask = i;
	if (mask == first - 1)
		first = mask;
	require_float_checkpoint(checkpoint_id, "exported");

	lo = export_tensors(checkpoint_id);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
						 (Datum[]) {CStringGetTextDatum("model.safetensors"), (Datum) 0, ObjectIdGetDatum(lo)},
						 (bool[]) {false, true, false});

	initStringInfo(&s);
	appendStringInfo(&s, "{\"architectures\": [\"M2M100ForConditionalGeneration\"], \"model_type\": \"m2m_100\", "
					 "\"vocab_size\": %d, \"d_model\": %d, \"encoder_layers\": %d, \"decoder_layers\": %d, "
					 "\"encoder_attention_heads\": %d, \"decoder_attention_heads\": %d, "
					 "\"encoder_ffn_dim\": %d, \"decoder_ffn_dim\": %d, \"activation_function\": \"%s\", "
					 "\"dropout\": %.9g, \"attention_dropout\": %.9g, \"activation_dropout\": %.9g, "
					 "\"max_position_embeddings\": %d, \"scale_embedding\": %s, \"tie_word_embeddings\": true, "
					 "\"is_encoder_decoder\": true, \"pad_token_id\": %d, \"bos_token_id\": 0, \"eos_token_id\": %d, "
					 "\"decoder_start_token_id\": %d, \"encoder_layerdrop\": 0.0, \"decoder_layerdrop\": 0.0, "
					 "\"init_std\": 0.02, \"use_cache\": true, \"torch_dtype\": \"float32\"}",
					 c.vocab_size, c.d_model, c.num_encoder_layers, c.num_decoder_layers, c.num_heads, c.num_heads,
					 c.d_ff, c.d_ff, activations[c.activation], c.dropout, c.attention_dropout, c.relu_dropout,
					 c.max_positions, c.scale_embedding ? "true" : "false", pad, eos, bos);
	put_json(rsinfo, "config.json", &s);
	appendStringInfo(&s, "{\"bos_token_id\": 0, \"decoder_start_token_id\": %d, \"eos_token_id\": %d, "
					 "\"pad_token_id\": %d, ", bos, eos, pad);
	append_generation_defaults(&s, model, 1, c.max_positions);
	appendStringInfoChar(&s, '}');
	put_json(rsinfo, "generation_config.json", &s);
	put_file(rsinfo, "sentencepiece.bpe.model", VARDATA_ANY(spm), VARSIZE_ANY_EXHDR(spm));
	if (!nllb)
	{
		/* vocab.json: the pieces before the language tokens */
		appendStringInfoChar(&s, '{');
		for (i = 0; i < first; i++)
		{
			if (i > 0)
				appendStringInfoString(&s, ", ");
			escape_json(&s, TextDatumGetCString(pieces[i]));
			appendStringInfo(&s, ": %d", i);
		}
		appendStringInfoChar(&s, '}');
		put_json(rsinfo, "vocab.json", &s);
	}

	/* the tokenizer: its class, the language tokens in id order (added tokens at their ids), the defaults */
	appendStringInfo(&s, "{\"tokenizer_class\": \"%s\", \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", "
					 "\"sep_token\": \"</s>\", \"pad_token\": \"<pad>\", \"unk_token\": \"<unk>\", "
					 "\"clean_up_tokenization_spaces\": true, \"model_max_length\": %d, \"sp_model_kwargs\": {}, ",
					 nllb ? "NllbTokenizer" : "M2M100Tokenizer", c.max_positions);
	if (nllb)
		appendStringInfo(&s, "\"mask_token\": \"<mask>\", \"legacy_behaviour\": %s, ", legacy ? "true" : "false");
	else
		appendStringInfo(&s, "\"language_codes\": \"%s\", \"num_madeup_words\": %d, ",
						 language_codes_name(codes, n_languages), c.vocab_size - first - n_languages);
	appendStringInfoString(&s, "\"src_lang\": ");
	escape_json(&s, source != NULL ? source : TextDatumGetCString(codes[0]));
	appendStringInfoString(&s, ", \"tgt_lang\": ");
	escape_json(&s, target != NULL ? target : TextDatumGetCString(codes[0]));
	/* language tokens that are text (language_tokens_special false) are neither listed nor added tokens */
	appendStringInfoString(&s, ", \"additional_special_tokens\": ");
	append_text_array(&s, codes, special ? n_languages : 0, nllb ? "" : "__", nllb ? "" : "__");
	appendStringInfoString(&s, ", \"added_tokens_decoder\": {");
	for (i = 0; i < 4; i++)
		appendStringInfo(&s, "%s\"%d\": {\"content\": \"%s\", \"lstrip\": false, \"normalized\": false, "
						 "\"rstrip\": false, \"single_word\": false, \"special\": true}", i > 0 ? ", " : "", i,
						 fairseq_specials[i]);
	for (i = special ? 0 : n_languages; i < n_languages + (mask >= 0 ? 1 : 0); i++)
	{
		int			id = i < n_languages ? DatumGetInt32(ids[i]) : mask;

		appendStringInfo(&s, ", \"%d\": {\"content\": ", id);
		escape_json(&s, TextDatumGetCString(pieces[id]));
		appendStringInfoString(&s, ", \"lstrip\": false, \"normalized\": false, \"rstrip\": false, "
							   "\"single_word\": false, \"special\": true}");
	}
	appendStringInfoString(&s, "}}");
	put_json(rsinfo, "tokenizer_config.json", &s);
	appendStringInfoString(&s, "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"sep_token\": \"</s>\", "
						   "\"pad_token\": \"<pad>\", \"unk_token\": \"<unk>\", ");
	if (nllb)
		appendStringInfoString(&s, "\"mask_token\": \"<mask>\", ");
	appendStringInfoString(&s, "\"additional_special_tokens\": ");
	append_text_array(&s, codes, special ? n_languages : 0, nllb ? "" : "__", nllb ? "" : "__");
	appendStringInfoChar(&s, '}');
	put_json(rsinfo, "special_tokens_map.json", &s);
	SPI_finish();
	return (Datum) 0;
}
