/*
 * safetensors.c - checkpoints in and out of the database in the
 * safetensors format (https://huggingface.co/docs/safetensors): an 8-byte
 * little-endian header length, a JSON header naming each tensor's dtype,
 * shape and byte range, then the raw little-endian data. Tensor names are
 * Hugging Face MarianMT's; the metadata carries the model configuration
 * and the SentencePiece vocabulary (base64), so the file stands alone.
 * Import reads the header with the engine's own parser (src/safetensors.h).
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/base64.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include "attention.h"
#include "safetensors.h"

PG_FUNCTION_INFO_V1(attention_export_checkpoint);
PG_FUNCTION_INFO_V1(attention_import_checkpoint);

/* Appends "key": "value" (both JSON-escaped) to a metadata object. */
static void
append_meta(StringInfo s, const char *key, const char *value)
{
	if (s->data[s->len - 1] != '{')
		appendStringInfoChar(s, ',');
	escape_json(s, key);
	appendStringInfoChar(s, ':');
	escape_json(s, value);
}

/*
 * export_checkpoint(checkpoint bigint) returns bytea: the checkpoint's
 * parameters (no optimizer state) as a safetensors file, tensors sorted by
 * name, float32.
 */
Datum
attention_export_checkpoint(PG_FUNCTION_ARGS)
{
	int64		checkpoint_id = PG_GETARG_INT64(0);
	TfTensor   *t;
	int			count,
				i,
				d;
	StringInfoData h;
	bytea	   *vocab,
			   *out;
	char	   *b64;
	int			b64_len;
	uint64		data_bytes = 0,
				offset = 0,
				header_len,
				total;
	char	   *p;
	char		number[32];

	SPI_connect();
	if (SPI_execute_with_args("SELECT m.name, m.config::text, v.name, v.model, c.step, c.kind "
							  "FROM attention.checkpoints c JOIN attention.models m USING (model_id) "
							  "JOIN attention.vocabularies v USING (vocabulary_id) WHERE c.checkpoint_id = $1", 1,
							  (Oid[]) {INT8OID}, (Datum[]) {Int64GetDatum(checkpoint_id)}, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read attention.checkpoints");
	if (SPI_processed == 0)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
						errmsg("checkpoint %lld does not exist", (long long) checkpoint_id)));
	{
		HeapTuple	tup = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *model = SPI_getvalue(tup, desc, 1);
		char	   *config = SPI_getvalue(tup, desc, 2);
		char	   *vocabulary = SPI_getvalue(tup, desc, 3);
		char	   *step = SPI_getvalue(tup, desc, 5);
		char	   *kind = SPI_getvalue(tup, desc, 6);
		bool		isnull;

		vocab = DatumGetByteaPCopy(SPI_getbinval(tup, desc, 4, &isnull));
		initStringInfo(&h);
		appendStringInfoString(&h, "{\"__metadata__\":{");
		append_meta(&h, "format", "pt");
		append_meta(&h, "attention.format", CppAsString2(CHECKPOINT_FORMAT));
		append_meta(&h, "attention.model", model);
		append_meta(&h, "attention.config", config);
		append_meta(&h, "attention.vocabulary", vocabulary);
		append_meta(&h, "attention.step", step);
		append_meta(&h, "attention.kind", kind);
		require_model_owner(model, "export a checkpoint of");
	}
	b64_len = pg_b64_enc_len(VARSIZE_ANY_EXHDR(vocab));
	b64 = palloc(b64_len + 1);
	b64_len = pg_b64_encode(VARDATA_ANY(vocab), VARSIZE_ANY_EXHDR(vocab), b64, b64_len);
	if (b64_len < 0)
		elog(ERROR, "could not encode the vocabulary");
	b64[b64_len] = '\0';
	append_meta(&h, "attention.vocabulary_model", b64);
	appendStringInfoChar(&h, '}');

	t = read_tensors(checkpoint_id, TENSORS_PARAMETERS, &count);
	if (count == 0)
		ereport(ERROR, (errcode(ERRCODE_NO_DATA),
						errmsg("checkpoint %lld has no parameter tensors", (long long) checkpoint_id)));
	for (i = 0; i < count; i++)
	{
		if (t[i].dtype != TF_FLOAT32)
			ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
							errmsg("checkpoint %lld: parameter \"%s\" is not float32", (long long) checkpoint_id,
								   t[i].name)));
		appendStringInfoChar(&h, ',');
		escape_json(&h, t[i].name);
		appendStringInfoString(&h, ":{\"dtype\":\"F32\",\"shape\":[");
		for (d = 0; d < t[i].ndim; d++)
			appendStringInfo(&h, "%s" INT64_FORMAT, d > 0 ? "," : "", t[i].shape[d]);
		snprintf(number, sizeof(number), UINT64_FORMAT, offset + t[i].bytes);
		appendStringInfo(&h, "],\"data_offsets\":[" UINT64_FORMAT ",%s]}", offset, number);
		offset += t[i].bytes;
	}
	data_bytes = offset;
	appendStringInfoChar(&h, '}');
	while (h.len % 8 != 0)
		appendStringInfoChar(&h, ' ');	/* the format pads the header to 8 bytes with spaces */
	header_len = h.len;
	total = 8 + header_len + data_bytes;
	if (total + VARHDRSZ > MaxAllocSize)
		ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						errmsg("checkpoint %lld is %llu bytes as safetensors, over the 1 GB bytea limit",
							   (long long) checkpoint_id, (unsigned long long) total)));
	out = SPI_palloc(VARHDRSZ + total);
	SET_VARSIZE(out, VARHDRSZ + total);
	p = VARDATA(out);
	for (i = 0; i < 8; i++)
		p[i] = (char) ((header_len >> (8 * i)) & 0xff);	/* little-endian */
	memcpy(p + 8, h.data, header_len);
	p += 8 + header_len;
	for (i = 0; i < count; i++)
	{
		memcpy(p, t[i].data, t[i].bytes);
		p += t[i].bytes;
	}
	SPI_finish();
	PG_RETURN_BYTEA_P(out);
}

