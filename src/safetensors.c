/*
 * safetensors.c - the safetensors header parser (safetensors.h): a strict
 * recursive-descent reader of the JSON subset the format uses. Every path
 * is bounded by the header's bytes; every failure names what and where
 * (byte offset in the header).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

#define MAX_HEADER_BYTES (100u << 20)	/* the reference implementation's limit: 100 MB */

typedef struct Parser
{
	const char *s;
	size_t		n,
				i;
	char	   *err;
	size_t		errlen;
} Parser;

static int	fail(Parser *p, const char *fmt,...) __attribute__((format(printf, 2, 3)));

static int
fail(Parser *p, const char *fmt,...)
{
	char		what[200];
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	snprintf(p->err, p->errlen, "safetensors header, byte %zu: %s", p->i, what);
	return -1;
}

static void
skip_ws(Parser *p)
{
	while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
		p->i++;
}

/* Consumes character c after optional whitespace. */
static int
expect(Parser *p, char c)
{
	skip_ws(p);
	if (p->i >= p->n || p->s[p->i] != c)
		return fail(p, "expected '%c'", c);
	p->i++;
	return 0;
}

/* Appends byte b to buf[*len] (cap bytes; grows when *dyn). */
static int
put(Parser *p, char **buf, size_t *cap, size_t *len, bool dyn, char b)
{
	if (*len + 1 >= *cap)
	{
		char	   *grown;

		if (!dyn)
			return fail(p, "a name longer than %d bytes", ST_NAME_MAX - 1);
		grown = realloc(*buf, *cap * 2);
		if (grown == NULL)
			return fail(p, "out of memory");
		*buf = grown;
		*cap *= 2;
	}
	(*buf)[(*len)++] = b;
	return 0;
}

