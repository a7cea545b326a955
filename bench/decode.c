/*
 * decode.c - translation throughput of the engine (beam search with
 * key/value caches) on a model whose weights the reference scripts
 * (bench/reference_decode.py for PyTorch, bench/ct2_decode.py for
 * CTranslate2) load too.
 *
 *   decode weights OUT_FILE small|base [VOCAB]
 *       writes a model with the paper's initialisation (seed 1) and 256
 *       sources: 8 groups of 32 sentences with 6, 10, ..., 34 random ids
 *       plus EOS (equal lengths within a group, so every toolkit applies the
 *       same length limit to a batch).
 *   decode run WEIGHTS THREADS BEAM BATCH OFFSET [REPS] [OUT_IDS]
 *       translates the 256 sources in order in batches of BATCH, REPS times
 *       (after one warm-up pass; REPS 0: one pass, timed), and prints one
 *       result line with the median; OUT_IDS receives the output ids, one sentence per line.
 *
 * Weights file: the test fixture format (test/fixtures/make_model_fixture.py):
 * "config" int32 [vocab, d_model, heads, d_ff, encoder layers, decoder
 * layers, pad, bos, eos, max_positions], every parameter under its MarianMT
 * name, and "sources" int32 [256, 35] padded with 0.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device.h"
#include "transformer.h"

#define SENTENCES 256
#define GROUP 32
#define MAX_SRC 35

static void
die(const char *what, const char *err)
{
	fprintf(stderr, "decode: %s: %s\n", what, err);
	exit(1);
}

/* Writes one record (name, int32 or float32 data with its shape). */
static void
record(FILE *f, const char *name, int dtype, int ndim, const int64_t *shape, const void *data)
{
	uint32_t	len = (uint32_t) strlen(name),
				d = (uint32_t) dtype,
				n = (uint32_t) ndim;
	size_t		count = 1;
	int			i;

	fwrite(&len, 4, 1, f);
	fwrite(name, 1, len, f);
	fwrite(&d, 4, 1, f);
	fwrite(&n, 4, 1, f);
	for (i = 0; i < ndim; i++)
	{
		uint32_t	s = (uint32_t) shape[i];

		fwrite(&s, 4, 1, f);
		count *= shape[i];
	}
	fwrite(data, 4, count, f);
}

static void
write_weights(const char *path, const char *size, int vocab)
{
	TfConfig	c;
	TfModel    *m;
	TfTensor   *t;
	int			n,
				i,
				j;
	char		err[TF_ERRLEN];
	FILE	   *f = fopen(path, "wb");
	int32_t		cfg[10];
	int64_t		shape[2];
	int32_t    *src = calloc(SENTENCES * MAX_SRC, sizeof(int32_t));
	uint64_t	state = 12345;

	if (strcmp(size, "base") == 0)
		tf_config_base(&c, vocab);
	else
		tf_config_small(&c, vocab);
	m = tf_model_create(&c, 1, "cpu", 1, err, sizeof(err));
	if (m == NULL || f == NULL)
		die("create", m == NULL ? err : path);
	cfg[0] = vocab, cfg[1] = c.d_model, cfg[2] = c.num_heads, cfg[3] = c.d_ff;
	cfg[4] = c.num_encoder_layers, cfg[5] = c.num_decoder_layers, cfg[6] = 0, cfg[7] = 2, cfg[8] = 3;
	cfg[9] = c.max_positions;
	fwrite("ATTFIX1\n", 1, 8, f);
	shape[0] = 10;
	record(f, "config", 1, 1, shape, cfg);
	if (tf_model_tensors(m, &t, &n, err, sizeof(err)) != TF_OK)
		die("tensors", err);
	for (i = 0; i < n; i++)
		if (strncmp(t[i].name, "model.", 6) == 0)
			record(f, t[i].name, 0, t[i].ndim, t[i].shape, t[i].data);
	for (i = 0; i < SENTENCES; i++)
	{
		int			len = 6 + 4 * (i / GROUP);

		for (j = 0; j < len; j++)
		{
			state = state * 6364136223846793005ULL + 1442695040888963407ULL;
			src[i * MAX_SRC + j] = 4 + (int) ((state >> 33) % (uint64_t) (vocab - 4));
		}
		src[i * MAX_SRC + len] = 3;
	}
	shape[0] = SENTENCES;
	shape[1] = MAX_SRC;
	record(f, "sources", 1, 2, shape, src);
	fclose(f);
	tf_tensors_free(t);
	free(src);
	tf_model_free(m);
}

/* Resident memory of this process in MB (VmRSS), or -1. */
static double
resident_mb(void)
{
	FILE	   *f = fopen("/proc/self/status", "r");
	char		line[256];
	double		kb = -1.0;

	while (f != NULL && fgets(line, sizeof(line), f) != NULL)
		if (strncmp(line, "VmRSS:", 6) == 0)
			kb = atof(line + 6);
	if (f != NULL)
		fclose(f);
	return kb < 0 ? -1.0 : kb / 1024.0;
}

/*
 * Reads the weights file into an inference model (int8 with --precision
 * int8); *sources receives [SENTENCES, MAX_SRC].
 */
