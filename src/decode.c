/*
 * decode.c - translation by beam search (DESIGN.md section 2) with
 * incremental decoding.
 *
 * The first step is an ordinary forward pass of the sources with BOS as
 * the only target token: it runs the encoder, computes every decoder
 * layer's encoder-decoder keys and values (kept for the whole search), the
 * self-attention keys and values of position 0, and the logits of the
 * first output token. Each later step feeds one token per live hypothesis
 * through the decoder, appends its keys and values to a per-layer cache
 * [rows, max length, 2 d_model] (fp32, or bf16 in mixed precision: the
 * backend's cache_bytes) and attends over the cache, so a step costs
 * one row per hypothesis instead of the whole prefix. After each step the
 * caches are gathered into the order of the surviving hypotheses.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

#define MAX_BEAM 64
#define MAX_DECODER_LAYERS 64

void
tf_decode_options_default(TfDecodeOptions *opt)
{
	memset(opt, 0, sizeof(*opt));
	opt->beam_size = 4;
	opt->nbest = 1;
	opt->length_penalty = 0.6f;
	opt->max_length_offset = 50;
	opt->bos_id = 2;
	opt->eos_id = 3;
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
 * Most output tokens (without EOS) for a source of n tokens with its EOS:
 * n - 1 + offset, and the decoder's positions stay below max_positions.
 */
