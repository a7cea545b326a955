/*
 * decode.c - translation by beam search (docs/design.md §3) with
 * incremental decoding.
 *
 * A sentence that joins the search runs through the encoder once
 * (tf_model_encode), which also gives every decoder layer's encoder-decoder
 * keys and values of it (kept in the sentence's slot for the whole
 * search). Each step feeds one token per live hypothesis (BOS for a
 * sentence that just joined) through the decoder, appends its keys and
 * values to a per-layer cache [rows, max length, 2 d_model] (fp32, or bf16
 * in mixed precision: the backend's cache_bytes) and attends over the
 * cache, so a step costs one row per hypothesis instead of the whole
 * prefix. After each step the caches are gathered into the order of the
 * surviving hypotheses.
 *
 * The search is a stream (continuous batching, as serving systems do):
 * sentences join between steps, each at its own position, and leave when
 * done, so a service keeps its batch full instead of waiting for a batch's
 * longest sentence. tf_model_translate is one stream that all sentences
 * join at once.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "signals.h"

#define MAX_BEAM 64
#define MAX_DECODER_LAYERS 64

void
tf_decode_options_default(TfDecodeOptions *opt)
{
	memset(opt, 0, sizeof(*opt));
	opt->beam_size = TF_DEFAULT_BEAM_SIZE;
	opt->nbest = 1;
	opt->length_penalty = (float) TF_DEFAULT_LENGTH_PENALTY;
	opt->max_length_offset = TF_DEFAULT_MAX_LENGTH_OFFSET;
	opt->bos_id = 2;
	opt->eos_id = 3;
	opt->forced_id = -1;
}

void
tf_hypotheses_free(TfHypothesis *hyps, int n)
{
	int			i;

	for (i = 0; i < n; i++)
	{
		free(hyps[i].tokens);
		hyps[i].tokens = NULL;
	}
}

/* The length penalty of Wu et al. (2016): ((5 + length) / 6)^alpha, length counting EOS. */
static double
length_penalty(double alpha, int length)
{
	return pow((5.0 + length) / 6.0, alpha);
}

/*
 * Most decoding steps before EOS for a source of n tokens with its EOS:
 * n - 1 + offset output tokens after the forced token (prefix 1, see
 * TfDecodeOptions.forced_id; else 0), at most max_output (0: no such
 * limit), and the decoder's positions stay below max_positions.
 */
static int
output_limit(const TfConfig *c, int n, int offset, int max_output, int prefix)
{
	int64_t		limit = (int64_t) n - 1 + offset + prefix;

	if (max_output > 0 && limit > (int64_t) max_output + prefix)
		limit = (int64_t) max_output + prefix;

	/* at least the forced token's step, whatever the source (a source_prefix as long as the source) */
	if (limit < prefix)
		limit = prefix;

	return (int) (limit < c->max_positions - 1 ? limit : c->max_positions - 1);
}

/* One candidate continuation of a live hypothesis. */
typedef struct Candidate
{
	double		log_prob;
	int			row;
	int32_t		id;
} Candidate;

