/*
 * test_ops.c - finite-difference gradient checks of every CPU backend op
 * with a backward: for a random weighting w, L = sum(w * op(x)) in double,
 * dL/dx by central differences against the op's backward.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "rng.h"
#include "check.h"
#include "fixture.h"
#include "signals.h"

#define FD_H 1e-3f
#define FD_TOL 2e-2

static unsigned rng_state = 12345;

/* Uniform in [-1, 1). */
static float
rnd(void)
{
	return fixture_uniform(&rng_state);
}

static void
fill(float *x, size_t n)
{
	size_t		i;

	for (i = 0; i < n; i++)
		x[i] = rnd();
}

static double
dot(const float *a, const float *b, size_t n)
{
	double		s = 0.0;
	size_t		i;

	for (i = 0; i < n; i++)
		s += (double) a[i] * b[i];
	return s;
}

/* Compares analytic gradient g of x against central differences of loss(). */
static void
fd_check(const char *what, float *x, const float *g, size_t n, double (*loss) (void *), void *ctx)
{
	size_t		i;
	double		worst = 0.0;

	for (i = 0; i < n; i++)
	{
		float		x0 = x[i];
		double		lp,
					lm,
					num,
					err;

		x[i] = x0 + FD_H;
		lp = loss(ctx);
		x[i] = x0 - FD_H;
		lm = loss(ctx);
		x[i] = x0;
		num = (lp - lm) / (2.0 * FD_H);
		err = fabs(num - g[i]) / fmax(fmax(fabs(num), fabs(g[i])), 1e-2);
		worst = fmax(worst, err);
	}
	CHECK(worst < FD_TOL, "%s: finite differences disagree, worst relative error %.3g", what, worst);
}

/* ---- LayerNorm ---- */
typedef struct LnCtx
{
	TfBackend  *be;
	float	   *x,
			   *gamma,
			   *beta,
			   *w,
			   *out,
			   *mean,
			   *rstd;
	int			rows,
				d;
} LnCtx;

static double
ln_loss(void *arg)
{
	LnCtx	   *c = arg;

	c->be->layernorm(c->be, c->out, c->mean, c->rstd, c->x, c->gamma, c->beta, c->rows, c->d, 1e-5f);
	return dot(c->w, c->out, (size_t) c->rows * c->d);
}

static void
check_layernorm(TfBackend *be)
{
	enum {R = 3, D = 8};
	float		x[R * D], gamma[D], beta[D], w[R * D], out[R * D], mean[R], rstd[R];
	float		dx[R * D], dg[D] = {0}, db[D] = {0};
	LnCtx		c = {be, x, gamma, beta, w, out, mean, rstd, R, D};

	fill(x, R * D);
	fill(gamma, D);
	fill(beta, D);
	fill(w, R * D);
	ln_loss(&c);
	be->layernorm_backward(be, dx, dg, db, w, x, mean, rstd, gamma, R, D);
	be->layernorm_backward_finish(be);
	fd_check("layernorm dx", x, dx, R * D, ln_loss, &c);
	fd_check("layernorm dgamma", gamma, dg, D, ln_loss, &c);
	fd_check("layernorm dbeta", beta, db, D, ln_loss, &c);
}

/* ---- attention ---- */
typedef struct AttnCtx
{
	TfBackend  *be;
	float	   *q,
			   *k,
			   *v,
			   *w,
			   *ctx,
			   *lse,
			   *probs;
	TfAttentionShape sh;
	int			ldq,
				ldk;
} AttnCtx;

static double
attn_loss(void *arg)
{
	AttnCtx    *c = arg;

	c->be->attention(c->be, c->ctx, c->lse, c->probs, c->q, c->ldq, c->k, c->v, c->ldk, &c->sh);
	return dot(c->w, c->ctx, (size_t) c->sh.q_start[c->sh.batch] * c->sh.num_heads * c->sh.head_dim);
}

