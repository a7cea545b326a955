/*
 * vocabulary.c - subword vocabularies: SentencePiece models stored in
 * attention.vocabularies, trained from a corpus or imported, and the
 * encode/tokenize/decode/vocabulary_pieces functions over them.
 *
 * A loaded model is C++ heap memory owned by a VocabHandle, which a memory
 * context callback frees, so an ERROR never leaks it. Scalar functions keep
 * their handle in fn_extra: a model is loaded once per query, not per row.
 */
#include "postgres.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "pgstat.h"
#include "port.h"
#include "portability/instr_time.h"
#include "storage/latch.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "catalog.h"
#include "compat.h"
#include "cpu_budget.h"
#include "spm.h"
#include "rights.h"
#include "wait_events.h"

PG_FUNCTION_INFO_V1(attention_train_vocabulary);
PG_FUNCTION_INFO_V1(attention_import_vocabulary);
PG_FUNCTION_INFO_V1(attention_drop_vocabulary);
PG_FUNCTION_INFO_V1(attention_encode);
PG_FUNCTION_INFO_V1(attention_tokenize);
PG_FUNCTION_INFO_V1(attention_decode);
PG_FUNCTION_INFO_V1(attention_vocabulary_pieces);

#define SPM_ERRLEN 512
#define MAX_VOCAB_SIZE 1000000

/* A loaded vocabulary; freed with the memory context it lives in. */
typedef struct VocabHandle
{
	MemoryContextCallback callback;
	char	   *name;			/* vocabulary name, or NULL before the first load */
	SpmModel   *model;
} VocabHandle;

/* Memory context callback: frees the SentencePiece model. */
static void
vocab_handle_free(void *arg)
{
	VocabHandle *handle = (VocabHandle *) arg;

	spm_free(handle->model);
	handle->model = NULL;
}

/* Creates an empty handle in context, freed with it. */
static VocabHandle *
vocab_handle_create(MemoryContext context)
{
	VocabHandle *handle = MemoryContextAllocZero(context, sizeof(VocabHandle));

	handle->callback.func = vocab_handle_free;
	handle->callback.arg = handle;
	MemoryContextRegisterResetCallback(context, &handle->callback);
	return handle;
}

/*
 * Parses model bytes into handle->model; ERROR with SQLSTATE sqlerrcode
 * (naming what) when they are not a valid model: a user's bytes are data
 * errors (class 22), a stored model's are corruption (class XX).
 */
static void
vocab_handle_parse(VocabHandle *handle, const char *bytes, size_t len, const char *what, int sqlerrcode)
{
	char		err[SPM_ERRLEN];

	spm_free(handle->model);
	handle->model = NULL;
	if (spm_load(bytes, len, &handle->model, err, sizeof(err)) != 0)
		ereport(ERROR,
				(errcode(sqlerrcode),
				 errmsg("%s is not a valid SentencePiece model", what),
				 errdetail("SentencePiece: %s", err)));
}

/* Loads the vocabulary called name into handle; ERROR when it does not exist. */
static void
vocab_handle_load(VocabHandle *handle, const char *name, MemoryContext name_context)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];

	SPI_connect();
	values[0] = CStringGetTextDatum(name);
	if (SPI_execute_with_args(psprintf("SELECT %s FROM attention.vocabularies v WHERE name = $1", vocabulary_columns()),
							  1, argtypes, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not look up vocabulary \"%s\"", name);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("vocabulary \"%s\" does not exist", name),
				 errhint("Create one with attention.train_vocabulary() or attention.import_vocabulary().")));
	spm_free(handle->model);
	handle->model = NULL;
	handle->model = vocabulary_load(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
									psprintf("the model of vocabulary \"%s\"", name), ERRCODE_DATA_CORRUPTED);
	SPI_finish();
	if (handle->name != NULL)
		pfree(handle->name);
	handle->name = MemoryContextStrdup(name_context, name);
}

