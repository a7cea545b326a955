/*
 * dataset.c - the training data feed and validation on it.
 *
 * A corpus split read from attention.corpus_pairs is encoded once into
 * SentencePiece ids, sorted by length and cut into batches of about
 * batch_tokens ids per side; each epoch visits the batches in an order
 * drawn from (seed, epoch), so a resumed job sees exactly the order an
 * uninterrupted one would (the table-stored corpus and seeded shuffling of
 * Marian's corpus reader). Validation gives the cross-entropy per target
 * token (teacher forcing) and the BLEU of beam-search translations; used
 * by the training worker between steps and by attention.evaluate.
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "bleu.h"
#include "cpu_budget.h"
#include "dataset.h"
#include "progress.h"
#include "rights.h"
#include "rng.h"

/* Philox stream of the batch order of an epoch (distinct from dropout streams). */
#define ORDER_STREAM(epoch) ((UINT64CONST(0x5EED) << 48) | (uint64) (epoch))

/* Rows fetched from the cursor at a time. */
#define FETCH_ROWS 1000

static int
pair_cmp(const void *a, const void *b)
{
	const DataPair *x = *(const DataPair *const *) a;
	const DataPair *y = *(const DataPair *const *) b;

	if (x->src_len != y->src_len)
		return x->src_len - y->src_len;
	if (x->tgt_len != y->tgt_len)
		return x->tgt_len - y->tgt_len;
	return x < y ? -1 : x > y;	/* stable: corpus order */
}

/* Encodes one text into palloc'd ids; ERROR naming the pair on failure. */
static int32 *
encode(const SpmModel *vocab, SpmSide side, const char *text, int32 *len, int64 pair_id)
{
	int		   *ids;
	size_t		n;
	int32	   *out;
	char		err[512];

	if (spm_encode(vocab, side, text, strlen(text), &ids, &n, err, sizeof(err)) != 0)
		ereport(ERROR, (errcode(ERRCODE_DATA_EXCEPTION),
						errmsg("could not encode corpus pair %lld: %s", (long long) pair_id, err)));
	out = palloc(Max(n, 1) * sizeof(int32));
	memcpy(out, ids, n * sizeof(int32));
	spm_free_buffer(ids);
	*len = (int32) n;
	return out;
}

/* A split being read: the pairs so far (data_load_from's state between rows). */
typedef struct Loading
{
	DataSet    *d;
	const SpmModel *vocab;
	int			max_positions;
	int			references;
	DataPair   *all;			/* the pairs that fit, in corpus order */
	int64		n;
	int64		capacity;
	int32		ref_capacity;
} Loading;

/* Encodes one row (pair_id, source, target) into l; memory in the current context. */
static void
add_pair(Loading *l, HeapTuple tup, TupleDesc desc)
{
	DataSet    *d = l->d;
	bool		isnull;
	int64		pair_id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
	char	   *source = SPI_getvalue(tup, desc, 2);
	char	   *target = SPI_getvalue(tup, desc, 3);
	DataPair	p;

	CHECK_FOR_INTERRUPTS();
	p.src = encode(l->vocab, SPM_SOURCE, source, &p.src_len, pair_id);
	p.tgt = encode(l->vocab, SPM_TARGET, target, &p.tgt_len, pair_id);
	if (d->num_references < l->references)
	{
		if (d->num_references == l->ref_capacity)
		{
			l->ref_capacity = Max(64, l->ref_capacity * 2);
			d->references = d->references == NULL ? palloc(l->ref_capacity * sizeof(char *))
				: repalloc(d->references, l->ref_capacity * sizeof(char *));
			d->ordered = d->ordered == NULL ? palloc(l->ref_capacity * sizeof(DataPair))
				: repalloc(d->ordered, l->ref_capacity * sizeof(DataPair));
		}
		d->references[d->num_references] = pstrdup(target);
		d->ordered[d->num_references++] = p;
	}
	pfree(source);
	pfree(target);
	if (p.src_len + 1 > l->max_positions || p.tgt_len + 1 > l->max_positions)
	{
		d->skipped++;
		return;
	}
	if (l->n == l->capacity)
	{
		l->capacity = Max(1024, l->capacity * 2);
		l->all = l->all == NULL ? palloc_extended(l->capacity * sizeof(DataPair), MCXT_ALLOC_HUGE)
			: repalloc_huge(l->all, l->capacity * sizeof(DataPair));
	}
	l->all[l->n++] = p;
}

/*
 * Another server's rows of `query` into l, FETCH_ROWS at a time through a
 * cursor in a read-only transaction there (rolled back on ERROR, so the
 * session is left outside any); each batch's tuples freed once encoded.
 */