static void
check_attention(TfBackend *be, bool causal, bool cross, float dropout)
{
	enum {B = 2, H = 2, DK = 3, D = H * DK, MAXQ = 4, MAXK = 4};
	/* sentence 0: 4 queries, 4 keys; sentence 1: 3 queries, 2 keys (cross) or 3 (self) */
	int32_t		q_start[B + 1] = {0, 4, 7};
	int32_t		k_start[B + 1] = {0, 4, cross ? 6 : 7};
	int64_t		p_start[B + 1] = {0, H * 4 * 4, H * 4 * 4 + H * 3 * (cross ? 2 : 3)};
	float		q[7 * D], k[7 * D], v[7 * D], w[7 * D], ctx[7 * D];
	float		probs[H * 4 * 4 + H * 3 * 3], lse[7 * H], dq[7 * D], dk[7 * D], dv[7 * D];
	int			nk = k_start[B];
	AttnCtx		c = {be, q, k, v, w, ctx, lse, probs, {.batch = B, .num_heads = H, .head_dim = DK,
			.q_start = q_start, .k_start = k_start, .p_start = p_start, .causal = causal, .dropout = dropout,
			.seed = 5, .stream = 77, .max_q = MAXQ, .max_k = MAXK, .p_total = p_start[B]}, D, D};
	char		what[64];

	be->reserve(be, MAXQ * MAXK, B * MAXQ * H, 0);
	fill(q, sizeof(q) / 4);
	fill(k, sizeof(k) / 4);
	fill(v, sizeof(v) / 4);
	fill(w, sizeof(w) / 4);
	attn_loss(&c);
	be->attention_backward(be, dq, dk, dv, w, lse, q, D, k, v, D, &c.sh);
	snprintf(what, sizeof(what), "attention%s%s dropout %.1f dq", causal ? " causal" : "",
			 cross ? " cross" : "", dropout);
	fd_check(what, q, dq, 7 * D, attn_loss, &c);
	what[strlen(what) - 1] = 'k';
	fd_check(what, k, dk, (size_t) nk * D, attn_loss, &c);
	what[strlen(what) - 1] = 'v';
	fd_check(what, v, dv, (size_t) nk * D, attn_loss, &c);
	/* a causal query sees no later key; every probability row sums to 1 */
	CHECK(!causal || probs[1] == 0.0f, "causal mask leaks: query 0 sees key 1 (%g)", probs[1]);
	{
		int			r,
					j;
		int64_t		total = p_start[B];
		int			rows_checked = 0;

		for (r = 0; r < B; r++)
		{
			int			lq = q_start[r + 1] - q_start[r],
						lk = k_start[r + 1] - k_start[r],
						row;

			for (row = 0; row < H * lq; row++)
			{
				double		sum = 0.0;

				for (j = 0; j < lk; j++)
					sum += probs[p_start[r] + (int64_t) row * lk + j];
				CHECK(fabs(sum - 1.0) < 1e-5, "probability row %d of sentence %d sums to %g", row, r, sum);
				rows_checked++;
			}
		}
		CHECK(rows_checked == H * 7 && total > 0, "checked %d probability rows", rows_checked);
	}
}

/* ---- label-smoothed cross-entropy ---- */
typedef struct CeCtx
{
	TfBackend  *be;
	float	   *logits;
	int32_t    *labels;
	int			rows,
				vocab;
} CeCtx;

static double
ce_loss(void *arg)
{
	CeCtx	   *c = arg;
	double		rows[16],
				loss = 0.0;

	c->be->cross_entropy(c->be, c->logits, false, c->labels, c->rows, c->vocab, c->vocab, 0, 0.1f, rows);
	c->be->accumulate(c->be, &loss, rows, c->rows);
	return loss;
}

static void
check_cross_entropy(TfBackend *be)
{
	enum {R = 4, V = 7};
	float		logits[R * V], grad[R * V];
	int32_t		labels[R] = {3, 0, 6, 1};
	CeCtx		c = {be, logits, labels, R, V};
	double		rows[R];

	fill(logits, R * V);
	memcpy(grad, logits, sizeof(grad));
	be->cross_entropy(be, grad, true, labels, R, V, V, 0, 0.1f, rows);	/* the gradient in place */
	CHECK(rows[1] == 0.0 && rows[0] > 0.0, "pad row's loss %g, another row's %g", rows[1], rows[0]);
	fd_check("cross_entropy dlogits", logits, grad, R * V, ce_loss, &c);
}

/* ---- swish and GELU ---- */
typedef struct ActCtx
{
	TfBackend  *be;
	TfActivation f;
	float	   *x,
			   *y,
			   *w;
	int			n;
} ActCtx;

static double
act_loss(void *arg)
{
	ActCtx	   *c = arg;

	c->be->activation(c->be, c->f, c->y, c->x, c->n);
	return dot(c->w, c->y, c->n);
}

