/*
 * corpus.c - parallel corpora: import_corpus (any query) and load_corpus
 * (line-aligned files on the server). Pairs are inserted in batches through
 * one prepared statement; an ERROR anywhere rolls the whole load back.
 */
#include "postgres.h"

#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "common/string.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "catalog.h"
#include "progress.h"
#include "rights.h"

PG_FUNCTION_INFO_V1(attention_import_corpus);
PG_FUNCTION_INFO_V1(attention_load_corpus);
PG_FUNCTION_INFO_V1(attention_drop_corpus);

#define PAIR_BATCH_SIZE 1000

/* Pairs waiting to be inserted into attention.corpus_pairs. */
typedef struct PairBatch
{
	SPIPlanPtr	insert_plan;
	int32		corpus_id;
	text	   *split;
	Datum		sources[PAIR_BATCH_SIZE];
	Datum		targets[PAIR_BATCH_SIZE];
	int			count;
	int64		inserted;
	MemoryContext batch_context;	/* holds the texts of the pending batch */
} PairBatch;

/* ERROR unless split is train, valid or test. */
static void
check_split(const char *split)
{
	if (strcmp(split, "train") != 0 && strcmp(split, "valid") != 0 && strcmp(split, "test") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid split \"%s\"", split),
				 errhint("The split must be \"train\", \"valid\" or \"test\".")));
}

/* Prepares a batch for corpus_id/split; call inside SPI. */
static void
batch_init(PairBatch *batch, int32 corpus_id, text *split)
{
	Oid			argtypes[4] = {INT4OID, TEXTOID, TEXTARRAYOID, TEXTARRAYOID};

	batch->insert_plan = SPI_prepare("INSERT INTO attention.corpus_pairs (corpus_id, split, source, target) "
									 "SELECT $1, $2, s, t FROM unnest($3, $4) AS u(s, t)",
									 4, argtypes);
	if (batch->insert_plan == NULL)
		elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
	batch->corpus_id = corpus_id;
	batch->split = split;
	batch->count = 0;
	batch->inserted = 0;
	batch->batch_context = AllocSetContextCreate(CurrentMemoryContext, "attention corpus batch",
												 ALLOCSET_DEFAULT_SIZES);
}

/* Inserts the pending pairs. */
static void
batch_flush(PairBatch *batch)
{
	Datum		values[4];

	if (batch->count == 0)
		return;
	values[0] = Int32GetDatum(batch->corpus_id);
	values[1] = PointerGetDatum(batch->split);
	values[2] = PointerGetDatum(construct_array(batch->sources, batch->count, TEXTOID, -1, false, TYPALIGN_INT));
	values[3] = PointerGetDatum(construct_array(batch->targets, batch->count, TEXTOID, -1, false, TYPALIGN_INT));
	if (SPI_execute_plan(batch->insert_plan, values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not insert corpus pairs");
	batch->inserted += SPI_processed;
	progress_add(batch->count);
	batch->count = 0;
	MemoryContextReset(batch->batch_context);
	CHECK_FOR_INTERRUPTS();
}

/* Queues one pair (copied into the batch context), flushing a full batch. */
static void
batch_add(PairBatch *batch, const char *source, int source_len, const char *target, int target_len)
{
	MemoryContext old = MemoryContextSwitchTo(batch->batch_context);

	batch->sources[batch->count] = PointerGetDatum(cstring_to_text_with_len(source, source_len));
	batch->targets[batch->count] = PointerGetDatum(cstring_to_text_with_len(target, target_len));
	MemoryContextSwitchTo(old);
	if (++batch->count == PAIR_BATCH_SIZE)
		batch_flush(batch);
}

/*
 * import_corpus(corpus text, query text, split text) -> bigint
 * Runs the query with the caller's privileges; its two columns (any types,
 * taken in their text form) become source and target.
 */
Datum
attention_import_corpus(PG_FUNCTION_ARGS)
{
	char	   *corpus = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *query = text_to_cstring(PG_GETARG_TEXT_PP(1));
	text	   *split = PG_GETARG_TEXT_PP(2);
	PairBatch	batch;
	SPIPlanPtr	plan;
	Portal		portal;
	int64		row = 0;

	check_split(text_to_cstring(split));
	SPI_connect();
	batch_init(&batch, require_owner("corpus", corpus, "add pairs to"), split);

	plan = SPI_prepare(query, 0, NULL);
	if (plan == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("could not prepare query \"%s\": %s", query, SPI_result_code_string(SPI_result))));
	if (!SPI_is_cursor_plan(plan))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("query \"%s\" does not return rows", query),
				 errhint("Pass a SELECT returning (source, target).")));
	portal = SPI_cursor_open(NULL, plan, NULL, NULL, true);
	progress_begin("import_corpus", corpus, "pairs", -1);

	for (;;)
	{
		uint64		i;
		SPITupleTable *tuptable;

		SPI_cursor_fetch(portal, true, PAIR_BATCH_SIZE);
		tuptable = SPI_tuptable;
		if (tuptable->tupdesc->natts != 2)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg_plural("query returns %d column, but import_corpus needs 2 (source, target)",
								   "query returns %d columns, but import_corpus needs 2 (source, target)",
								   tuptable->tupdesc->natts, tuptable->tupdesc->natts)));
		if (SPI_processed == 0)
			break;
		for (i = 0; i < SPI_processed; i++)
		{
			char	   *source = SPI_getvalue(tuptable->vals[i], tuptable->tupdesc, 1);
			char	   *target = SPI_getvalue(tuptable->vals[i], tuptable->tupdesc, 2);

			row++;
			if (source == NULL || target == NULL)
				ereport(ERROR,
						(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						 errmsg("row " INT64_FORMAT " of the query has a NULL %s", row,
								source == NULL ? "source" : "target"),
						 errhint("Filter out NULLs in the query, e.g. WHERE source IS NOT NULL AND target IS NOT NULL.")));
			batch_add(&batch, source, strlen(source), target, strlen(target));
			pfree(source);
			pfree(target);
		}
		SPI_freetuptable(tuptable);
	}
	SPI_cursor_close(portal);
	batch_flush(&batch);
	progress_end();
	SPI_finish();
	PG_RETURN_INT64(batch.inserted);
}