static int
hex4(Parser *p, unsigned *v)
{
	int			k;

	*v = 0;
	if (p->n - p->i < 4)
		return fail(p, "a truncated \\u escape");
	for (k = 0; k < 4; k++)
	{
		char		c = p->s[p->i++];

		*v <<= 4;
		if (c >= '0' && c <= '9')
			*v |= (unsigned) (c - '0');
		else if (c >= 'a' && c <= 'f')
			*v |= (unsigned) (c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			*v |= (unsigned) (c - 'A' + 10);
		else
			return fail(p, "a bad \\u escape");
	}
	return 0;
}

/*
 * Reads a JSON string into *buf: a fixed buffer of cap bytes (names), or
 * with dyn a malloc'd one the caller frees. NUL-terminated; \u0000 and raw
 * control characters are refused.
 */
static int
read_string(Parser *p, char **buf, size_t cap, bool dyn)
{
	size_t		len = 0;

	if (dyn)
	{
		cap = 64;
		if ((*buf = malloc(cap)) == NULL)
			return fail(p, "out of memory");
	}
	if (expect(p, '"') != 0)
		return -1;
	for (;;)
	{
		unsigned char c;

		if (p->i >= p->n)
			return fail(p, "an unterminated string");
		c = (unsigned char) p->s[p->i++];
		if (c == '"')
			break;
		if (c < 0x20)
			return fail(p, "a control character in a string");
		if (c != '\\')
		{
			if (put(p, buf, &cap, &len, dyn, (char) c) != 0)
				return -1;
			continue;
		}
		if (p->i >= p->n)
			return fail(p, "an unterminated string");
		c = (unsigned char) p->s[p->i++];
		if (c == 'u')
		{
			unsigned	u,
						lo;
			char		utf8[4];
			int			k,
						bytes;

			if (hex4(p, &u) != 0)
				return -1;
			if (u >= 0xDC00 && u <= 0xDFFF)
				return fail(p, "a lone low surrogate");
			if (u >= 0xD800 && u <= 0xDBFF)
			{
				if (p->n - p->i < 2 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
					return fail(p, "a lone high surrogate");
				p->i += 2;
				if (hex4(p, &lo) != 0)
					return -1;
				if (lo < 0xDC00 || lo > 0xDFFF)
					return fail(p, "a high surrogate without its low one");
				u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
			}
			if (u == 0)
				return fail(p, "\\u0000 in a string");
			if (u < 0x80)
				utf8[0] = (char) u, bytes = 1;
			else if (u < 0x800)
				utf8[0] = (char) (0xC0 | (u >> 6)), utf8[1] = (char) (0x80 | (u & 0x3F)), bytes = 2;
			else if (u < 0x10000)
				utf8[0] = (char) (0xE0 | (u >> 12)), utf8[1] = (char) (0x80 | ((u >> 6) & 0x3F)),
					utf8[2] = (char) (0x80 | (u & 0x3F)), bytes = 3;
			else
				utf8[0] = (char) (0xF0 | (u >> 18)), utf8[1] = (char) (0x80 | ((u >> 12) & 0x3F)),
					utf8[2] = (char) (0x80 | ((u >> 6) & 0x3F)), utf8[3] = (char) (0x80 | (u & 0x3F)), bytes = 4;
			for (k = 0; k < bytes; k++)
				if (put(p, buf, &cap, &len, dyn, utf8[k]) != 0)
					return -1;
			continue;
		}
		switch (c)
		{
			case '"':
			case '\\':
			case '/':
				break;
			case 'b':
				c = '\b';
				break;
			case 'f':
				c = '\f';
				break;
			case 'n':
				c = '\n';
				break;
			case 'r':
				c = '\r';
				break;
			case 't':
				c = '\t';
				break;
			default:
				return fail(p, "a bad escape \\%c", c);
		}
		if (put(p, buf, &cap, &len, dyn, (char) c) != 0)
			return -1;
	}
	(*buf)[len] = '\0';
	return 0;
}

/* A non-negative integer without sign, fraction or exponent, below 2^63. */
static int
read_uint(Parser *p, uint64_t *v)
{
	size_t		start;

	skip_ws(p);
	start = p->i;
	*v = 0;
	while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
	{
		unsigned	d = (unsigned) (p->s[p->i] - '0');

		if (*v > (UINT64_C(0x7FFFFFFFFFFFFFFF) - d) / 10)
			return fail(p, "an integer over 2^63 - 1");
		*v = *v * 10 + d;
		p->i++;
	}
	if (p->i == start)
		return fail(p, "expected a non-negative integer");
	if (p->i - start > 1 && p->s[start] == '0')
		return fail(p, "an integer with a leading zero");
	if (p->i < p->n && (p->s[p->i] == '.' || p->s[p->i] == 'e' || p->s[p->i] == 'E'))
		return fail(p, "expected an integer, not a fraction or exponent");
	return 0;
}

/* '[' integers ']' into v[0 .. *count), at most max of them. */
static int
read_uints(Parser *p, uint64_t *v, int max, int *count)
{
	*count = 0;
	if (expect(p, '[') != 0)
		return -1;
	skip_ws(p);
	if (p->i < p->n && p->s[p->i] == ']')
	{
		p->i++;
		return 0;
	}
	for (;;)
	{
		if (*count == max)
			return fail(p, "more than %d integers", max);
		if (read_uint(p, &v[(*count)++]) != 0)
			return -1;
		skip_ws(p);
		if (p->i < p->n && p->s[p->i] == ',')
		{
			p->i++;
			continue;
		}
		return expect(p, ']');
	}
}

/* Whether the next non-space character is c (consumed when it is). */
static bool
next_is(Parser *p, char c)
{
	skip_ws(p);
	if (p->i < p->n && p->s[p->i] == c)
	{
		p->i++;
		return true;
	}
	return false;
}

/* A tensor entry's object: exactly dtype, shape and data_offsets. */
static int
read_tensor(Parser *p, StTensor *t)
{
	bool		seen[3] = {false, false, false};
	char		key[32];
	char	   *k = key;

	if (expect(p, '{') != 0)
		return -1;
	if (next_is(p, '}'))
		return fail(p, "tensor \"%s\" has no dtype, shape or data_offsets", t->name);
	do
	{
		int			which;

		if (read_string(p, &k, sizeof(key), false) != 0 || expect(p, ':') != 0)
			return -1;
		which = strcmp(key, "dtype") == 0 ? 0 : strcmp(key, "shape") == 0 ? 1 :
			strcmp(key, "data_offsets") == 0 ? 2 : -1;
		if (which < 0)
			return fail(p, "tensor \"%s\" has an unknown key \"%s\"", t->name, key);
		if (seen[which])
			return fail(p, "tensor \"%s\" has \"%s\" twice", t->name, key);
		seen[which] = true;
		if (which == 0)
		{
			char	   *d = t->dtype;

			if (read_string(p, &d, sizeof(t->dtype), false) != 0)
				return -1;
		}
		else if (which == 1)
		{
			uint64_t	dims[ST_MAX_DIMS];
			int			d;

			if (read_uints(p, dims, ST_MAX_DIMS, &t->ndim) != 0)
				return -1;
			for (d = 0; d < t->ndim; d++)
				t->shape[d] = (int64_t) dims[d];
		}
		else
		{
			uint64_t	off[2];
			int			n;

			if (read_uints(p, off, 2, &n) != 0)
				return -1;
			if (n != 2)
				return fail(p, "tensor \"%s\": data_offsets must hold 2 integers, not %d", t->name, n);
			t->begin = off[0];
			t->end = off[1];
		}
	} while (next_is(p, ','));
	if (expect(p, '}') != 0)
		return -1;
	if (!seen[0] || !seen[1] || !seen[2])
		return fail(p, "tensor \"%s\" lacks %s", t->name, !seen[0] ? "dtype" : !seen[1] ? "shape" : "data_offsets");
	return 0;
}

/* "__metadata__": an object of string values. */
static int
read_metadata(Parser *p, StHeader *h)
{
	int			room = 0;

	if (h->meta != NULL)
		return fail(p, "\"__metadata__\" twice");
	if (expect(p, '{') != 0)
		return -1;
	h->meta = malloc(sizeof(StMeta));
	if (h->meta == NULL)
		return fail(p, "out of memory");
	room = 1;
	if (next_is(p, '}'))
		return 0;
	do
	{
		StMeta	   *m;
		char	   *k;
		int			j;

		if (h->nmeta == room)
		{
			StMeta	   *grown = realloc(h->meta, 2 * room * sizeof(StMeta));

			if (grown == NULL)
				return fail(p, "out of memory");
			h->meta = grown;
			room *= 2;
		}
		m = &h->meta[h->nmeta];
		m->value = NULL;
		k = m->key;
		if (read_string(p, &k, sizeof(m->key), false) != 0 || expect(p, ':') != 0)
			return -1;
		for (j = 0; j < h->nmeta; j++)
			if (strcmp(h->meta[j].key, m->key) == 0)
				return fail(p, "metadata key \"%s\" twice", m->key);
		skip_ws(p);
		if (p->i >= p->n || p->s[p->i] != '"')
			return fail(p, "metadata \"%s\" is not a string", m->key);
		h->nmeta++;				/* owns value from here, even half read */
		if (read_string(p, &m->value, 0, true) != 0)
			return -1;
	} while (next_is(p, ','));
	return expect(p, '}');
}

static int
tensor_cmp(const void *a, const void *b)
{
	return strcmp(((const StTensor *) a)->name, ((const StTensor *) b)->name);
}

int
st_parse(const char *bytes, size_t len, StHeader *out, char *err, size_t errlen)
{
	Parser		p;
	uint64_t	header_len = 0;
	int			room = 0,
				k;

	memset(out, 0, sizeof(*out));
	if (len < 8)
	{
		snprintf(err, errlen, "not a safetensors file: %zu bytes", len);
		return -1;
	}
	for (k = 7; k >= 0; k--)
		header_len = (header_len << 8) | (unsigned char) bytes[k];	/* little-endian */
	if (header_len > len - 8)
	{
		snprintf(err, errlen, "not a safetensors file: header length %llu exceeds the %zu bytes given",
				 (unsigned long long) header_len, len);
		return -1;
	}
	if (header_len > MAX_HEADER_BYTES)
	{
		snprintf(err, errlen, "safetensors header of %llu bytes, over the limit of %u",
				 (unsigned long long) header_len, MAX_HEADER_BYTES);
		return -1;
	}
	out->header_len = header_len;
	out->data_len = len - 8 - header_len;
	p.s = bytes + 8;
	p.n = (size_t) header_len;
	p.i = 0;
	p.err = err;
	p.errlen = errlen;
	if (expect(&p, '{') != 0)
		goto bad;
	if (!next_is(&p, '}'))
	{
		do
		{
			char		name[ST_NAME_MAX];
			char	   *nm = name;
			StTensor   *t;

			if (read_string(&p, &nm, sizeof(name), false) != 0 || expect(&p, ':') != 0)
				goto bad;
			if (strcmp(name, "__metadata__") == 0)
			{
				if (read_metadata(&p, out) != 0)
					goto bad;
				continue;
			}
			if (out->count == room)
			{
				StTensor   *grown = realloc(out->tensors, (size_t) (room ? 2 * room : 16) * sizeof(StTensor));

				if (grown == NULL)
				{
					fail(&p, "out of memory");
					goto bad;
				}
				out->tensors = grown;
				room = room ? 2 * room : 16;
			}
			t = &out->tensors[out->count];
			memset(t, 0, sizeof(*t));
			strcpy(t->name, name);
			if (read_tensor(&p, t) != 0)
				goto bad;
			if (t->begin > t->end || t->end > out->data_len)
			{
				fail(&p, "tensor \"%s\": data_offsets [%llu, %llu] outside the %llu data bytes", t->name,
					 (unsigned long long) t->begin, (unsigned long long) t->end,
					 (unsigned long long) out->data_len);
				goto bad;
			}
			out->count++;
		} while (next_is(&p, ','));
		if (expect(&p, '}') != 0)
			goto bad;
	}
	skip_ws(&p);
	if (p.i != p.n)
	{
		fail(&p, "bytes after the header's object");
		goto bad;
	}
	if (out->count > 1)
		qsort(out->tensors, out->count, sizeof(StTensor), tensor_cmp);
	for (k = 1; k < out->count; k++)
		if (strcmp(out->tensors[k - 1].name, out->tensors[k].name) == 0)
		{
			snprintf(err, errlen, "safetensors header: tensor \"%s\" twice", out->tensors[k].name);
			goto bad;
		}
	return 0;
bad:
	st_free(out);
	return -1;
}

void
st_free(StHeader *h)
{
	int			k;

	for (k = 0; k < h->nmeta; k++)
		free(h->meta[k].value);
	free(h->meta);
	free(h->tensors);
	memset(h, 0, sizeof(*h));
}

const char *
st_meta(const StHeader *h, const char *key)
{
	int			k;

	for (k = 0; k < h->nmeta; k++)
		if (strcmp(h->meta[k].key, key) == 0)
			return h->meta[k].value;
	return NULL;
}
