/*
 * safetensors.c - checkpoints in and out of the database in the
 * safetensors format (https://huggingface.co/docs/safetensors): an 8-byte
 * little-endian header length, a JSON header naming each tensor's dtype,
 * shape and byte range, then the raw little-endian data. Tensor names are
 * Hugging Face MarianMT's; the metadata carries the model configuration
 * and the SentencePiece vocabulary (base64), so the file stands alone.
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
	uint64		len = VARSIZE_ANY_EXHDR(file),
				header_len;
	char	   *header;
	const char *data;
	uint64		data_len;
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

	if (len < 8)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("not a safetensors file: %llu bytes", (unsigned long long) len)));
	header_len = 0;
	for (i = 7; i >= 0; i--)
		header_len = (header_len << 8) | (unsigned char) bytes[i];	/* little-endian */
	if (header_len > len - 8)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("not a safetensors file: header length %llu exceeds the %llu bytes given",
							   (unsigned long long) header_len, (unsigned long long) len)));
	header = pnstrdup(bytes + 8, header_len);
	data = bytes + 8 + header_len;
	data_len = len - 8 - header_len;

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
	/* the header, through jsonb: every tensor but __metadata__, sorted by name */
	if (SPI_execute_with_args("SELECT h.key, h.value->>'dtype', "
							  "CASE WHEN jsonb_typeof(h.value->'shape') = 'array' THEN "
							  "ARRAY(SELECT x::bigint FROM jsonb_array_elements_text(h.value->'shape') x) END, "
							  "(h.value->'data_offsets'->>0)::numeric, (h.value->'data_offsets'->>1)::numeric "
							  "FROM jsonb_each($1::jsonb) h WHERE h.key <> '__metadata__' ORDER BY h.key", 1,
							  (Oid[]) {TEXTOID}, (Datum[]) {CStringGetTextDatum(header)}, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the safetensors header");
	count = (int) SPI_processed;
	t = palloc0(Max(count, 1) * sizeof(TfTensor));
	for (i = 0; i < count; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *name = SPI_getvalue(tup, desc, 1);
		char	   *dtype = SPI_getvalue(tup, desc, 2);
		char	   *begin_s = SPI_getvalue(tup, desc, 4);
		char	   *end_s = SPI_getvalue(tup, desc, 5);
		Datum		shape_d = SPI_getbinval(tup, desc, 3, &isnull);
		ArrayType  *shape;
		int			ndim,
					d;
		int64		elements = 1;
		double		begin,
					end;

		if (strlen(name) >= sizeof(t[i].name))
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("tensor name \"%s\" is too long", name)));
		if (dtype == NULL || strcmp(dtype, "F32") != 0)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("tensor \"%s\" has dtype %s; only F32 can be imported", name, dtype ? dtype : "(none)")));
		if (isnull || begin_s == NULL || end_s == NULL)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("tensor \"%s\" lacks a shape or data_offsets", name)));
		shape = DatumGetArrayTypeP(shape_d);
		ndim = ArrayGetNItems(ARR_NDIM(shape), ARR_DIMS(shape));
		if (ndim > TF_MAX_DIMS)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("tensor \"%s\" has %d dimensions, more than %d", name, ndim, TF_MAX_DIMS)));
		strlcpy(t[i].name, name, sizeof(t[i].name));
		t[i].dtype = TF_FLOAT32;
		t[i].ndim = ndim;
		for (d = 0; d < ndim; d++)
		{
			t[i].shape[d] = ((int64 *) ARR_DATA_PTR(shape))[d];
			if (t[i].shape[d] < 0 || t[i].shape[d] > PG_INT32_MAX)
				ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
								errmsg("tensor \"%s\" has an invalid shape", name)));
			elements *= t[i].shape[d];
		}
		begin = strtod(begin_s, NULL);
		end = strtod(end_s, NULL);
		if (!(begin >= 0 && end >= begin && end <= (double) data_len && end - begin == (double) elements * 4))
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("tensor \"%s\": data_offsets [%s, %s] do not hold its %lld floats within the %llu data bytes",
								   name, begin_s, end_s, (long long) elements, (unsigned long long) data_len)));
		t[i].data = (void *) (data + (uint64) begin);
		t[i].bytes = (size_t) (end - begin);
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

	if (SPI_execute_with_args("SELECT (($1::jsonb)->'__metadata__'->>'attention.step')", 1, (Oid[]) {TEXTOID},
							  (Datum[]) {CStringGetTextDatum(header)}, NULL, true, 1) == SPI_OK_SELECT &&
		SPI_processed == 1)
	{
		char	   *s = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);

		if (s != NULL)
			step = Max(0, strtoll(s, NULL, 10));
	}
	if (SPI_execute_with_args("INSERT INTO attention.checkpoints (model_id, kind, step) VALUES ($1, 'imported', $2) "
							  "RETURNING checkpoint_id", 2, (Oid[]) {INT4OID, INT8OID},
							  (Datum[]) {Int32GetDatum(model_id), Int64GetDatum(step)}, NULL, false, 1) != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "could not insert a checkpoint of model \"%s\"", model);
	checkpoint_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	write_tensors(checkpoint_id, t, count);
	SPI_finish();
	PG_RETURN_INT64(checkpoint_id);
}
