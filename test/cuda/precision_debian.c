/*
 * precision_debian.c - bf16 mixed precision against fp32 on the real corpus
 * (scripts/fetch-corpus), through the engine:
 *
 *   precision_debian CORPUS_DIR CUDA_LIBRARY [STEPS [TOKENS [SENTENCES [MORE_STEPS]]]]
 *
 * Trains a 1,000-piece BPE vocabulary on the train split and the tiny
 * configuration (d_model 64, 2+2 layers, 4 heads, d_ff 256, dropout 0.1) from
 * one seed twice, over the same batches of about TOKENS (default 400) tokens
 * per side: in fp32 on the CPU backend and in bf16 on the CUDA backend of
 * CUDA_LIBRARY (the emulated one in CI). Dropout masks are keyed by seed,
 * step and batch, so the two runs differ only by their arithmetic. Then
 * trains the bf16 run's model further in fp32 on the CPU, so that it
 * translates: until the mean loss of 100 steps falls under TARGET_LOSS and a
 * tenth of its translations are distinct (then EXTRA_STEPS at a time), at
 * most MORE_STEPS (default 8,000) steps (the model leaves its plateau of
 * short, repeated answers after a number of steps that any change of
 * summation order moves by thousands), and translates the first
 * SENTENCES (default 100) test sentences of at most 47 pieces with it, in
 * fp32 on the CPU and in bf16 on the CUDA backend (beam 4).
 *
 * Fails (exit 1) when a 10th step's loss differs from fp32's by more than 2%,
 * fewer than half of the translations are equal, bf16's beam search does
 * worse than fp32's by more than 0.5 on average (each translation ranked by
 * the fp32 model as beam search ranks it: a precision error would make
 * bf16's choices worse, not merely different), or the fp32 translations are
 * degenerate (fewer than a tenth distinct, or under 5 tokens on average: such
 * a model agrees with itself trivially); prints every compared value.
 *
 * Equality alone is not the criterion: this briefly trained model has many
 * near ties (hypotheses whose ranks differ by 0.05), where the two
 * precisions pick differently, and a tie early in the search sends the
 * beams apart, either way (a fixed 95% held on the corpus of 2026-11-23 and
 * not on that of 2026-11-25: 67 of 100 equal, 21 of the 33 others near ties,
 * 6 better in fp32 and 6 in bf16 by over 1).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../bench/corpus.h"
#include "spm.h"

/* The continuation's mean loss over 100 steps under which the model translates (4.83: 29 distinct answers; 4.97: 6) */
#define TARGET_LOSS 4.75
/* then steps at a time until a tenth of the translations are distinct */
#define EXTRA_STEPS 500
#include "transformer.h"

#define VOCAB 1000
#define MAX_LEN 48

typedef struct Pair
{
	int		   *src;
	int			ns;				/* source ids + EOS */
	int		   *tgt;
	int			nt;				/* target ids + 1 (BOS in, EOS out) */
} Pair;

static void
die(const char *what, const char *err)
{
	fprintf(stderr, "precision_debian: %s: %s\n", what, err);
	exit(2);
}

static int
by_length(const void *a, const void *b)
{
	const Pair *x = a,
			   *y = b;

	return x->ns != y->ns ? x->ns - y->ns : x->nt - y->nt;
}

/* Fills a padded batch from pairs[0 .. n-1]; buffers are malloc'd. */
static TfBatch
make_batch(const Pair *p, int n)
{
	TfBatch		b = {0};
	int32_t    *src,
			   *tgt,
			   *lab;

	for (int k = 0; k < n; k++)
	{
		b.src_len = p[k].ns > b.src_len ? p[k].ns : b.src_len;
		b.tgt_len = p[k].nt > b.tgt_len ? p[k].nt : b.tgt_len;
	}
	b.batch_size = n;
	src = calloc((size_t) n * b.src_len, 4);
	tgt = calloc((size_t) n * b.tgt_len, 4);
	lab = calloc((size_t) n * b.tgt_len, 4);
	for (int k = 0; k < n; k++)
	{
		for (int t = 0; t < p[k].ns - 1; t++)
			src[k * b.src_len + t] = p[k].src[t];
		src[k * b.src_len + p[k].ns - 1] = SPM_EOS_ID;
		tgt[k * b.tgt_len] = SPM_BOS_ID;
		for (int t = 0; t < p[k].nt - 1; t++)
		{
			tgt[k * b.tgt_len + t + 1] = p[k].tgt[t];
			lab[k * b.tgt_len + t] = p[k].tgt[t];
		}
		lab[k * b.tgt_len + p[k].nt - 1] = SPM_EOS_ID;
	}
	b.src = src;
	b.tgt_in = tgt;
	b.labels = lab;
	return b;
}