/* Best first; ties by row, then id (the order the reference search uses). */
static int
candidate_cmp(const void *a, const void *b)
{
	const Candidate *x = a,
			   *y = b;

	if (x->log_prob != y->log_prob)
		return x->log_prob > y->log_prob ? -1 : 1;
	if (x->row != y->row)
		return x->row < y->row ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/*
 * A search: sentence slots (each sentence's source keys and values, its
 * step count, finished hypotheses), live rows (hypotheses, grouped by
 * sentence, in the order their sentences joined) and backend buffers. Host
 * arrays live in one block and backend buffers in one arena, both laid out
 * for the capacity (S slots of max_src source positions, S * K rows of
 * Tmax cache positions) and re-laid out when it grows.
 */
struct TfStream
{
	TfModel    *m;
	TfDecodeOptions opt;
	int			K,
				V,
				d,
				F,
				H,
				Ld;
	int			S;				/* sentence slots */
	int			max_src;		/* source positions per slot */
	int			Tmax;			/* cache positions per row: longest output + EOS */
	int			RC;				/* row capacity, S * K */
	int			prefix;			/* 1 with a forced token (the first of every history), else 0 */

	/* host, per slot */
	void	   *host;			/* the block every host array is carved from */
	bool	   *used;
	int		   *max_len;		/* output token limit */
	int		   *src_count;		/* source tokens with EOS */
	int		   *steps;			/* output tokens of the live hypotheses */
	int		   *finished_n;
	int64_t    *tag;
	TfHypothesis *finished;		/* [S, K], best first */
	int		   *completed;		/* done slots in order of completion, not yet taken */
	int			n_completed;
	int		   *joining;		/* slots added since the last step: their BOS is still to decode */
	int			n_joining;
	int			occupied;		/* slots used (live or completed) */

	/* host, per live row (ping-pong for reordering) */
	int			R;
	int		   *row_sent;
	double	   *row_logp;
	int32_t    *history;		/* [RC, Tmax] output tokens so far */
	int		   *next_sent;
	double	   *next_logp;
	int32_t    *next_history;
	int32_t    *next_token;
	int32_t    *parent;
	Candidate  *cand;			/* [K, K]: one sentence's candidates */
	float	   *packed;			/* one download: top_logp, eos_logp, top_id of some rows */
	float	   *top_logp;		/* [RC, K] each row's pending results */
	float	   *eos_logp;		/* [RC] */
	int32_t    *top_id;			/* [RC, K] */
	int32_t    *ints;			/* staging for idx */
	int64_t    *longs;			/* staging for pstart */

	/* backend memory */
	float	   *arena;
	size_t		arena_floats;
	int32_t    *idx;
	size_t		idx_capacity;
	int64_t    *pstart;
	size_t		pstart_capacity;
	void	   *cache[MAX_DECODER_LAYERS + 1];	/* per decoder layer [RC, Tmax, 2d] elements of
												 * be->cache_bytes, plus a spare */
	float	   *cross[MAX_DECODER_LAYERS];	/* per decoder layer [S, max_src, 2d]: source keys, values */
	float	   *x,
			   *x1,
			   *x2,
			   *qkv,
			   *ctx,
			   *tmp,
			   *res,
			   *q,
			   *f1,
			   *mean,
			   *rstd,
			   *logits,
			   *d_packed;		/* [RC, 2K + 1]: top-k results, packed as in packed */
	TfOperand16 operands16[5];	/* bf16 on a backend with set_operands16: x, x1, x2, ctx
								 * and f1, which products read, each with its copy
								 * carved after it (installed for each step) */
	int			num_operands16;
};

/* Carves count elements for *field out of base at *off (16-byte aligned); base NULL only measures. */
#define CARVE(base, off, field, count) \
	do { \
		(field) = (base) != NULL ? (void *) ((char *) (base) + (off)) : NULL; \
		(off) += ((size_t) (count) * sizeof(*(field)) + 15) & ~(size_t) 15; \
	} while (0)

/* Lays the host arrays out in block (NULL: measures); returns the bytes. */
static size_t
host_layout(TfStream *s, void *block)
{
	size_t		S = s->S,
				RC = s->RC,
				K = s->K,
				off = 0;

	CARVE(block, off, s->used, S);
	CARVE(block, off, s->max_len, S);
	CARVE(block, off, s->src_count, S);
	CARVE(block, off, s->steps, S);
	CARVE(block, off, s->finished_n, S);
	CARVE(block, off, s->tag, S);
	CARVE(block, off, s->finished, S * K);
	CARVE(block, off, s->completed, S);
	CARVE(block, off, s->joining, S);
	CARVE(block, off, s->row_sent, RC);
	CARVE(block, off, s->row_logp, RC);
	CARVE(block, off, s->history, RC * s->Tmax);
	CARVE(block, off, s->next_sent, RC);
	CARVE(block, off, s->next_logp, RC);
	CARVE(block, off, s->next_history, RC * s->Tmax);
	CARVE(block, off, s->next_token, RC);
	CARVE(block, off, s->parent, RC);
	CARVE(block, off, s->cand, K * K);
	CARVE(block, off, s->packed, RC * (2 * K + 1));
	CARVE(block, off, s->top_logp, RC * K);
	CARVE(block, off, s->eos_logp, RC);
	CARVE(block, off, s->top_id, RC * K);
	CARVE(block, off, s->ints, 7 * RC + 1);
	CARVE(block, off, s->longs, 2 * RC + 2);
	return off;
}

/* Lays the backend buffers out in arena (NULL: measures), each TF_CARVE_ALIGN-aligned; returns the floats. */
static size_t
arena_layout(TfStream *s, float *arena)
{
	TfBackend  *be = s->m->be;
	size_t		RC = s->RC,
				d = s->d,
				off = 0;
	size_t		cache = RC * s->Tmax * 2 * d * be->cache_bytes / sizeof(float);
	bool		copies = s->m->precision == TF_BF16 && be->set_operands16 != NULL;
	int			l;

	for (l = 0; l <= s->Ld; l++)
	{
		s->cache[l] = arena != NULL ? arena + off : NULL;
		off += tf_carve_count(cache, sizeof(float));
	}
	for (l = 0; l < s->Ld; l++)
	{
		s->cross[l] = arena != NULL ? arena + off : NULL;
		off += tf_carve_count((size_t) s->S * s->max_src * 2 * d, sizeof(float));
	}
#define CUT(field, count) (s->field = arena != NULL ? arena + off : NULL, \
								 off += tf_carve_count((size_t) (count), sizeof(float)))
/* CUT, and in bf16 on a backend with set_operands16 a bf16 copy after it, listed */
#define CUT_OPERAND(field, count) \
	do { \
		CUT(field, count); \
		if (copies) \
		{ \
			if (arena != NULL) \
				s->operands16[s->num_operands16++] = (TfOperand16) {s->field, arena + off, (size_t) (count), false}; \
			off += tf_carve_count(((size_t) (count) + 1) / 2, sizeof(float)); \
		} \
	} while (0)
	s->num_operands16 = 0;
	CUT_OPERAND(x, RC * d);
	CUT_OPERAND(x1, RC * d);
	CUT_OPERAND(x2, RC * d);
	CUT(qkv, RC * 3 * d);
	CUT_OPERAND(ctx, RC * d);
	CUT(tmp, RC * d);
	CUT(res, RC * d);
	CUT(q, RC * d);
	CUT_OPERAND(f1, RC * s->F);
	CUT(mean, RC);
	CUT(rstd, RC);
	CUT(logits, RC * (size_t) s->m->ldv);
	CUT(d_packed, RC * (2 * s->K + 1));
#undef CUT_OPERAND
#undef CUT
	return off;
}