/*
 * import_checkpoint(model text, data bytea) returns bigint: a safetensors
 * file with exactly the model's parameters (names, shapes, float32) as a
 * new checkpoint of kind 'imported'; the bytes are stored as given.
 */
Datum
attention_import_checkpoint(PG_FUNCTION_ARGS)
{
	char	   *model = text_to_cstring(PG_GETARG_TEXT_PP(0));
	bytea	   *file = PG_GETARG_BYTEA_PP(1);
	const char *bytes = VARDATA_ANY(file);
	uint64		len = VARSIZE_ANY_EXHDR(file);
	StHeader	header;
	StTensor   *entries;
	const char *data;
	const char *format;
	const char *step_s;
	TfConfig	c;
	TfTensor   *t;
	TfModel    *engine;
	int			count,
				i;
	int32		model_id;
	int64		checkpoint_id,
				step = 0;
	bool		isnull;
	char		err[TF_ERRLEN];

	if (st_parse(bytes, len, &header, err, sizeof(err)) != 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("%s", err)));
	/* palloc'd copies, so that an ERROR below leaks nothing */
	count = header.count;
	entries = palloc(Max(count, 1) * sizeof(StTensor));
	memcpy(entries, header.tensors, count * sizeof(StTensor));
	format = st_meta(&header, "attention.format");
	if (format != NULL && strcmp(format, CppAsString2(CHECKPOINT_FORMAT)) != 0)
	{
		char	   *f = pstrdup(format);

		st_free(&header);
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("the safetensors file has checkpoint format \"%s\"; this library reads format %d",
							   f, CHECKPOINT_FORMAT),
						errhint("Import it with the attention version that exported it, or a newer one.")));
	}
	step_s = st_meta(&header, "attention.step");
	if (step_s != NULL)
		step = Max(0, strtoll(step_s, NULL, 10));
	data = bytes + 8 + header.header_len;
	st_free(&header);

	SPI_connect();
	model_id = require_model_owner(model, "import a checkpoint into");
	read_model_row(model);
	{
		HeapTuple	tup = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		int			vocab_size = DatumGetInt32(SPI_getbinval(tup, desc, 4, &isnull));
		int			pad_id = DatumGetInt32(SPI_getbinval(tup, desc, 5, &isnull));

		attention_config_from_jsonb(DatumGetJsonbP(SPI_getbinval(tup, desc, 2, &isnull)), vocab_size, pad_id, &c);
	}
	t = palloc0(Max(count, 1) * sizeof(TfTensor));
	for (i = 0; i < count; i++)
	{
		const StTensor *e = &entries[i];
		int64		elements = 1;
		int			d;

		if (strlen(e->name) >= sizeof(t[i].name))
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("tensor name \"%s\" is too long", e->name)));
		if (strcmp(e->dtype, "F32") != 0)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("tensor \"%s\" has dtype %s; only F32 can be imported", e->name, e->dtype)));
		if (e->ndim > TF_MAX_DIMS)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("tensor \"%s\" has %d dimensions, more than %d", e->name, e->ndim, TF_MAX_DIMS)));
		strlcpy(t[i].name, e->name, sizeof(t[i].name));
		t[i].dtype = TF_FLOAT32;
		t[i].ndim = e->ndim;
		for (d = 0; d < e->ndim; d++)
		{
			t[i].shape[d] = e->shape[d];
			if (e->shape[d] > PG_INT32_MAX)
				ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
								errmsg("tensor \"%s\" has an invalid shape", e->name)));
			elements *= e->shape[d];
		}
		if (e->end - e->begin != (uint64) elements * 4)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("tensor \"%s\": data_offsets [%llu, %llu] do not hold its %lld floats",
								   e->name, (unsigned long long) e->begin, (unsigned long long) e->end,
								   (long long) elements)));
		t[i].data = (void *) (data + e->begin);
		t[i].bytes = (size_t) (e->end - e->begin);
	}

	/* the engine checks names and shapes against the model, naming the first that differs */
	engine = tf_model_create_inference(&c, "cpu", 1, err, sizeof(err));
	if (engine == NULL)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("could not create model \"%s\": %s", model, err)));
	if (tf_model_load(engine, t, count, err, sizeof(err)) != TF_OK)
	{
		tf_model_free(engine);
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("the safetensors file does not fit model \"%s\": %s", model, err)));
	}
	tf_model_free(engine);
	if (SPI_execute_with_args("INSERT INTO attention.checkpoints (model_id, kind, step) VALUES ($1, 'imported', $2) "
							  "RETURNING checkpoint_id", 2, (Oid[]) {INT4OID, INT8OID},
							  (Datum[]) {Int32GetDatum(model_id), Int64GetDatum(step)}, NULL, false, 1) != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "could not insert a checkpoint of model \"%s\"", model);
	checkpoint_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	write_tensors(checkpoint_id, t, count);
	SPI_finish();
	PG_RETURN_INT64(checkpoint_id);
}