/* The model of vocabulary `name`, cached in fn_extra for the rest of the query. */
static SpmModel *
cached_vocabulary(FunctionCallInfo fcinfo, text *name)
{
	VocabHandle *handle = (VocabHandle *) fcinfo->flinfo->fn_extra;
	char	   *cname = text_to_cstring(name);

	if (handle == NULL)
	{
		handle = vocab_handle_create(fcinfo->flinfo->fn_mcxt);
		fcinfo->flinfo->fn_extra = handle;
	}
	if (handle->model == NULL || strcmp(handle->name, cname) != 0)
		vocab_handle_load(handle, cname, fcinfo->flinfo->fn_mcxt);
	return handle->model;
}

/* ERROR with the SentencePiece message err, for vocabulary name. */
static void
spm_error(const char *action, text *name, const char *err)
{
	ereport(ERROR,
			(errcode(ERRCODE_INTERNAL_ERROR),
			 errmsg("could not %s with vocabulary \"%s\": %s", action, text_to_cstring(name), err)));
}

/* ERROR unless no vocabulary is called name yet; call inside SPI. */
static void
check_vocabulary_name_free(const char *name)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];

	values[0] = CStringGetTextDatum(name);
	if (SPI_execute_with_args("SELECT 1 FROM attention.vocabularies WHERE name = $1",
							  1, argtypes, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not look up vocabulary \"%s\"", name);
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("vocabulary \"%s\" already exists", name),
				 errhint("Choose another name, or drop it with attention.drop_vocabulary(name).")));
}

/*
 * ERROR unless the current role may insert into attention.vocabularies:
 * checked before a long training rather than after it.
 */
static void
check_insert_privilege(void)
{
	Oid			relid = RangeVarGetRelid(makeRangeVar("attention", "vocabularies", -1), NoLock, false);

	if (pg_class_aclcheck(relid, GetUserId(), ACL_INSERT) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_TABLE, "vocabularies");
}

/* A special id as a nullable INSERT value. */
static Datum
special_id(int id, char *null_flag)
{
	*null_flag = id >= 0 ? ' ' : 'n';
	return Int32GetDatum(id);
}

/*
 * Inserts a vocabulary row and returns its id; call inside SPI. corpus_id,
 * model_type, character_coverage, byte_fallback, sentences and seconds are
 * NULL for an imported model (corpus_id < 0, model_type NULL).
 */
static int32
insert_vocabulary(const char *name, int32 corpus_id, const char *model_type,
				  double character_coverage, bool byte_fallback, int64 sentences,
				  double seconds, const SpmModel *model, const char *bytes, size_t len)
{
	Oid			argtypes[13] = {TEXTOID, INT4OID, TEXTOID, INT4OID, INT4OID, INT4OID, INT4OID,
	INT4OID, FLOAT8OID, BOOLOID, INT8OID, FLOAT8OID, BYTEAOID};
	Datum		values[13];
	char		nulls[14] = "             ";
	bytea	   *data = palloc(VARHDRSZ + len);
	bool		trained = corpus_id >= 0;
	bool		isnull;

	SET_VARSIZE(data, VARHDRSZ + len);
	memcpy(VARDATA(data), bytes, len);
	values[0] = CStringGetTextDatum(name);
	values[1] = Int32GetDatum(corpus_id);
	values[2] = trained ? CStringGetTextDatum(model_type) : (Datum) 0;
	values[3] = Int32GetDatum(spm_size(model));
	values[4] = special_id(spm_pad_id(model), &nulls[4]);
	values[5] = special_id(spm_unk_id(model), &nulls[5]);
	values[6] = special_id(spm_bos_id(model), &nulls[6]);
	values[7] = special_id(spm_eos_id(model), &nulls[7]);
	values[8] = Float8GetDatum(character_coverage);
	values[9] = BoolGetDatum(byte_fallback);
	values[10] = Int64GetDatum(sentences);
	values[11] = Float8GetDatum(seconds);
	values[12] = PointerGetDatum(data);
	if (!trained)
		nulls[1] = nulls[2] = nulls[8] = nulls[9] = nulls[10] = nulls[11] = 'n';
	nulls[13] = '\0';

	if (SPI_execute_with_args("INSERT INTO attention.vocabularies (name, corpus_id, model_type, vocab_size, "
							  "pad_id, unk_id, bos_id, eos_id, character_coverage, byte_fallback, "
							  "training_sentences, training_seconds, model) "
							  "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) "
							  "RETURNING vocabulary_id",
							  13, argtypes, values, nulls, false, 1) != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "could not insert vocabulary \"%s\"", name);
	return DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/* Validates train_vocabulary's arguments; ERROR naming the bad one. */
static void
check_train_options(int32 vocab_size, const char *model_type, double character_coverage, int32 max_pairs)
{
	if (vocab_size < 8 || vocab_size > MAX_VOCAB_SIZE)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("vocab_size %d is out of range", vocab_size),
				 errhint("vocab_size must be between 8 and %d.", MAX_VOCAB_SIZE)));
	if (strcmp(model_type, "bpe") != 0 && strcmp(model_type, "unigram") != 0 &&
		strcmp(model_type, "char") != 0 && strcmp(model_type, "word") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid model_type \"%s\"", model_type),
				 errhint("model_type must be \"bpe\", \"unigram\", \"char\" or \"word\".")));
	if (!(character_coverage > 0.0 && character_coverage <= 1.0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("character_coverage %g is out of range", character_coverage),
				 errhint("character_coverage must be in (0, 1].")));
	if (max_pairs < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_pairs %d is negative", max_pairs),
				 errhint("Use 0 to train on every pair of the train split.")));
}