/* Frees the tokens of the finished hypotheses still held by slots [0, S). */
static void
free_finished(TfStream *s)
{
	int			i;

	for (i = 0; i < s->S; i++)
		if (s->used[i])
			tf_hypotheses_free(s->finished + (size_t) i * s->K, s->finished_n[i]);
}

/*
 * Lays the stream out for at least S slots of max_src source positions,
 * keeping what it holds: host arrays and (when anything is held, or the
 * arena is too small) the arena are allocated anew and the held slots,
 * rows, pending results, caches and source keys/values copied over.
 * False when out of memory; the stream is then unchanged.
 */
static bool
stream_resize(TfStream *s, int S, int max_src)
{
	TfModel    *m = s->m;
	TfBackend  *be = m->be;
	TfStream	o = *s;			/* the old layout */
	size_t		d = s->d;
	size_t		floats,
				ints,
				longs;
	bool		fresh = s->occupied == 0;
	int			i,
				l;

	s->S = S;
	s->max_src = max_src;
	s->RC = S * s->K;
	s->Tmax = output_limit(&m->config, max_src, s->opt.max_length_offset, s->opt.max_output_tokens, s->prefix) + 1;
	s->host = calloc(1, host_layout(s, NULL));
	floats = arena_layout(s, NULL);
	ints = 7 * (size_t) s->RC + 1;
	longs = 2 * (size_t) s->RC + 2;
	if (!fresh || floats > o.arena_floats)
		s->arena = be->alloc(be, floats * sizeof(float));
	if (ints > o.idx_capacity)
		s->idx = be->alloc(be, ints * sizeof(int32_t));
	if (longs > o.pstart_capacity)
		s->pstart = be->alloc(be, longs * sizeof(int64_t));
	if (s->host == NULL || s->arena == NULL || s->idx == NULL || s->pstart == NULL ||
		!be->reserve(be, (size_t) s->Tmax * (s->Tmax > max_src ? s->Tmax : max_src), 0, 0))
	{
		free(s->host);
		if (s->arena != o.arena)
			be->free(be, s->arena);
		if (s->idx != o.idx)
			be->free(be, s->idx);
		if (s->pstart != o.pstart)
			be->free(be, s->pstart);
		*s = o;
		return false;
	}
	host_layout(s, s->host);
	arena_layout(s, s->arena);
	if (s->arena != o.arena)
		s->arena_floats = floats;
	if (s->idx != o.idx)
		s->idx_capacity = ints;
	if (s->pstart != o.pstart)
		s->pstart_capacity = longs;

	/* what the old layout holds */
	if (!fresh)
	{
		int			positions = 0;

		memcpy(s->used, o.used, o.S * sizeof(bool));
		memcpy(s->max_len, o.max_len, o.S * sizeof(int));
		memcpy(s->src_count, o.src_count, o.S * sizeof(int));
		memcpy(s->steps, o.steps, o.S * sizeof(int));
		memcpy(s->finished_n, o.finished_n, o.S * sizeof(int));
		memcpy(s->tag, o.tag, o.S * sizeof(int64_t));
		memcpy(s->finished, o.finished, (size_t) o.S * o.K * sizeof(TfHypothesis));
		memcpy(s->completed, o.completed, o.n_completed * sizeof(int));
		memcpy(s->joining, o.joining, o.n_joining * sizeof(int));
		memcpy(s->row_sent, o.row_sent, o.R * sizeof(int));
		memcpy(s->row_logp, o.row_logp, o.R * sizeof(double));
		memcpy(s->top_logp, o.top_logp, (size_t) o.R * o.K * sizeof(float));
		memcpy(s->eos_logp, o.eos_logp, o.R * sizeof(float));
		memcpy(s->top_id, o.top_id, (size_t) o.R * o.K * sizeof(int32_t));
		for (i = 0; i < o.R; i++)
		{
			memcpy(s->history + (size_t) i * s->Tmax, o.history + (size_t) i * o.Tmax, o.Tmax * sizeof(int32_t));
			positions = o.steps[o.row_sent[i]] + 1 > positions ? o.steps[o.row_sent[i]] + 1 : positions;
		}
		for (l = 0; l < s->Ld && o.R > 0; l++)
			be->cache_gather(be, s->cache[l], (size_t) s->Tmax * 2 * d, o.cache[l], (size_t) o.Tmax * 2 * d, false,
							 NULL, o.R, positions * 2 * d);
		for (l = 0; l < s->Ld; l++)
			be->gather(be, s->cross[l], (size_t) max_src * 2 * d, o.cross[l], (size_t) o.max_src * 2 * d, NULL, o.S,
					   (size_t) o.max_src * 2 * d);
	}
	free(o.host);
	if (s->arena != o.arena)
		be->free(be, o.arena);
	if (s->idx != o.idx)
		be->free(be, o.idx);
	if (s->pstart != o.pstart)
		be->free(be, o.pstart);
	return true;
}

/*
 * One decoder step for the s->R live rows whose input tokens are
 * s->next_token, each at its sentence's position (steps): writes the rows'
 * keys and values there into the caches and the logits [R, V].
 */
