/*
 * test_ops.c - finite-difference gradient checks of every CPU backend op
 * with a backward: for a random weighting w, L = sum(w * op(x)) in double,
 * dL/dx by central differences against the op's backward.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"

#define FD_H 1e-3f
#define FD_TOL 2e-2

static unsigned rng_state = 12345;

/* Uniform in [-1, 1). */
static float
rnd(void)
{
	rng_state = rng_state * 1664525u + 1013904223u;
	return (float) ((rng_state >> 8) & 0xFFFFFF) / 8388608.0f - 1.0f;
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
			   *probs;
	TfAttentionShape sh;
	int			ldq,
				ldk;
} AttnCtx;

static double
attn_loss(void *arg)
{
	AttnCtx    *c = arg;

	c->be->attention(c->be, c->ctx, c->probs, c->q, c->ldq, c->k, c->v, c->ldk, &c->sh);
	return dot(c->w, c->ctx, (size_t) c->sh.batch * c->sh.q_len * c->sh.num_heads * c->sh.head_dim);
}

static void
check_attention(TfBackend *be, bool causal, float dropout)
{
	enum {B = 2, H = 2, DK = 3, LQ = 4, LK = 4, D = H * DK};
	float		q[B * LQ * D], k[B * LK * D], v[B * LK * D], w[B * LQ * D], ctx[B * LQ * D];
	float		probs[B * H * LQ * LK], dq[B * LQ * D], dk[B * LK * D], dv[B * LK * D];
	uint8_t		pad[B * LK] = {0, 0, 0, 0, 0, 0, 1, 1};
	AttnCtx		c = {be, q, k, v, w, ctx, probs, {B, H, DK, LQ, LK, causal, pad, dropout, 5, 77}, D, D};
	char		what[64];

	be->reserve(be, LQ * LK);
	fill(q, sizeof(q) / 4);
	fill(k, sizeof(k) / 4);
	fill(v, sizeof(v) / 4);
	fill(w, sizeof(w) / 4);
	attn_loss(&c);
	be->attention_backward(be, dq, dk, dv, w, probs, q, D, k, v, D, &c.sh);
	snprintf(what, sizeof(what), "attention%s dropout %.1f dq", causal ? " causal" : "", dropout);
	fd_check(what, q, dq, sizeof(q) / 4, attn_loss, &c);
	what[strlen(what) - 1] = 'k';
	fd_check(what, k, dk, sizeof(k) / 4, attn_loss, &c);
	what[strlen(what) - 1] = 'v';
	fd_check(what, v, dv, sizeof(v) / 4, attn_loss, &c);
	/* masked keys get no probability and padded keys no gradient */
	CHECK(probs[1] == 0.0f || !causal, "causal mask leaks: query 0 sees key 1 (%g)", probs[1]);
	CHECK(probs[(size_t) (1 * H) * LQ * LK + 2] == 0.0f, "padding mask leaks (%g)", probs[(size_t) (1 * H) * LQ * LK + 2]);
	CHECK(dk[(1 * LK + 2) * D] == 0.0f && dv[(1 * LK + 3) * D + 1] == 0.0f, "padded keys receive gradient");
}

/* ---- label-smoothed cross-entropy ---- */
typedef struct CeCtx
{
	TfBackend  *be;
	float	   *logits,
			   *scratch;
	int32_t    *labels;
	int			rows,
				vocab;
} CeCtx;

static double
ce_loss(void *arg)
{
	CeCtx	   *c = arg;
	double		loss = 0.0;
	int64_t		tokens = 0;

	c->be->cross_entropy(c->be, c->scratch, c->logits, c->labels, c->rows, c->vocab, 0, 0.1f, &loss, &tokens);
	return loss;
}