/*
 * Reads the source and target sentences of the corpus's train split (the
 * first max_pairs pairs by pair_id when max_pairs > 0), as the tables' owner
 * (the caller has checked the current role may use the corpus); inside SPI.
 * Returns the number of sentences, with pointers and byte lengths in the
 * palloc'd arrays *sentences and *lengths (of the current context).
 */
static int64
read_train_sentences(int32 corpus_id, int32 max_pairs, char ***sentences, size_t **lengths)
{
	AsTableOwner saved;
	Oid			argtypes[2] = {INT4OID, INT8OID};
	Datum		values[2];
	SPIPlanPtr	plan;
	Portal		portal;
	MemoryContext caller = CurrentMemoryContext;
	int64		n = 0;
	int64		cap = 1024;

	*sentences = palloc(cap * sizeof(char *));
	*lengths = palloc(cap * sizeof(size_t));
	values[0] = Int32GetDatum(corpus_id);
	values[1] = Int64GetDatum(max_pairs > 0 ? (int64) max_pairs : PG_INT64_MAX);
	as_table_owner(&saved);		/* the caller may use the corpus (require_usable); rights.h */
	plan = SPI_prepare("SELECT source, target FROM attention.corpus_pairs "
					   "WHERE corpus_id = $1 AND split = 'train' ORDER BY pair_id LIMIT $2",
					   2, argtypes);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
	portal = SPI_cursor_open(NULL, plan, values, NULL, true);
	for (;;)
	{
		uint64		i;

		SPI_cursor_fetch(portal, true, 10000);
		if (SPI_processed == 0)
			break;
		for (i = 0; i < SPI_processed; i++)
		{
			int			col;

			for (col = 1; col <= 2; col++)
			{
				bool		isnull;
				text	   *t = DatumGetTextPP(SPI_getbinval(SPI_tuptable->vals[i],
															 SPI_tuptable->tupdesc, col, &isnull));
				MemoryContext old = MemoryContextSwitchTo(caller);

				if (n == cap)
				{
					cap *= 2;
					*sentences = repalloc_huge(*sentences, cap * sizeof(char *));
					*lengths = repalloc_huge(*lengths, cap * sizeof(size_t));
				}
				(*lengths)[n] = VARSIZE_ANY_EXHDR(t);
				(*sentences)[n] = pnstrdup(VARDATA_ANY(t), (*lengths)[n]);
				n++;
				MemoryContextSwitchTo(old);
			}
		}
		SPI_freetuptable(SPI_tuptable);
		CHECK_FOR_INTERRUPTS();
	}
	SPI_cursor_close(portal);
	end_as_table_owner(&saved);
	return n;
}