/* Smooth activations against finite differences; values against their definitions. */
static void
check_activations(TfBackend *be)
{
	enum {N = 40};
	float		x[N], y[N], w[N], dx[N];
	ActCtx		c = {be, TF_SWISH, x, y, w, N};
	int			f,
				i;

	for (f = TF_SWISH; f <= TF_GELU; f++)
	{
		c.f = (TfActivation) f;
		fill(x, N);
		for (i = 0; i < N; i++)
			x[i] *= 4.0f;		/* [-4, 4): both tails and the bend */
		fill(w, N);
		act_loss(&c);
		for (i = 0; i < N; i++)
		{
			double		want = f == TF_SWISH ? x[i] / (1.0 + exp(-x[i])) : 0.5 * x[i] * (1.0 + erf(x[i] / sqrt(2.0)));

			CHECK(fabs(y[i] - want) < 1e-5 * fmax(1.0, fabs(want)), "%s(%g) = %g, want %g",
				  f == TF_SWISH ? "swish" : "gelu", x[i], y[i], want);
		}
		be->activation_backward(be, c.f, dx, w, x, N);
		fd_check(f == TF_SWISH ? "swish dx" : "gelu dx", x, dx, N, act_loss, &c);
	}
}

/* ---- embedding, bias, ReLU, dropout (linear or piecewise linear ops) ---- */
static void
check_simple_ops(TfBackend *be)
{
	enum {R = 5, D = 4, V = 6};
	float		e[V * D], out[R * D], w[R * D], de[V * D] = {0}, dbias[D] = {0}, pe[3 * D];
	int32_t		pos[R] = {0, 1, 2, 0, 1};
	float		x[R * D], y[R * D], dx[R * D];
	int32_t		ids[R] = {1, 5, 1, 0, 3};
	int			i,
				j,
				kept = 0;

	fill(e, V * D);
	fill(w, R * D);
	tf_positional_encoding(pe, 3, D);
	be->embed(be, out, ids, pos, e, pe, R, D, 2.0f, 0.0f, 0, 0, NULL);
	CHECK(fabsf(out[3 * D + 1] - (e[0 * D + 1] * 2.0f + 1.0f)) < 1e-6f,
		  "position 0 column 1 should add cos(0) = 1");
	be->embed_backward(be, de, w, 3, w + 3 * D, R - 3, ids, NULL, 0, D, 2.0f);	/* two parts: rows 0-2, 3-4 */
	for (j = 0; j < D; j++)
		CHECK(fabsf(de[1 * D + j] - 2.0f * (w[0 * D + j] + w[2 * D + j])) < 1e-6f &&
			  de[2 * D + j] == 0.0f, "embedding gradient of a repeated id");
	/* with dropout: the bits of embed, then dropout in place */
	{
		float		fused[R * D], apart[R * D];
		uint8_t		m1[R * D], m2[R * D];

		be->embed(be, fused, ids, pos, e, pe, R, D, 2.0f, 0.4f, 5, 8, m1);
		be->embed(be, apart, ids, pos, e, pe, R, D, 2.0f, 0.0f, 0, 0, NULL);
		be->dropout(be, apart, apart, R * D, 0.4f, 5, 8, m2);
		CHECK(memcmp(fused, apart, sizeof(fused)) == 0 && memcmp(m1, m2, sizeof(m1)) == 0 &&
			  memchr(m1, 0, sizeof(m1)) != NULL, "embed with dropout: not the bits of embed, then dropout");
	}
	be->bias_backward(be, dbias, w, R, D, D, 1.0f);
	for (j = 0; j < D; j++)
	{
		float		s = 0.0f;

		for (i = 0; i < R; i++)
			s += w[i * D + j];
		CHECK(fabsf(dbias[j] - s) < 1e-5f, "bias gradient column %d", j);
	}
	be->bias_rows(be, out, dbias, R, D, D);
	for (j = 0; j < D; j++)
		CHECK(out[4 * D + j] == dbias[j], "bias_rows column %d", j);
	fill(x, R * D);
	be->activation(be, TF_RELU, y, x, R * D);
	be->activation_backward(be, TF_RELU, dx, w, x, R * D);
	for (i = 0; i < R * D; i++)
		CHECK(y[i] == (x[i] > 0 ? x[i] : 0.0f) && dx[i] == (x[i] > 0 ? w[i] : 0.0f), "relu element %d", i);
	/* dropout: same mask forward and backward, scaled by 1/(1-p), about 1-p kept */
	{
		static float big[4000],
					dropped[4000],
					back[4000];

		for (i = 0; i < 4000; i++)
			big[i] = 1.0f;
		static uint8_t mask[4000];

		be->dropout(be, dropped, big, 4000, 0.25f, 9, 3, mask);
		be->dropout_backward(be, back, big, 4000, 0.25f, mask);
		for (i = 0; i < 4000; i++)
		{
			kept += dropped[i] != 0.0f;
			CHECK(dropped[i] == back[i] && (dropped[i] == 0.0f || fabsf(dropped[i] - 1.0f / 0.75f) < 1e-6f) &&
				  mask[i] == (dropped[i] != 0.0f) &&
				  (dropped[i] != 0.0f) == (tf_random_uniform(9, 3, (uint64_t) i) >= 0.25f),
				  "dropout element %d", i);
		}
		CHECK(kept > 2850 && kept < 3150, "dropout 0.25 kept %d of 4000", kept);
	}
}