/*
 * A decoder sub-layer's output, its branch's result in s->tmp [R, d]:
 * pre-norm, the residual stream s->x += tmp; post-norm, out = LN(in + tmp)
 * with the LayerNorm at gamma and beta, in the sub-layer's input (x, x1,
 * x2 in turn: buffers that let each sub-layer read its input while the
 * next is written).
 */
static void
sublayer_output(TfStream *s, const float *in, float *out, size_t gamma, size_t beta)
{
	TfModel    *m = s->m;
	TfBackend  *be = m->be;
	size_t		n = (size_t) s->R * s->d;

	if (m->config.normalize_before)
	{
		be->add(be, s->x, s->x, s->tmp, n);
		return;
	}
	be->residual_layernorm(be, out, s->mean, s->rstd, s->res, in, s->tmp, m->params + gamma, m->params + beta,
						   s->R, s->d, m->config.layer_norm_eps, 0.0f, 0, 0, NULL);
}

static void
decoder_step(TfStream *s)
{
	TfModel    *m = s->m;
	TfBackend  *be = m->be;
	const TfConfig *c = &m->config;
	int			R = s->R,
				d = s->d,
				Le = c->num_encoder_layers,
				max_pos = 0;
	size_t		row_stride = (size_t) s->Tmax * 2 * d;
	size_t		eb = (size_t) be->cache_bytes;
	int32_t    *ids = s->ints,
			   *pos = ids + R,
			   *q_start = pos + R,
			   *k_start = q_start + R + 1,
			   *k_len = k_start + R,
			   *src_first = k_len + R,
			   *src_count = src_first + R;
	int64_t    *p_self = s->longs,
			   *p_cross = p_self + R + 1;
	int32_t    *dev = s->idx;
	TfAttentionShape self = {.kv_cache = true},
				cross = {0};
	const float *P = m->params;
	bool		pre = c->normalize_before;
	int			r,
				l;

	p_self[0] = 0;
	for (r = 0; r <= R; r++)
	{
		int			sent = r < R ? s->row_sent[r] : 0;

		q_start[r] = r;
		p_cross[r] = (int64_t) r * s->H * s->max_src;
		if (r == R)
			break;
		ids[r] = s->next_token[r];
		pos[r] = s->steps[sent];
		max_pos = pos[r] > max_pos ? pos[r] : max_pos;
		p_self[r + 1] = p_self[r] + (int64_t) s->H * (pos[r] + 1);
		k_start[r] = r * s->Tmax;
		k_len[r] = pos[r] + 1;
		src_first[r] = sent * s->max_src;
		src_count[r] = s->src_count[sent];
	}
	be->upload(be, dev, s->ints, (size_t) (7 * R + 1) * sizeof(int32_t));
	be->upload(be, s->pstart, s->longs, (size_t) (2 * R + 2) * sizeof(int64_t));

	self.batch = cross.batch = R;
	self.q_rows = cross.q_rows = R;	/* ctx's rows: attention writes its copy */
	self.num_heads = cross.num_heads = s->H;
	self.head_dim = cross.head_dim = d / s->H;
	self.q_start = cross.q_start = dev + 2 * R;
	self.k_start = dev + 3 * R + 1;
	self.k_len = dev + 4 * R + 1;
	self.p_start = s->pstart;
	self.max_q = cross.max_q = 1;
	self.max_k = max_pos + 1;
	self.p_total = p_self[R];
	cross.k_start = dev + 5 * R + 1;
	cross.k_len = dev + 6 * R + 1;
	cross.p_start = s->pstart + R + 1;
	cross.max_k = s->max_src;
	cross.p_total = p_cross[R];

	if (s->num_operands16 > 0)
		be->set_operands16(be, s->operands16, s->num_operands16);
	tf_embed(m, s->x, dev, dev + R, R);
	for (l = 0; l < c->num_decoder_layers; l++)
	{
		const LayerOffsets *o = &m->layer_off[Le + l];
		char	   *cache = s->cache[l];
		int			r0,
					r1;

		/* masked self-attention over the cache (this position is the newest key) */
		if (pre)
			be->layernorm(be, s->x1, s->mean, s->rstd, s->x, P + o->ln_self_g, P + o->ln_self_b, R, d,
						  c->layer_norm_eps);
		tf_linear(m, s->qkv, pre ? s->x1 : s->x, o->self.w_qkv, o->self.b_qkv, R, d, 3 * d);
		for (r0 = 0; r0 < R; r0 = r1)
		{
			/* rows of sentences that joined together share a position */
			for (r1 = r0 + 1; r1 < R && pos[r1] == pos[r0]; r1++)
				;
			be->cache_gather(be, cache + ((size_t) r0 * row_stride + (size_t) pos[r0] * 2 * d) * eb, row_stride,
							 s->qkv + (size_t) r0 * 3 * d + d, 3 * (size_t) d, true, NULL, r1 - r0, 2 * (size_t) d);
		}
		be->attention(be, s->ctx, NULL, NULL, s->qkv, 3 * d, (const float *) cache, (const float *) (cache + d * eb),
					  2 * d, &self);
		tf_linear(m, s->tmp, s->ctx, o->self.w_out, o->self.b_out, R, d, d);
		sublayer_output(s, s->x, s->x1, o->ln_self_g, o->ln_self_b);
		/* encoder-decoder attention over the source's keys and values */
		if (pre)
			be->layernorm(be, s->x2, s->mean, s->rstd, s->x, P + o->ln_cross_g, P + o->ln_cross_b, R, d,
						  c->layer_norm_eps);
		tf_linear(m, s->q, pre ? s->x2 : s->x1, o->cross.w_qkv, o->cross.b_qkv, R, d, d);
		be->attention(be, s->ctx, NULL, NULL, s->q, d, s->cross[l], s->cross[l] + d, 2 * d, &cross);
		tf_linear(m, s->tmp, s->ctx, o->cross.w_out, o->cross.b_out, R, d, d);
		sublayer_output(s, s->x1, s->x2, o->ln_cross_g, o->ln_cross_b);
		/* feed-forward */
		if (pre)
			be->layernorm(be, s->x2, s->mean, s->rstd, s->x, P + o->ln_ffn_g, P + o->ln_ffn_b, R, d,
						  c->layer_norm_eps);
		tf_linear(m, s->f1, s->x2, o->w1, o->b1, R, d, s->F);
		be->activation(be, c->activation, s->f1, s->f1, (size_t) R * s->F);
		tf_linear(m, s->tmp, s->f1, o->w2, o->b2, R, s->F, d);
		sublayer_output(s, s->x2, s->x, o->ln_ffn_g, o->ln_ffn_b);
	}
	if (pre)
		tf_final_norm(m, true, s->x1, s->mean, s->rstd, s->x, R);
	tf_logits(m, s->logits, pre ? s->x1 : s->x, R);
	if (s->num_operands16 > 0)
		be->set_operands16(be, m->operands16, m->num_operands16);	/* the model's arena's again */
}

