/*
 * test_spm.c - the SentencePiece shim: in-memory training,
 * special ids, encode/decode round trip, and errors (never crashes) for
 * corrupt models, out-of-range ids and impossible training requests.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "spm.h"

#define N_SENTENCES 400

/* Trains on sentences; returns 0 and the model, or -1 with err filled. */
static int
train(char **sentences, size_t *lengths, size_t n, int vocab_size, char **model, size_t *len,
	  char *err, size_t errlen)
{
	SpmTrainOptions options = {vocab_size, "bpe", 1.0, false, 2};

	return spm_train((const char *const *) sentences, lengths, n, &options, model, len, err, errlen);
}

/*
 * A vocabulary pair over `model` (bytes, len) on both sides with its 64
 * pieces in reverse order plus a language code, as Marian's vocab.json maps
 * pieces: text encodes to the mapped ids (ids, n: the model's own), a
 * leading code to its id, and decodes back without the special ids.
 */
static void
pair_vocabulary(const SpmModel *model, const char *bytes, size_t len, const char *text, const int *ids, size_t n)
{
	const char *table[68];
	size_t		lengths[68];
	int			special[4] = {63 - SPM_PAD_ID, 63 - SPM_UNK_ID, 63 - SPM_PAD_ID, 63 - SPM_EOS_ID};
	SpmModel   *pair = NULL;
	char		err[256],
				coded[256],
			   *out = NULL;
	int		   *got = NULL,
				with_eos[64];
	size_t		got_n = 0,
				out_len = 0,
				i;
	int			id;

	for (id = 0; id < 64; id++)
		table[id] = spm_piece(model, 63 - id, &lengths[id]);
	table[64] = ">>de<<";
	lengths[64] = 6;
	CHECK(spm_load_pair(bytes, len, bytes, len, table, lengths, 65, special, &pair, err, sizeof(err)) == 0,
		  "pair: %s", err);
	if (pair == NULL)
		return;
	CHECK(spm_size(pair) == 65 && spm_pad_id(pair) == 63 && spm_bos_id(pair) == 63 &&
		  spm_eos_id(pair) == 60 && spm_unk_id(pair) == 62, "pair: size %d, special ids %d %d %d %d",
		  spm_size(pair), spm_pad_id(pair), spm_unk_id(pair), spm_bos_id(pair), spm_eos_id(pair));
	snprintf(coded, sizeof(coded), ">>de<<%s", text);
	CHECK(spm_encode(pair, SPM_SOURCE, coded, strlen(coded), &got, &got_n, err, sizeof(err)) == 0, "pair: %s", err);
	CHECK(got_n == n + 1 && got[0] == 64, "pair: %zu ids, first %d", got_n, got_n > 0 ? got[0] : -1);
	for (i = 0; i < n && i + 1 < got_n; i++)
		CHECK(got[i + 1] == 63 - ids[i], "pair: id %zu is %d, not %d", i, got[i + 1], 63 - ids[i]);
	for (i = 0; i < n && i < 62; i++)
		with_eos[i] = 63 - ids[i];
	with_eos[i] = spm_eos_id(pair);
	CHECK(spm_decode(pair, with_eos, i + 1, &out, &out_len, err, sizeof(err)) == 0 && strcmp(out, text) == 0,
		  "pair: decoded \"%s\" (%s)", out ? out : "", err);
	spm_free_buffer(got);
	spm_free_buffer(out);
	spm_free(pair);
	pair = NULL;

	/*
	 * MarianTokenizer.decode's text: pieces the target model lacks (a
	 * source-only word, punctuation it never saw) verbatim with every U+2581
	 * a space, special ids skipped, stripped, " ." and " 's" cleaned up.
	 */
	table[65] = "\xE2\x96\x81" "Foo" "\xE2\x96\x81" "Bar";
	table[66] = "\xE2\x96\x81.";
	table[67] = "\xE2\x96\x81's";
	for (id = 65; id < 68; id++)
		lengths[id] = strlen(table[id]);
	CHECK(spm_load_pair(bytes, len, bytes, len, table, lengths, 68, special, &pair, err, sizeof(err)) == 0,
		  "pair: %s", err);
	if (pair != NULL)
	{
		int			marked[66];
		char		want[300];

		marked[0] = spm_pad_id(pair);
		marked[1] = 65;
		marked[2] = spm_unk_id(pair);
		for (i = 0; i < n && i < 60; i++)
			marked[i + 3] = 63 - ids[i];
		marked[i + 3] = 67;
		marked[i + 4] = 66;
		marked[i + 5] = spm_eos_id(pair);
		snprintf(want, sizeof(want), "Foo Bar %s's.", text);
		CHECK(spm_decode(pair, marked, i + 6, &out, &out_len, err, sizeof(err)) == 0 && strcmp(out, want) == 0,
			  "pair: decoded \"%s\", not \"%s\" (%s)", out ? out : "", want, err);
		spm_free_buffer(out);
		spm_free(pair);
		pair = NULL;
	}
	table[64] = table[3];
	lengths[64] = lengths[3];
	CHECK(spm_load_pair(bytes, len, bytes, len, table, lengths, 65, special, &pair, err, sizeof(err)) != 0 &&
		  pair == NULL && strstr(err, "has two ids, 3 and 64") != NULL, "pair: a duplicate piece loaded (%s)", err);
	special[3] = 65;
	table[64] = ">>de<<";
	CHECK(spm_load_pair(bytes, len, bytes, len, table, lengths, 65, special, &pair, err, sizeof(err)) != 0 &&
		  strstr(err, "eos id 65") != NULL, "pair: eos id 65 of 65 loaded (%s)", err);
}