/* Writes all of buf to fd; false on error. Used only in the training child. */
static bool
write_all(int fd, const char *buf, size_t len)
{
	while (len > 0)
	{
		ssize_t		w = write(fd, buf, len);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		buf += w;
		len -= (size_t) w;
	}
	return true;
}

/*
 * Body of the training child process: trains, writes 'M' + model bytes or
 * 'E' + message to fd, and leaves with _exit (no PostgreSQL exit callbacks:
 * the child shares the backend's memory image, never its duties).
 */
pg_noreturn static void
training_child(int fd, pid_t parent, char **sentences, size_t *lengths, int64 n,
			   const SpmTrainOptions *options)
{
	char		err[SPM_ERRLEN];
	char	   *bytes;
	size_t		len;
	sigset_t	none;
	bool		ok;
	static const int signals[] = {SIGHUP, SIGINT, SIGTERM, SIGQUIT, SIGALRM, SIGUSR1, SIGUSR2, SIGPIPE};
	size_t		i;

#ifdef __linux__
	prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
	if (getppid() != parent)
		_exit(1);
	for (i = 0; i < lengthof(signals); i++)
		pqsignal(signals[i], SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);

	if (spm_train((const char *const *) sentences, lengths, (size_t) n, options, &bytes, &len,
				  err, sizeof(err)) == 0)
		ok = write_all(fd, "M", 1) && write_all(fd, bytes, len);
	else
		ok = write_all(fd, "E", 1) && write_all(fd, err, strlen(err));
	_exit(ok ? 0 : 1);
}

/*
 * Runs SentencePiece training (which cannot be interrupted) in a child
 * process, while this backend waits on its latch and the pipe: a cancel,
 * statement_timeout or termination kills the child at once. The model
 * bytes end up in *model (palloc'd) and *model_len.
 */
static void
run_training(char **sentences, size_t *lengths, int64 n, const SpmTrainOptions *options,
			 char **model, size_t *model_len)
{
	int			fds[2];
	pid_t		pid;
	int			status;
	StringInfoData out;

	initStringInfo(&out);
	if (pipe(fds) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("could not create pipe for vocabulary training: %m")));
	fflush(NULL);
	pid = fork();
	if (pid < 0)
	{
		close(fds[0]);
		close(fds[1]);
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("could not start vocabulary training process: %m")));
	}
	if (pid == 0)
	{
		close(fds[0]);
		training_child(fds[1], getppid(), sentences, lengths, n, options);
	}
	close(fds[1]);
	if (fcntl(fds[0], F_SETFL, O_NONBLOCK) != 0)
		elog(WARNING, "could not make the training pipe non-blocking: %m");

	PG_TRY();
	{
		for (;;)
		{
			ssize_t		r;

			enlargeStringInfo(&out, 65536);
			r = read(fds[0], out.data + out.len, 65536);
			if (r > 0)
			{
				out.len += (int) r;
				out.data[out.len] = '\0';	/* enlargeStringInfo left room for it */
				continue;
			}
			if (r == 0)
				break;
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				ereport(ERROR,
						(errcode_for_file_access(),
						 errmsg("could not read from the vocabulary training process: %m")));
			(void) WaitLatchOrSocket(MyLatch,
									 WL_LATCH_SET | WL_SOCKET_READABLE | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
									 fds[0], 1000L, attention_wait_event(ATTENTION_WAIT_VOCABULARY_TRAINER));
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
	PG_CATCH();
	{
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		close(fds[0]);
		PG_RE_THROW();
	}
	PG_END_TRY();
	close(fds[0]);
	while (waitpid(pid, &status, 0) < 0)
	{
		if (errno != EINTR)
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not wait for the vocabulary training process: %m")));
	}

	if (out.len > 0 && out.data[0] == 'E')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("SentencePiece training failed: %s", out.data + 1),
				 errhint("A vocab_size larger than the corpus supports, or too small for its characters, fails here.")));
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || out.len < 1 || out.data[0] != 'M')
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("vocabulary training process failed: %s", wait_result_to_str(status))));
	*model = out.data + 1;
	*model_len = (size_t) out.len - 1;
}

