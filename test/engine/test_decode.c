/*
 * test_decode.c - translation against the PyTorch reference search of
 * test/fixtures/decode_fixture.bin (token ids, log-probabilities, scores,
 * n-best lists), incremental decoding against full-prefix scoring,
 * batching independence, continuous batching (streams), scoring and attention probabilities, bad options.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fixture.h"
#include "transformer.h"

/* True when |a - b| <= tol * max(1, |b|). */
static bool
close_to(double a, double b, double tol)
{
	return fabs(a - b) <= tol * fmax(1.0, fabs(b));
}

/* Compares hypotheses of sentences [first, first + count) with the reference of one case. */
static int
compare_case(const Fixture *fx, int c, const TfHypothesis *h, int first, int count, int nbest)
{
	char		name[64];
	const FixTensor *tok,
			   *lp,
			   *sc,
			   *le;
	int			maxout,
				bad = 0,
				i,
				j,
				t;

	snprintf(name, sizeof(name), "case%d.tokens", c);
	tok = fixture_get(fx, name);
	snprintf(name, sizeof(name), "case%d.log_prob", c);
	lp = fixture_get(fx, name);
	snprintf(name, sizeof(name), "case%d.score", c);
	sc = fixture_get(fx, name);
	snprintf(name, sizeof(name), "case%d.length_eos", c);
	le = fixture_get(fx, name);
	maxout = (int) (tok->count / lp->count);
	for (i = 0; i < count; i++)
		for (j = 0; j < nbest; j++)
		{
			const TfHypothesis *x = &h[i * nbest + j];
			size_t		k = (size_t) (first + i) * nbest + j;
			const int32_t *want = (const int32_t *) tok->data + k * maxout;
			int			length = ((const int32_t *) le->data)[2 * k];
			bool		eos = ((const int32_t *) le->data)[2 * k + 1] != 0;
			bool		same = x->length == length && x->finished == eos;

			for (t = 0; same && t < length; t++)
				same = x->tokens[t] == want[t];
			CHECK(same, "case %d sentence %d hypothesis %d: %d tokens (eos %d), PyTorch %d (eos %d)",
				  c, first + i, j, x->length, x->finished, length, eos);
			CHECK(close_to(x->log_prob, ((const float *) lp->data)[k], 1e-4) &&
				  close_to(x->score, ((const float *) sc->data)[k], 1e-4),
				  "case %d sentence %d hypothesis %d: log_prob %.6f score %.6f, PyTorch %.6f %.6f",
				  c, first + i, j, x->log_prob, x->score, ((const float *) lp->data)[k],
				  ((const float *) sc->data)[k]);
			bad += !same;
		}
	return bad;
}

/* The decoding options of the fixture's case c. */
static TfDecodeOptions
case_options(const Fixture *fx, int c)
{
	const int32_t *cfg = fixture_get(fx, "config")->data;
	TfDecodeOptions opt;
	char		name[64];
	const int32_t *o;

	snprintf(name, sizeof(name), "case%d.options", c);
	o = fixture_get(fx, name)->data;
	tf_decode_options_default(&opt);
	opt.beam_size = o[0];
	opt.nbest = o[1];
	opt.length_penalty = o[2] / 1000.0f;
	opt.max_length_offset = o[3];
	opt.bos_id = cfg[7];
	opt.eos_id = cfg[8];
	return opt;
}

