/*
 * translate_column.c - the translate_column procedure: translates a
 * table's column in place, in length-sorted batches committed one by one,
 * rows addressed by the primary key; each batch through the model's
 * translation service when attention.use_service lets it (translate_texts).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "portability/instr_time.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "catalog.h"
#include "progress.h"
#include "settings.h"
#include "transformer.h"
#include "translation.h"

PG_FUNCTION_INFO_V1(attention_translate_column);

/* Seconds between translate_column's progress notices. */
#define NOTICE_SECONDS 5.0

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
 * translate_column(relation, source_column, target_column, model, batch_size,
 * target_language, source_language):
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
	text	   *model,
			   *target_language,
			   *source_language;
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

	model = PG_ARGISNULL(3) ? NULL : PG_GETARG_TEXT_PP(3);
	/* the languages (the 0.2.0 definition has no such arguments) */
	target_language = PG_NARGS() > 5 && !PG_ARGISNULL(5) ? PG_GETARG_TEXT_PP(5) : NULL;
	source_language = PG_NARGS() > 6 && !PG_ARGISNULL(6) ? PG_GETARG_TEXT_PP(6) : NULL;
	INSTR_TIME_SET_CURRENT(start);
	last_notice = start;
	progress_begin("translate_column", psprintf("%s: %s -> %s", rel, source_column, target_column), "rows", total);
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
		/* through the model's service like translate(): a redeploy applies from the next batch */
		translate_texts(model, BEAM_SIZE_OF_MODEL, TF_DEFAULT_LENGTH_PENALTY, TF_DEFAULT_MAX_LENGTH_OFFSET,
						target_language, source_language, texts, n, BATCH_SENTENCES, results);
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
		progress_add(n);
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
	progress_end();
	SPI_finish();
	PG_RETURN_VOID();
}
