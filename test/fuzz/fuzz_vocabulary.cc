/*
 * fuzz_vocabulary.cc - libFuzzer target: what import_vocabulary does with a
 * user's bytes (src/spm.h): load them as a SentencePiece model, and when
 * that succeeds, encode and decode a sentence with it. Any bytes must give
 * a model or an error message, never a crash.
 */
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "spm.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

extern "C" int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	SpmModel   *model = nullptr;
	char		err[512];
	int		   *ids = nullptr;
	size_t		n = 0;
	static const char text[] = "The package provides data files.";

	if (spm_load(reinterpret_cast<const char *>(data), size, &model, err, sizeof(err)) != 0)
	{
		if (err[0] == '\0')
			abort();
		return 0;
	}
	(void) spm_unk_id(model);
	if (spm_encode(model, SPM_SOURCE, text, sizeof(text) - 1, &ids, &n, err, sizeof(err)) == 0)
	{
		char	   *out = nullptr;
		size_t		len = 0;

		if (spm_decode(model, ids, n, &out, &len, err, sizeof(err)) == 0)
			spm_free_buffer(out);
		spm_free_buffer(ids);
	}
	spm_free(model);
	return 0;
}