static void
add_remote_pairs(Remote *remote, Loading *l, const char *query, Oid *types, Datum *values)
{
	MemoryContext ctx = CurrentMemoryContext;
	MemoryContext batch = AllocSetContextCreate(ctx, "corpus rows from the coordinator", ALLOCSET_DEFAULT_SIZES);
	Rows		rows;

	rows_query(remote, &rows, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY", 0, NULL, NULL, NULL, false, 0);
	PG_TRY();
	{
		rows_query(remote, &rows, psprintf("DECLARE attention_pairs NO SCROLL CURSOR FOR %s", query), 2, types,
				   values, NULL, true, 0);
		do
		{
			MemoryContextSwitchTo(batch);
			rows_query(remote, &rows, psprintf("FETCH %d FROM attention_pairs", FETCH_ROWS), 0, NULL, NULL,
					   NULL, true, 0);
			rows_require(&rows, 3, (Oid[]) {INT8OID, TEXTOID, TEXTOID}, "the coordinator's corpus pairs");
			MemoryContextSwitchTo(ctx);
			for (uint64 r = 0; r < rows.n; r++)
				add_pair(l, rows.vals[r], rows.desc);
			MemoryContextReset(batch);
		} while (rows.n > 0);
		rows_query(remote, &rows, "COMMIT", 0, NULL, NULL, NULL, false, 0);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(ctx);
		rows_query(remote, &rows, "ROLLBACK", 0, NULL, NULL, NULL, false, 0);
		PG_RE_THROW();
	}
	PG_END_TRY();
	MemoryContextDelete(batch);
}

void
data_load_from(Remote *remote, DataSet *d, int32 corpus_id, const char *split, const SpmModel *vocab,
			   int max_positions, int batch_tokens, int references)
{
	static const char query[] = "SELECT pair_id, source, target FROM attention.corpus_pairs "
		"WHERE corpus_id = $1 AND split = $2 ORDER BY pair_id";
	Oid			types[2] = {INT4OID, TEXTOID};
	Datum		values[2] = {Int32GetDatum(corpus_id), CStringGetTextDatum(split)};
	Loading		l = {.d = d, .vocab = vocab, .max_positions = max_positions, .references = references};
	DataPair  **sorted,
			   *all;
	int64		n,
				i;
	int32		nb = 0;
	MemoryContext ctx = CurrentMemoryContext;	/* SPI calls return in their own */

	memset(d, 0, sizeof(*d));
	if (remote != NULL)
		add_remote_pairs(remote, &l, query, types, values);
	else
	{
		/* this server's rows FETCH_ROWS at a time through a cursor, as the tables' owner (dataset.h) */
		SPIPlanPtr	plan = SPI_prepare(query, 2, types);
		Portal		portal;
		AsTableOwner saved;

		as_table_owner(&saved);
		if (plan == NULL)
			elog(ERROR, "could not prepare the corpus query");
		portal = SPI_cursor_open(NULL, plan, values, NULL, true);
		for (;;)
		{
			SPI_cursor_fetch(portal, true, FETCH_ROWS);
			MemoryContextSwitchTo(ctx);
			if (SPI_processed == 0)
				break;
			for (uint64 r = 0; r < SPI_processed; r++)
				add_pair(&l, SPI_tuptable->vals[r], SPI_tuptable->tupdesc);
			SPI_freetuptable(SPI_tuptable);
		}
		SPI_cursor_close(portal);
		SPI_freeplan(plan);
		end_as_table_owner(&saved);
	}
	all = l.all;
	n = l.n;
	MemoryContextSwitchTo(ctx);
	if (n > PG_INT32_MAX / 2)
		ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						errmsg("split %s of the corpus has %lld pairs, more than a job can hold", split, (long long) n)));

	/* sort by length (stably), then copy into sorted order */
	sorted = palloc_extended(Max(n, 1) * sizeof(DataPair *), MCXT_ALLOC_HUGE);
	for (i = 0; i < n; i++)
		sorted[i] = &all[i];
	qsort(sorted, n, sizeof(DataPair *), pair_cmp);
	d->pairs = palloc_extended(Max(n, 1) * sizeof(DataPair), MCXT_ALLOC_HUGE);
	for (i = 0; i < n; i++)
		d->pairs[i] = *sorted[i];
	d->num_pairs = (int32) n;
	pfree(sorted);
	if (all != NULL)
		pfree(all);

	/* consecutive runs while (longest + 1) * count stays within batch_tokens on both sides */
	d->batches = palloc(Max(n, 1) * sizeof(DataBatch));
	for (i = 0; i < n;)
	{
		DataBatch  *b = &d->batches[nb++];
		int64		j = i;

		memset(b, 0, sizeof(*b));
		b->first = (int32) i;
		while (j < n)
		{
			int32		s = Max(b->src_len, d->pairs[j].src_len + 1);
			int32		t = Max(b->tgt_len, d->pairs[j].tgt_len + 1);
			int64		count = j - i + 1;

			if (count > 1 && ((int64) s * count > batch_tokens || (int64) t * count > batch_tokens))
				break;
			b->src_len = s;
			b->tgt_len = t;
			b->src_tokens += d->pairs[j].src_len + 1;
			b->tgt_tokens += d->pairs[j].tgt_len + 1;
			j++;
		}
		b->count = (int32) (j - i);
		d->max_batch_ids = Max(d->max_batch_ids, (int64) b->count * Max(b->src_len, b->tgt_len));
		i = j;
	}
	d->num_batches = nb;
}