/* Every case of the fixture, batched and one sentence at a time; incremental = full-prefix scores. */
static void
check_search(const Fixture *fx, TfModel *m)
{
	const int32_t *cfg = fixture_get(fx, "config")->data;
	const FixTensor *src = fixture_get(fx, "src");
	int			B = 4,
				L = (int) src->count / 4;
	int			cases = cfg[9];
	int			c,
				checked = 0,
				rescored = 0;
	double		worst = 0.0;
	char		err[TF_ERRLEN];

	for (c = 0; c < cases; c++)
	{
		TfDecodeOptions opt;
		TfHypothesis *h;
		int			i,
					j;

		opt = case_options(fx, c);
		h = calloc((size_t) B * opt.nbest, sizeof(TfHypothesis));
		CHECK(tf_model_translate(m, src->data, B, L, &opt, h, err, sizeof(err)) == TF_OK,
			  "translate case %d: %s", c, err);
		compare_case(fx, c, h, 0, B, opt.nbest);
		checked += B * opt.nbest;

		/* the log-probability of every hypothesis, recomputed over its whole prefix */
		for (i = 0; i < B * opt.nbest; i++)
		{
			int			s = i / opt.nbest;
			int			n = h[i].length + 1;
			int32_t    *tgt = calloc(2 * (size_t) n, sizeof(int32_t));
			TfBatch		b = {1, L, n, (const int32_t *) src->data + (size_t) s * L, tgt, tgt + n};
			double		lp;

			tgt[0] = opt.bos_id;
			for (j = 0; j < h[i].length; j++)
				tgt[1 + j] = tgt[n + j] = h[i].tokens[j];
			tgt[n + n - 1] = opt.eos_id;
			CHECK(tf_model_score(m, &b, &lp, err, sizeof(err)) == TF_OK, "score: %s", err);
			CHECK(close_to(lp, h[i].log_prob, 1e-4), "case %d hypothesis %d: incremental %.6f, full prefix %.6f",
				  c, i, h[i].log_prob, lp);
			worst = fmax(worst, fabs(lp - h[i].log_prob));
			rescored++;
			free(tgt);
		}
		tf_hypotheses_free(h, B * opt.nbest);

		/* one sentence at a time gives the same as the batch */
		for (i = 0; i < B; i++)
		{
			CHECK(tf_model_translate(m, (const int32_t *) src->data + (size_t) i * L, 1, L, &opt, h,
									 err, sizeof(err)) == TF_OK, "translate case %d sentence %d: %s", c, i, err);
			compare_case(fx, c, h, i, 1, opt.nbest);
			tf_hypotheses_free(h, opt.nbest);
		}
		free(h);
	}
	printf("  beam search: %d cases, %d hypotheses equal to PyTorch's; incremental vs full prefix: %d, worst |diff| %.2g\n",
		   cases, checked, rescored, worst);
}

/* Takes every done sentence of a stream and compares it with the reference; returns how many. */
static int
take_done(const Fixture *fx, TfStream *st, int c, int nbest)
{
	TfHypothesis h[64];
	int64_t		tag;
	int			n = 0;

	while (tf_stream_take(st, &tag, h))
	{
		compare_case(fx, c, h, (int) tag, 1, nbest);
		tf_hypotheses_free(h, nbest);
		n++;
	}
	return n;
}

/*
 * Continuous batching: sentences joining a stream at different steps (the
 * shortest first, so the stream grows in sentences and source positions
 * while it holds hypotheses) get PyTorch's hypotheses, as alone.
 */
