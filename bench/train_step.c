/*
 * train_step.c - training throughput of the engine: full steps (forward,
 * backward, Adam) on length-bucketed batches of the real corpus.
 *
 *   train_step batches CORPUS_DIR OUT_FILE [TOKENS_PER_SIDE]
 *       trains an 8,000-piece BPE vocabulary on CORPUS_DIR/train.{en,de},
 *       encodes the pairs, groups them by length into batches of about
 *       TOKENS_PER_SIDE (default 4096) tokens per side, and writes 40 of
 *       them (seeded choice) to OUT_FILE for this program and the PyTorch
 *       reference (bench/reference_train_step.py) alike.
 *   train_step run BATCHES_FILE small|base THREADS STEPS
 *       times STEPS steps (after 2 warm-up steps) and prints one result line.
 *
 * Batch file: int32 count, then per batch int32 B, S, T and int32 arrays
 * src [B*S], tgt_in [B*T], labels [B*T] (pad 0, BOS 2, EOS 3).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "blas.h"
#include "corpus.h"
#include "device.h"
#include "spm.h"
#include "transformer.h"

#define NUM_BATCHES 40
#define MAX_LEN 128

typedef struct Pair
{
	int		   *src;
	int			ns;
	int		   *tgt;
	int			nt;
} Pair;

typedef struct Batch
{
	int			B,
				S,
				T;
	int32_t    *src,
			   *tgt_in,
			   *labels;
} Batch;

static int
by_length(const void *a, const void *b)
{
	const Pair *x = a,
			   *y = b;

	return x->ns != y->ns ? x->ns - y->ns : x->nt - y->nt;
}

/* The batches command. */
static int
make_batches(const char *dir, const char *out, int tokens)
{
	char		err[512];
	char	  **en,
			  **de;
	size_t	   *len_en,
			   *len_de;
	size_t		n,
				i,
				nb = 0;
	SpmModel   *model;
	Pair	   *pairs;
	Batch	   *batches;
	FILE	   *f;
	unsigned	seed = 2024;
	int			count = 0;

	model = corpus_train_vocabulary(dir, 8000, &en, &len_en, &de, &len_de, &n);

	pairs = calloc(n, sizeof(Pair));
	for (i = 0; i < n; i++)
	{
		size_t		a,
					b;

		spm_encode(model, SPM_SOURCE, en[i], len_en[i], &pairs[i].src, &a, err, sizeof(err));
		spm_encode(model, SPM_TARGET, de[i], len_de[i], &pairs[i].tgt, &b, err, sizeof(err));
		pairs[i].ns = (int) a + 1;	/* + EOS */
		pairs[i].nt = (int) b + 1;	/* BOS + target, target + EOS */
	}
	qsort(pairs, n, sizeof(Pair), by_length);

	/* consecutive runs of similar length, up to `tokens` per side including padding */
	batches = calloc(n, sizeof(Batch));
	for (i = 0; i < n;)
	{
		size_t		j = i;
		int			S = 0,
					T = 0;

		while (j < n && pairs[j].ns <= MAX_LEN && pairs[j].nt <= MAX_LEN)
		{
			int			s = S > pairs[j].ns ? S : pairs[j].ns;
			int			t = T > pairs[j].nt ? T : pairs[j].nt;

			if ((size_t) s * (j - i + 1) > (size_t) tokens || (size_t) t * (j - i + 1) > (size_t) tokens)
				break;
			S = s;
			T = t;
			j++;
		}
		if (j == i)
		{
			i++;
			continue;
		}
		batches[nb].B = (int) (j - i);
		batches[nb].S = S;
		batches[nb].T = T;
		batches[nb].src = (int32_t *) (pairs + i);	/* remember the start; filled below */
		nb++;
		i = j;
	}
	f = fopen(out, "wb");
	count = NUM_BATCHES < (int) nb ? NUM_BATCHES : (int) nb;
	fwrite(&count, 4, 1, f);
	for (i = 0; i < (size_t) count; i++)
	{
		Batch	   *bt;
		Pair	   *p;
		int			k,
					t;
		int32_t    *src,
				   *tgt,
				   *lab;

		seed = seed * 1103515245u + 12345u;
		bt = &batches[(seed >> 8) % nb];
		p = (Pair *) bt->src;
		src = calloc((size_t) bt->B * bt->S, 4);
		tgt = calloc((size_t) bt->B * bt->T, 4);
		lab = calloc((size_t) bt->B * bt->T, 4);
		for (k = 0; k < bt->B; k++)
		{
			for (t = 0; t < p[k].ns - 1; t++)
				src[k * bt->S + t] = p[k].src[t];
			src[k * bt->S + p[k].ns - 1] = SPM_EOS_ID;
			tgt[k * bt->T] = SPM_BOS_ID;
			for (t = 0; t < p[k].nt - 1; t++)
			{
				tgt[k * bt->T + t + 1] = p[k].tgt[t];
				lab[k * bt->T + t] = p[k].tgt[t];
			}
			lab[k * bt->T + p[k].nt - 1] = SPM_EOS_ID;
		}
		fwrite(&bt->B, 4, 1, f);
		fwrite(&bt->S, 4, 1, f);
		fwrite(&bt->T, 4, 1, f);
		fwrite(src, 4, (size_t) bt->B * bt->S, f);
		fwrite(tgt, 4, (size_t) bt->B * bt->T, f);
		fwrite(lab, 4, (size_t) bt->B * bt->T, f);
		free(src);
		free(tgt);
		free(lab);
	}
	fclose(f);
	printf("%zu pairs, %zu batches of <= %d tokens per side; wrote %d to %s\n", n, nb, tokens, count, out);
	return 0;
}

