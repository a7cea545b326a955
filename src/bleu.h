/*
 * bleu.h - BLEU exactly as sacreBLEU 2.x computes it by default.
 *
 * Defaults reproduced: tokenizer "13a" (mteval-v13a), case-sensitive,
 * max n-gram order 4, smoothing "exp" (NIST geometric sequence), one
 * reference per segment. Sentence BLEU uses the effective order
 * (sacrebleu.sentence_bleu), corpus BLEU does not (sacrebleu.corpus_bleu).
 *
 * Pure C11, no PostgreSQL headers: the SQL glue is src/pg/bleu_functions.c.
 */
#ifndef ATTENTION_BLEU_H
#define ATTENTION_BLEU_H

#include <stdbool.h>
#include <stddef.h>

#define BLEU_MAX_ORDER 4

/* Number of doubles in a flattened BleuStats (see bleu_stats_to_array). */
#define BLEU_STATS_LEN (2 + 2 * BLEU_MAX_ORDER)

/* Sufficient statistics of one or more segments; sums over a corpus. */
typedef struct BleuStats
{
	double		sys_len;	/* hypothesis tokens */
	double		ref_len;	/* reference tokens */
	double		correct[BLEU_MAX_ORDER];	/* clipped n-gram matches, n = 1..4 */
	double		total[BLEU_MAX_ORDER];	/* hypothesis n-grams, n = 1..4 */
} BleuStats;

/*
 * Tokenizes `len` bytes of UTF-8 `text` with sacreBLEU's 13a tokenizer
 * (after Python's rstrip, as sacreBLEU preprocesses a segment). On success
 * returns 0 and a malloc'd NUL-terminated string in *out (tokens separated by
 * single spaces; caller frees); returns -1 when out of memory.
 */
int			bleu_tokenize_13a(const char *text, size_t len, char **out);

/*
 * Adds the statistics of one hypothesis/reference pair (UTF-8, byte lengths
 * given) to *stats. Returns 0, or -1 when out of memory (stats unchanged).
 */
int			bleu_add_segment(BleuStats *stats, const char *hyp, size_t hyp_len,
							 const char *ref, size_t ref_len);

/*
 * BLEU in [0, 100] from statistics, with exp smoothing. effective_order true
 * averages only over the n-gram orders the hypothesis has (sentence BLEU).
 * Source: Papineni et al. 2002, eq. BP * exp(sum log p_n / N); sacreBLEU's
 * BLEU.compute_bleu for smoothing and the early exits.
 */
double		bleu_score(const BleuStats *stats, bool effective_order);

/* Flattens stats to BLEU_STATS_LEN doubles: sys_len, ref_len, correct[4], total[4]. */
void		bleu_stats_to_array(const BleuStats *stats, double *out);

/* Inverse of bleu_stats_to_array. */
void		bleu_stats_from_array(const double *in, BleuStats *stats);

#endif
