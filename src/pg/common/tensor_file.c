/*
 * tensor_file.c - safetensors files of named float32 tensors (tensor_file.h):
 * writing one with its metadata, checking tensors against a configuration,
 * and reading one (F32, F16 or BF16, widened to float32) with the engine's
 * header parser (src/safetensors.h). Used by export_checkpoint,
 * import_checkpoint and the Hugging Face import and export.
 */
#include "postgres.h"

#include <math.h>

#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/memutils.h"

#include "safetensors.h"
#include "tensor_file.h"
#include "transformer.h"

void
tensor_file_meta(StringInfo s, const char *key, const char *value)
{
	if (s->len > 0)
		appendStringInfoChar(s, ',');
	escape_json(s, key);
	appendStringInfoChar(s, ':');
	escape_json(s, value);
}

bytea *
tensor_file_write(const TfTensor *t, int count, const char *metadata, const char *what)
{
	StringInfoData h;
	uint64		offset = 0,
				header_len,
				total;
	bytea	   *out;
	char	   *p;
	int			i,
				d;

	initStringInfo(&h);
	appendStringInfo(&h, "{\"__metadata__\":{%s}", metadata);
	for (i = 0; i < count; i++)
	{
		if (t[i].dtype != TF_FLOAT32)
			ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
							errmsg("%s: parameter \"%s\" is not float32", what, t[i].name)));
		appendStringInfoChar(&h, ',');
		escape_json(&h, t[i].name);
		appendStringInfoString(&h, ":{\"dtype\":\"F32\",\"shape\":[");
		for (d = 0; d < t[i].ndim; d++)
			appendStringInfo(&h, "%s" INT64_FORMAT, d > 0 ? "," : "", t[i].shape[d]);
		appendStringInfo(&h, "],\"data_offsets\":[" UINT64_FORMAT "," UINT64_FORMAT "]}", offset,
						 offset + t[i].bytes);
		offset += t[i].bytes;
	}
	appendStringInfoChar(&h, '}');
	while (h.len % 8 != 0)
		appendStringInfoChar(&h, ' ');	/* the format pads the header to 8 bytes with spaces */
	header_len = h.len;
	total = 8 + header_len + offset;
	if (total + VARHDRSZ > MaxAllocSize)
		ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						errmsg("%s is %llu bytes as safetensors, over the 1 GB bytea limit",
							   what, (unsigned long long) total)));
	out = SPI_palloc(VARHDRSZ + total);
	SET_VARSIZE(out, VARHDRSZ + total);
	p = VARDATA(out);
	for (i = 0; i < 8; i++)
		p[i] = (char) ((header_len >> (8 * i)) & 0xff);	/* little-endian */
	memcpy(p + 8, h.data, header_len);
	p += 8 + header_len;
	for (i = 0; i < count; i++)
	{
		memcpy(p, t[i].data, t[i].bytes);
		p += t[i].bytes;
	}
	pfree(h.data);
	return out;
}

void
tensor_file_check(const TfConfig *c, const TfTensor *t, int count, const char *what)
{
	TfModel    *engine;
	char		err[TF_ERRLEN];

	/* the engine checks names and shapes against the model, naming the first that differs */
	engine = tf_model_create_inference(c, "cpu", 1, err, sizeof(err));
	if (engine == NULL)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("could not create a model to check against: %s", err)));
	if (tf_model_load(engine, t, count, err, sizeof(err)) != TF_OK)
	{
		tf_model_free(engine);
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("%s: %s", what, err)));
	}
	tf_model_free(engine);
}

/* IEEE half-precision bits to float. */
static float
half_to_float(uint16 h)
{
	uint32		sign = (uint32) (h & 0x8000) << 16,
				exp = (h >> 10) & 0x1f,
				mant = h & 0x3ff,
				bits;
	float		f;

	if (exp == 0)
	{
		/* zero or subnormal: mant * 2^-24 */
		f = ldexpf((float) mant, -24);
		return sign ? -f : f;
	}
	if (exp == 31)
		bits = sign | 0x7f800000 | (mant << 13);
	else
		bits = sign | ((exp + 112) << 23) | (mant << 13);
	memcpy(&f, &bits, sizeof(f));
	return f;
}