static TfModel *
read_weights(const char *path, int threads, int32_t **sources, int *config)
{
	FILE	   *f = fopen(path, "rb");
	char		magic[8];
	TfConfig	c;
	TfModel    *m = NULL;
	TfTensor   *t = NULL;
	int			n = 0,
				i;
	char		err[TF_ERRLEN];

	if (f == NULL || fread(magic, 1, 8, f) != 8 || memcmp(magic, "ATTFIX1\n", 8) != 0)
		die("read", path);
	for (;;)
	{
		uint32_t	len,
					dtype,
					ndim,
					dims[2] = {1, 1};
		char		name[128];
		size_t		count;
		void	   *data;

		if (fread(&len, 4, 1, f) != 1)
			break;
		if (len >= sizeof(name) || fread(name, 1, len, f) != len || fread(&dtype, 4, 1, f) != 1 ||
			fread(&ndim, 4, 1, f) != 1 || ndim > 2 || fread(dims, 4, ndim, f) != ndim)
			die("read", "corrupt weights file");
		name[len] = '\0';
		count = (size_t) dims[0] * (ndim > 1 ? dims[1] : 1);
		data = malloc(count * 4);
		if (fread(data, 4, count, f) != count)
			die("read", "truncated weights file");
		if (strcmp(name, "config") == 0)
		{
			memcpy(config, data, 10 * sizeof(int32_t));
			tf_config_base(&c, config[0]);
			c.d_model = config[1], c.num_heads = config[2], c.d_ff = config[3];
			c.num_encoder_layers = config[4], c.num_decoder_layers = config[5];
			c.max_positions = config[9];
			c.dropout = 0.0f;
			m = tf_model_create_inference(&c, bench_device, threads, err, sizeof(err));
			if (m == NULL || tf_model_tensors(m, &t, &n, err, sizeof(err)) != TF_OK)
				die("create", err);
			bench_set_precision(m);
			free(data);
		}
		else if (strcmp(name, "sources") == 0)
			*sources = data;
		else
		{
			for (i = 0; i < n; i++)
				if (strcmp(t[i].name, name) == 0)
					t[i].data = data;
		}
	}
	fclose(f);
	if (m == NULL || tf_model_load(m, t, n, err, sizeof(err)) != TF_OK)
		die("load", m == NULL ? "no config" : err);
	for (i = 0; i < n; i++)
		free(t[i].data);
	tf_tensors_free(t);
	return bench_quantize(m, threads);
}

static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return x < y ? -1 : x > y;
}

static void
run(int argc, char **argv)
{
	int			threads = atoi(argv[3]);
	TfDecodeOptions opt;
	int			batch = atoi(argv[5]);
	int			reps = argc > 7 ? atoi(argv[7]) : 3;
	int32_t    *sources = NULL;
	int			config[10];
	TfModel    *m = read_weights(argv[2], threads, &sources, config);
	TfHypothesis *h = calloc(SENTENCES, sizeof(TfHypothesis));
	double	   *times = calloc(reps + 1, sizeof(double));
	long		tokens = 0;
	char		err[TF_ERRLEN];
	int			r,
				i,
				med;

	tf_decode_options_default(&opt);
	opt.beam_size = atoi(argv[4]);
	opt.max_length_offset = atoi(argv[6]);
	for (r = 0; r <= reps; r++)
	{
		double		t0 = bench_now();

		tokens = 0;
		for (i = 0; i < SENTENCES; i += batch)
		{
			int			b = batch < SENTENCES - i ? batch : SENTENCES - i;

			if (tf_model_translate(m, sources + (size_t) i * MAX_SRC, b, MAX_SRC, &opt, h + i, err,
								   sizeof(err)) != TF_OK)
				die("translate", err);
		}
		times[r] = bench_now() - t0;
		for (i = 0; i < SENTENCES; i++)
			tokens += h[i].length + 1;
		if (r == reps && argc > 8)
		{
			FILE	   *f = fopen(argv[8], "w");
			int			t;

			for (i = 0; f != NULL && i < SENTENCES; i++)
			{
				for (t = 0; t < h[i].length; t++)
					fprintf(f, "%s%d", t > 0 ? " " : "", h[i].tokens[t]);
				fprintf(f, "\n");
			}
			if (f != NULL)
				fclose(f);
		}
		tf_hypotheses_free(h, SENTENCES);
	}
	qsort(times + 1, reps, sizeof(double), cmp_double);
	med = reps > 0 ? 1 + reps / 2 : 0;	/* REPS 0: the one pass, warm-up included */
	printf("engine decode device=%s precision=%s d_model=%d beam=%d batch=%d threads=%d sentences=%d tokens=%ld seconds=%.3f "
		   "tokens_per_s=%.0f sentences_per_s=%.1f weights_mb=%.1f resident_mb=%.1f\n", bench_device, bench_precision,
		   config[1], opt.beam_size, batch, threads, SENTENCES, tokens, times[med], tokens / times[med],
		   SENTENCES / times[med], tf_model_weight_bytes(m) / 1048576.0, resident_mb());
	free(times);
	free(h);
	free(sources);
	tf_model_free(m);
}

int
main(int argc, char **argv)
{
	argc = bench_device_option(argc, argv);
	if (argc >= 4 && strcmp(argv[1], "weights") == 0)
		write_weights(argv[2], argv[3], argc > 4 ? atoi(argv[4]) : 8000);
	else if (argc >= 7 && strcmp(argv[1], "run") == 0)
		run(argc, argv);
	else
	{
		fprintf(stderr, "usage: decode weights OUT small|base [VOCAB]\n"
				"       decode run WEIGHTS THREADS BEAM BATCH OFFSET [REPS] [OUT_IDS] [--device cpu|cuda|cuda:N] [--precision fp32|bf16|int8]\n");
		return 2;
	}
	return 0;
}