/* Adds a finished hypothesis to its sentence's list (best first, stable); false when out of memory. */
static bool
add_finished(TfStream *s, int sent, const int32_t *tokens, int length, double log_prob, bool eos)
{
	TfHypothesis *list = s->finished + (size_t) sent * s->K;
	int			n = s->finished_n[sent];
	TfHypothesis h;
	int			i;

	h.length = length;
	h.log_prob = log_prob;
	h.score = log_prob / length_penalty(s->opt.length_penalty, length + 1);
	h.finished = eos;
	h.tokens = malloc((length > 0 ? length : 1) * sizeof(int32_t));
	if (h.tokens == NULL)
		return false;
	memcpy(h.tokens, tokens, length * sizeof(int32_t));
	for (i = n; i > 0 && list[i - 1].score < h.score; i--)
		list[i] = list[i - 1];
	list[i] = h;
	s->finished_n[sent] = n + 1;
	return true;
}

/* A sentence is done: it leaves the search and waits to be taken. */
static void
complete(TfStream *s, int sent)
{
	s->completed[s->n_completed++] = sent;
}

/*
 * Chooses the continuations of every sentence's live rows from their
 * pending results (top_logp, top_id, eos_logp), each sentence at its own
 * step, and sets up the next rows (next_*, parent); a continuing sentence's
 * steps grows by one. Returns the number of next rows, or -1 when out of
 * memory.
 */
static int
select_candidates(TfStream *s)
{
	int			K = s->K;
	int			r0 = 0;
	int			next = 0;

	while (r0 < s->R)
	{
		int			sent = s->row_sent[r0];
		int			t = s->steps[sent];
		int			r1 = r0;
		int			width = K - s->finished_n[sent];
		int			n = 0;
		int			i,
					r;
		int			first_next = next;
		double		best_live = -INFINITY;

		while (r1 < s->R && s->row_sent[r1] == sent)
			r1++;
		if (t < s->prefix)
		{
			/* the forced token: the sentence's one row (BOS) continues with it, scoring 0 */
			s->parent[next] = r0;
			s->next_sent[next] = sent;
			s->next_logp[next] = s->row_logp[r0];
			s->next_token[next] = s->opt.forced_id;
			s->next_history[(size_t) next * s->Tmax] = s->opt.forced_id;
			next++;
			s->steps[sent] = t + 1;
			r0 = r1;
			continue;
		}
		if (t == s->max_len[sent])
		{
			/* at the length limit: EOS is forced */
			for (r = r0; r < r1; r++)
				if (!add_finished(s, sent, s->history + (size_t) r * s->Tmax + s->prefix, t - s->prefix,
								  s->row_logp[r] + s->eos_logp[r], false))
					return -1;
			complete(s, sent);
			r0 = r1;
			continue;
		}
		for (r = r0; r < r1; r++)
			for (i = 0; i < K; i++)
			{
				Candidate  *cd = &s->cand[n++];

				cd->log_prob = s->row_logp[r] + s->top_logp[(size_t) r * K + i];
				cd->row = r - r0;
				cd->id = s->top_id[(size_t) r * K + i];
			}
		qsort(s->cand, n, sizeof(Candidate), candidate_cmp);
		for (i = 0; i < width && i < n; i++)
		{
			const Candidate *cd = &s->cand[i];
			int			row = r0 + cd->row;

			if (cd->id == s->opt.eos_id)
			{
				if (!add_finished(s, sent, s->history + (size_t) row * s->Tmax + s->prefix, t - s->prefix,
								  cd->log_prob, true))
					return -1;
				continue;
			}
			s->parent[next] = row;
			s->next_sent[next] = sent;
			s->next_logp[next] = cd->log_prob;
			s->next_token[next] = cd->id;
			memcpy(s->next_history + (size_t) next * s->Tmax, s->history + (size_t) row * s->Tmax,
				   t * sizeof(int32_t));
			s->next_history[(size_t) next * s->Tmax + t] = cd->id;
			best_live = cd->log_prob > best_live ? cd->log_prob : best_live;
			next++;
		}
		/* early stop: no live hypothesis can beat the nbest-th finished one */
		if (next == first_next ||
			(s->finished_n[sent] >= s->opt.nbest &&
			 s->finished[(size_t) sent * K + s->opt.nbest - 1].score >=
			 best_live / length_penalty(s->opt.length_penalty, s->max_len[sent] - s->prefix + 1)))
		{
			next = first_next;
			complete(s, sent);
		}
		else
			s->steps[sent] = t + 1;
		r0 = r1;
	}
	return next;
}