static void
check_stream(const Fixture *fx, TfModel *m)
{
	const int32_t *cfg = fixture_get(fx, "config")->data;
	const FixTensor *src = fixture_get(fx, "src");
	const int32_t *ids = src->data;
	int			L = (int) src->count / 4;
	int			order[4] = {0, 1, 2, 3},
				len[4];
	int			cases = cfg[9],
				taken_all = 0,
				c,
				i,
				j;
	char		err[TF_ERRLEN];

	for (i = 0; i < 4; i++)
		for (len[i] = 0; len[i] < L && ids[i * L + len[i]] != cfg[6]; len[i]++)
			;
	for (i = 1; i < 4; i++)
		for (j = i; j > 0 && len[order[j]] < len[order[j - 1]]; j--)
		{
			int			t = order[j];

			order[j] = order[j - 1];
			order[j - 1] = t;
		}
	CHECK(len[order[0]] < len[order[3]], "the fixture's sources have equal lengths: no growth tested");
	for (c = 0; c < cases; c++)
	{
		TfDecodeOptions opt;
		TfStream   *st;
		int32_t		pair[2 * 64],
					empty[2] = {cfg[6], cfg[6]};
		int64_t		tags[2] = {order[2], order[3]};
		int			taken = 0,
					steps = 0;

		size_t		before = tf_model_memory_bytes(m),
					during = 0;

		opt = case_options(fx, c);
		CHECK(tf_stream_create(m, &opt, &st, err, sizeof(err)) == TF_OK, "stream: %s", err);
		if (st == NULL || L > 64)
			continue;
		CHECK(tf_stream_add(st, ids + (size_t) order[0] * L, 1, L, (int64_t[]) {order[0]}, err, sizeof(err)) == TF_OK,
			  "add: %s", err);
		CHECK(tf_stream_add(st, empty, 1, 2, NULL, err, sizeof(err)) == TF_ERROR && strstr(err, "empty") != NULL,
			  "an empty source joined: %s", err);
		for (i = 0; i < 2; i++, steps++)
			CHECK(tf_stream_step(st, err, sizeof(err)) == TF_OK, "step: %s", err);
		taken += take_done(fx, st, c, opt.nbest);
		CHECK(tf_stream_add(st, ids + (size_t) order[1] * L, 1, L, (int64_t[]) {order[1]}, err, sizeof(err)) == TF_OK,
			  "add: %s", err);
		CHECK(tf_stream_step(st, err, sizeof(err)) == TF_OK, "step: %s", err);
		taken += take_done(fx, st, c, opt.nbest);
		memcpy(pair, ids + (size_t) order[2] * L, L * sizeof(int32_t));
		memcpy(pair + L, ids + (size_t) order[3] * L, L * sizeof(int32_t));
		CHECK(tf_stream_add(st, pair, 2, L, tags, err, sizeof(err)) == TF_OK, "add: %s", err);
		during = tf_model_memory_bytes(m);
		while (tf_stream_sentences(st) > 0 && steps++ < 1000)
		{
			CHECK(tf_stream_step(st, err, sizeof(err)) == TF_OK, "step: %s", err);
			taken += take_done(fx, st, c, opt.nbest);
		}
		taken += take_done(fx, st, c, opt.nbest);
		CHECK(taken == 4, "case %d: %d sentences left the stream, not 4", c, taken);
		taken_all += taken;
		tf_stream_free(st);
		/* the allocator's count: the stream's caches held while it decodes, given back with it */
		CHECK(before >= tf_model_weight_bytes(m) && during > before && tf_model_memory_bytes(m) == before,
			  "case %d: memory %zu (weights %zu), %zu with the stream, %zu after it", c, before,
			  tf_model_weight_bytes(m), during, tf_model_memory_bytes(m));
	}
	printf("  stream: %d cases, %d sentences joining at steps 0, 2, 3, 3 equal to PyTorch's\n", cases, taken_all);
}