/*
 * tf_group_by_id against its definition, on vocabularies of 7, 37,000 and
 * 256,206 ids (NLLB-200's; repeated ids, the first and last id of each), a
 * single row and none: every row once, ids increasing, rows increasing
 * within an id; the workspace past the vocabulary untouched.
 */
static void
check_group_by_id(void)
{
	const int	n = 5003;
	const int32_t vocab[] = {7, 37000, 256206, 50, 50};
	int32_t    *ids = malloc(n * sizeof(int32_t)),
			   *groups = malloc((3 * (size_t) n + 1) * sizeof(int32_t)),
			   *counts = malloc((256206 + 1) * sizeof(int32_t));
	uint64_t	x = 88172645463325252ull;

	for (int c = 0; c < 5; c++)
	{
		int			rows = c < 3 ? n : c == 3 ? 1 : 0,
					u,
					bad = 0,
					distinct = 0;
		const int32_t *start,
				   *id,
				   *row;

		for (int i = 0; i < rows; i++)
		{
			x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
			ids[i] = c < 3 ? (int32_t) ((x * 2685821657736338717ull >> 33) % (uint64_t) vocab[c]) : 42;
			if (i % 7 == 3)
				ids[i] = ids[i / 2];	/* repeats in every case */
		}
		if (c < 3)
			ids[17] = 0, ids[n - 2] = vocab[c] - 1;
		for (int i = 0; i < rows; i++)
		{
			int			j = 0;

			while (j < i && ids[j] != ids[i])
				j++;
			distinct += j == i;
		}
		counts[vocab[c]] = -12345;
		u = tf_group_by_id(ids, rows, vocab[c], groups, counts);
		start = groups, id = start + u + 1, row = id + u;
		bad += u != distinct || start[0] != 0 || start[u] != rows || counts[vocab[c]] != -12345;
		for (int j = 0; j < u && !bad; j++)
		{
			bad += start[j] >= start[j + 1] || (j > 0 && id[j] <= id[j - 1]);
			for (int k = start[j]; k < start[j + 1]; k++)
				bad += row[k] < 0 || row[k] >= rows || ids[row[k]] != id[j] ||
					(k > start[j] && row[k] <= row[k - 1]);
		}
		CHECK(!bad, "tf_group_by_id, %d rows, vocabulary of %d: %d distinct ids, %d returned, %d wrong", rows,
			  vocab[c], distinct, u, bad);
	}
	free(ids);
	free(groups);
	free(counts);
}

void
test_ops(const char *fixtures)
{
	TfBackend  *be = tf_backend_cpu_create(2);
	sigset_t	old;

	(void) fixtures;
	tf_block_signals(&old);		/* as the model's entry points do */
	check_layernorm(be);
	check_attention(be, false, false, 0.0f);
	check_attention(be, true, false, 0.0f);
	check_attention(be, true, false, 0.3f);
	check_attention(be, false, true, 0.0f);
	check_attention(be, false, true, 0.3f);
	check_cross_entropy(be);
	check_activations(be);
	check_simple_ops(be);
	check_group_by_id();
	tf_restore_signals(&old);
	be->destroy(be);
}