/*
 * Moves the next rows into place: host bookkeeping and the backend caches,
 * each row's positions so far (the rows of sentences that joined together,
 * so have equal step counts, in one gather per layer).
 */
static void
reorder(TfStream *s, int next)
{
	TfBackend  *be = s->m->be;
	int			Ld = s->Ld;
	size_t		row_stride = (size_t) s->Tmax * 2 * s->d;
	int32_t    *tmp_i;
	int		   *tmp_s;
	double	   *tmp_d;
	int			positions = 0,
				l,
				i;
	bool		in_place = true;

	for (i = 0; i < next; i++)
		positions = s->steps[s->next_sent[i]] > positions ? s->steps[s->next_sent[i]] : positions;
	/* rows that only drop out (greedy search, finished sentences) move in place, all in one gather */
	for (i = 0; i < next && in_place; i++)
		in_place = s->parent[i] >= i && (i == 0 || s->parent[i] > s->parent[i - 1]);
	for (i = 0; i < next && in_place && s->parent[i] == i; i++)
		;
	be->upload(be, s->idx, s->parent, (size_t) next * sizeof(int32_t));
	for (l = 0; l < Ld && i < next; l++)
	{
		void	   *spare = s->cache[Ld];
		int			r0,
					r1;

		if (in_place)
		{
			be->cache_gather(be, s->cache[l], row_stride, s->cache[l], row_stride, false, s->idx, next,
							 (size_t) positions * 2 * s->d);
			continue;
		}
		/* gather layer l into the spare buffer, which becomes layer l's */
		for (r0 = 0; r0 < next; r0 = r1)
		{
			int			steps = s->steps[s->next_sent[r0]];

			for (r1 = r0 + 1; r1 < next && s->steps[s->next_sent[r1]] == steps; r1++)
				;
			be->cache_gather(be, (char *) spare + (size_t) r0 * row_stride * be->cache_bytes, row_stride,
							 s->cache[l], row_stride, false, s->idx + r0, r1 - r0, (size_t) steps * 2 * s->d);
		}
		s->cache[Ld] = s->cache[l];
		s->cache[l] = spare;
	}
	tmp_i = s->history, s->history = s->next_history, s->next_history = tmp_i;
	tmp_s = s->row_sent, s->row_sent = s->next_sent, s->next_sent = tmp_s;
	tmp_d = s->row_logp, s->row_logp = s->next_logp, s->next_logp = tmp_d;
	s->R = next;
}

/* Checks the options; TF_ERROR naming the bad one. */
static int
check_options(const TfModel *m, const TfDecodeOptions *opt, int batch, char *err, size_t errlen)
{
	int			V = m->config.vocab_size;

	/* candidates come from every id but pad */
	if (opt->beam_size < 1 || opt->beam_size > MAX_BEAM || opt->beam_size > V - 1)
		snprintf(err, errlen, "beam_size %d is out of range [1, %d]", opt->beam_size,
				 V - 1 < MAX_BEAM ? V - 1 : MAX_BEAM);
	else if (opt->nbest < 1 || opt->nbest > opt->beam_size)
		snprintf(err, errlen, "nbest %d is out of range [1, beam_size %d]", opt->nbest, opt->beam_size);
	else if (!(opt->length_penalty >= 0.0f && isfinite(opt->length_penalty)))
		snprintf(err, errlen, "length_penalty %g must be a finite number >= 0", opt->length_penalty);
	else if (opt->max_length_offset < 0)
		snprintf(err, errlen, "max_length_offset %d must not be negative", opt->max_length_offset);
	else if (opt->max_output_tokens < 0)
		snprintf(err, errlen, "max_output_tokens %d must not be negative", opt->max_output_tokens);
	else if (opt->bos_id < 0 || opt->bos_id >= V || opt->eos_id < 0 || opt->eos_id >= V)
		snprintf(err, errlen, "bos_id %d or eos_id %d is out of range [0, %d)", opt->bos_id, opt->eos_id, V);
	else if (opt->forced_id >= V)
		snprintf(err, errlen, "forced_id %d is out of range [0, %d)", opt->forced_id, V);
	else if (opt->source_prefix < 0)
		snprintf(err, errlen, "source_prefix %d must not be negative", opt->source_prefix);
	else if (opt->forced_id >= 0 && m->config.max_positions < 3)
		snprintf(err, errlen, "a forced token needs max_positions >= 3, not %d", m->config.max_positions);
	else if (batch < 1)
		snprintf(err, errlen, "empty batch: %d sentences", batch);
	else if (m->config.num_decoder_layers > MAX_DECODER_LAYERS)
		snprintf(err, errlen, "num_decoder_layers %d is over %d, the decoder's limit", m->config.num_decoder_layers,
				 MAX_DECODER_LAYERS);
	else
		return TF_OK;
	return TF_ERROR;
}

