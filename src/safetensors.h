/*
 * safetensors.h - the safetensors file header
 * (https://huggingface.co/docs/safetensors): an 8-byte little-endian
 * header length N, N bytes of JSON, then the tensors' raw bytes. The JSON is
 * an object: "__metadata__" (an object of string values, optional) and one
 * entry per tensor, {"dtype": "F32", "shape": [d0, ...], "data_offsets":
 * [begin, end]} with offsets into the data that follows the header.
 *
 * A parser of its own (safetensors.c, plain C, no PostgreSQL), strict and
 * bounded, so that any bytes give either a header or a message naming the
 * problem; fuzzed by test/fuzz/fuzz_safetensors.c.
 */
#ifndef ATTENTION_SAFETENSORS_H
#define ATTENTION_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 8			/* dimensions a tensor entry may have */
#define ST_NAME_MAX 256			/* bytes of a tensor name or metadata key, with NUL */

/* One tensor entry of the header. */
typedef struct StTensor
{
	char		name[ST_NAME_MAX];
	char		dtype[16];		/* "F32", "F16", "BF16", "I64", ... as written */
	int			ndim;
	int64_t		shape[ST_MAX_DIMS];
	uint64_t	begin,			/* data_offsets: bytes from the start of the data */
				end;
} StTensor;

/* One "__metadata__" entry. */
typedef struct StMeta
{
	char		key[ST_NAME_MAX];
	char	   *value;			/* NUL-terminated, malloc'd */
} StMeta;

/* A parsed header; tensors sorted by name. */
typedef struct StHeader
{
	uint64_t	header_len;		/* N */
	uint64_t	data_len;		/* bytes after the header */
	StTensor   *tensors;		/* [count], malloc'd */
	int			count;
	StMeta	   *meta;			/* [nmeta], malloc'd */
	int			nmeta;
} StHeader;

/*
 * Parses the header of the safetensors file bytes[0 .. len) into *out
 * (free with st_free). Checks: the length prefix fits, the JSON is one
 * object of well-formed values (strings, integers, arrays, objects; depth at
 * most 8), every tensor entry has exactly dtype (a string), shape
 * (non-negative integers, at most ST_MAX_DIMS) and data_offsets (two
 * integers, begin <= end <= data_len), names are unique and shorter than
 * ST_NAME_MAX, metadata values are strings, and nothing follows the object
 * but spaces. The data itself is not checked against dtype and shape (the
 * caller knows its dtypes). Returns 0, or -1 with a message in err.
 */
int			st_parse(const char *bytes, size_t len, StHeader *out, char *err, size_t errlen);

/* Frees what st_parse allocated (a zeroed header is allowed). */
void		st_free(StHeader *h);

/* The value of metadata key `key`, or NULL. */
const char *st_meta(const StHeader *h, const char *key);

#endif
