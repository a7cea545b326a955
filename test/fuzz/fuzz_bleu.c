/*
 * fuzz_bleu.c - libFuzzer target: the BLEU tokenizer (13a) and sentence
 * statistics (src/bleu.h) on any bytes: the input up to its first NUL is the
 * hypothesis, the rest the reference. Tokenizing twice gives the same
 * tokens; a segment scores within [0, 100].
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bleu.h"

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *) data;
	const char *nul = memchr(text, '\0', size);
	size_t		hyp_len = nul != NULL ? (size_t) (nul - text) : size;
	const char *ref = nul != NULL ? nul + 1 : text + size;
	size_t		ref_len = nul != NULL ? size - hyp_len - 1 : 0;
	char	   *a = NULL,
			   *b = NULL;
	BleuStats	stats;
	double		score;

	if (bleu_tokenize_13a(text, hyp_len, &a) != 0)
		return 0;				/* out of memory */
	if (bleu_tokenize_13a(text, hyp_len, &b) != 0 || strcmp(a, b) != 0)
		abort();
	free(a);
	free(b);
	memset(&stats, 0, sizeof(stats));
	if (bleu_add_segment(&stats, text, hyp_len, ref, ref_len) != 0)
		return 0;
	score = bleu_score(&stats, true);
	if (!(score >= 0.0 && score <= 100.0 + 1e-9))
		abort();
	return 0;
}