void
data_epoch_order(const DataSet *d, int64 seed, int64 epoch, int32 *order)
{
	int32		i;

	for (i = 0; i < d->num_batches; i++)
		order[i] = i;
	/* Fisher-Yates; j uniform in [0, i] (64-bit product: no modulo bias worth the name) */
	for (i = d->num_batches - 1; i > 0; i--)
	{
		uint32		r = tf_random_u32((uint64) seed, ORDER_STREAM(epoch), (uint64) i);
		int32		j = (int32) (((uint64) r * (uint64) (i + 1)) >> 32);
		int32		tmp = order[i];

		order[i] = order[j];
		order[j] = tmp;
	}
}

void
data_fill(const DataSet *d, const DataBatch *b, int pad_id, int bos_id, int eos_id,
		  int32 *src, int32 *tgt_in, int32 *labels, TfBatch *batch)
{
	int32		k,
				t;

	for (k = 0; k < b->count; k++)
	{
		const DataPair *p = &d->pairs[b->first + k];
		int32	   *s = src + (int64) k * b->src_len;
		int32	   *x = tgt_in + (int64) k * b->tgt_len;
		int32	   *y = labels + (int64) k * b->tgt_len;

		for (t = 0; t < b->src_len; t++)
			s[t] = t < p->src_len ? p->src[t] : t == p->src_len ? eos_id : pad_id;
		for (t = 0; t < b->tgt_len; t++)
		{
			x[t] = t == 0 ? bos_id : t <= p->tgt_len ? p->tgt[t - 1] : pad_id;
			y[t] = t < p->tgt_len ? p->tgt[t] : t == p->tgt_len ? eos_id : pad_id;
		}
	}
	batch->batch_size = b->count;
	batch->src_len = b->src_len;
	batch->tgt_len = b->tgt_len;
	batch->src = src;
	batch->tgt_in = tgt_in;
	batch->labels = labels;
	batch->index = 0;
}

/*
 * A source row of `width` ids: src[0 .. m), EOS, then padding; with
 * `language` the feed's source language token first, or after the EOS
 * (source_language_last). The caller leaves room: m + 2 <= width with a
 * language, m + 1 without.
 */
static void
source_row(int32 *s, int width, const int32 *src, int m, const DataFeed *feed, bool language)
{
	int			t = 0,
				k;

	if (language && !feed->source_language_last)
		s[t++] = feed->source_language;
	for (k = 0; k < m; k++)
		s[t++] = src[k];
	s[t++] = feed->eos_id;
	if (language && feed->source_language_last)
		s[t++] = feed->source_language;
	while (t < width)
		s[t++] = feed->pad_id;
}

/*
 * data_fill with feed's languages: each row one wider, the source after its
 * language token, the decoder input bos + target language + target, the
 * labels target language + target + EOS.
 */
static void
fill_languages(const DataSet *d, const DataBatch *b, const DataFeed *feed, TfBatch *batch)
{
	int32		ls = b->src_len + 1,
				lt = b->tgt_len + 1,
				k,
				t;

	for (k = 0; k < b->count; k++)
	{
		const DataPair *p = &d->pairs[b->first + k];
		int32	   *s = feed->src + (int64) k * ls;
		int32	   *x = feed->tgt_in + (int64) k * lt;
		int32	   *y = feed->labels + (int64) k * lt;

		source_row(s, ls, p->src, p->src_len, feed, true);
		x[0] = feed->bos_id;
		y[0] = x[1] = feed->target_language;
		for (t = 1; t < lt; t++)
		{
			if (t > 1)
				x[t] = t <= p->tgt_len + 1 ? p->tgt[t - 2] : feed->pad_id;
			y[t] = t <= p->tgt_len ? p->tgt[t - 1] : t == p->tgt_len + 1 ? feed->eos_id : feed->pad_id;
		}
	}
	batch->batch_size = b->count;
	batch->src_len = ls;
	batch->tgt_len = lt;
	batch->src = feed->src;
	batch->tgt_in = feed->tgt_in;
	batch->labels = feed->labels;
	batch->index = 0;
}