/* Log-probabilities and attention probabilities of teacher-forced pairs against PyTorch. */
static void
check_score_and_attention(const Fixture *fx, TfModel *m)
{
	const int32_t *cfg = fixture_get(fx, "config")->data;
	const FixTensor *src = fixture_get(fx, "src");
	const FixTensor *tgt_in = fixture_get(fx, "score.tgt_in");
	const float *want = fixture_get(fx, "score.log_prob")->data;
	TfBatch		b = {4, (int) src->count / 4, (int) tgt_in->count / 4, src->data, tgt_in->data,
	fixture_get(fx, "score.labels")->data};
	double		lp[4];
	double		worst = 0.0;
	char		err[TF_ERRLEN];
	const char *kinds[] = {"encoder_self", "decoder_self", "cross"};
	int			i,
				k,
				l,
				planes = 0;

	CHECK(tf_model_score(m, &b, lp, err, sizeof(err)) == TF_OK, "score: %s", err);
	CHECK(tf_model_attention(m, TF_CROSS, 0, 0, NULL, &k, &l, err, sizeof(err)) == TF_ERROR,
		  "a score not asked to keep the attention probabilities has them");
	tf_model_keep_attention(m);
	CHECK(tf_model_score(m, &b, lp, err, sizeof(err)) == TF_OK, "score keeping the attention: %s", err);
	for (i = 0; i < 4; i++)
		CHECK(close_to(lp[i], want[i], 1e-5), "sentence %d: log-probability %.6f, PyTorch %.6f", i, lp[i], want[i]);
	for (i = 0; i < 4; i++)
		for (k = 0; k < 3; k++)
			for (l = 0; l < (k == 0 ? cfg[4] : cfg[5]); l++)
			{
				char		name[64];
				const FixTensor *ref;
				int			q,
							n;
				float	   *probs;

				snprintf(name, sizeof(name), "attention.%d.%s.%d", i, kinds[k], l);
				ref = fixture_get(fx, name);
				CHECK(tf_model_attention(m, (TfAttentionKind) k, l, i, NULL, &q, &n, err, sizeof(err)) == TF_OK,
					  "attention sizes: %s", err);
				CHECK(ref != NULL && ref->count == (size_t) cfg[2] * q * n, "%s: %d x %d", name, q, n);
				if (ref == NULL || ref->count != (size_t) cfg[2] * q * n)
					continue;
				probs = malloc(ref->count * sizeof(float));
				tf_model_attention(m, (TfAttentionKind) k, l, i, probs, &q, &n, err, sizeof(err));
				worst = fmax(worst, rel_error(probs, ref->data, ref->count));
				CHECK(rel_error(probs, ref->data, ref->count) < 1e-5, "%s differs from PyTorch by %.2g", name,
					  rel_error(probs, ref->data, ref->count));
				planes++;
				free(probs);
			}
	CHECK(tf_model_attention(m, TF_CROSS, cfg[5], 0, NULL, &k, &l, err, sizeof(err)) == TF_ERROR,
		  "layer out of range accepted");
	printf("  score: 4 log-probabilities; attention: %d planes, worst relative error %.2g\n", planes, worst);
}

/* Bad options, interruption, and an inference model refusing to train. */
static bool
always(void *arg)
{
	(*(int *) arg)++;
	return true;
}

static void
check_bad_options(const Fixture *fx, TfModel *m)
{
	const FixTensor *src = fixture_get(fx, "src");
	int			L = (int) src->count / 4;
	TfDecodeOptions opt;
	TfHypothesis h[64];
	char		err[TF_ERRLEN];
	int32_t		empty[2] = {0, 0};
	int			polls = 0;
	struct
	{
		int			beam,
					nbest;
		float		alpha;
		int			offset;
		const char *word;
	}			bad[] = {{0, 1, 0.6f, 50, "beam_size"}, {65, 1, 0.6f, 50, "beam_size"},
	{4, 5, 0.6f, 50, "nbest"}, {4, 0, 0.6f, 50, "nbest"}, {4, 1, -1.0f, 50, "length_penalty"},
	{4, 1, NAN, 50, "length_penalty"}, {4, 1, 0.6f, -1, "max_length_offset"}};
	size_t		i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
	{
		tf_decode_options_default(&opt);
		opt.beam_size = bad[i].beam;
		opt.nbest = bad[i].nbest;
		opt.length_penalty = bad[i].alpha;
		opt.max_length_offset = bad[i].offset;
		CHECK(tf_model_translate(m, src->data, 4, L, &opt, h, err, sizeof(err)) == TF_ERROR &&
			  strstr(err, bad[i].word) != NULL, "bad option %zu not refused by name: %s", i, err);
	}
	tf_decode_options_default(&opt);
	CHECK(tf_model_translate(m, empty, 1, 2, &opt, h, err, sizeof(err)) == TF_ERROR &&
		  strstr(err, "empty") != NULL, "empty source accepted: %s", err);
	empty[0] = 99;
	CHECK(tf_model_translate(m, empty, 1, 2, &opt, h, err, sizeof(err)) == TF_ERROR &&
		  strstr(err, "99") != NULL, "out-of-range id accepted: %s", err);
	CHECK(tf_model_translate(m, src->data, 0, L, &opt, h, err, sizeof(err)) == TF_ERROR, "empty batch accepted");
	opt.interrupted = always;
	opt.interrupt_arg = &polls;
	CHECK(tf_model_translate(m, src->data, 4, L, &opt, h, err, sizeof(err)) == TF_ERROR &&
		  strstr(err, "interrupted") != NULL && polls == 1, "interrupt not honoured (%d polls): %s", polls, err);
	CHECK(tf_model_backward(m, 1.0f, err, sizeof(err)) == TF_ERROR && strstr(err, "inference") != NULL,
		  "inference model ran a backward: %s", err);
}