/*
 * train_vocabulary(name, corpus, vocab_size, model_type, character_coverage,
 *                  byte_fallback, max_pairs) -> int
 * One joint model over the source and target sentences of the train split,
 * trained in memory (no temporary files).
 */
Datum
attention_train_vocabulary(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *corpus = text_to_cstring(PG_GETARG_TEXT_PP(1));
	int32		vocab_size = PG_GETARG_INT32(2);
	char	   *model_type = text_to_cstring(PG_GETARG_TEXT_PP(3));
	double		character_coverage = PG_GETARG_FLOAT8(4);
	bool		byte_fallback = PG_GETARG_BOOL(5);
	int32		max_pairs = PG_GETARG_INT32(6);
	SpmTrainOptions options;
	char	  **sentences;
	size_t	   *lengths;
	int64		n;
	int32		corpus_id;
	char	   *bytes = NULL;
	size_t		len = 0;
	instr_time	start,
				duration;
	VocabHandle *handle;
	int32		id;

	check_train_options(vocab_size, model_type, character_coverage, max_pairs);
	check_insert_privilege();
	SPI_connect();
	check_vocabulary_name_free(name);
	corpus_id = require_usable("corpus", corpus, "train a vocabulary on");
	n = read_train_sentences(corpus_id, max_pairs, &sentences, &lengths);
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("corpus \"%s\" has no train pairs", corpus),
				 errhint("Load pairs with split 'train' first (attention.import_corpus or attention.load_corpus).")));

	options.vocab_size = vocab_size;
	options.model_type = model_type;
	options.character_coverage = character_coverage;
	options.byte_fallback = byte_fallback;
	/* the threads go back by themselves when a cancel ends the training */
	options.num_threads = cpu_budget_take(0);

	INSTR_TIME_SET_CURRENT(start);
	run_training(sentences, lengths, n, &options, &bytes, &len);
	cpu_budget_give(options.num_threads);
	INSTR_TIME_SET_CURRENT(duration);
	INSTR_TIME_SUBTRACT(duration, start);

	handle = vocab_handle_create(CurrentMemoryContext);
	vocab_handle_parse(handle, bytes, len, "the trained model", ERRCODE_INTERNAL_ERROR);
	id = insert_vocabulary(name, corpus_id, model_type, character_coverage, byte_fallback, n,
						   INSTR_TIME_GET_DOUBLE(duration), handle->model, bytes, len);
	SPI_finish();
	PG_RETURN_INT32(id);
}