void
data_feed_alloc(DataFeed *feed, const DataSet *a, const DataSet *b, int max_positions)
{
	int64		ids = Max(a->max_batch_ids, b ? b->max_batch_ids : 0);

	/* rows one wider for a language token each (fill_languages): at most twice as many ids */
	if (feed->multilingual)
		ids *= 2;

	feed->src = palloc_extended(Max(ids, (int64) VALIDATE_BLEU_BATCH * max_positions) * sizeof(int32),
								MCXT_ALLOC_HUGE);
	feed->tgt_in = palloc_extended(Max(ids, 1) * sizeof(int32), MCXT_ALLOC_HUGE);
	feed->labels = palloc_extended(Max(ids, 1) * sizeof(int32), MCXT_ALLOC_HUGE);
}

double
dataset_loss(TfModel *engine, const DataSet *d, DataFeed *feed)
{
	double		sum = 0;
	int64		tokens = 0;
	int32		b,
				k,
				most = 1;
	double	   *log_prob;
	char		err[TF_ERRLEN];

	for (b = 0; b < d->num_batches; b++)
		most = Max(most, d->batches[b].count);
	log_prob = palloc(most * sizeof(double));
	for (b = 0; b < d->num_batches; b++)
	{
		const DataBatch *db = &d->batches[b];
		TfBatch		batch = {0};
		int			threads,
					rc;

		CHECK_FOR_INTERRUPTS();
		if (feed->stop != NULL && feed->stop(feed->stop_arg))
		{
			pfree(log_prob);
			return NAN;
		}
		if (feed->multilingual)
			fill_languages(d, db, feed, &batch);
		else
			data_fill(d, db, feed->pad_id, feed->bos_id, feed->eos_id, feed->src, feed->tgt_in, feed->labels,
					  &batch);
		threads = cpu_budget_take_for(engine, 0);
		rc = tf_model_score_prefixed(engine, &batch, feed->multilingual ? 1 : 0, log_prob, err, sizeof(err));
		cpu_budget_give(threads);
		if (rc != TF_OK)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("validation: %s", err)));
		for (k = 0; k < db->count; k++)
			sum -= log_prob[k];
		tokens += db->tgt_tokens;
		progress_add(db->count);
	}
	pfree(log_prob);
	return tokens > 0 ? sum / tokens : NAN;
}

double
dataset_bleu(TfModel *engine, const SpmModel *vocab, const DataSet *d, DataFeed *feed,
			 int beam_size, int max_output_tokens, int max_positions)
{
	BleuStats	stats;
	TfDecodeOptions opt;
	TfHypothesis hyps[VALIDATE_BLEU_BATCH];
	char		err[TF_ERRLEN];
	int32		b,
				prefix = feed->multilingual ? 1 : 0;

	if (d->num_references == 0)
		return NAN;
	memset(&stats, 0, sizeof(stats));
	tf_decode_options_default(&opt);
	opt.beam_size = beam_size;
	opt.max_output_tokens = max_output_tokens;
	opt.nbest = 1;
	opt.bos_id = feed->bos_id;
	opt.eos_id = feed->eos_id;
	opt.forced_id = feed->multilingual ? feed->target_language : -1;
	opt.source_prefix = prefix;
	for (b = 0; b < d->num_references; b += VALIDATE_BLEU_BATCH)
	{
		int32		n = Min(VALIDATE_BLEU_BATCH, d->num_references - b),
					len = 0,
					k,
					threads,
					rc;

		CHECK_FOR_INTERRUPTS();
		if (feed->stop != NULL && feed->stop(feed->stop_arg))
			return NAN;
		for (k = 0; k < n; k++)
			len = Max(len, d->ordered[b + k].src_len + 1 + prefix);
		len = Min(len, max_positions);
		for (k = 0; k < n; k++)
		{
			const DataPair *p = &d->ordered[b + k];
			int32	   *s = feed->src + k * len;
			int32		m = Min(p->src_len, len - 1 - prefix);

			source_row(s, len, p->src, m, feed, prefix);
		}
		threads = cpu_budget_take_for(engine, 0);
		rc = tf_model_translate(engine, feed->src, n, len, &opt, hyps, err, sizeof(err));
		cpu_budget_give(threads);
		if (rc != TF_OK)
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("validation translation: %s", err)));
		for (k = 0; k < n; k++)
		{
			char	   *text;
			size_t		text_len;
			const char *ref = d->references[b + k];

			if (spm_decode(vocab, hyps[k].tokens, hyps[k].length, &text, &text_len, err, sizeof(err)) != 0)
			{
				tf_hypotheses_free(hyps, n);
				ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("decoding a translation: %s", err)));
			}
			if (bleu_add_segment(&stats, text, text_len, ref, strlen(ref)) != 0)
			{
				spm_free_buffer(text);
				tf_hypotheses_free(hyps, n);
				ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
			}
			spm_free_buffer(text);
		}
		tf_hypotheses_free(hyps, n);
		progress_add(n);
	}
	return bleu_score(&stats, false);
}