/*
 * The best K continuations of each live row from the step's logits [R, V]:
 * the rows' pending results (top_logp, eos_logp, top_id), brought to the
 * host in one download.
 */
static void
topk_step(TfStream *s)
{
	TfBackend  *be = s->m->be;
	size_t		RK = (size_t) s->R * s->K;
	float	   *d = s->d_packed;

	be->log_softmax_topk(be, s->logits, s->R, s->V, s->m->ldv, s->K, d, (int32_t *) (d + RK + s->R),
						 s->m->config.pad_id, s->opt.eos_id, d + RK);
	be->download(be, s->packed, d, (2 * RK + s->R) * sizeof(float));
	memcpy(s->top_logp, s->packed, RK * sizeof(float));
	memcpy(s->eos_logp, s->packed + RK, s->R * sizeof(float));
	memcpy(s->top_id, s->packed + RK + s->R, RK * sizeof(int32_t));
}

/* A stream on m with options opt (checked), empty; NULL when out of memory. */
static TfStream *
stream_new(TfModel *m, const TfDecodeOptions *opt)
{
	TfStream   *s = calloc(1, sizeof(TfStream));

	if (s == NULL)
		return NULL;
	s->m = m;
	s->opt = *opt;
	s->K = opt->beam_size;
	s->V = m->config.vocab_size;
	s->d = m->config.d_model;
	s->F = m->config.d_ff;
	s->H = m->config.num_heads;
	s->Ld = m->config.num_decoder_layers;
	s->prefix = opt->forced_id >= 0 ? 1 : 0;
	return s;
}

int
tf_stream_create(TfModel *m, const TfDecodeOptions *opt, TfStream **out, char *err, size_t errlen)
{
	*out = NULL;
	if (check_options(m, opt, 1, err, errlen) != TF_OK)
		return TF_ERROR;
	*out = stream_new(m, opt);
	if (*out == NULL)
	{
		snprintf(err, errlen, "out of memory for a translation stream");
		return TF_ERROR;
	}
	return TF_OK;
}

void
tf_stream_free(TfStream *s)
{
	TfBackend  *be;

	if (s == NULL)
		return;
	be = s->m->be;
	if (s->host != NULL)
		free_finished(s);
	free(s->host);
	be->free(be, s->arena);
	be->free(be, s->idx);
	be->free(be, s->pstart);
	free(s);
}

int
tf_stream_add(TfStream *s, const int32_t *src, int batch, int src_len, const int64_t *tags, char *err,
			  size_t errlen)
{
	TfModel    *m = s->m;
	TfBackend  *be = m->be;
	const TfConfig *c = &m->config;
	int			Le = c->num_encoder_layers;
	size_t		d = s->d;
	TfBatch		b = {0};
	int32_t    *bos;
	int			S = s->S,
				max_src = s->max_src,
				slot = 0,
				i,
				l;
	sigset_t	old;

	if (batch < 1)
	{
		snprintf(err, errlen, "empty batch: %d sentences", batch);
		return TF_ERROR;
	}

	/* the sources through the encoder, and every decoder layer's keys and values of them */
	bos = malloc(2 * (size_t) batch * sizeof(int32_t));
	if (bos == NULL)
	{
		snprintf(err, errlen, "out of memory for a batch of %d sentences", batch);
		return TF_ERROR;
	}
	for (i = 0; i < batch; i++)
	{
		bos[i] = s->opt.bos_id;
		bos[batch + i] = s->opt.eos_id;
	}
	b.batch_size = batch;
	b.src_len = src_len;
	b.tgt_len = 1;
	b.src = src;
	b.tgt_in = bos;
	b.labels = bos + batch;
	i = tf_model_encode(m, &b, err, errlen);
	free(bos);
	if (i != TF_OK)
		return TF_ERROR;
	for (i = 0; i < batch; i++)
		if (m->lay.ints[i + 1] == m->lay.ints[i])
		{
			snprintf(err, errlen, "source %d is empty: a source needs at least its EOS", i);
			return TF_ERROR;
		}

	/* room: exactly the batch in an empty stream, else grown by half at least */
	if (s->occupied == 0)
		S = batch, max_src = m->lay.max_src;
	else
	{
		if (s->occupied + batch > S)
			S = s->occupied + batch > 2 * S ? s->occupied + batch : 2 * S;
		if (m->lay.max_src > max_src)
		{
			max_src = m->lay.max_src > max_src + max_src / 2 ? m->lay.max_src : max_src + max_src / 2;
			max_src = max_src < c->max_positions ? max_src : c->max_positions;
		}
	}
	if ((s->host == NULL || S != s->S || max_src != s->max_src || s->occupied == 0) &&
		!stream_resize(s, S, max_src))
	{
		snprintf(err, errlen, "out of memory for beam search over %d sentences x %d beams, %d source positions",
				 S, s->K, max_src);
		return TF_ERROR;
	}

	/* the sentences take free slots with their sources' keys and values; the next step decodes their BOS */
	tf_block_signals(&old);
	for (i = 0; i < batch; i++)
	{
		int			n = m->lay.ints[i + 1] - m->lay.ints[i];

		while (s->used[slot])
			slot++;
		s->used[slot] = true;
		s->src_count[slot] = n;
		s->max_len[slot] = output_limit(c, n - s->opt.source_prefix, s->opt.max_length_offset,
										s->opt.max_output_tokens, s->prefix);
		s->steps[slot] = 0;
		s->finished_n[slot] = 0;
		s->tag[slot] = tags != NULL ? tags[i] : i;
		s->joining[s->n_joining++] = slot;
		for (l = 0; l < s->Ld; l++)		/* rows of kv_all's layer-l columns */
			be->gather(be, s->cross[l] + (size_t) slot * s->max_src * 2 * d, (size_t) 2 * d,
					   m->acts[Le + l].kv_cross + (size_t) m->lay.ints[i] * m->ld_kv, (size_t) m->ld_kv, NULL, n,
					   (size_t) 2 * d);
	}
	tf_restore_signals(&old);
	s->occupied += batch;
	return be->status(be, err, errlen);
}

