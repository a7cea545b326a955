/*
 * checkpoint.c - the lifecycle of checkpoints in tables: averaging the
 * last ones (the paper's section 6.1: the deployed model is the average of
 * the last checkpoints) and quantizing one to int8.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "catalog.h"
#include "progress.h"
#include "transformer.h"

PG_FUNCTION_INFO_V1(attention_average_checkpoints);
PG_FUNCTION_INFO_V1(attention_quantize);

/*
 * Reads tensor `name` of a checkpoint as float32 (chunks joined) into
 * *data (palloc'd), its shape into *ndim and shape [TF_MAX_DIMS]; returns
 * the number of floats. ERROR naming the tensor when it is missing, not
 * float32, or of more than TF_MAX_DIMS dimensions.
 */
static size_t
read_float_tensor(int64 checkpoint_id, const char *name, float **data, int *ndim, int64 *shape)
{
	Oid			types[2] = {INT8OID, TEXTOID};
	Datum		values[2] = {Int64GetDatum(checkpoint_id), CStringGetTextDatum(name)};
	size_t		bytes = 0;
	uint64		r;
	bool		isnull;

	if (SPI_execute_with_args("SELECT dtype, shape, bytes FROM attention.checkpoint_tensors "
							  "WHERE checkpoint_id = $1 AND name = $2 ORDER BY chunk", 2, types, values, NULL,
							  true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read checkpoint %lld", (long long) checkpoint_id);
	if (SPI_processed == 0 || strcmp(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1), "float32") != 0)
		ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
						errmsg("checkpoint %lld has no float32 tensor \"%s\"", (long long) checkpoint_id, name),
						errhint("Only checkpoints of the same model, with the same tensors, can be averaged.")));
	{
		ArrayType  *dims = DatumGetArrayTypeP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
		int			d;

		*ndim = ArrayGetNItems(ARR_NDIM(dims), ARR_DIMS(dims));
		if (*ndim > TF_MAX_DIMS || ARR_HASNULL(dims))
			ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
							errmsg("checkpoint %lld: tensor \"%s\" has an unsupported shape",
								   (long long) checkpoint_id, name)));
		for (d = 0; d < *ndim; d++)
			shape[d] = ((int64 *) ARR_DATA_PTR(dims))[d];
	}
	*data = NULL;
	for (r = 0; r < SPI_processed; r++)
	{
		bytea	   *b = DatumGetByteaPP(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 3, &isnull));
		size_t		n = VARSIZE_ANY_EXHDR(b);

		*data = *data == NULL ? palloc(Max(n, 1)) : repalloc_huge(*data, bytes + n);
		memcpy((char *) *data + bytes, VARDATA_ANY(b), n);
		bytes += n;
	}
	return bytes / sizeof(float);
}

/*
 * average_checkpoints(model text, last_n int) returns bigint: a new
 * checkpoint whose parameters are the element-wise mean (in double
 * precision, so identical inputs give themselves back) of the model's
 * last_n newest trained checkpoints; it records them in averaged_from.
 * Averages and int8 checkpoints are never among them.
 */
