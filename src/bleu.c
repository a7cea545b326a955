/*
 * bleu.c - sacreBLEU-compatible BLEU: the 13a tokenizer, clipped n-gram
 * statistics and the score with exp smoothing.
 *
 * Text is UTF-8. The 13a regular expressions only ever match ASCII, so they
 * run on bytes; whitespace follows Python's str.isspace()/str.split(), which
 * sacreBLEU uses, including the Unicode spaces.
 */
#include "bleu.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A token: byte offset and length in the tokenized string. */
typedef struct Token
{
	size_t		start;
	size_t		len;
} Token;

/* Returns the byte length of the Python whitespace character at s, or 0. */
static size_t
space_len(const unsigned char *s, size_t avail)
{
	uint32_t	cp;

	if (s[0] < 0x80)
		return (s[0] == ' ' || (s[0] >= 0x09 && s[0] <= 0x0D) ||
				(s[0] >= 0x1C && s[0] <= 0x1F)) ? 1 : 0;
	if ((s[0] & 0xE0) == 0xC0 && avail >= 2)
	{
		cp = ((uint32_t) (s[0] & 0x1F) << 6) | (s[1] & 0x3F);
		return (cp == 0x85 || cp == 0xA0) ? 2 : 0;
	}
	if ((s[0] & 0xF0) == 0xE0 && avail >= 3)
	{
		cp = ((uint32_t) (s[0] & 0x0F) << 12) | ((uint32_t) (s[1] & 0x3F) << 6) | (s[2] & 0x3F);
		return (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
				cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000) ? 3 : 0;
	}
	return 0;
}

/* Returns the byte length of the (possibly invalid) UTF-8 character at s. */
static size_t
char_len(const unsigned char *s, size_t avail)
{
	size_t		n = 1;

	if ((s[0] & 0xE0) == 0xC0)
		n = 2;
	else if ((s[0] & 0xF0) == 0xE0)
		n = 3;
	else if ((s[0] & 0xF8) == 0xF0)
		n = 4;
	return n <= avail ? n : 1;
}

/* Python str.replace(pat, rep) in place, for len(rep) <= len(pat); returns the new length. */
static size_t
replace_shrinking(char *s, size_t len, const char *pat, const char *rep)
{
	size_t		plen = strlen(pat);
	size_t		rlen = strlen(rep);
	size_t		i = 0;
	size_t		o = 0;

	while (i < len)
	{
		if (i + plen <= len && memcmp(s + i, pat, plen) == 0)
		{
			memcpy(s + o, rep, rlen);
			o += rlen;
			i += plen;
		}
		else
			s[o++] = s[i++];
	}
	return o;
}

/* 13a rule 1: the ASCII class [{-~[-` -&(-+:-@/] gets a space on each side. */
static bool
is_13a_symbol(unsigned char c)
{
	return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') ||
		(c >= '(' && c <= '+') || (c >= ':' && c <= '@') || c == '/';
}

static bool
is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

/*
 * Applies the four TokenizerRegexp substitutions of sacreBLEU's 13a
 * tokenizer, each a left-to-right re.sub, from `in` (len bytes) to `out`
 * (room for 3 * len bytes); returns the output length.
 */
static size_t
apply_13a_rules(const unsigned char *in, size_t len, unsigned char *out, unsigned char *tmp)
{
	size_t		i,
				n;

	/* ([\{-\~\[-\` -\&\(-\+\:-\@\/]) -> ' \1 ' */
	n = 0;
	for (i = 0; i < len; i++)
	{
		if (is_13a_symbol(in[i]))
		{
			out[n++] = ' ';
			out[n++] = in[i];
			out[n++] = ' ';
		}
		else
			out[n++] = in[i];
	}
	/* ([^0-9])([\.,]) -> '\1 \2 ' */
	len = n;
	n = 0;
	for (i = 0; i < len;)
	{
		if (i + 1 < len && !is_digit(out[i]) && (out[i + 1] == '.' || out[i + 1] == ','))
		{
			tmp[n++] = out[i];
			tmp[n++] = ' ';
			tmp[n++] = out[i + 1];
			tmp[n++] = ' ';
			i += 2;
		}
		else
			tmp[n++] = out[i++];
	}
	/* ([\.,])([^0-9]) -> ' \1 \2' */
	len = n;
	n = 0;
	for (i = 0; i < len;)
	{
		if (i + 1 < len && (tmp[i] == '.' || tmp[i] == ',') && !is_digit(tmp[i + 1]))
		{
			out[n++] = ' ';
			out[n++] = tmp[i];
			out[n++] = ' ';
			out[n++] = tmp[i + 1];
			i += 2;
		}
		else
			out[n++] = tmp[i++];
	}
	/* ([0-9])(-) -> '\1 \2 ' */
	len = n;
	n = 0;
	for (i = 0; i < len;)
	{
		if (i + 1 < len && is_digit(out[i]) && out[i + 1] == '-')
		{
			tmp[n++] = out[i];
			tmp[n++] = ' ';
			tmp[n++] = '-';
			tmp[n++] = ' ';
			i += 2;
		}
		else
			tmp[n++] = out[i++];
	}
	memcpy(out, tmp, n);
	return n;
}