/* import_vocabulary(name text, model bytea) -> int: stores an existing .model. */
Datum
attention_import_vocabulary(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	bytea	   *model = PG_GETARG_BYTEA_PP(1);
	VocabHandle *handle = vocab_handle_create(CurrentMemoryContext);
	int32		id;

	vocab_handle_parse(handle, VARDATA_ANY(model), VARSIZE_ANY_EXHDR(model), "the imported model",
					   ERRCODE_INVALID_BINARY_REPRESENTATION);
	if (spm_unk_id(handle->model) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the imported model has no unknown-piece id")));
	check_insert_privilege();
	SPI_connect();
	check_vocabulary_name_free(name);
	id = insert_vocabulary(name, -1, NULL, 0, false, 0, 0, handle->model,
						   VARDATA_ANY(model), VARSIZE_ANY_EXHDR(model));
	SPI_finish();
	PG_RETURN_INT32(id);
}

/* encode(source text, vocabulary text) -> int[] */
Datum
attention_encode(PG_FUNCTION_ARGS)
{
	text	   *source = PG_GETARG_TEXT_PP(0);
	text	   *vocabulary = PG_GETARG_TEXT_PP(1);
	SpmModel   *model = cached_vocabulary(fcinfo, vocabulary);
	char		err[SPM_ERRLEN];
	int		   *ids;
	size_t		n,
				i;
	Datum	   *elems;

	if (spm_encode(model, SPM_SOURCE, VARDATA_ANY(source), VARSIZE_ANY_EXHDR(source), &ids, &n, err, sizeof(err)) != 0)
		spm_error("encode text", vocabulary, err);
	elems = palloc((n > 0 ? n : 1) * sizeof(Datum));
	for (i = 0; i < n; i++)
		elems[i] = Int32GetDatum(ids[i]);
	spm_free_buffer(ids);
	PG_RETURN_ARRAYTYPE_P(construct_array(elems, (int) n, INT4OID, sizeof(int32), true, TYPALIGN_INT));
}

/* tokenize(source text, vocabulary text) -> text[] */
Datum
attention_tokenize(PG_FUNCTION_ARGS)
{
	text	   *source = PG_GETARG_TEXT_PP(0);
	text	   *vocabulary = PG_GETARG_TEXT_PP(1);
	SpmModel   *model = cached_vocabulary(fcinfo, vocabulary);
	char		err[SPM_ERRLEN];
	char	   *pieces;
	size_t	   *offsets;
	size_t		n,
				i;
	Datum	   *elems;

	if (spm_encode_pieces(model, SPM_SOURCE, VARDATA_ANY(source), VARSIZE_ANY_EXHDR(source),
						  &pieces, &offsets, &n, err, sizeof(err)) != 0)
		spm_error("tokenize text", vocabulary, err);
	elems = palloc((n > 0 ? n : 1) * sizeof(Datum));
	for (i = 0; i < n; i++)
		elems[i] = PointerGetDatum(cstring_to_text_with_len(pieces + offsets[i],
															offsets[i + 1] - offsets[i]));
	spm_free_buffer(pieces);
	spm_free_buffer(offsets);
	PG_RETURN_ARRAYTYPE_P(construct_array(elems, (int) n, TEXTOID, -1, false, TYPALIGN_INT));
}

/* decode(ids int[], vocabulary text) -> text; ERROR naming an out-of-range id. */
Datum
attention_decode(PG_FUNCTION_ARGS)
{
	ArrayType  *array = PG_GETARG_ARRAYTYPE_P(0);
	text	   *vocabulary = PG_GETARG_TEXT_PP(1);
	SpmModel   *model = cached_vocabulary(fcinfo, vocabulary);
	int			size = spm_size(model);
	Datum	   *elems;
	bool	   *nulls;
	int			n,
				i;
	int		   *ids;
	char	   *out;
	size_t		len;
	char		err[SPM_ERRLEN];
	text	   *result;

	deconstruct_array(array, INT4OID, sizeof(int32), true, TYPALIGN_INT, &elems, &nulls, &n);
	ids = palloc((n > 0 ? n : 1) * sizeof(int));
	for (i = 0; i < n; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("id %d of the array is NULL", i + 1)));
		ids[i] = DatumGetInt32(elems[i]);
		if (ids[i] < 0 || ids[i] >= size)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("id %d is out of range for vocabulary \"%s\"", ids[i], text_to_cstring(vocabulary)),
					 errhint("Ids of this vocabulary are 0 to %d.", size - 1)));
	}
	if (spm_decode(model, ids, (size_t) n, &out, &len, err, sizeof(err)) != 0)
		spm_error("decode ids", vocabulary, err);
	result = cstring_to_text_with_len(out, (int) len);
	spm_free_buffer(out);
	PG_RETURN_TEXT_P(result);
}