/* Reads the batch file. */
static int
read_batches(const char *path, Batch **out)
{
	FILE	   *f = fopen(path, "rb");
	int			count,
				i;
	Batch	   *b;

	if (f == NULL || fread(&count, 4, 1, f) != 1)
	{
		fprintf(stderr, "cannot read %s\n", path);
		exit(1);
	}
	b = calloc(count, sizeof(Batch));
	for (i = 0; i < count; i++)
	{
		size_t		ns,
					nt;

		if (fread(&b[i].B, 4, 1, f) != 1 || fread(&b[i].S, 4, 1, f) != 1 || fread(&b[i].T, 4, 1, f) != 1)
			exit(1);
		ns = (size_t) b[i].B * b[i].S;
		nt = (size_t) b[i].B * b[i].T;
		b[i].src = malloc(ns * 4);
		b[i].tgt_in = malloc(nt * 4);
		b[i].labels = malloc(nt * 4);
		if (fread(b[i].src, 4, ns, f) != ns || fread(b[i].tgt_in, 4, nt, f) != nt ||
			fread(b[i].labels, 4, nt, f) != nt)
			exit(1);
	}
	fclose(f);
	*out = b;
	return count;
}

/* Matrix-product FLOPs of one training step on the unpadded tokens (forward x 3). */
static double
step_flops(const TfConfig *c, const Batch *b)
{
	double		d = c->d_model,
				F = c->d_ff,
				V = c->vocab_size;
	double		ns = 0,
				nt = 0,
				ss = 0,
				tt = 0,
				st = 0,
				fwd;
	int			k,
				t;

	for (k = 0; k < b->B; k++)
	{
		int			ls = 0,
					lt = 0;

		for (t = 0; t < b->S; t++)
			ls += b->src[k * b->S + t] != 0;
		for (t = 0; t < b->T; t++)
			lt += b->labels[k * b->T + t] != 0;
		ns += ls;
		nt += lt;
		ss += (double) ls * ls;
		tt += (double) lt * lt;
		st += (double) ls * lt;
	}
	fwd = c->num_encoder_layers * (2 * ns * d * 3 * d + 2 * ns * d * d + 4 * ns * d * F + 4 * ss * d);
	fwd += c->num_decoder_layers * (2 * nt * d * 3 * d + 2 * nt * d * d + 4 * tt * d +
									2 * nt * d * d + 2 * ns * d * 2 * d + 4 * st * d + 2 * nt * d * d +
									4 * nt * d * F);
	fwd += 2 * nt * d * V;
	return 3 * fwd;
}

/*
 * sgemm peak: the best GFLOP/s of 5 products of 2048 x 2048 x 2048 by
 * OpenBLAS on `threads` threads of its own (run before and after the steps;
 * the VM's speed drifts).
 */