static void
check_cross_entropy(TfBackend *be)
{
	enum {R = 4, V = 7};
	float		logits[R * V], scratch[R * V], grad[R * V];
	int32_t		labels[R] = {3, 0, 6, 1};
	CeCtx		c = {be, logits, scratch, labels, R, V};
	double		loss = 0.0;
	int64_t		tokens = 0;

	fill(logits, R * V);
	memcpy(grad, logits, sizeof(grad));
	be->cross_entropy(be, scratch, logits, labels, R, V, 0, 0.1f, &loss, &tokens);
	be->cross_entropy_backward(be, grad, scratch, labels, R, V, 0, 0.1f, 1.0f);
	CHECK(tokens == 3, "pad label counted: %lld tokens", (long long) tokens);
	fd_check("cross_entropy dlogits", logits, grad, R * V, ce_loss, &c);
}

/* ---- embedding, bias, ReLU, dropout (linear or piecewise linear ops) ---- */
static void
check_simple_ops(TfBackend *be)
{
	enum {R = 5, D = 4, V = 6};
	float		e[V * D], out[R * D], w[R * D], de[V * D] = {0}, dbias[D] = {0}, pe[3 * D];
	float		x[R * D], y[R * D], dx[R * D];
	int32_t		ids[R] = {1, 5, 1, 0, 3};
	int			i,
				j,
				kept = 0;

	fill(e, V * D);
	fill(w, R * D);
	tf_positional_encoding(pe, 3, D);
	be->embed(be, out, ids, e, pe, R, 3, D, 2.0f);
	CHECK(fabsf(out[3 * D + 1] - (e[0 * D + 1] * 2.0f + 1.0f)) < 1e-6f,
		  "position 0 column 1 should add cos(0) = 1");
	be->embed_backward(be, de, w, ids, R, D, 2.0f);
	for (j = 0; j < D; j++)
		CHECK(fabsf(de[1 * D + j] - 2.0f * (w[0 * D + j] + w[2 * D + j])) < 1e-6f &&
			  de[2 * D + j] == 0.0f, "embedding gradient of a repeated id");
	be->bias_backward(be, dbias, w, R, D);
	for (j = 0; j < D; j++)
	{
		float		s = 0.0f;

		for (i = 0; i < R; i++)
			s += w[i * D + j];
		CHECK(fabsf(dbias[j] - s) < 1e-5f, "bias gradient column %d", j);
	}
	be->bias_rows(be, out, dbias, R, D);
	for (j = 0; j < D; j++)
		CHECK(out[4 * D + j] == dbias[j], "bias_rows column %d", j);
	fill(x, R * D);
	be->relu(be, y, x, R * D);
	be->relu_backward(be, dx, w, x, R * D);
	for (i = 0; i < R * D; i++)
		CHECK(y[i] == (x[i] > 0 ? x[i] : 0.0f) && dx[i] == (x[i] > 0 ? w[i] : 0.0f), "relu element %d", i);
	/* dropout: same mask forward and backward, scaled by 1/(1-p), about 1-p kept */
	{
		static float big[4000],
					dropped[4000],
					back[4000];

		for (i = 0; i < 4000; i++)
			big[i] = 1.0f;
		be->dropout(be, dropped, big, 4000, 0.25f, 9, 3);
		be->dropout(be, back, big, 4000, 0.25f, 9, 3);
		for (i = 0; i < 4000; i++)
		{
			kept += dropped[i] != 0.0f;
			CHECK(dropped[i] == back[i] && (dropped[i] == 0.0f || fabsf(dropped[i] - 1.0f / 0.75f) < 1e-6f),
				  "dropout element %d", i);
		}
		CHECK(kept > 2850 && kept < 3150, "dropout 0.25 kept %d of 4000", kept);
	}
}

void
test_ops(const char *fixtures)
{
	TfBackend  *be = tf_backend_cpu_create(2);

	(void) fixtures;
	check_layernorm(be);
	check_attention(be, false, 0.0f);
	check_attention(be, true, 0.0f);
	check_attention(be, true, 0.3f);
	check_cross_entropy(be);
	check_simple_ops(be);
	tf_backend_cpu_free(be);
}