/*
 * A pre-norm model with fairseq's positions (M2M-100's layout: pad 1, the
 * decoder start equal to EOS) decoding after a forced token: every
 * hypothesis's log-probability equals the full-prefix score without the
 * forced token's, lengths stay within the limit counted after it, and a
 * batch gives what one sentence at a time gives.
 */
static void
check_prenorm_forced(void)
{
	TfConfig	c;
	TfModel    *m;
	TfDecodeOptions opt;
	int32_t		src[4 * 8];
	int			beam,
				i,
				j,
				rescored = 0,
				at_limit = 0,
				capped = 0;
	double		worst = 0.0;
	char		err[TF_ERRLEN];

	tf_config_small(&c, 64);
	c.d_model = 32, c.num_heads = 4, c.d_ff = 64, c.num_encoder_layers = 2, c.num_decoder_layers = 2;
	c.normalize_before = true, c.positions = TF_POSITIONS_FAIRSEQ, c.pad_id = 1, c.max_positions = 64;
	m = tf_model_create(&c, 21, test_device, 2, err, sizeof(err));
	CHECK(m != NULL, "create: %s", err);
	if (m == NULL)
		return;
	for (i = 0; i < 4; i++)
		for (j = 0; j < 8; j++)
			src[i * 8 + j] = j < 7 - i ? 4 + (i * 13 + j * 7) % 56 : j == 7 - i ? 2 : 1;
	tf_decode_options_default(&opt);
	opt.bos_id = opt.eos_id = 2;
	opt.forced_id = 60;
	opt.source_prefix = 1;		/* the first source token counts as a language token */
	opt.max_length_offset = 4;
	for (beam = 1; beam <= 4; beam += 3)
	{
		TfHypothesis h[4],
					one;

		opt.beam_size = beam;
		CHECK(tf_model_translate(m, src, 4, 8, &opt, h, err, sizeof(err)) == TF_OK, "translate: %s", err);
		for (i = 0; i < 4; i++)
		{
			int			n = h[i].length + 2;
			int32_t    *tgt = calloc(2 * (size_t) n, sizeof(int32_t));
			TfBatch		b = {1, 8, n, src + i * 8, tgt, tgt + n};
			double		lp;

			CHECK(h[i].length <= 7 - i - opt.source_prefix + opt.max_length_offset,
				  "beam %d sentence %d: %d tokens, over the limit %d", beam, i, h[i].length,
				  7 - i - opt.source_prefix + opt.max_length_offset);
			at_limit += h[i].length == 7 - i - opt.source_prefix + opt.max_length_offset;
			tgt[0] = opt.bos_id;
			tgt[1] = tgt[n] = opt.forced_id;
			for (j = 0; j < h[i].length; j++)
				tgt[2 + j] = tgt[n + 1 + j] = h[i].tokens[j];
			tgt[2 * n - 1] = opt.eos_id;
			CHECK(tf_model_score_prefixed(m, &b, 1, &lp, err, sizeof(err)) == TF_OK, "score: %s", err);
			CHECK(close_to(lp, h[i].log_prob, 1e-4), "beam %d sentence %d: incremental %.6f, full prefix %.6f",
				  beam, i, h[i].log_prob, lp);
			worst = fmax(worst, fabs(lp - h[i].log_prob));
			rescored++;
			free(tgt);
			CHECK(tf_model_translate(m, src + i * 8, 1, 8, &opt, &one, err, sizeof(err)) == TF_OK,
				  "translate: %s", err);
			CHECK(one.length == h[i].length && memcmp(one.tokens, h[i].tokens, one.length * sizeof(int32_t)) == 0,
				  "beam %d sentence %d: alone differs from the batch", beam, i);
			tf_hypotheses_free(&one, 1);
		}
		tf_hypotheses_free(h, 4);
	}
	/*
	 * max_output_tokens 6 under offset 4 (limits 10 - i) is each sentence
	 * alone under offset i (limits 6 - i + i): the same hypotheses
	 */
	for (beam = 1; beam <= 4; beam += 3)
	{
		TfHypothesis h[4],
					one;
		TfDecodeOptions alone = opt;

		opt.beam_size = alone.beam_size = beam;
		opt.max_output_tokens = 6;
		CHECK(tf_model_translate(m, src, 4, 8, &opt, h, err, sizeof(err)) == TF_OK, "translate: %s", err);
		for (i = 0; i < 4; i++)
		{
			alone.max_length_offset = i;
			CHECK(h[i].length <= 6, "beam %d sentence %d: %d tokens over max_output_tokens 6", beam, i, h[i].length);
			capped += h[i].length == 6;
			CHECK(tf_model_translate(m, src + i * 8, 1, 8, &alone, &one, err, sizeof(err)) == TF_OK,
				  "translate: %s", err);
			CHECK(one.length == h[i].length && memcmp(one.tokens, h[i].tokens, one.length * sizeof(int32_t)) == 0 &&
				  close_to(one.log_prob, h[i].log_prob, 1e-4),
				  "beam %d sentence %d: max_output_tokens 6 differs from the offset's limit of 6", beam, i);
			tf_hypotheses_free(&one, 1);
		}
		tf_hypotheses_free(h, 4);
	}
	CHECK(capped > 0, "no hypothesis reached max_output_tokens: the limit is not tested");
	opt.max_output_tokens = -1;
	CHECK(tf_model_translate(m, src, 1, 8, &opt, NULL, err, sizeof(err)) == TF_ERROR &&
		  strstr(err, "max_output_tokens") != NULL, "max_output_tokens -1 accepted: %s", err);
	opt.max_output_tokens = 0;
	opt.forced_id = 64;
	CHECK(tf_model_translate(m, src, 1, 8, &opt, NULL, err, sizeof(err)) == TF_ERROR && strstr(err, "forced_id") != NULL,
		  "forced_id 64 of vocabulary 64 accepted: %s", err);
	CHECK(at_limit > 0, "no hypothesis reached the length limit: the limit is not tested");
	printf("  pre-norm + forced token: %d hypotheses (%d at the length limit), incremental vs full prefix worst "
		   "|diff| %.2g; %d of 8 at max_output_tokens, each as alone under the offset's limit\n", rescored, at_limit,
		   worst, capped);
	tf_model_free(m);
}

void
test_decode(const char *fixtures)
{
	char		path[4096];
	Fixture		fx;
	TfModel    *m;

	snprintf(path, sizeof(path), "%s/decode_fixture.bin", fixtures);
	CHECK(fixture_read(path, &fx), "cannot read %s", path);
	if (fx.n == 0)
		return;
	m = fixture_decode_model(&fx);
	if (m != NULL)
	{
		check_search(&fx, m);
		check_stream(&fx, m);
		check_score_and_attention(&fx, m);
		check_bad_options(&fx, m);
	}
	tf_model_free(m);
	check_prenorm_forced();
	fixture_free(&fx);
}