/* Opens a corpus file for reading; ERROR naming it when that fails. */
static FILE *
open_corpus_file(const char *path)
{
	FILE	   *file = AllocateFile(path, "r");

	if (file == NULL)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open corpus file \"%s\" for reading: %m", path)));
	return file;
}

/*
 * Reads the next line of file into buf without its line terminator;
 * false at end of file. ERROR when the line is not valid in the database
 * encoding or the read fails.
 */
static bool
read_corpus_line(FILE *file, const char *path, int64 lineno, StringInfo buf)
{
	if (!pg_get_line_buf(file, buf))
	{
		if (ferror(file))
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not read corpus file \"%s\": %m", path)));
		return false;
	}
	if (buf->len > 0 && buf->data[buf->len - 1] == '\n')
		buf->data[--buf->len] = '\0';
	if (buf->len > 0 && buf->data[buf->len - 1] == '\r')
		buf->data[--buf->len] = '\0';
	if (!pg_verify_mbstr(GetDatabaseEncoding(), buf->data, buf->len, true))
		ereport(ERROR,
				(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
				 errmsg("line " INT64_FORMAT " of corpus file \"%s\" is not valid %s",
						lineno, path, GetDatabaseEncodingName())));
	return true;
}

/*
 * load_corpus(corpus text, source_path text, target_path text, split text) -> bigint
 * Line i of the source file pairs with line i of the target file.
 */
Datum
attention_load_corpus(PG_FUNCTION_ARGS)
{
	char	   *corpus = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *source_path = text_to_cstring(PG_GETARG_TEXT_PP(1));
	char	   *target_path = text_to_cstring(PG_GETARG_TEXT_PP(2));
	text	   *split = PG_GETARG_TEXT_PP(3);
	PairBatch	batch;
	FILE	   *source_file;
	FILE	   *target_file;
	StringInfoData source_line;
	StringInfoData target_line;
	int64		lineno = 0;

	if (!has_privs_of_role(GetUserId(), ROLE_PG_READ_SERVER_FILES))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to load corpus files"),
				 errdetail("Only roles with privileges of the \"pg_read_server_files\" role may read files on the server."),
				 errhint("Use attention.import_corpus() or COPY FROM STDIN to load from the client.")));
	check_split(text_to_cstring(split));

	SPI_connect();
	batch_init(&batch, require_owner("corpus", corpus, "add pairs to"), split);
	source_file = open_corpus_file(source_path);
	target_file = open_corpus_file(target_path);
	progress_begin("load_corpus", corpus, "pairs", -1);
	initStringInfo(&source_line);
	initStringInfo(&target_line);

	for (;;)
	{
		bool		has_source = read_corpus_line(source_file, source_path, lineno + 1, &source_line);
		bool		has_target = read_corpus_line(target_file, target_path, lineno + 1, &target_line);

		if (has_source != has_target)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("corpus files have different line counts: \"%s\" has " INT64_FORMAT " lines, \"%s\" has more",
							has_source ? target_path : source_path, lineno,
							has_source ? source_path : target_path),
					 errhint("Line i of the source file must be the translation of line i of the target file; nothing was loaded.")));
		if (!has_source)
			break;
		lineno++;
		batch_add(&batch, source_line.data, source_line.len, target_line.data, target_line.len);
	}
	batch_flush(&batch);
	progress_end();
	FreeFile(source_file);
	FreeFile(target_file);
	SPI_finish();
	PG_RETURN_INT64(batch.inserted);
}

