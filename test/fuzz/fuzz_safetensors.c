/*
 * fuzz_safetensors.c - libFuzzer target: st_parse (src/safetensors.h) on
 * any bytes. Beyond the sanitizers, a parsed header must keep its promises:
 * tensors sorted by unique name, offsets within the data, dims bounded.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	StHeader	h;
	char		err[256];
	int			k;

	if (st_parse((const char *) data, size, &h, err, sizeof(err)) != 0)
	{
		if (err[0] == '\0' || memchr(err, '\0', sizeof(err)) == NULL)
			abort();
		return 0;
	}
	if (8 + h.header_len + h.data_len != size)
		abort();
	for (k = 0; k < h.count; k++)
	{
		const StTensor *t = &h.tensors[k];

		if (t->begin > t->end || t->end > h.data_len || t->ndim < 0 || t->ndim > ST_MAX_DIMS)
			abort();
		if (k > 0 && strcmp(h.tensors[k - 1].name, t->name) >= 0)
			abort();
	}
	for (k = 0; k < h.nmeta; k++)
		if (h.meta[k].value == NULL || st_meta(&h, h.meta[k].key) == NULL)
			abort();
	st_free(&h);
	return 0;
}