int
bleu_tokenize_13a(const char *text, size_t len, char **out)
{
	const unsigned char *u = (const unsigned char *) text;
	size_t		end = 0;
	size_t		i,
				n,
				cap;
	char	   *line;
	unsigned char *a,
			   *b;
	char	   *res;
	size_t		o = 0;

	/* rstrip(): keep up to the end of the last non-whitespace character */
	for (i = 0; i < len;)
	{
		size_t		sl = space_len(u + i, len - i);

		if (sl > 0)
			i += sl;
		else
		{
			i += char_len(u + i, len - i);
			end = i;
		}
	}

	/* Each rule at most doubles the length (rule 1 triples); 3x + slack covers all. */
	cap = 8 * (end + 2) + 16;
	line = malloc(end + 3);
	a = malloc(cap);
	b = malloc(cap);
	if (line == NULL || a == NULL || b == NULL)
	{
		free(line);
		free(a);
		free(b);
		return -1;
	}

	/* Tokenizer13a: the language-independent part, then ' ' + line + ' ' */
	line[0] = ' ';
	memcpy(line + 1, text, end);
	n = 1 + end;
	n = replace_shrinking(line + 1, n - 1, "<skipped>", "") + 1;
	n = replace_shrinking(line + 1, n - 1, "-\n", "") + 1;
	n = replace_shrinking(line + 1, n - 1, "\n", " ") + 1;
	if (memchr(line, '&', n) != NULL)
	{
		n = replace_shrinking(line + 1, n - 1, "&quot;", "\"") + 1;
		n = replace_shrinking(line + 1, n - 1, "&amp;", "&") + 1;
		n = replace_shrinking(line + 1, n - 1, "&lt;", "<") + 1;
		n = replace_shrinking(line + 1, n - 1, "&gt;", ">") + 1;
	}
	line[n++] = ' ';

	n = apply_13a_rules((unsigned char *) line, n, a, b);
	free(line);

	/* ' '.join(line.split()) */
	res = (char *) b;
	for (i = 0; i < n;)
	{
		size_t		sl = space_len(a + i, n - i);

		if (sl > 0)
		{
			i += sl;
			continue;
		}
		if (o > 0)
			res[o++] = ' ';
		while (i < n && space_len(a + i, n - i) == 0)
		{
			size_t		cl = char_len(a + i, n - i);

			memcpy(res + o, a + i, cl);
			o += cl;
			i += cl;
		}
	}
	res[o] = '\0';
	free(a);
	*out = res;
	return 0;
}

/* Splits a tokenized string at single spaces; returns the count, or -1 when out of memory. */
static long
split_tokens(const char *s, Token **tokens)
{
	size_t		len = strlen(s);
	size_t		count = 0;
	size_t		i,
				start;
	Token	   *t;

	for (i = 0; i < len; i++)
		if (s[i] == ' ')
			count++;
	count = len > 0 ? count + 1 : 0;
	t = malloc((count > 0 ? count : 1) * sizeof(Token));
	if (t == NULL)
		return -1;
	count = 0;
	start = 0;
	for (i = 0; i <= len && len > 0; i++)
	{
		if (i == len || s[i] == ' ')
		{
			t[count].start = start;
			t[count].len = i - start;
			count++;
			start = i + 1;
		}
	}
	*tokens = t;
	return (long) count;
}

/* FNV-1a hash of the n-gram of `order` tokens starting at tokens[pos]. */
static uint64_t
ngram_hash(const char *s, const Token *tokens, size_t pos, int order)
{
	uint64_t	h = 1469598103934665603ULL ^ (uint64_t) order;
	int			k;
	size_t		j;

	for (k = 0; k < order; k++)
	{
		const Token *t = &tokens[pos + k];

		for (j = 0; j < t->len; j++)
			h = (h ^ (unsigned char) s[t->start + j]) * 1099511628211ULL;
		h = (h ^ 0xFF) * 1099511628211ULL;	/* token separator, never in UTF-8 */
	}
	return h;
}

/* True when two n-grams of the same order have identical tokens. */
static bool
ngram_equal(const char *s1, const Token *t1, const char *s2, const Token *t2, int order)
{
	int			k;

	for (k = 0; k < order; k++)
		if (t1[k].len != t2[k].len || memcmp(s1 + t1[k].start, s2 + t2[k].start, t1[k].len) != 0)
			return false;
	return true;
}

/* An entry of the reference n-gram table; pos == SIZE_MAX marks a free slot. */
typedef struct NgramEntry
{
	uint64_t	hash;
	size_t		pos;			/* first token of the n-gram in the reference */
	int			order;
	int			remaining;		/* reference count not yet matched by the hypothesis */
} NgramEntry;