int
tf_stream_step(TfStream *s, char *err, size_t errlen)
{
	TfBackend  *be = s->m->be;
	int			next = 0,
				i;
	sigset_t	old;

	if (s->R > 0)
	{
		next = select_candidates(s);
		if (next < 0)
		{
			snprintf(err, errlen, "out of memory for translation hypotheses");
			return TF_ERROR;
		}
	}
	if (next == 0 && s->n_joining == 0)
	{
		s->R = 0;
		return TF_OK;
	}
	tf_block_signals(&old);
	if (next > 0)
		reorder(s, next);
	else
		s->R = 0;
	/* the sentences that joined start from BOS, one row each */
	for (i = 0; i < s->n_joining; i++, s->R++)
	{
		s->row_sent[s->R] = s->joining[i];
		s->row_logp[s->R] = 0.0;
		s->next_token[s->R] = s->opt.bos_id;
	}
	s->n_joining = 0;
	decoder_step(s);
	topk_step(s);
	tf_restore_signals(&old);
	return be->status(be, err, errlen);
}

int
tf_stream_sentences(const TfStream *s)
{
	return s->occupied - s->n_completed;
}

bool
tf_stream_take(TfStream *s, int64_t *tag, TfHypothesis *out)
{
	int			sent,
				j;

	if (s->n_completed == 0)
		return false;
	sent = s->completed[0];
	memmove(s->completed, s->completed + 1, --s->n_completed * sizeof(int));
	*tag = s->tag[sent];
	for (j = 0; j < s->opt.nbest; j++)
	{
		out[j] = s->finished[(size_t) sent * s->K + j];
		s->finished[(size_t) sent * s->K + j].tokens = NULL;
	}
	tf_hypotheses_free(s->finished + (size_t) sent * s->K, s->finished_n[sent]);
	s->finished_n[sent] = 0;
	s->used[sent] = false;
	s->occupied--;
	return true;
}

int
tf_model_translate(TfModel *m, const int32_t *src, int batch, int src_len, const TfDecodeOptions *opt,
				   TfHypothesis *out, char *err, size_t errlen)
{
	TfStream   *s;
	int			rc = TF_ERROR;

	if (check_options(m, opt, batch, err, errlen) != TF_OK)
		return TF_ERROR;
	s = stream_new(m, opt);
	if (s == NULL)
	{
		snprintf(err, errlen, "out of memory for a batch of %d sentences", batch);
		return TF_ERROR;
	}
	/* the model keeps the backend buffers between calls */
	s->arena = m->dec_arena, s->arena_floats = m->dec_arena_floats;
	s->idx = m->dec_idx, s->idx_capacity = m->dec_idx_capacity;
	s->pstart = m->dec_pstart, s->pstart_capacity = m->dec_pstart_capacity;
	m->dec_arena = NULL, m->dec_idx = NULL, m->dec_pstart = NULL;
	if (tf_stream_add(s, src, batch, src_len, NULL, err, errlen) == TF_OK)
	{
		for (;;)
		{
			if (tf_stream_step(s, err, errlen) != TF_OK)
				break;
			if (s->R == 0)
			{
				int64_t		tag;

				/* tags are the sentences' indexes */
				while (s->n_completed > 0)
					tf_stream_take(s, &tag, out + (size_t) s->tag[s->completed[0]] * opt->nbest);
				rc = TF_OK;
				break;
			}
			if (opt->interrupted != NULL && opt->interrupted(opt->interrupt_arg))
			{
				snprintf(err, errlen, "translation interrupted");
				break;
			}
		}
	}
	m->dec_arena = s->arena, m->dec_arena_floats = s->arena_floats;
	m->dec_idx = s->idx, m->dec_idx_capacity = s->idx_capacity;
	m->dec_pstart = s->pstart, m->dec_pstart_capacity = s->pstart_capacity;
	s->arena = NULL, s->idx = NULL, s->pstart = NULL;
	tf_stream_free(s);
	return rc;
}