void
test_spm(const char *fixtures)
{
	static const char *words[] = {"the", "package", "provides", "files", "for", "library",
	"data", "tool", "debian", "support", "development", "documentation"};
	char	   *sentences[N_SENTENCES];
	size_t		lengths[N_SENTENCES];
	char		err[256];
	char	   *bytes = NULL;
	size_t		len = 0;
	SpmModel   *model = NULL;
	unsigned	seed = 7;
	int			i;

	(void) fixtures;
	for (i = 0; i < N_SENTENCES; i++)
	{
		char		buf[256] = "";
		int			w,
					nw = 3 + i % 8;

		for (w = 0; w < nw; w++)
		{
			seed = seed * 1103515245u + 12345u;
			if (w > 0)
				strcat(buf, " ");
			strcat(buf, words[(seed >> 16) % 12]);
		}
		sentences[i] = strdup(buf);
		lengths[i] = strlen(buf);
	}

	CHECK(train(sentences, lengths, N_SENTENCES, 64, &bytes, &len, err, sizeof(err)) == 0,
		  "training failed: %s", err);
	CHECK(spm_load(bytes, len, &model, err, sizeof(err)) == 0, "load failed: %s", err);
	if (model != NULL)
	{
		const char *text = "the package provides development documentation";
		int		   *ids = NULL;
		size_t		n = 0,
					np = 0,
					i2;
		char	   *out = NULL,
				   *pieces = NULL;
		size_t		out_len = 0,
				   *offsets = NULL;
		int			bad[2] = {5, 64};

		CHECK(spm_size(model) == 64, "vocab size %d, wanted 64", spm_size(model));
		CHECK(spm_pad_id(model) == SPM_PAD_ID && spm_unk_id(model) == SPM_UNK_ID &&
			  spm_bos_id(model) == SPM_BOS_ID && spm_eos_id(model) == SPM_EOS_ID,
			  "special ids %d %d %d %d", spm_pad_id(model), spm_unk_id(model),
			  spm_bos_id(model), spm_eos_id(model));
		CHECK(spm_encode(model, SPM_SOURCE, text, strlen(text), &ids, &n, err, sizeof(err)) == 0, "encode: %s", err);
		CHECK(n > 0 && n < strlen(text), "encoded into %zu ids", n);
		for (i2 = 0; i2 < n; i2++)
			CHECK(ids[i2] > SPM_EOS_ID && ids[i2] < 64, "id %d out of the piece range", ids[i2]);
		CHECK(spm_decode(model, ids, n, &out, &out_len, err, sizeof(err)) == 0, "decode: %s", err);
		CHECK(out != NULL && strcmp(out, text) == 0, "round trip gave \"%s\"", out ? out : "(null)");
		CHECK(spm_encode_pieces(model, SPM_TARGET, text, strlen(text), &pieces, &offsets, &np, err, sizeof(err)) == 0,
			  "pieces: %s", err);
		CHECK(np == n && strncmp(pieces, "\xe2\x96\x81the", 6) == 0, "pieces %zu \"%s\"", np, pieces);
		CHECK(spm_decode(model, bad, 2, &out, &out_len, err, sizeof(err)) != 0 &&
			  strstr(err, "64") != NULL, "decoding id 64 of 64 did not fail by name: %s", err);
		spm_free_buffer(out);
		spm_free_buffer(pieces);
		spm_free_buffer(offsets);
		pair_vocabulary(model, bytes, len, text, ids, n);
		spm_free_buffer(ids);
	}
	spm_free(model);

	/* corrupt models are refused with a message */
	model = NULL;
	CHECK(spm_load("not a model", 11, &model, err, sizeof(err)) != 0 && model == NULL,
		  "garbage bytes loaded");
	CHECK(spm_load(bytes, len / 2, &model, err, sizeof(err)) != 0 && model == NULL,
		  "a truncated model loaded");
	CHECK(spm_load("", 0, &model, err, sizeof(err)) != 0 && model == NULL, "an empty model loaded");
	spm_free_buffer(bytes);

	/* impossible requests fail with SentencePiece's message */
	CHECK(train(sentences, lengths, N_SENTENCES, 100000, &bytes, &len, err, sizeof(err)) != 0 &&
		  strlen(err) > 0, "vocab_size 100000 on a tiny corpus did not fail");

	for (i = 0; i < N_SENTENCES; i++)
		free(sentences[i]);
}