int
bleu_add_segment(BleuStats *stats, const char *hyp, size_t hyp_len,
				 const char *ref, size_t ref_len)
{
	char	   *htok = NULL,
			   *rtok = NULL;
	Token	   *ht = NULL,
			   *rt = NULL;
	long		nh,
				nr;
	NgramEntry *table = NULL;
	size_t		cap = 16;
	size_t		mask,
				i;
	int			order;
	double		correct[BLEU_MAX_ORDER] = {0};
	int			rc = -1;

	if (bleu_tokenize_13a(hyp, hyp_len, &htok) != 0 ||
		bleu_tokenize_13a(ref, ref_len, &rtok) != 0)
		goto done;
	nh = split_tokens(htok, &ht);
	nr = split_tokens(rtok, &rt);
	if (nh < 0 || nr < 0)
		goto done;

	while (cap < 2 * (size_t) nr * BLEU_MAX_ORDER + 16)
		cap *= 2;
	mask = cap - 1;
	table = malloc(cap * sizeof(NgramEntry));
	if (table == NULL)
		goto done;
	for (i = 0; i < cap; i++)
		table[i].pos = SIZE_MAX;

	/* count reference n-grams */
	for (order = 1; order <= BLEU_MAX_ORDER; order++)
	{
		for (i = 0; i + order <= (size_t) nr; i++)
		{
			uint64_t	h = ngram_hash(rtok, rt, i, order);
			size_t		slot = h & mask;

			while (table[slot].pos != SIZE_MAX &&
				   !(table[slot].hash == h && table[slot].order == order &&
					 ngram_equal(rtok, rt + table[slot].pos, rtok, rt + i, order)))
				slot = (slot + 1) & mask;
			if (table[slot].pos == SIZE_MAX)
			{
				table[slot].hash = h;
				table[slot].pos = i;
				table[slot].order = order;
				table[slot].remaining = 0;
			}
			table[slot].remaining++;
		}
	}

	/* clipped matches: each hypothesis n-gram consumes one reference occurrence */
	for (order = 1; order <= BLEU_MAX_ORDER; order++)
	{
		for (i = 0; i + order <= (size_t) nh; i++)
		{
			uint64_t	h = ngram_hash(htok, ht, i, order);
			size_t		slot = h & mask;

			while (table[slot].pos != SIZE_MAX)
			{
				if (table[slot].hash == h && table[slot].order == order &&
					ngram_equal(rtok, rt + table[slot].pos, htok, ht + i, order))
				{
					if (table[slot].remaining > 0)
					{
						table[slot].remaining--;
						correct[order - 1] += 1;
					}
					break;
				}
				slot = (slot + 1) & mask;
			}
		}
	}

	stats->sys_len += (double) nh;
	stats->ref_len += (double) nr;
	for (order = 1; order <= BLEU_MAX_ORDER; order++)
	{
		stats->correct[order - 1] += correct[order - 1];
		if (nh >= order)
			stats->total[order - 1] += (double) (nh - order + 1);
	}
	rc = 0;

done:
	free(table);
	free(ht);
	free(rt);
	free(htok);
	free(rtok);
	return rc;
}

/* sacreBLEU's my_log: log, with log(0) taken as -9999999999. */
static double
safe_log(double x)
{
	return x == 0.0 ? -9999999999.0 : log(x);
}

double
bleu_score(const BleuStats *stats, bool effective_order)
{
	double		precisions[BLEU_MAX_ORDER] = {0};
	double		bp = 1.0;
	double		smooth = 1.0;
	double		sum = 0.0;
	int			eff_order = BLEU_MAX_ORDER;
	bool		any_correct = false;
	int			n;

	if (stats->sys_len < stats->ref_len)
		bp = stats->sys_len > 0 ? exp(1.0 - stats->ref_len / stats->sys_len) : 0.0;

	for (n = 0; n < BLEU_MAX_ORDER; n++)
		if (stats->correct[n] != 0)
			any_correct = true;
	if (!any_correct)
		return 0.0;

	for (n = 1; n <= BLEU_MAX_ORDER; n++)
	{
		if (stats->total[n - 1] == 0)
			break;
		if (effective_order)
			eff_order = n;
		if (stats->correct[n - 1] == 0)
		{
			smooth *= 2;
			precisions[n - 1] = 100.0 / (smooth * stats->total[n - 1]);
		}
		else
			precisions[n - 1] = 100.0 * stats->correct[n - 1] / stats->total[n - 1];
	}
	for (n = 0; n < eff_order; n++)
		sum += safe_log(precisions[n]);
	return bp * exp(sum / eff_order);
}

void
bleu_stats_to_array(const BleuStats *stats, double *out)
{
	int			n;

	out[0] = stats->sys_len;
	out[1] = stats->ref_len;
	for (n = 0; n < BLEU_MAX_ORDER; n++)
	{
		out[2 + n] = stats->correct[n];
		out[2 + BLEU_MAX_ORDER + n] = stats->total[n];
	}
}

void
bleu_stats_from_array(const double *in, BleuStats *stats)
{
	int			n;

	stats->sys_len = in[0];
	stats->ref_len = in[1];
	for (n = 0; n < BLEU_MAX_ORDER; n++)
	{
		stats->correct[n] = in[2 + n];
		stats->total[n] = in[2 + BLEU_MAX_ORDER + n];
	}
}