/*
 * drop_corpus(name text, cascade boolean) returns void: drops a corpus the
 * current role owns, with its pairs. The training jobs that used it, every
 * role's, refuse the drop unless cascade, which deletes them (their
 * checkpoints stay), as DROP ... CASCADE drops other owners' dependent
 * objects; a queued or running one refuses it either way. The jobs are read,
 * locked and deleted as the tables' owner, since the caller may not see other
 * roles' jobs (rights.h).
 */
Datum
attention_drop_corpus(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	bool		cascade = PG_GETARG_BOOL(1);
	Datum		id;
	AsTableOwner saved;
	uint64		r;

	SPI_connect();
	id = Int32GetDatum(require_owner("corpus", name, "drop"));
	as_table_owner(&saved);
	/*
	 * the corpus row first: no new job can name it (the foreign key's share
	 * lock waits) until the drop commits; then the jobs stay as read (the
	 * launcher resumes none of them meanwhile)
	 */
	if (SPI_execute_with_args("SELECT 1 FROM attention.corpora WHERE corpus_id = $1 FOR UPDATE", 1,
							  (Oid[]) {INT4OID}, &id, NULL, false, 0) != SPI_OK_SELECT ||
		SPI_execute_with_args("SELECT 1 FROM attention.jobs WHERE corpus_id = $1 FOR UPDATE", 1, (Oid[]) {INT4OID},
							  &id, NULL, false, 0) != SPI_OK_SELECT ||
		SPI_execute_with_args("SELECT v.job_id, v.status, m.name, m.owner FROM attention.training_jobs v "
							  "JOIN attention.models m ON m.model_id = v.model_id WHERE v.corpus_id = $1 "
							  "ORDER BY v.job_id", 1, (Oid[]) {INT4OID}, &id, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the training jobs of corpus \"%s\"", name);
	for (r = 0; r < SPI_processed; r++)
	{
		HeapTuple	tup = SPI_tuptable->vals[r];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *status = SPI_getvalue(tup, desc, 2);

		if (!cascade)
			ereport(ERROR, (errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
							errmsg("corpus \"%s\" is used by training job %s of model \"%s\"", name,
								   SPI_getvalue(tup, desc, 1), SPI_getvalue(tup, desc, 3)),
							errhint("attention.drop_corpus(name, cascade => true) drops the corpus with every job "
									"that used it (their checkpoints stay).")));
		if (strcmp(status, "queued") == 0 || strcmp(status, "running") == 0)
			ereport(ERROR, (errcode(ERRCODE_OBJECT_IN_USE),
							errmsg("corpus \"%s\" is used by training job %s of model \"%s\", which is %s", name,
								   SPI_getvalue(tup, desc, 1), SPI_getvalue(tup, desc, 3), status),
							errhint("The members of role %s, which owns the model, cancel it with "
									"attention.cancel_training(job).", SPI_getvalue(tup, desc, 4))));
	}
	if (SPI_execute_with_args("DELETE FROM attention.jobs WHERE corpus_id = $1", 1, (Oid[]) {INT4OID}, &id, NULL,
							  false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not delete the training jobs of corpus \"%s\"", name);
	end_as_table_owner(&saved);
	if (SPI_execute_with_args("DELETE FROM attention.corpora WHERE corpus_id = $1", 1, (Oid[]) {INT4OID}, &id, NULL,
							  false, 0) != SPI_OK_DELETE || SPI_processed != 1)
		elog(ERROR, "could not delete corpus \"%s\"", name);
	SPI_finish();
	PG_RETURN_VOID();
}