static int
output_limit(const TfConfig *c, int n, int offset)
{
	int64_t		limit = (int64_t) n - 1 + offset;

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

/* Search state: host bookkeeping and backend buffers. */
typedef struct Search
{
	TfModel    *m;
	const TfDecodeOptions *opt;
	int			B,
				K,
				V,
				d,
				F,
				H;
	int			Tmax;			/* cache positions: longest output + EOS */
	int			max_src;
	int			rows_cap;		/* B * K */

	/* host, per sentence */
	int		   *max_len;		/* output token limit */
	int		   *src_first,
			   *src_count;		/* the sentence's encoder rows */
	int		   *finished_n;
	bool	   *done;
	TfHypothesis *finished;		/* [B, K], best first */

	/* host, per live row (ping-pong for reordering) */
	int			R;
	int		   *row_sent;
	double	   *row_logp;
	int32_t    *history;		/* [rows_cap, Tmax] output tokens so far */
	int		   *next_sent;
	double	   *next_logp;
	int32_t    *next_history;
	int32_t    *next_token;
	int32_t    *parent;
	Candidate  *cand;
	float	   *packed;			/* one step's download: top_logp, eos_logp, top_id */
	float	   *top_logp;		/* [R, K] */
	float	   *eos_logp;		/* [R] */
	int32_t    *top_id;			/* [R, K] */
	int32_t    *ints;			/* staging for dec_idx */
	int64_t    *longs;			/* staging for dec_pstart */

	/* backend memory */
	void	   *cache[MAX_DECODER_LAYERS + 1];	/* per decoder layer [rows_cap, Tmax, 2d] elements of
												 * be->cache_bytes, plus a spare */
	const float *kv_cross[MAX_DECODER_LAYERS];	/* per decoder layer [source rows, 2d] (the forward's) */
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
			   *probs,
			   *probs_cross,
			   *logits,
			   *d_packed;		/* [rows_cap, 2K + 1]: the step's results, packed as in packed */
} Search;

/* Host allocations of the search; false when out of memory. */
static bool
search_host_alloc(Search *s)
{
	size_t		R = (size_t) s->rows_cap;

	s->max_len = calloc(s->B, sizeof(int));
	s->src_first = calloc(s->B, sizeof(int));
	s->src_count = calloc(s->B, sizeof(int));
	s->finished_n = calloc(s->B, sizeof(int));
	s->done = calloc(s->B, sizeof(bool));
	s->finished = calloc(R, sizeof(TfHypothesis));
	s->row_sent = calloc(R, sizeof(int));
	s->row_logp = calloc(R, sizeof(double));
	s->history = calloc(R * s->Tmax, sizeof(int32_t));
	s->next_sent = calloc(R, sizeof(int));
	s->next_logp = calloc(R, sizeof(double));
	s->next_history = calloc(R * s->Tmax, sizeof(int32_t));
	s->next_token = calloc(R, sizeof(int32_t));
	s->parent = calloc(R, sizeof(int32_t));
	s->cand = calloc(R * s->K, sizeof(Candidate));
	s->packed = calloc(R * (2 * s->K + 1), sizeof(float));
	s->ints = calloc(8 * R + 1, sizeof(int32_t));
	s->longs = calloc(2 * R + 2, sizeof(int64_t));
	return s->max_len && s->src_first && s->src_count && s->finished_n && s->done && s->finished &&
		s->row_sent && s->row_logp && s->history && s->next_sent && s->next_logp &&
		s->next_history && s->next_token && s->parent && s->cand && s->packed && s->ints && s->longs;
}

/* Frees the host allocations (and the tokens of finished hypotheses not handed out). */
static void
search_host_free(Search *s)
{
	if (s->finished != NULL)
		tf_hypotheses_free(s->finished, s->rows_cap);
	free(s->max_len);
	free(s->src_first);
	free(s->src_count);
	free(s->finished_n);
	free(s->done);
	free(s->finished);
	free(s->row_sent);
	free(s->row_logp);
	free(s->history);
	free(s->next_sent);
	free(s->next_logp);
	free(s->next_history);
	free(s->next_token);
	free(s->parent);
	free(s->cand);
	free(s->packed);
	free(s->ints);
	free(s->longs);
}

/* Carves the backend buffers out of the model's decode arena (grown as needed); false when out of memory. */
static bool
search_backend_alloc(Search *s)
{
	TfModel    *m = s->m;
	int			Ld = m->config.num_decoder_layers;
	size_t		R = (size_t) s->rows_cap,
				d = s->d;
	size_t		cache = R * s->Tmax * 2 * d * m->be->cache_bytes / sizeof(float);	/* floats of one cache */
	size_t		need = (Ld + 1) * cache + R * (7 * d + 3 * d + s->F + 2 + s->V + 2 * s->K + 1) +
		R * s->H * (s->Tmax + s->max_src);
	size_t		ints = 8 * R + 1,
				longs = 2 * R + 2;
	float	   *p;
	int			l;

	if (need > m->dec_arena_floats)
	{
		m->be->free(m->be, m->dec_arena);
		m->dec_arena = m->be->alloc(m->be, need * sizeof(float));
		m->dec_arena_floats = m->dec_arena != NULL ? need : 0;
	}
	if (ints > m->dec_idx_capacity)
	{
		m->be->free(m->be, m->dec_idx);
		m->dec_idx = m->be->alloc(m->be, ints * sizeof(int32_t));
		m->dec_idx_capacity = m->dec_idx != NULL ? ints : 0;
	}
	if (longs > m->dec_pstart_capacity)
	{
		m->be->free(m->be, m->dec_pstart);
		m->dec_pstart = m->be->alloc(m->be, longs * sizeof(int64_t));
		m->dec_pstart_capacity = m->dec_pstart != NULL ? longs : 0;
	}
	if (m->dec_arena == NULL || m->dec_idx == NULL || m->dec_pstart == NULL ||
		!m->be->reserve(m->be, (size_t) s->Tmax * (s->Tmax > s->max_src ? s->Tmax : s->max_src), 0))
		return false;
	p = m->dec_arena;
	for (l = 0; l <= Ld; l++, p += cache)
		s->cache[l] = p;
	s->x = p, p += R * d;
	s->x1 = p, p += R * d;
	s->x2 = p, p += R * d;
	s->qkv = p, p += R * 3 * d;
	s->ctx = p, p += R * d;
	s->tmp = p, p += R * d;
	s->res = p, p += R * d;
	s->q = p, p += R * d;
	s->f1 = p, p += R * s->F;
	s->mean = p, p += R;
	s->rstd = p, p += R;
	s->logits = p, p += R * s->V;
	s->d_packed = p, p += R * (2 * s->K + 1);
	s->probs = p, p += R * s->H * s->Tmax;
	s->probs_cross = p;
	return true;
}

/*
 * One decoder step at position t for the s->R live rows whose input tokens
 * are s->next_token: writes the rows' keys and values at position t into
 * the caches and the logits [R, V].
 */
static void
decoder_step(Search *s, int t)
{
	TfModel    *m = s->m;
	TfBackend  *be = m->be;
	const TfConfig *c = &m->config;
	int			R = s->R,
				d = s->d,
				Le = c->num_encoder_layers;
	size_t		row_stride = (size_t) s->Tmax * 2 * d;
	int32_t    *ids = s->ints,
			   *pos = ids + R,
			   *q_start = pos + R,
			   *k_start = q_start + R + 1,
			   *k_len = k_start + R,
			   *src_first = k_len + R,
			   *src_count = src_first + R;
	int64_t    *p_self = s->longs,
			   *p_cross = p_self + R + 1;
	int32_t    *dev = m->dec_idx;
	TfAttentionShape self = {.kv_cache = true},
				cross = {0};
	const float *P = m->params;
	int			r,
				l;

	for (r = 0; r <= R; r++)
	{
		q_start[r] = r;
		p_self[r] = (int64_t) r * s->H * (t + 1);
		p_cross[r] = (int64_t) r * s->H * s->max_src;
		if (r == R)
			break;
		ids[r] = s->next_token[r];
		pos[r] = t;
		k_start[r] = r * s->Tmax;
		k_len[r] = t + 1;
		src_first[r] = s->src_first[s->row_sent[r]];
		src_count[r] = s->src_count[s->row_sent[r]];
	}
	be->upload(be, dev, s->ints, (size_t) (7 * R + 1) * sizeof(int32_t));
	be->upload(be, m->dec_pstart, s->longs, (size_t) (2 * R + 2) * sizeof(int64_t));

	self.batch = cross.batch = R;
	self.num_heads = cross.num_heads = s->H;
	self.head_dim = cross.head_dim = d / s->H;
	self.q_start = cross.q_start = dev + 2 * R;
	self.k_start = dev + 3 * R + 1;
	self.k_len = dev + 4 * R + 1;
	self.p_start = m->dec_pstart;
	self.max_q = cross.max_q = 1;
	self.max_k = t + 1;
	self.p_total = p_self[R];
	cross.k_start = dev + 5 * R + 1;
	cross.k_len = dev + 6 * R + 1;
	cross.p_start = m->dec_pstart + R + 1;
	cross.max_k = s->max_src;
	cross.p_total = p_cross[R];

	be->embed(be, s->x, dev, dev + R, P + m->off_embedding, m->pe, R, d, sqrtf((float) d));
	for (l = 0; l < c->num_decoder_layers; l++)
	{
		const LayerOffsets *o = &m->layer_off[Le + l];
		char	   *cache = s->cache[l];
		size_t		eb = (size_t) be->cache_bytes;

		/* masked self-attention over the cache (this position is the newest key) */
		tf_linear(be, s->qkv, s->x, P + o->self.w_qkv, P + o->self.b_qkv, R, d, 3 * d);
		be->cache_gather(be, cache + (size_t) t * 2 * d * eb, row_stride, s->qkv + d, 3 * (size_t) d, true, NULL, R,
						 2 * (size_t) d);
		be->attention(be, s->ctx, s->probs, s->qkv, 3 * d, (const float *) cache, (const float *) (cache + d * eb),
					  2 * d, &self);
		tf_linear(be, s->tmp, s->ctx, P + o->self.w_out, P + o->self.b_out, R, d, d);
		be->add(be, s->res, s->x, s->tmp, (size_t) R * d);
		be->layernorm(be, s->x1, s->mean, s->rstd, s->res, P + o->ln_self_g, P + o->ln_self_b, R, d,
					  c->layer_norm_eps);
		/* encoder-decoder attention over the source's keys and values */
		tf_linear(be, s->q, s->x1, P + o->cross.w_qkv, P + o->cross.b_qkv, R, d, d);
		be->attention(be, s->ctx, s->probs_cross, s->q, d, s->kv_cross[l], s->kv_cross[l] + d, 2 * d,
					  &cross);
		tf_linear(be, s->tmp, s->ctx, P + o->cross.w_out, P + o->cross.b_out, R, d, d);
		be->add(be, s->res, s->x1, s->tmp, (size_t) R * d);
		be->layernorm(be, s->x2, s->mean, s->rstd, s->res, P + o->ln_cross_g, P + o->ln_cross_b, R, d,
					  c->layer_norm_eps);
		/* feed-forward */
		tf_linear(be, s->f1, s->x2, P + o->w1, P + o->b1, R, d, s->F);
		be->activation(be, c->activation, s->f1, s->f1, (size_t) R * s->F);
		tf_linear(be, s->tmp, s->f1, P + o->w2, P + o->b2, R, s->F, d);
		be->add(be, s->res, s->x2, s->tmp, (size_t) R * d);
		be->layernorm(be, s->x, s->mean, s->rstd, s->res, P + o->ln_ffn_g, P + o->ln_ffn_b, R, d,
					  c->layer_norm_eps);
	}
	tf_logits(m, s->logits, s->x, R);
}

/* Adds a finished hypothesis to its sentence's list (best first, stable); false when out of memory. */
static bool
add_finished(Search *s, int sent, const int32_t *tokens, int length, double log_prob, bool eos)
{
	TfHypothesis *list = s->finished + (size_t) sent * s->K;
	int			n = s->finished_n[sent];
	TfHypothesis h;
	int			i;

	h.length = length;
	h.log_prob = log_prob;
	h.score = log_prob / length_penalty(s->opt->length_penalty, length + 1);
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

/*
 * Chooses the continuations of every sentence's live rows after step t
 * (host: top_logp, top_id, eos_logp downloaded) and sets up the next rows
 * (next_*, parent). Returns the number of next rows, or -1 when out of memory.
 */
static int
select_candidates(Search *s, int t)
{
	int			K = s->K;
	int			r0 = 0;
	int			next = 0;

	while (r0 < s->R)
	{
		int			sent = s->row_sent[r0];
		int			r1 = r0;
		int			width = K - s->finished_n[sent];
		int			n = 0;
		int			i,
					r;
		int			first_next = next;
		double		best_live = -INFINITY;

		while (r1 < s->R && s->row_sent[r1] == sent)
			r1++;
		if (t == s->max_len[sent])
		{
			/* at the length limit: EOS is forced */
			for (r = r0; r < r1; r++)
				if (!add_finished(s, sent, s->history + (size_t) r * s->Tmax, t,
								  s->row_logp[r] + s->eos_logp[r], false))
					return -1;
			s->done[sent] = true;
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

			if (cd->id == s->opt->eos_id)
			{
				if (!add_finished(s, sent, s->history + (size_t) row * s->Tmax, t, cd->log_prob, true))
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
			(s->finished_n[sent] >= s->opt->nbest &&
			 s->finished[(size_t) sent * K + s->opt->nbest - 1].score >=
			 best_live / length_penalty(s->opt->length_penalty, s->max_len[sent] + 1)))
		{
			next = first_next;
			s->done[sent] = true;
		}
		r0 = r1;
	}
	return next;
}

/* Moves the next rows into place: host bookkeeping and the backend caches (positions 0 .. t). */
static void
reorder(Search *s, int next, int t)
{
	TfModel    *m = s->m;
	TfBackend  *be = m->be;
	int			Ld = m->config.num_decoder_layers;
	size_t		row_stride = (size_t) s->Tmax * 2 * s->d;
	int32_t    *tmp_i;
	int		   *tmp_s;
	double	   *tmp_d;
	int			l;

	int			i;
	bool		in_place = true;

	/* rows that only drop out (greedy search, finished sentences) move in place */
	for (i = 0; i < next && in_place; i++)
		in_place = s->parent[i] >= i && (i == 0 || s->parent[i] > s->parent[i - 1]);
	for (i = 0; i < next && in_place && s->parent[i] == i; i++)
		;
	be->upload(be, m->dec_idx, s->parent, (size_t) next * sizeof(int32_t));
	for (l = 0; l < Ld && i < next; l++)
	{
		void	   *spare = s->cache[Ld];

		if (in_place)
		{
			be->cache_gather(be, s->cache[l], row_stride, s->cache[l], row_stride, false, m->dec_idx, next,
							 (size_t) (t + 1) * 2 * s->d);
			continue;
		}
		/* gather layer l into the spare buffer, which becomes layer l's */
		be->cache_gather(be, spare, row_stride, s->cache[l], row_stride, false, m->dec_idx, next,
						 (size_t) (t + 1) * 2 * s->d);
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
	else if (opt->bos_id < 0 || opt->bos_id >= V || opt->eos_id < 0 || opt->eos_id >= V)
		snprintf(err, errlen, "bos_id %d or eos_id %d is out of range [0, %d)", opt->bos_id, opt->eos_id, V);
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
 * The best K continuations of each of the R live rows from their logits
 * [R, V], brought to the host in one download: top_logp [R, K], eos_logp
 * [R] and top_id [R, K], packed in that order for the current R.
 */
static void
topk_step(Search *s, const float *logits)
{
	TfBackend  *be = s->m->be;
	size_t		RK = (size_t) s->R * s->K;
	float	   *d = s->d_packed;

	be->log_softmax_topk(be, logits, s->R, s->V, s->K, d, (int32_t *) (d + RK + s->R), s->m->config.pad_id,
						 s->opt->eos_id, d + RK);
	be->download(be, s->packed, d, (2 * RK + s->R) * sizeof(float));
	s->top_logp = s->packed;
	s->eos_logp = s->packed + RK;
	s->top_id = (int32_t *) (s->packed + RK + s->R);
}

/* The search (tf_model_translate after the BOS forward pass); signals are blocked only while computing. */
static int
search_run(Search *s, char *err, size_t errlen)
{
	TfModel    *m = s->m;
	TfBackend  *be = m->be;
	const TfConfig *c = &m->config;
	int			Le = c->num_encoder_layers;
	int			t = 0;
	int			l;
	sigset_t	old;

	/* step 0 came from the forward pass: its rows are the sentences */
	s->R = s->B;
	for (l = 0; l < s->R; l++)
	{
		s->row_sent[l] = l;
		s->row_logp[l] = 0.0;
	}
	tf_block_signals(&old);
	for (l = 0; l < c->num_decoder_layers; l++)
	{
		const LayerActs *a = &m->acts[Le + l];

		s->kv_cross[l] = a->kv_cross;
		be->cache_gather(be, s->cache[l], (size_t) s->Tmax * 2 * s->d, a->qkv + s->d, 3 * (size_t) s->d, true,
						 NULL, s->B, 2 * (size_t) s->d);
	}
	topk_step(s, m->logits);
	for (;;)
	{
		int			next;

		tf_restore_signals(&old);
		if (be->status(be, err, errlen) != TF_OK)
			return TF_ERROR;
		next = select_candidates(s, t);
		if (next < 0)
		{
			snprintf(err, errlen, "out of memory for translation hypotheses");
			return TF_ERROR;
		}
		if (next == 0)
			return TF_OK;
		if (s->opt->interrupted != NULL && s->opt->interrupted(s->opt->interrupt_arg))
		{
			snprintf(err, errlen, "translation interrupted");
			return TF_ERROR;
		}
		tf_block_signals(&old);
		reorder(s, next, t);
		t++;
		decoder_step(s, t);
		topk_step(s, s->logits);
	}
}

int
tf_model_translate(TfModel *m, const int32_t *src, int batch, int src_len, const TfDecodeOptions *opt,
				   TfHypothesis *out, char *err, size_t errlen)
{
	const TfConfig *c = &m->config;
	Search		s;
	TfBatch		b = {0};
	int32_t    *bos = NULL;
	int			i,
				rc = TF_ERROR;

	memset(&s, 0, sizeof(s));
	if (check_options(m, opt, batch, err, errlen) != TF_OK)
		return TF_ERROR;
	s.m = m;
	s.opt = opt;
	s.B = batch;
	s.K = opt->beam_size;
	s.V = c->vocab_size;
	s.d = c->d_model;
	s.F = c->d_ff;
	s.H = c->num_heads;
	s.rows_cap = batch * opt->beam_size;

	/* the first step: encoder, cross keys/values and position 0 in one forward pass */
	bos = malloc(2 * (size_t) batch * sizeof(int32_t));
	if (bos == NULL)
	{
		snprintf(err, errlen, "out of memory for a batch of %d sentences", batch);
		return TF_ERROR;
	}
	for (i = 0; i < batch; i++)
	{
		bos[i] = opt->bos_id;
		bos[batch + i] = opt->eos_id;
	}
	b.batch_size = batch;
	b.src_len = src_len;
	b.tgt_len = 1;
	b.src = src;
	b.tgt_in = bos;
	b.labels = bos + batch;
	if (tf_model_forward(m, &b, false, NULL, NULL, err, errlen) != TF_OK)
		goto done;
	tf_model_reset_stats(m);

	/* lengths and limits */
	s.max_src = m->lay.max_src;
	for (i = 0; i < batch; i++)
		if (m->lay.ints[i + 1] == m->lay.ints[i])
		{
			snprintf(err, errlen, "source %d is empty: a source needs at least its EOS", i);
			goto done;
		}
	s.Tmax = output_limit(c, s.max_src, opt->max_length_offset) + 1;
	if (!search_host_alloc(&s) || !search_backend_alloc(&s))
	{
		snprintf(err, errlen, "out of memory for beam search over %d sentences x %d beams, %d positions",
				 batch, s.K, s.Tmax);
		goto done;
	}
	for (i = 0; i < batch; i++)
	{
		int			n = m->lay.ints[i + 1] - m->lay.ints[i];

		s.src_first[i] = m->lay.ints[i];
		s.src_count[i] = n;
		s.max_len[i] = output_limit(c, n, opt->max_length_offset);
	}
	rc = search_run(&s, err, errlen);
	if (rc == TF_OK)
		for (i = 0; i < batch; i++)
		{
			int			j;

			for (j = 0; j < opt->nbest; j++)
			{
				out[(size_t) i * opt->nbest + j] = s.finished[(size_t) i * s.K + j];
				s.finished[(size_t) i * s.K + j].tokens = NULL;
			}
		}

done:
	search_host_free(&s);
	free(bos);
	return rc;
}