/*
 * Batches of similar lengths from pairs sorted by length, up to `tokens` per
 * side with padding, in a seeded order (step s trains on batch s mod *nb).
 */
static TfBatch *
cut_batches(const Pair *pairs, size_t kept, int tokens, size_t *nb)
{
	TfBatch    *batches = calloc(kept, sizeof(TfBatch));

	*nb = 0;
	for (size_t i = 0; i < kept;)
	{
		size_t		j = i + 1;

		while (j < kept && (size_t) pairs[j].ns * (j - i + 1) <= (size_t) tokens &&
			   (size_t) (pairs[j].nt > pairs[j - 1].nt ? pairs[j].nt : pairs[j - 1].nt) * (j - i + 1) <=
			   (size_t) tokens)
			j++;
		batches[(*nb)++] = make_batch(pairs + i, (int) (j - i));
		i = j;
	}
	for (size_t i = *nb - 1; i > 0; i--)
	{
		size_t		j = ((i * 2654435761u) >> 7) % (i + 1);
		TfBatch		t = batches[i];

		batches[i] = batches[j];
		batches[j] = t;
	}
	return batches;
}

/* One optimizer step over one batch; returns the mean loss. */
static double
train_step(TfModel *m, const TfBatch *b, const TfOptimizer *opt)
{
	char		err[TF_ERRLEN];
	double		loss;
	int64_t		tokens;
	TfStepStats stats;

	if (tf_model_forward(m, b, true, &loss, &tokens, err, sizeof(err)) != TF_OK ||
		tf_model_backward(m, 1.0f / (float) tokens, err, sizeof(err)) != TF_OK ||
		tf_model_step(m, opt, &stats, err, sizeof(err)) != TF_OK)
		die("training step", err);
	return loss / (double) tokens;
}

/* Whether two hypotheses have the same tokens. */
static bool
same(const TfHypothesis *a, const TfHypothesis *b)
{
	return a->length == b->length && memcmp(a->tokens, b->tokens, a->length * sizeof(int32_t)) == 0;
}

/*
 * What beam search ranks a hypothesis of source src [MAX_LEN] by, under
 * model m: its log-probability (teacher-forced, EOS included) over the
 * length penalty ((5 + |Y|) / 6)^0.6 of the default options.
 */
static double
rank_score(TfModel *m, const int32_t *src, const TfHypothesis *h)
{
	char		err[TF_ERRLEN];
	int			n = h->length + 1;
	int32_t    *tgt = calloc(2 * (size_t) n, sizeof(int32_t));
	TfBatch		b = {1, MAX_LEN, n, src, tgt, tgt + n, 0};
	double		lp;

	tgt[0] = SPM_BOS_ID;
	for (int j = 0; j < h->length; j++)
		tgt[1 + j] = tgt[n + j] = h->tokens[j];
	tgt[2 * n - 1] = SPM_EOS_ID;
	if (tf_model_score(m, &b, &lp, err, sizeof(err)) != TF_OK)
		die("score", err);
	free(tgt);
	return lp / pow((5.0 + n) / 6.0, 0.6);
}

/* How many of n hypotheses differ from every one before them. */
static int
count_distinct(const TfHypothesis *h, int n)
{
	int			distinct = 0;

	for (int i = 0; i < n; i++)
	{
		bool		seen = false;

		for (int k = 0; k < i && !seen; k++)
			seen = same(&h[k], &h[i]);
		distinct += !seen;
	}
	return distinct;
}

/* Beam-4 translations of src [n, len] into out [n]. */
static void
translate(TfModel *m, const int32_t *src, int n, int len, TfHypothesis *out)
{
	char		err[TF_ERRLEN];
	TfDecodeOptions opt;

	tf_decode_options_default(&opt);
	if (tf_model_translate(m, src, n, len, &opt, out, err, sizeof(err)) != TF_OK)
		die("translation", err);
}

