/*
 * bleu_functions.c - SQL glue of BLEU: attention.bleu() and the corpus_bleu aggregate
 * (state: float8[BLEU_STATS_LEN] of summed statistics, see src/bleu.h).
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "bleu.h"

PG_FUNCTION_INFO_V1(attention_bleu);
PG_FUNCTION_INFO_V1(attention_bleu_accum);
PG_FUNCTION_INFO_V1(attention_bleu_combine);
PG_FUNCTION_INFO_V1(attention_bleu_final);

/* Adds the statistics of one pair of texts; ERROR when out of memory. */
static void
add_segment(BleuStats *stats, text *hyp, text *ref)
{
	if (bleu_add_segment(stats, VARDATA_ANY(hyp), VARSIZE_ANY_EXHDR(hyp),
						 VARDATA_ANY(ref), VARSIZE_ANY_EXHDR(ref)) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory computing BLEU")));
}

/* Reads an aggregate state array; ERROR when it is not float8[BLEU_STATS_LEN]. */
static void
state_to_stats(ArrayType *a, BleuStats *stats)
{
	if (ARR_NDIM(a) != 1 || ARR_DIMS(a)[0] != BLEU_STATS_LEN ||
		ARR_HASNULL(a) || ARR_ELEMTYPE(a) != FLOAT8OID)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("BLEU statistics must be a float8 array of %d non-null elements",
						BLEU_STATS_LEN)));
	bleu_stats_from_array((double *) ARR_DATA_PTR(a), stats);
}

/* Builds an aggregate state array from statistics. */
static ArrayType *
stats_to_state(const BleuStats *stats)
{
	Datum		elems[BLEU_STATS_LEN];
	double		values[BLEU_STATS_LEN];
	int			i;

	bleu_stats_to_array(stats, values);
	for (i = 0; i < BLEU_STATS_LEN; i++)
		elems[i] = Float8GetDatum(values[i]);
	return construct_array(elems, BLEU_STATS_LEN, FLOAT8OID, sizeof(float8),
						   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE);
}

/* bleu(hypothesis, reference): sentence BLEU as sacrebleu.sentence_bleu. */
Datum
attention_bleu(PG_FUNCTION_ARGS)
{
	BleuStats	stats = {0};

	add_segment(&stats, PG_GETARG_TEXT_PP(0), PG_GETARG_TEXT_PP(1));
	PG_RETURN_FLOAT8(bleu_score(&stats, true));
}

/* corpus_bleu transition: state + one segment's statistics. */
Datum
attention_bleu_accum(PG_FUNCTION_ARGS)
{
	BleuStats	stats;

	state_to_stats(PG_GETARG_ARRAYTYPE_P(0), &stats);
	add_segment(&stats, PG_GETARG_TEXT_PP(1), PG_GETARG_TEXT_PP(2));
	PG_RETURN_ARRAYTYPE_P(stats_to_state(&stats));
}

/* corpus_bleu combine: the sum of two partial states. */
Datum
attention_bleu_combine(PG_FUNCTION_ARGS)
{
	BleuStats	a,
				b;
	int			n;

	state_to_stats(PG_GETARG_ARRAYTYPE_P(0), &a);
	state_to_stats(PG_GETARG_ARRAYTYPE_P(1), &b);
	a.sys_len += b.sys_len;
	a.ref_len += b.ref_len;
	for (n = 0; n < BLEU_MAX_ORDER; n++)
	{
		a.correct[n] += b.correct[n];
		a.total[n] += b.total[n];
	}
	PG_RETURN_ARRAYTYPE_P(stats_to_state(&a));
}

/* corpus_bleu final: BLEU as sacrebleu.corpus_bleu (no effective order). */
Datum
attention_bleu_final(PG_FUNCTION_ARGS)
{
	BleuStats	stats;

	state_to_stats(PG_GETARG_ARRAYTYPE_P(0), &stats);
	PG_RETURN_FLOAT8(bleu_score(&stats, false));
}