/* vocabulary_pieces(vocabulary text) -> TABLE(id int, piece text, score real) */
Datum
attention_vocabulary_pieces(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	VocabHandle *handle = vocab_handle_create(CurrentMemoryContext);
	int			size,
				id;

	vocab_handle_load(handle, text_to_cstring(PG_GETARG_TEXT_PP(0)), CurrentMemoryContext);
	InitMaterializedSRF(fcinfo, 0);
	size = spm_size(handle->model);
	for (id = 0; id < size; id++)
	{
		Datum		values[3];
		bool		nulls[3] = {false, false, false};
		size_t		len;
		const char *piece = spm_piece(handle->model, id, &len);

		values[0] = Int32GetDatum(id);
		values[1] = PointerGetDatum(cstring_to_text_with_len(piece, (int) len));
		values[2] = Float4GetDatum(spm_score(handle->model, id));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		if (id % 1024 == 0)
			CHECK_FOR_INTERRUPTS();
	}
	return (Datum) 0;
}

/*
 * drop_vocabulary(name text, cascade boolean) returns void: drops a
 * vocabulary the current role owns. The models built on it, every role's,
 * refuse the drop unless cascade, which drops them with their checkpoints and
 * jobs (as DROP ... CASCADE drops other owners' dependent objects); a model
 * with a queued or running job refuses it either way. The models are read,
 * locked and deleted as the tables' owner, whose rights the caller lacks on
 * other roles' models (rights.h).
 */
Datum
attention_drop_vocabulary(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	bool		cascade = PG_GETARG_BOOL(1);
	Datum		id;
	AsTableOwner saved;
	uint64		r;

	SPI_connect();
	id = Int32GetDatum(require_owner("vocabulary", name, "drop"));
	as_table_owner(&saved);
	/* the vocabulary row first: no new model can name it (the foreign key's share lock waits) */
	if (SPI_execute_with_args("SELECT 1 FROM attention.vocabularies WHERE vocabulary_id = $1 FOR UPDATE", 1,
							  (Oid[]) {INT4OID}, &id, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not lock vocabulary \"%s\"", name);
	if (SPI_execute_with_args("SELECT m.name, m.owner, (SELECT v.job_id FROM attention.training_jobs v "
							  "WHERE v.model_id = m.model_id AND v.status IN ('queued', 'running') LIMIT 1) "
							  "FROM attention.models m WHERE m.vocabulary_id = $1 ORDER BY m.model_id FOR UPDATE OF m",
							  1, (Oid[]) {INT4OID}, &id, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the models of vocabulary \"%s\"", name);
	for (r = 0; r < SPI_processed; r++)
	{
		HeapTuple	tup = SPI_tuptable->vals[r];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *job = SPI_getvalue(tup, desc, 3);

		if (!cascade)
			ereport(ERROR, (errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
							errmsg("vocabulary \"%s\" is used by model \"%s\"", name, SPI_getvalue(tup, desc, 1)),
							errhint("attention.drop_vocabulary(name, cascade => true) drops the vocabulary with every "
									"model built on it.")));
		if (job != NULL)
			ereport(ERROR, (errcode(ERRCODE_OBJECT_IN_USE),
							errmsg("vocabulary \"%s\" is used by model \"%s\", whose training job %s is queued or "
								   "running", name, SPI_getvalue(tup, desc, 1), job),
							errhint("The members of role %s, which owns the model, cancel it with "
									"attention.cancel_training(job).", SPI_getvalue(tup, desc, 2))));
	}
	if (SPI_execute_with_args("DELETE FROM attention.models WHERE vocabulary_id = $1", 1, (Oid[]) {INT4OID}, &id,
							  NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not drop the models of vocabulary \"%s\"", name);
	end_as_table_owner(&saved);
	if (SPI_execute_with_args("DELETE FROM attention.vocabularies WHERE vocabulary_id = $1", 1, (Oid[]) {INT4OID}, &id,
							  NULL, false, 0) != SPI_OK_DELETE || SPI_processed != 1)
		elog(ERROR, "could not delete vocabulary \"%s\"", name);
	SPI_finish();
	PG_RETURN_VOID();
}