Datum
attention_average_checkpoints(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	int32		last_n = PG_GETARG_INT32(1);
	Oid			types[2] = {INT4OID, INT4OID};
	int32		model_id;
	int64	   *ids;
	Datum	   *id_datums;
	int64		step,
				average_id;
	int			n,
				i,
				t,
				count;
	char	  **names;
	bool		isnull;

	if (last_n < 1 || last_n > 1000)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("last_n %d is out of range", last_n),
						errhint("last_n must be between 1 and 1000 (the paper averages 5 or 20).")));
	SPI_connect();
	model_id = require_model_owner(name, "average checkpoints of");
	if (SPI_execute_with_args("SELECT checkpoint_id, step FROM attention.checkpoints "
							  "WHERE model_id = $1 AND kind NOT IN ('average', 'quantized') "
							  "ORDER BY step DESC, checkpoint_id DESC LIMIT $2", 2, types,
							  (Datum[]) {Int32GetDatum(model_id), Int32GetDatum(last_n)}, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the checkpoints of model \"%s\"", name);
	n = (int) SPI_processed;
	if (n == 0)
		ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						errmsg("model \"%s\" has no checkpoints to average", name)));
	ids = palloc(n * sizeof(int64));
	id_datums = palloc(n * sizeof(Datum));
	step = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	for (i = 0; i < n; i++)
	{
		ids[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
		id_datums[i] = Int64GetDatum(ids[i]);
	}

	/* the parameters: every float32 tensor of the newest one that is not optimizer state */
	if (SPI_execute_with_args("SELECT DISTINCT name FROM attention.checkpoint_tensors WHERE checkpoint_id = $1 "
							  "AND dtype = 'float32' AND name NOT LIKE 'optimizer.%' ORDER BY name", 1,
							  (Oid[]) {INT8OID}, (Datum[]) {Int64GetDatum(ids[0])}, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read checkpoint %lld", (long long) ids[0]);
	count = (int) SPI_processed;
	names = palloc(Max(count, 1) * sizeof(char *));
	for (t = 0; t < count; t++)
		names[t] = SPI_getvalue(SPI_tuptable->vals[t], SPI_tuptable->tupdesc, 1);

	if (SPI_execute_with_args("INSERT INTO attention.checkpoints (model_id, kind, step, averaged_from) "
							  "VALUES ($1, 'average', $2, $3) RETURNING checkpoint_id", 3,
							  (Oid[]) {INT4OID, INT8OID, INT8ARRAYOID},
							  (Datum[]) {Int32GetDatum(model_id), Int64GetDatum(step),
								  PointerGetDatum(construct_array(id_datums, n, INT8OID, 8, FLOAT8PASSBYVAL,
																  TYPALIGN_DOUBLE))},
							  NULL, false, 1) != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "could not insert the average of model \"%s\"", name);
	average_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	progress_begin("average_checkpoints", psprintf("%s: %d checkpoints", name, n), "tensors", count);

	for (t = 0; t < count; t++)
	{
		double	   *sum = NULL;
		float	   *data,
				   *mean;
		size_t		len = 0,
					j;
		TfTensor	out;

		memset(&out, 0, sizeof(out));
		for (i = 0; i < n; i++)
		{
			int			ndim;
			int64		shape[TF_MAX_DIMS] = {0};
			size_t		got = read_float_tensor(ids[i], names[t], &data, &ndim, shape);

			CHECK_FOR_INTERRUPTS();
			if (i == 0)
			{
				len = got;
				out.ndim = ndim;
				memcpy(out.shape, shape, sizeof(shape));
				sum = palloc_extended(Max(len, 1) * sizeof(double), MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
			}
			else if (got != len || ndim != out.ndim || memcmp(shape, out.shape, sizeof(shape)) != 0)
				ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
								errmsg("tensor \"%s\" differs in shape between checkpoints %lld and %lld",
									   names[t], (long long) ids[i], (long long) ids[0])));
			for (j = 0; j < len; j++)
				sum[j] += data[j];
			pfree(data);
		}
		mean = palloc_extended(Max(len, 1) * sizeof(float), MCXT_ALLOC_HUGE);
		for (j = 0; j < len; j++)
			mean[j] = (float) (sum[j] / n);
		strlcpy(out.name, names[t], sizeof(out.name));
		out.dtype = TF_FLOAT32;
		out.data = mean;
		out.bytes = len * sizeof(float);
		write_tensors(average_id, &out, 1);
		pfree(sum);
		pfree(mean);
	}
	progress_end();
	SPI_finish();
	PG_RETURN_INT64(average_id);
}

/*
 * quantize(checkpoint bigint, dtype text) returns bigint: a new checkpoint
 * (kind quantized, format 2, quantized_from the source, the source's step)
 * with the source's parameters quantized by the engine (tf_model_quantize:
 * int8 weights with a float32 scale per output row, the rest float32).
 * Needs the model's owner. ERRORs: an unknown dtype, a checkpoint that does
 * not exist, is already int8, or does not load.
 */
Datum
attention_quantize(PG_FUNCTION_ARGS)
{
	int64		checkpoint_id = PG_GETARG_INT64(0);
	char	   *dtype = text_to_cstring(PG_GETARG_TEXT_PP(1));
	char	   *model,
			   *kind;
	int32		model_id;
	int64		step;
	volatile int64 quantized_id = 0;
	TfConfig	c;
	TfTensor   *tensors;
	TfTensor   *volatile out = NULL;
	int			count,
				n = 0;
	TfModel    *volatile fp32 = NULL;
	TfModel    *volatile q = NULL;
	char		err[TF_ERRLEN];
	bool		isnull;

	if (strcmp(dtype, "int8") != 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("quantize has no dtype \"%s\"", dtype),
						errhint("The dtype is int8 (weights of every matrix product as int8 with a float32 scale per row).")));
	SPI_connect();
	if (SPI_execute_with_args("SELECT m.name, c.kind, c.step, c.model_id FROM attention.checkpoints c "
							  "JOIN attention.models m USING (model_id) WHERE c.checkpoint_id = $1", 1,
							  (Oid[]) {INT8OID}, (Datum[]) {Int64GetDatum(checkpoint_id)}, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read attention.checkpoints");
	if (SPI_processed == 0)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
						errmsg("checkpoint %lld does not exist", (long long) checkpoint_id)));
	model = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	kind = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	step = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull));
	model_id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull));
	require_model_owner(model, "quantize a checkpoint of");
	if (strcmp(kind, "quantized") == 0)
		ereport(ERROR, (errcode(ERRCODE_WRONG_OBJECT_TYPE),
						errmsg("checkpoint %lld is already int8 (kind quantized)", (long long) checkpoint_id),
						errhint("Quantize the float32 checkpoint it came from.")));
	read_model_row(model);
	attention_config_from_jsonb(DatumGetJsonbP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)),
								DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull)),
								DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 5, &isnull)), &c);
	tensors = read_tensors(checkpoint_id, TENSORS_PARAMETERS, &count);

	PG_TRY();
	{
		TfTensor   *list = NULL;

		fp32 = tf_model_create_inference(&c, "cpu", 1, err, sizeof(err));
		if (fp32 == NULL)
			ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY),
							errmsg("could not create model \"%s\": %s", model, err)));
		if (tf_model_load(fp32, tensors, count, err, sizeof(err)) != TF_OK)
			ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
							errmsg("could not load checkpoint %lld of model \"%s\": %s", (long long) checkpoint_id,
								   model, err)));
		q = tf_model_quantize(fp32, 1, err, sizeof(err));
		if (q != NULL && tf_model_tensors(q, &list, &n, err, sizeof(err)) == TF_OK)
			out = list;
		if (out == NULL)
			ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY),
							errmsg("could not quantize checkpoint %lld: %s", (long long) checkpoint_id, err)));
		if (SPI_execute_with_args("INSERT INTO attention.checkpoints (model_id, kind, step, format, quantized_from) "
								  "VALUES ($1, 'quantized', $2, " CppAsString2(CHECKPOINT_FORMAT_INT8) ", $3) "
								  "RETURNING checkpoint_id", 3, (Oid[]) {INT4OID, INT8OID, INT8OID},
								  (Datum[]) {Int32GetDatum(model_id), Int64GetDatum(step), Int64GetDatum(checkpoint_id)},
								  NULL, false, 1) != SPI_OK_INSERT_RETURNING)
			elog(ERROR, "could not insert a checkpoint of model \"%s\"", model);
		quantized_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		progress_begin("quantize", psprintf("%s: checkpoint %lld", model, (long long) checkpoint_id), "tensors", n);
		write_tensors(quantized_id, out, n);
		progress_end();
	}
	PG_FINALLY();
	{
		tf_tensors_free(out);
		tf_model_free(q);
		tf_model_free(fp32);
	}
	PG_END_TRY();
	SPI_finish();
	PG_RETURN_INT64(quantized_id);
}