static double
sgemm_peak(int threads)
{
	int			n = 2048,
				r;
	float	   *a = calloc((size_t) n * n, 4),
			   *b = calloc((size_t) n * n, 4),
			   *c = calloc((size_t) n * n, 4);
	double		best = 0.0;
	const TfBlas *blas = tf_blas(NULL, 0);	/* the engine's OpenBLAS and kernels */

	if (blas != NULL)
		blas->set_num_threads(threads); /* the engine runs it on one thread per block */
	for (r = 0; blas != NULL && r < 5; r++)
	{
		double		t0 = bench_now();
		double		g;

		blas->sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
		g = 2.0 * n * n * n / (bench_now() - t0) / 1e9;
		best = g > best ? g : best;
	}
	if (blas != NULL)
		blas->set_num_threads(1);
	free(a);
	free(b);
	free(c);
	return best;
}

/* The run command. */
static int
run(const char *path, const char *size, int threads, int steps)
{
	Batch	   *batches;
	int			count = read_batches(path, &batches);
	TfConfig	c;
	TfModel    *m;
	TfOptimizer opt;
	char		err[TF_ERRLEN];
	double	   *secs = calloc(steps, sizeof(double));
	double		tokens = 0,
				flops = 0,
				total = 0,
				peak;
	int			i;
	struct rusage ru;

	if (strcmp(size, "base") == 0)
		tf_config_base(&c, 8000);
	else
		tf_config_small(&c, 8000);
	m = tf_model_create(&c, 1, bench_device, threads, err, sizeof(err));
	if (m == NULL)
		return fprintf(stderr, "%s\n", err), 1;
	bench_set_precision(m);
	tf_optimizer_default(&opt);
	peak = sgemm_peak(threads);		/* before the steps, and again after them */
	for (i = -2; i < steps; i++)
	{
		const Batch *b = &batches[(i + 2) % count];
		TfBatch		tb = {b->B, b->S, b->T, b->src, b->tgt_in, b->labels};
		TfStepStats st;
		double		t0 = bench_now();
		int64_t		n = 0;
		int			k;

		for (k = 0; k < b->B * b->T; k++)
			n += b->labels[k] != 0;
		if (tf_model_forward(m, &tb, true, NULL, NULL, err, sizeof(err)) != TF_OK ||
			tf_model_backward(m, (float) (1.0 / n), err, sizeof(err)) != TF_OK ||
			tf_model_step(m, &opt, &st, err, sizeof(err)) != TF_OK)
			return fprintf(stderr, "%s\n", err), 1;
		if (i < 0)
			continue;
		secs[i] = bench_now() - t0;
		total += secs[i];
		for (k = 0; k < b->B * b->S; k++)
			tokens += b->src[k] != 0;
		tokens += (double) n;
		flops += step_flops(&c, b);
	}
	{
		double		again = sgemm_peak(threads);

		peak = again > peak ? again : peak;
	}
	getrusage(RUSAGE_SELF, &ru);
	{
		double		sorted_median;

		qsort(secs, steps, sizeof(double), bench_compare_double);
		sorted_median = secs[steps / 2];
		printf("engine %s device=%s precision=%s threads=%d steps=%d median_step_s=%.4f tokens_per_s=%.0f gflops=%.1f "
			   "sgemm_peak_gflops=%.1f peak_fraction=%.2f max_rss_mb=%ld openblas=%s\n",
			   size, bench_device, bench_precision, threads, steps, sorted_median, tokens / total, flops / total / 1e9, peak,
			   flops / total / 1e9 / peak, ru.ru_maxrss / 1024,
			   tf_blas(NULL, 0) != NULL ? tf_blas(NULL, 0)->get_corename() : "none");
	}
	tf_model_free(m);
	return 0;
}

int
main(int argc, char **argv)
{
	argc = bench_device_option(argc, argv);
	if (argc >= 4 && strcmp(argv[1], "batches") == 0)
		return make_batches(argv[2], argv[3], argc > 4 ? atoi(argv[4]) : 4096);
	if (argc == 6 && strcmp(argv[1], "run") == 0)
		return run(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
	if (argc == 2 && strcmp(argv[1], "core") == 0)
	{
		/* the OpenBLAS kernel family the engine loads here, for a reference to run on */
		const TfBlas *blas = tf_blas(NULL, 0);

		printf("%s\n", blas != NULL ? blas->get_corename() : "none");
		return blas != NULL ? 0 : 1;
	}
	fprintf(stderr, "usage: train_step batches CORPUS_DIR OUT [TOKENS] | run BATCHES small|base THREADS STEPS "
			"[--device cpu|cuda|cuda:N] [--precision fp32|bf16] | core\n");
	return 2;
}
