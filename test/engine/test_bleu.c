/*
 * test_bleu.c - BLEU against sacreBLEU: every case of
 * test/fixtures/bleu_cases.tsv (made by make_bleu_fixture.py with sacreBLEU)
 * must tokenize identically and score within 1e-6 BLEU, sentence and corpus.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bleu.h"
#include "check.h"

/* Undoes COPY-text escapes (\\t \\n \\r \\\\) in place; returns the length. */
static size_t
unescape(char *s)
{
	size_t		i,
				o = 0;

	for (i = 0; s[i] != '\0'; i++)
	{
		if (s[i] == '\\' && s[i + 1] != '\0')
		{
			i++;
			s[o++] = s[i] == 't' ? '\t' : s[i] == 'n' ? '\n' : s[i] == 'r' ? '\r' : s[i];
		}
		else
			s[o++] = s[i];
	}
	s[o] = '\0';
	return o;
}

/* Splits line at tabs into exactly n fields; false when the count differs. */
static bool
split_fields(char *line, char **fields, int n)
{
	int			k = 0;
	char	   *p = line;

	fields[k++] = p;
	while ((p = strchr(p, '\t')) != NULL)
	{
		*p++ = '\0';
		if (k == n)
			return false;
		fields[k++] = p;
	}
	return k == n;
}

void
test_bleu(const char *fixtures)
{
	char		path[4096];
	FILE	   *f;
	char	   *line = NULL;
	size_t		cap = 0;
	ssize_t		len;
	BleuStats	corpus = {0};
	int			cases = 0;

	snprintf(path, sizeof(path), "%s/bleu_cases.tsv", fixtures);
	f = fopen(path, "r");
	CHECK(f != NULL, "cannot open %s", path);
	if (f == NULL)
		return;
	while ((len = getline(&line, &cap, f)) > 0)
	{
		char	   *fld[5] = {NULL};
		double		expected;
		bool		ok;

		if (line[len - 1] == '\n')
			line[len - 1] = '\0';
		ok = split_fields(line, fld, 5);
		CHECK(ok, "malformed fixture line: %s", line);
		if (!ok)
			continue;
		expected = strtod(fld[4], NULL);
		if (strncmp(fld[0], "corpus:", 7) == 0)
		{
			double		got = bleu_score(&corpus, false);

			CHECK(fabs(got - expected) < 1e-6, "%s: corpus BLEU %.10f, sacreBLEU %.10f",
				  fld[0], got, expected);
			memset(&corpus, 0, sizeof(corpus));
			continue;
		}
		{
			size_t		hlen = unescape(fld[1]);
			size_t		rlen = unescape(fld[2]);
			char	   *tok = NULL;
			BleuStats	sentence = {0};
			double		got;

			unescape(fld[3]);
			CHECK(bleu_tokenize_13a(fld[1], hlen, &tok) == 0, "%s: tokenize failed", fld[0]);
			CHECK(tok != NULL && strcmp(tok, fld[3]) == 0, "%s: 13a gives \"%s\", sacreBLEU \"%s\"",
				  fld[0], tok ? tok : "(null)", fld[3]);
			free(tok);
			CHECK(bleu_add_segment(&sentence, fld[1], hlen, fld[2], rlen) == 0, "%s: stats failed", fld[0]);
			CHECK(bleu_add_segment(&corpus, fld[1], hlen, fld[2], rlen) == 0, "%s: stats failed", fld[0]);
			got = bleu_score(&sentence, true);
			CHECK(fabs(got - expected) < 1e-6, "%s: sentence BLEU %.10f, sacreBLEU %.10f",
				  fld[0], got, expected);
			cases++;
		}
	}
	CHECK(cases >= 50, "only %d BLEU cases in the fixture", cases);
	free(line);
	fclose(f);

	/* statistics survive the flat-array round trip used by the aggregate state */
	{
		BleuStats	a = {0},
					b;
		double		flat[BLEU_STATS_LEN];

		CHECK(bleu_add_segment(&a, "a b c d e", 9, "a b c d f", 9) == 0, "stats failed");
		bleu_stats_to_array(&a, flat);
		bleu_stats_from_array(flat, &b);
		CHECK(memcmp(&a, &b, sizeof(a)) == 0, "BleuStats array round trip differs");
		CHECK(a.sys_len == 5 && a.correct[0] == 4 && a.total[3] == 2 && a.correct[3] == 1,
			  "unexpected statistics for a b c d e / a b c d f");
	}
}