int
main(int argc, char **argv)
{
	const char *dir = argc > 2 ? argv[1] : NULL;
	int			steps = argc > 3 ? atoi(argv[3]) : 300,
				tokens = argc > 4 ? atoi(argv[4]) : 400,
				sentences = argc > 5 ? atoi(argv[5]) : 100,
				more_steps = argc > 6 ? atoi(argv[6]) : 8000,
				trained = 0,
				target_steps = 0;	/* trained at least this far (rounds of EXTRA_STEPS) */
	char		path[4096],
				err[512];
	char	  **en,
			  **de,
			  **test_en;
	size_t	   *len_en,
			   *len_de,
			   *len_test;
	size_t		n,
				test_lines,
				kept = 0,
				nb = 0;
	SpmModel   *vocab;
	Pair	   *pairs;
	TfBatch    *batches;
	TfConfig	config;
	TfOptimizer opt;
	TfModel    *fp32,
			   *bf16;
	TfTensor   *tensors;
	double		window[100],
				last_losses = 0.0;
	int			count,
				worst_step = 0,
				equal = 0,
				distinct = 0;
	long		output_tokens = 0;
	double		worse = 0;		/* sum over sentences of fp32's rank of its output minus of bf16's */
	double		worst = 0.0;
	int32_t    *test_src;
	TfHypothesis *hyp32,
			   *hyp16;
	bool		failed = false;

	if (dir == NULL || steps < 10 || tokens < MAX_LEN || sentences < 1)
	{
		fprintf(stderr, "usage: %s CORPUS_DIR CUDA_LIBRARY [STEPS >= 10 [TOKENS >= %d [SENTENCES [MORE_STEPS]]]]\n", argv[0],
				MAX_LEN);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	tf_backend_set_cuda_library(argv[2]);

	/* vocabulary on both sides of the train split; pairs of at most MAX_LEN pieces */
	vocab = corpus_train_vocabulary(dir, VOCAB, &en, &len_en, &de, &len_de, &n);
	pairs = calloc(n, sizeof(Pair));
	for (size_t i = 0; i < n; i++)
	{
		Pair	   *p = &pairs[kept];
		size_t		a,
					b;

		if (spm_encode(vocab, SPM_SOURCE, en[i], len_en[i], &p->src, &a, err, sizeof(err)) != 0 ||
			spm_encode(vocab, SPM_TARGET, de[i], len_de[i], &p->tgt, &b, err, sizeof(err)) != 0)
			die("encode", err);
		p->ns = (int) a + 1;
		p->nt = (int) b + 1;
		if (p->ns <= MAX_LEN && p->nt <= MAX_LEN)
			kept++;
	}

	qsort(pairs, kept, sizeof(Pair), by_length);
	batches = cut_batches(pairs, kept, tokens, &nb);
	printf("%zu pairs, %zu of at most %d pieces, %zu batches of <= %d tokens per side\n", n, kept, MAX_LEN, nb,
		   tokens);

	tf_config_small(&config, VOCAB);
	config.d_model = 64;
	config.num_encoder_layers = config.num_decoder_layers = 2;
	config.num_heads = 4;
	config.d_ff = 256;
	config.max_positions = 128;
	tf_optimizer_default(&opt);
	opt.warmup_steps = 100;
	if ((fp32 = tf_model_create(&config, 11, "cpu", 1, err, sizeof(err))) == NULL)
		die("fp32 model", err);
	if ((bf16 = tf_model_create(&config, 11, "cuda", 1, err, sizeof(err))) == NULL ||
		tf_model_set_precision(bf16, TF_BF16, err, sizeof(err)) != TF_OK)
		die("bf16 model", err);

	printf("step  loss fp32   loss bf16   difference\n");
	for (int s = 0; s < steps; s++)
	{
		const TfBatch *b = &batches[s % nb];
		double		l32 = train_step(fp32, b, &opt),
					l16 = train_step(bf16, b, &opt),
					rel = fabs(l16 - l32) / l32;

		if ((s + 1) % 10 != 0)
			continue;
		printf("%4d  %9.5f   %9.5f   %6.3f%%\n", s + 1, l32, l16, 100.0 * rel);
		if (rel > worst)
			worst = rel, worst_step = s + 1;
	}
	printf("losses: largest difference %.3f%% at step %d (limit 2%%)\n", 100.0 * worst, worst_step);
	failed |= worst > 0.02;

	/*
	 * After 300 steps the model still answers every source with EOS alone;
	 * the bf16 run's model goes on training in fp32 on the CPU (cheap) over
	 * batches of 400 tokens until it translates, then that model is decoded
	 * in fp32 on the CPU and in bf16 on the CUDA backend.
	 */
	if (tf_model_tensors(bf16, &tensors, &count, err, sizeof(err)) != TF_OK ||
		tf_model_load(fp32, tensors, count, err, sizeof(err)) != TF_OK)
		die("copying the bf16 run's model", err);
	tf_tensors_free(tensors);
	free(batches);
	batches = cut_batches(pairs, kept, 400, &nb);
	snprintf(path, sizeof(path), "%s/test.en", dir);
	test_lines = read_lines(path, &test_en, &len_test);
	test_src = calloc((size_t) sentences * MAX_LEN, sizeof(int32_t));
	for (int i = 0, line = 0; i < sentences; line++)
	{
		int		   *ids;
		size_t		k;

		if (line == (int) test_lines)
			die(path, "fewer short test sentences than asked for");
		if (spm_encode(vocab, SPM_SOURCE, test_en[line], len_test[line], &ids, &k, err, sizeof(err)) != 0)
			die("encode", err);
		if (k < MAX_LEN)
		{
			for (size_t t = 0; t < k; t++)
				test_src[i * MAX_LEN + t] = ids[t];
			test_src[i++ * MAX_LEN + k] = SPM_EOS_ID;
		}
		spm_free_buffer(ids);
	}
	hyp32 = calloc(sentences, sizeof(TfHypothesis));
	hyp16 = calloc(sentences, sizeof(TfHypothesis));

	/*
	 * Trained until the mean loss of 100 steps is under TARGET_LOSS and then,
	 * in rounds of EXTRA_STEPS, until its fp32 translations are not
	 * degenerate (a tenth distinct): where the plateau ends moves with the
	 * summation order (another OpenBLAS kernel family), the loss it ends at
	 * too.
	 */
	for (;;)
	{
		while (trained < more_steps && (trained < 100 || last_losses / 100 >= TARGET_LOSS || trained < target_steps))
		{
			double		loss = train_step(fp32, &batches[trained % nb], &opt);

			last_losses += loss - (trained >= 100 ? window[trained % 100] : 0.0);
			window[trained++ % 100] = loss;
		}
		translate(fp32, test_src, sentences, MAX_LEN, hyp32);
		distinct = count_distinct(hyp32, sentences);
		if (distinct * 10 >= sentences || trained >= more_steps)
			break;
		printf("after %d steps in fp32 (mean loss of the last 100 %.4f) %d of %d translations distinct: %d steps more\n",
			   trained, last_losses / 100, distinct, sentences, EXTRA_STEPS);
		tf_hypotheses_free(hyp32, sentences);
		target_steps = trained + EXTRA_STEPS;
	}
	if (tf_model_tensors(fp32, &tensors, &count, err, sizeof(err)) != TF_OK ||
		tf_model_load(bf16, tensors, count, err, sizeof(err)) != TF_OK)
		die("copying the model back", err);
	tf_tensors_free(tensors);
	printf("then %d more steps in fp32 on the CPU over batches of <= 400 tokens per side (until a mean of 100 under "
		   "%.2f and a tenth of the translations distinct, at most %d): mean loss of the last 100 %.4f\n", trained,
		   TARGET_LOSS, more_steps, last_losses / (trained < 100 ? (trained > 0 ? trained : 1) : 100));
	translate(bf16, test_src, sentences, MAX_LEN, hyp16);
	for (int i = 0; i < sentences; i++)
	{
		equal += same(&hyp32[i], &hyp16[i]);
		if (!same(&hyp32[i], &hyp16[i]))
		{
			double		own = rank_score(fp32, test_src + (size_t) i * MAX_LEN, &hyp32[i]),
						other = rank_score(fp32, test_src + (size_t) i * MAX_LEN, &hyp16[i]);

			printf("sentence %d differs: fp32 ranks its own output %.4f and bf16's %.4f (a gap of %.2g)\n", i,
				   own, other, own - other);
			worse += own - other;
		}
		output_tokens += hyp32[i].length;
	}
	printf("translations: %d of %d equal in bf16 and fp32 (half required); bf16's ranked %.3f below fp32's on "
		   "average (at most 0.5 allowed); %d distinct, %.1f tokens on average (a tenth distinct and 5 tokens "
		   "required: a degenerate model would agree with itself)\n", equal, sentences, worse / sentences,
		   distinct, (double) output_tokens / sentences);
	failed |= equal * 2 < sentences || worse > 0.5 * sentences || distinct * 10 < sentences ||
		output_tokens < 5L * sentences;
	tf_hypotheses_free(hyp32, sentences);
	tf_hypotheses_free(hyp16, sentences);
	tf_model_free(fp32);
	tf_model_free(bf16);
	printf("%s\n", failed ? "FAILED" : "passed");
	return failed ? 1 : 0;
}
