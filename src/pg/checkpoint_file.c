/*
 * checkpoint_file.c - export_checkpoint and import_checkpoint: checkpoints
 * in and out of the database in the safetensors format (https://huggingface.co/docs/safetensors): an 8-byte
 * little-endian header length, a JSON header naming each tensor's dtype,
 * shape and byte range, then the raw little-endian data. Tensor names are
 * Hugging Face MarianMT's; the metadata carries the model configuration
 * and the SentencePiece vocabulary (base64), so the file stands alone.
 * Import reads the header with the engine's own parser (src/safetensors.h).
 */
#include "postgres.h"

#include <math.h>

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

#include "catalog.h"
#include "compat.h"
#include "safetensors.h"
#include "tensor_file.h"
#include "transformer.h"

PG_FUNCTION_INFO_V1(attention_export_checkpoint);
PG_FUNCTION_INFO_V1(attention_import_checkpoint);
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
	int			count;
	StringInfoData h;
	bytea	   *vocab,
			   *out;
	char	   *b64;
	int			b64_len;

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
		tensor_file_meta(&h, "format", "pt");
		tensor_file_meta(&h, "attention.format", CppAsString2(CHECKPOINT_FORMAT));
		tensor_file_meta(&h, "attention.model", model);
		tensor_file_meta(&h, "attention.config", config);
		tensor_file_meta(&h, "attention.vocabulary", vocabulary);
		tensor_file_meta(&h, "attention.step", step);
		tensor_file_meta(&h, "attention.kind", kind);
		require_model_owner(model, "export a checkpoint of");
		require_float_checkpoint(checkpoint_id, "exported");
	}
	b64_len = pg_b64_enc_len(VARSIZE_ANY_EXHDR(vocab));
	b64 = palloc(b64_len + 1);
	b64_len = pg_b64_encode((const pg_b64_byte *) VARDATA_ANY(vocab), VARSIZE_ANY_EXHDR(vocab), b64, b64_len);
	if (b64_len < 0)
		elog(ERROR, "could not encode the vocabulary");
	b64[b64_len] = '\0';
	tensor_file_meta(&h, "attention.vocabulary_model", b64);

	t = read_tensors(checkpoint_id, TENSORS_PARAMETERS, &count);
	if (count == 0)
		ereport(ERROR, (errcode(ERRCODE_NO_DATA),
						errmsg("checkpoint %lld has no parameter tensors", (long long) checkpoint_id)));
	out = tensor_file_write(t, count, h.data, psprintf("checkpoint %lld", (long long) checkpoint_id));
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
	static const char *const keys[2] = {"attention.format", "attention.step"};
	char	   *meta[2];
	TfConfig	c;
	TfTensor   *t;
	int			count;
	int32		model_id;
	int64		checkpoint_id,
				step = 0;
	bool		isnull;

	t = tensor_file_read(PG_GETARG_BYTEA_PP(1), &count, keys, meta, 2);
	if (meta[0] != NULL && strcmp(meta[0], CppAsString2(CHECKPOINT_FORMAT)) != 0)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("the safetensors file has checkpoint format \"%s\"; this library reads format %d",
							   meta[0], CHECKPOINT_FORMAT),
						errhint("Import it with the attention version that exported it, or a newer one.")));
	if (meta[1] != NULL)
		step = Max(0, strtoll(meta[1], NULL, 10));

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

	tensor_file_check(&c, t, count, psprintf("the safetensors file does not fit model \"%s\"", model));
	if (SPI_execute_with_args("INSERT INTO attention.checkpoints (model_id, kind, step) VALUES ($1, 'imported', $2) "
							  "RETURNING checkpoint_id", 2, (Oid[]) {INT4OID, INT8OID},
							  (Datum[]) {Int32GetDatum(model_id), Int64GetDatum(step)}, NULL, false, 1) != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "could not insert a checkpoint of model \"%s\"", model);
	checkpoint_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	write_tensors(checkpoint_id, t, count);
	SPI_finish();
	PG_RETURN_INT64(checkpoint_id);
}