int
tensor_file_dtype_width(const char *dtype)
{
	if (strcmp(dtype, "F32") == 0)
		return 4;
	if (strcmp(dtype, "F16") == 0 || strcmp(dtype, "BF16") == 0)
		return 2;
	return 0;
}

void
tensor_file_widen(const char *dtype, const char *src, int64 elements, float *dst)
{
	int64		k;

	if (strcmp(dtype, "F32") == 0)
	{
		memcpy(dst, src, (size_t) elements * sizeof(float));
		return;
	}
	for (k = 0; k < elements; k++)
	{
		uint16		h;
		uint32		bits;

		if ((k & 0xFFFFF) == 0)
			CHECK_FOR_INTERRUPTS();
		memcpy(&h, src + 2 * k, 2);
		if (dtype[0] == 'B')
		{
			/* bfloat16 is float32's upper half */
			bits = (uint32) h << 16;
			memcpy(dst + k, &bits, 4);
		}
		else
			dst[k] = half_to_float(h);
	}
}

TfTensor *
tensor_file_read(bytea *file, int *count, const char *const *keys, char **values, int nkeys)
{
	const char *bytes = VARDATA_ANY(file);
	uint64		len = VARSIZE_ANY_EXHDR(file);
	StHeader	header;
	StTensor   *entries;
	const char *data;
	TfTensor   *t;
	char		err[TF_ERRLEN];
	int			n,
				i;

	if (len >= 2 && ((bytes[0] == 'P' && bytes[1] == 'K') || (unsigned char) bytes[0] == 0x80))
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("the file is a pickled PyTorch checkpoint (pytorch_model.bin), not safetensors"),
						errhint("Pickles can run code when loaded, so they are not read. Convert it where transformers is "
								"installed: MarianMTModel.from_pretrained(DIR).save_pretrained(DIR, safe_serialization=True).")));
	if (st_parse(bytes, len, &header, err, sizeof(err)) != 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("%s", err)));
	/* palloc'd copies, so that an ERROR below leaks nothing */
	n = header.count;
	entries = palloc(Max(n, 1) * sizeof(StTensor));
	memcpy(entries, header.tensors, n * sizeof(StTensor));
	for (i = 0; i < nkeys; i++)
	{
		const char *v = st_meta(&header, keys[i]);

		values[i] = v != NULL ? pstrdup(v) : NULL;
	}
	data = bytes + 8 + header.header_len;
	st_free(&header);

	t = palloc0(Max(n, 1) * sizeof(TfTensor));
	for (i = 0; i < n; i++)
	{
		const StTensor *e = &entries[i];
		int			width = tensor_file_dtype_width(e->dtype);
		int64		elements = 1;
		int			d;

		if (strlen(e->name) >= sizeof(t[i].name))
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("tensor name \"%s\" is too long", e->name)));
		if (width == 0)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("tensor \"%s\" has dtype %s; only F32, F16 and BF16 can be imported",
								   e->name, e->dtype)));
		if (e->ndim > TF_MAX_DIMS)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("tensor \"%s\" has %d dimensions, more than %d", e->name, e->ndim, TF_MAX_DIMS)));
		strlcpy(t[i].name, e->name, sizeof(t[i].name));
		t[i].dtype = TF_FLOAT32;
		t[i].ndim = e->ndim;
		for (d = 0; d < e->ndim; d++)
		{
			t[i].shape[d] = e->shape[d];
			if (e->shape[d] > PG_INT32_MAX)
				ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
								errmsg("tensor \"%s\" has an invalid shape", e->name)));
			elements *= e->shape[d];
		}
		if (e->end - e->begin != (uint64) elements * width)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("tensor \"%s\": data_offsets [%llu, %llu] do not hold its %lld %s values",
								   e->name, (unsigned long long) e->begin, (unsigned long long) e->end,
								   (long long) elements, e->dtype)));
		t[i].bytes = (size_t) elements * sizeof(float);
		if (width == 4)
		{
			t[i].data = (void *) (data + e->begin);
			continue;
		}
		t[i].data = palloc_extended(Max(t[i].bytes, 1), MCXT_ALLOC_HUGE);
		tensor_file_widen(e->dtype, data + e->begin, elements, t[i].data);
	}
	*count = n;
	return t;
}
