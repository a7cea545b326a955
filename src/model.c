/*
 * model.c - the encoder-decoder Transformer (Vaswani et al. 2017, section 3;
 * docs/design.md §2): parameter layout and initialisation, forward pass
 * with label-smoothed loss, and backward pass, all through the backend
 * interface (backend.h).
 *
 * Parameters, gradients and both Adam moments are four allocations with the
 * same layout; named views (Hugging Face MarianMT names) point into them.
 * Activations live in one arena sized from the batch; it only grows. Batches
 * are packed without padding (batch.c): no layer computes on padding.
 */
#define _POSIX_C_SOURCE 200809L
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "signals.h"

/* Dropout sites (the low 32 bits of a dropout stream). */
#define SITE_ENC_EMBED 1u
#define SITE_DEC_EMBED 2u
#define SITE_ENC_LAYER(l) (0x100u + 16u * (uint32_t) (l))
#define SITE_DEC_LAYER(l) (0x10000u + 16u * (uint32_t) (l))
#define SITE_SELF_OUT 0u
#define SITE_CROSS_OUT 1u
#define SITE_FFN_OUT 2u
#define SITE_RELU 3u
#define SITE_SELF_PROBS 4u
#define SITE_CROSS_PROBS 5u

/* Parameter initialisation kinds. */
enum
{
	INIT_XAVIER,				/* U(-a, a), a = sqrt(6 / (fan_in + fan_out)) */
	INIT_ZERO,
	INIT_ONE,
	INIT_EMBEDDING				/* N(0, d_model^-0.5) */
};

/* A new parameter entry, its place not yet set. */
static ParamEntry *
new_entry(TfModel *m, const char *prefix, const char *name, int rows, int cols, int init)
{
	ParamEntry *e = &m->entries[m->num_entries++];

	snprintf(e->name, sizeof(e->name), "%s%s", prefix, name);
	e->ndim = cols > 0 ? 2 : 1;
	e->shape[0] = rows;
	e->shape[1] = cols > 0 ? cols : 1;
	e->count = (size_t) rows * (cols > 0 ? cols : 1);
	e->init = init;
	e->matrix = init == INIT_XAVIER || init == INIT_EMBEDDING;
	return e;
}

/*
 * Adds a parameter entry at `row` rows into the cross-attention key/value
 * block (layout_parameters), whose space is reserved.
 */
static void
add_cross_kv(TfModel *m, const char *prefix, const char *name, int cols, int init, size_t row)
{
	int			d = m->config.d_model;
	ParamEntry *e = new_entry(m, prefix, name, d, cols, init);

	if (cols == 0)
		e->offset = m->off_cross_kv_b + row;
	else if (m->quantized)
	{
		e->offset = m->off_cross_kv_w + row * d;
		e->qrow = m->cross_kv_qrow + row;
	}
	else
		e->offset = m->off_cross_kv_w + row * d;
}

/* Adds a parameter entry at the next free place; returns its offset (floats; bytes into q8). */
static size_t
add_param(TfModel *m, const char *prefix, const char *name, int rows, int cols, int init)
{
	ParamEntry *e = new_entry(m, prefix, name, rows, cols, init);

	if (m->quantized && e->matrix)
	{
		e->offset = m->num_q8;
		e->qrow = m->num_qrows;
		m->num_q8 += e->count;
		m->num_qrows += rows;
		return e->offset;
	}
	e->offset = m->num_params;
	m->num_params += e->count;
	return e->offset;
}

/*
 * Attention block: q, k, v weights contiguous ([3d, d], so self-attention is
 * one GEMM), then their biases. Decoder layer `cross` >= 0's
 * encoder-decoder attention keeps only q there: its k and v (weights and
 * biases) go to rows 2 cross d and (2 cross + 1) d of the cross key/value
 * block, so that every decoder layer's keys and values of the encoder
 * output are one GEMM. The entries' order, which seeds their
 * initialisation, is the same either way.
 */
static void
layout_attention(TfModel *m, const char *prefix, AttnOffsets *a, int cross)
{
	int			d = m->config.d_model;
	size_t		row = (size_t) 2 * cross * d;

	a->w_qkv = add_param(m, prefix, "q_proj.weight", d, d, INIT_XAVIER);
	if (cross < 0)
	{
		add_param(m, prefix, "k_proj.weight", d, d, INIT_XAVIER);
		add_param(m, prefix, "v_proj.weight", d, d, INIT_XAVIER);
	}
	else
	{
		add_cross_kv(m, prefix, "k_proj.weight", d, INIT_XAVIER, row);
		add_cross_kv(m, prefix, "v_proj.weight", d, INIT_XAVIER, row + d);
	}
	a->b_qkv = add_param(m, prefix, "q_proj.bias", d, 0, INIT_ZERO);
	if (cross < 0)
	{
		add_param(m, prefix, "k_proj.bias", d, 0, INIT_ZERO);
		add_param(m, prefix, "v_proj.bias", d, 0, INIT_ZERO);
	}
	else
	{
		add_cross_kv(m, prefix, "k_proj.bias", 0, INIT_ZERO, row);
		add_cross_kv(m, prefix, "v_proj.bias", 0, INIT_ZERO, row + d);
	}
	a->w_out = add_param(m, prefix, "out_proj.weight", d, d, INIT_XAVIER);
	a->b_out = add_param(m, prefix, "out_proj.bias", d, 0, INIT_ZERO);
}

/* LayerNorm weight and bias. */
static void
layout_norm(TfModel *m, const char *prefix, const char *name, size_t *gamma, size_t *beta)
{
	char		n[48];

	snprintf(n, sizeof(n), "%s.weight", name);
	*gamma = add_param(m, prefix, n, m->config.d_model, 0, INIT_ONE);
	snprintf(n, sizeof(n), "%s.bias", name);
	*beta = add_param(m, prefix, n, m->config.d_model, 0, INIT_ZERO);
}

/* The whole layout, in MarianMT names. */
static void
layout_parameters(TfModel *m)
{
	const TfConfig *c = &m->config;
	int			l;
	char		prefix[40];

	m->off_embedding = add_param(m, "", "model.shared.weight", c->vocab_size, c->d_model, INIT_EMBEDDING);
	/* the cross key/value block: weights [num_decoder_layers * 2d, d], then biases, contiguous in params */
	if (m->quantized)
	{
		m->off_cross_kv_w = m->num_q8;
		m->cross_kv_qrow = m->num_qrows;
		m->num_q8 += (size_t) 2 * c->num_decoder_layers * c->d_model * c->d_model;
		m->num_qrows += (size_t) 2 * c->num_decoder_layers * c->d_model;
	}
	else
	{
		m->off_cross_kv_w = m->num_params;
		m->num_params += (size_t) 2 * c->num_decoder_layers * c->d_model * c->d_model;
	}
	m->off_cross_kv_b = m->num_params;
	m->num_params += (size_t) 2 * c->num_decoder_layers * c->d_model;
	for (l = 0; l < c->num_encoder_layers + c->num_decoder_layers; l++)
	{
		bool		dec = l >= c->num_encoder_layers;
		LayerOffsets *o = &m->layer_off[l];
		char		sub[56];

		snprintf(prefix, sizeof(prefix), "model.%s.layers.%d.", dec ? "decoder" : "encoder",
				 dec ? l - c->num_encoder_layers : l);
		o->begin = m->num_params;
		snprintf(sub, sizeof(sub), "%sself_attn.", prefix);
		layout_attention(m, sub, &o->self, -1);
		layout_norm(m, prefix, "self_attn_layer_norm", &o->ln_self_g, &o->ln_self_b);
		if (dec)
		{
			snprintf(sub, sizeof(sub), "%sencoder_attn.", prefix);
			layout_attention(m, sub, &o->cross, l - c->num_encoder_layers);
			layout_norm(m, prefix, "encoder_attn_layer_norm", &o->ln_cross_g, &o->ln_cross_b);
		}
		o->w1 = add_param(m, prefix, "fc1.weight", c->d_ff, c->d_model, INIT_XAVIER);
		o->b1 = add_param(m, prefix, "fc1.bias", c->d_ff, 0, INIT_ZERO);
		o->w2 = add_param(m, prefix, "fc2.weight", c->d_model, c->d_ff, INIT_XAVIER);
		o->b2 = add_param(m, prefix, "fc2.bias", c->d_model, 0, INIT_ZERO);
		layout_norm(m, prefix, "final_layer_norm", &o->ln_ffn_g, &o->ln_ffn_b);
		o->end = m->num_params;
	}
	if (c->logits_bias)
		m->off_logits_bias = add_param(m, "", "final_logits_bias", 1, c->vocab_size, INIT_ZERO);
	if (c->normalize_before)
	{
		size_t		beta;

		layout_norm(m, "model.encoder.", "layer_norm", &m->off_enc_norm, &beta);
		layout_norm(m, "model.decoder.", "layer_norm", &m->off_dec_norm, &beta);
	}
}

/* Initialises the parameters on the host from the counter-based generator. */
static void
init_parameters(const TfModel *m, float *host)
{
	int			i;

	for (i = 0; i < m->num_entries; i++)
	{
		const ParamEntry *e = &m->entries[i];
		float	   *p = host + e->offset;
		size_t		j;

		switch (e->init)
		{
			case INIT_XAVIER:
				{
					float		a = sqrtf(6.0f / (float) (e->shape[0] + e->shape[1]));

					for (j = 0; j < e->count; j++)
						p[j] = (2.0f * tf_random_uniform(m->seed, (uint64_t) i, j) - 1.0f) * a;
					break;
				}
			case INIT_ZERO:
				break;
			case INIT_ONE:
				for (j = 0; j < e->count; j++)
					p[j] = 1.0f;
				break;
			case INIT_EMBEDDING:
				for (j = 0; j < e->count; j++)
					p[j] = tf_random_normal(m->seed, (uint64_t) i, j) / sqrtf((float) m->config.d_model);
				break;
		}
	}
}

int
tf_device_parse(const char *device, char kind[8], int *index, char *err, size_t errlen)
{
	*index = 0;
	if (strcmp(device, "cpu") == 0 || strcmp(device, "cuda") == 0)
	{
		strcpy(kind, device);
		return TF_OK;
	}
	if (strncmp(device, "cuda:", 5) == 0 && device[5] >= '0' && device[5] <= '9')
	{
		char	   *end;
		long		n = strtol(device + 5, &end, 10);

		if (*end == '\0' && n <= TF_MAX_DEVICE)
		{
			strcpy(kind, "cuda");
			*index = (int) n;
			return TF_OK;
		}
	}
	snprintf(err, errlen, "invalid device \"%s\" (expected \"cpu\", \"cuda\" or \"cuda:N\", N <= %d)", device,
			 TF_MAX_DEVICE);
	return TF_ERROR;
}

/*
 * The most buffers layout_activations lists with bf16 copies: 7 a layer
 * (ctx, ln_self, ctx_cross, ln_cross, h, ln_ffn, out), then enc_x0, dec_x0,
 * enc_final, dec_final, logits, tmp, g_qkv, g_h and g_kv.
 */
#define MAX_OPERANDS16(layers) (7 * (layers) + 9)

/*
 * tf_model_create (train: with gradients and Adam moments),
 * tf_model_create_inference and tf_model_create_quantized (quantized).
 */
static TfModel *
create(const TfConfig *config, uint64_t seed, const char *device, int threads, bool train, bool quantized,
	   char *err, size_t errlen)
{
	TfModel    *m;
	int			layers;
	int			max_entries;
	float	   *host;
	char		kind[8];
	int			index;
	sigset_t	old;

	if (tf_config_validate(config, err, errlen) != TF_OK ||
		tf_device_parse(device, kind, &index, err, errlen) != TF_OK)
		return NULL;
	m = calloc(1, sizeof(TfModel));
	layers = config->num_encoder_layers + config->num_decoder_layers;
	max_entries = 6 + layers * 30;
	if (m == NULL ||
		(m->entries = calloc(max_entries, sizeof(ParamEntry))) == NULL ||
		(m->layer_off = calloc(layers, sizeof(LayerOffsets))) == NULL ||
		(m->acts = calloc(layers, sizeof(LayerActs))) == NULL ||
		(m->operands16 = calloc(MAX_OPERANDS16(layers), sizeof(TfOperand16))) == NULL)
		goto oom;
	/* threads a backend starts (OpenMP, a driver's) inherit the blocked mask */
	tf_block_signals(&old);
	m->be = tf_backend_create(kind, index, threads, err, errlen);
	tf_restore_signals(&old);
	if (m->be == NULL)
	{
		tf_model_free(m);
		return NULL;
	}
	if (quantized && m->be->linear == NULL)
	{
		snprintf(err, errlen, "int8 models run on the CPU only; the %s backend has no int8 products", m->be->name);
		tf_model_free(m);
		return NULL;
	}
	m->config = *config;
	m->ldv = (config->vocab_size + m->be->vocab_multiple - 1) / m->be->vocab_multiple * m->be->vocab_multiple;
	m->seed = seed;
	m->quantized = quantized;
	layout_parameters(m);
	m->stats = m->be->alloc(m->be, 4 * sizeof(double));
	m->params = m->be->alloc(m->be, m->num_params * sizeof(float));
	if (quantized)
	{
		m->q8 = m->be->alloc(m->be, m->num_q8);
		m->qscale = m->be->alloc(m->be, m->num_qrows * sizeof(float));
		if (m->q8 == NULL || m->qscale == NULL)
			goto oom;
	}
	if (train)
	{
		m->grads = m->be->alloc(m->be, m->num_params * sizeof(float));
		m->adam_m = m->be->alloc(m->be, m->num_params * sizeof(float));
		m->adam_v = m->be->alloc(m->be, m->num_params * sizeof(float));
	}
	/* max_positions rows, then a row of zeros: the position of a pad token inside a text (batch.c) */
	m->pe = m->be->alloc(m->be, (size_t) (config->max_positions + 1) * config->d_model * sizeof(float));
	host = calloc(m->num_params > (size_t) (config->max_positions + 1) * config->d_model
				  ? m->num_params : (size_t) (config->max_positions + 1) * config->d_model, sizeof(float));
	if (m->params == NULL || m->pe == NULL || host == NULL || m->stats == NULL ||
		(train && (m->grads == NULL || m->adam_m == NULL || m->adam_v == NULL)))
	{
		free(host);
		goto oom;
	}
	if (train)
	{
		init_parameters(m, host);
		m->be->upload(m->be, m->params, host, m->num_params * sizeof(float));
	}
	if (config->positions == TF_POSITIONS_FAIRSEQ)
		tf_positional_encoding_fairseq(host, config->max_positions, config->d_model, config->pad_id + 1);
	else
		tf_positional_encoding(host, config->max_positions, config->d_model);
	memset(host + (size_t) config->max_positions * config->d_model, 0, config->d_model * sizeof(float));
	m->be->upload(m->be, m->pe, host, (size_t) (config->max_positions + 1) * config->d_model * sizeof(float));
	free(host);
	if (m->be->status(m->be, err, errlen) != TF_OK)
	{
		tf_model_free(m);
		return NULL;
	}
	return m;

oom:
	snprintf(err, errlen, "out of memory creating a model of %s", m != NULL ? "this size" : "any size");
	tf_model_free(m);
	return NULL;
}

TfModel *
tf_model_create(const TfConfig *config, uint64_t seed, const char *device, int threads,
				char *err, size_t errlen)
{
	return create(config, seed, device, threads, true, false, err, errlen);
}

TfModel *
tf_model_create_inference(const TfConfig *config, const char *device, int threads, char *err, size_t errlen)
{
	return create(config, 0, device, threads, false, false, err, errlen);
}

TfModel *
tf_model_create_quantized(const TfConfig *config, int threads, char *err, size_t errlen)
{
	return create(config, 0, "cpu", threads, false, true, err, errlen);
}

bool
tf_model_quantized(const TfModel *m)
{
	return m->quantized;
}

size_t
tf_model_weight_bytes(const TfModel *m)
{
	return m->num_params * sizeof(float) + m->num_q8 + m->num_qrows * sizeof(float);
}

size_t
tf_model_memory_bytes(const TfModel *m)
{
	return m->be->bytes > 0 ? (size_t) m->be->bytes : 0;
}

const char *
tf_model_backend(const TfModel *m)
{
	return m->be->name;
}

int
tf_model_download(TfModel *m, void *dst, const void *src, size_t bytes, char *err, size_t errlen)
{
	sigset_t	old;

	tf_block_signals(&old);
	m->be->download(m->be, dst, src, bytes);
	tf_restore_signals(&old);
	return m->be->status(m->be, err, errlen);
}

int
tf_precision_parse(const char *name, TfPrecision *precision, char *err, size_t errlen)
{
	if (strcmp(name, "fp32") == 0)
		*precision = TF_FP32;
	else if (strcmp(name, "bf16") == 0)
		*precision = TF_BF16;
	else
	{
		snprintf(err, errlen, "invalid precision \"%s\" (expected \"fp32\" or \"bf16\")", name);
		return TF_ERROR;
	}
	return TF_OK;
}

const char *
tf_precision_name(TfPrecision precision)
{
	return precision == TF_BF16 ? "bf16" : "fp32";
}

int
tf_model_set_precision(TfModel *m, TfPrecision precision, char *err, size_t errlen)
{
	sigset_t	old;
	bool		ok;

	if (m->be->set_precision == NULL)
	{
		if (precision == TF_FP32)
			return TF_OK;
		snprintf(err, errlen, "precision \"%s\": the %s backend computes in fp32 only",
				 tf_precision_name(precision), m->be->name);
		return TF_ERROR;
	}
	tf_block_signals(&old);
	ok = m->be->set_precision(m->be, precision, m->params, m->num_params);
	tf_restore_signals(&old);
	if (!ok)
	{
		snprintf(err, errlen, "out of memory for the %s copy of %zu weights", tf_precision_name(precision),
				 m->num_params);
		m->be->set_precision(m->be, TF_FP32, m->params, m->num_params);
		m->precision = TF_FP32;
		return TF_ERROR;
	}
	m->precision = precision;
	return m->be->status(m->be, err, errlen);
}

TfPrecision
tf_model_precision(const TfModel *m)
{
	return m->precision;
}

void
tf_model_weights_changed(TfModel *m)
{
	if (m->precision != TF_FP32)
		m->be->set_precision(m->be, m->precision, m->params, m->num_params);
}

void
tf_model_reset_stats(TfModel *m)
{
	m->be->zero(m->be, (float *) m->stats, 4 * sizeof(double) / sizeof(float));
	m->pending_tokens = 0;
}

void
tf_model_free(TfModel *m)
{
	if (m == NULL)
		return;
	if (m->be != NULL)
	{
		m->be->free(m->be, m->params);
		m->be->free(m->be, m->q8);
		m->be->free(m->be, m->qscale);
		m->be->free(m->be, m->grads);
		m->be->free(m->be, m->adam_m);
		m->be->free(m->be, m->adam_v);
		m->be->free(m->be, m->pe);
		m->be->free(m->be, m->arena);
		m->be->free(m->be, m->mask_arena);
		m->be->free(m->be, m->layout);
		m->be->free(m->be, m->dec_arena);
		m->be->free(m->be, m->dec_idx);
		m->be->free(m->be, m->dec_pstart);
		m->be->free(m->be, m->stats);
		m->be->free(m->be, m->row_loss);
		m->be->destroy(m->be);
	}
	free(m->lay.longs);
	free(m->lay.counts);
	free(m->entries);
	free(m->layer_off);
	free(m->acts);
	free(m->operands16);
	free(m);
}

void
tf_model_set_threads(TfModel *m, int threads)
{
	sigset_t	old;

	tf_block_signals(&old);
	m->be->set_threads(m->be, threads);
	tf_restore_signals(&old);
}

const TfConfig *
tf_model_config(const TfModel *m)
{
	return &m->config;
}

size_t
tf_model_num_parameters(const TfModel *m)
{
	return m->num_params;
}

/*
 * Bump allocation of n elements of elem_size bytes from an arena during a
 * sizing (base NULL: returns NULL) or an assigning pass; *used counts the
 * arena's elements, each carve rounded up by tf_carve_count (so every
 * buffer starts at a multiple of TF_CARVE_ALIGN bytes into the arena). take() carves floats,
 * take_mask() dropout-mask bytes.
 */
static void *
take_elements(void *base, size_t *used, size_t n, size_t elem_size)
{
	char	   *p = base != NULL ? (char *) base + *used * elem_size : NULL;

	*used += tf_carve_count(n, elem_size);
	return p;
}

#define take(base, used, n) ((float *) take_elements((base), (used), (n), sizeof(float)))
#define take_mask(base, used, n) ((uint8_t *) take_elements((base), (used), (n), 1))

/*
 * take() for a buffer that gemms read when gemm_input is true (an
 * activation, or a gradient that linear_backward's products read): in bf16
 * on a backend with set_operands16, its bf16 copy is carved right after it
 * and, on the assigning pass, listed in m->operands16 (with only16: every
 * reader reads it rounded, TfOperand16).
 */
static float *
take_operand16(TfModel *m, float *base, size_t *used, size_t n, bool gemm_input, bool only16)
{
	float	   *x = take(base, used, n);

	if (gemm_input && m->precision == TF_BF16 && m->be->set_operands16 != NULL)
	{
		void	   *x16 = take(base, used, (n + 1) / 2);

		if (base != NULL)
			m->operands16[m->num_operands16++] = (TfOperand16) {x, x16, n, only16};
	}
	return x;
}

static float *
take_operand(TfModel *m, float *base, size_t *used, size_t n, bool gemm_input)
{
	return take_operand16(m, base, used, n, gemm_input, false);
}

/*
 * Carves the activations of the current batch layout out of `base` (NULL:
 * only count) and returns the floats needed.
 */
static size_t
layout_activations(TfModel *m, float *base)
{
	const TfConfig *c = &m->config;
	const BatchLayout *lay = &m->lay;
	const int64_t *P = lay->longs;	/* enc, dec, cross probability offsets */
	size_t		d = c->d_model,
				F = c->d_ff;
	size_t		Ns = lay->Ns,
				Nt = lay->Nt,
				N = Ns > Nt ? Ns : Nt;
	size_t		used = 0;
	int			l;
	float	   *x;
	bool		post = !c->normalize_before;	/* post-norm gemms read the residual stream */

	if (base != NULL)
		m->num_operands16 = 0;
	x = take_operand(m, base, &used, Ns * d, post);
	m->enc_x0 = x;
	m->ld_kv = 2 * c->num_decoder_layers * (int) d;
	m->kv_all = take(base, &used, Ns * m->ld_kv);
	for (l = 0; l < c->num_encoder_layers + c->num_decoder_layers; l++)
	{
		LayerActs  *a = &m->acts[l];
		bool		dec = l >= c->num_encoder_layers;
		size_t		rows = dec ? Nt : Ns;

		if (l == c->num_encoder_layers)
		{
			x = take_operand(m, base, &used, Nt * d, post);
			m->dec_x0 = x;
		}
		a->x = x;
		a->qkv = take(base, &used, rows * 3 * d);
		a->lse = m->training ? take(base, &used, rows * c->num_heads) : NULL;
		a->probs = m->keep_probs ? take(base, &used, (size_t) (dec ? P[2 * (lay->B + 1) - 1] : P[lay->B])) : NULL;
		a->ctx = take_operand(m, base, &used, rows * d, true);
		a->r_self = take(base, &used, rows * d);
		a->mean_self = take(base, &used, rows);
		a->rstd_self = take(base, &used, rows);
		a->ln_self = take_operand(m, base, &used, rows * d, true);
		if (dec)
		{
			a->q_cross = take(base, &used, rows * d);
			a->kv_cross = base != NULL ? m->kv_all + (size_t) (l - c->num_encoder_layers) * 2 * d : NULL;
			a->lse_cross = m->training ? take(base, &used, rows * c->num_heads) : NULL;
			a->probs_cross = m->keep_probs ? take(base, &used, (size_t) P[3 * (lay->B + 1) - 1]) : NULL;
			a->ctx_cross = take_operand(m, base, &used, rows * d, true);
			a->r_cross = take(base, &used, rows * d);
			a->mean_cross = take(base, &used, rows);
			a->rstd_cross = take(base, &used, rows);
			a->ln_cross = take_operand(m, base, &used, rows * d, true);
		}
		a->f1 = take(base, &used, rows * F);
		a->h = take_operand(m, base, &used, rows * F, true);
		a->r_ffn = take(base, &used, rows * d);
		a->mean_ffn = take(base, &used, rows);
		a->rstd_ffn = take(base, &used, rows);
		a->ln_ffn = c->normalize_before ? take_operand(m, base, &used, rows * d, true) : NULL;
		a->out = take_operand(m, base, &used, rows * d, post);
		x = a->out;
	}
	if (c->normalize_before)
	{
		m->enc_final = take_operand(m, base, &used, Ns * d, true);
		m->dec_final = take_operand(m, base, &used, Nt * d, true);
		m->final_mean = take(base, &used, Ns + Nt);
		m->final_rstd = take(base, &used, Ns + Nt);
	}
	/* in training only cross_entropy's gradient pass reads the logits, rounded (TfBackend.cross_entropy) */
	m->logits = take_operand16(m, base, &used, Nt * (size_t) m->ldv, m->training, m->training);
	m->tmp = take_operand(m, base, &used, N * d, m->training);
	m->g_a = take(base, &used, N * d);
	m->g_b = take(base, &used, N * d);
	m->g_qkv = take_operand(m, base, &used, N * 3 * d, m->training);
	m->g_ctx = take(base, &used, N * d);
	m->g_h = take_operand(m, base, &used, N * F, m->training);
	m->g_kv = m->training ? take_operand(m, base, &used, Ns * m->ld_kv, true) : NULL;	/* backward only */
	m->g_enc = take(base, &used, Ns * d);
	return used;
}

/*
 * Carves the dropout masks of the current batch out of `base` (NULL: only
 * count) and returns the bytes needed: one per element of every dropout
 * site, written by the forward and read by the backward.
 */
static size_t
layout_masks(TfModel *m, uint8_t *base)
{
	const TfConfig *c = &m->config;
	size_t		d = c->d_model,
				F = c->d_ff,
				Ns = m->lay.Ns,
				Nt = m->lay.Nt;
	size_t		used = 0;
	int			l;

	m->keep_enc_embed = take_mask(base, &used, Ns * d);
	m->keep_dec_embed = take_mask(base, &used, Nt * d);
	for (l = 0; l < c->num_encoder_layers + c->num_decoder_layers; l++)
	{
		LayerActs  *a = &m->acts[l];
		bool		dec = l >= c->num_encoder_layers;
		size_t		rows = dec ? Nt : Ns;

		a->keep_self = take_mask(base, &used, rows * d);
		a->keep_cross = dec ? take_mask(base, &used, rows * d) : NULL;
		a->keep_ffn = take_mask(base, &used, rows * d);
		a->keep_relu = take_mask(base, &used, rows * F);
	}
	return used;
}

/* Makes the arena and the index buffers fit the current batch layout (they only grow), and uploads the layout. */
static int
ensure_arena(TfModel *m, char *err, size_t errlen)
{
	const BatchLayout *lay = &m->lay;
	size_t		need = layout_activations(m, NULL);
	size_t		masks = layout_masks(m, NULL);
	size_t		rows = (size_t) (lay->Ns > lay->Nt ? lay->Ns : lay->Nt),
				widest = (size_t) m->ldv,	/* logits; then d_ff and the fused QKV */
				operand,
				longs = 3 * (size_t) (lay->B + 1),
				grouped = 3 * (size_t) (lay->Ns + lay->Nt) + 1,	/* the most the backward's grouped ids take */
				layout = longs * sizeof(int64_t) + (lay->ints_used + grouped) * sizeof(int32_t);
	int			longest = lay->max_src > lay->max_tgt ? lay->max_src : lay->max_tgt;

	/*
	 * the largest product operand that is not a weight: [rows, widest]; none
	 * when every one has a bf16 copy (take_operand)
	 */
	if ((size_t) m->config.d_ff > widest)
		widest = (size_t) m->config.d_ff;
	if (3 * (size_t) m->config.d_model > widest)
		widest = 3 * (size_t) m->config.d_model;
	operand = m->precision == TF_BF16 && m->be->set_operands16 != NULL ? 0 : rows * widest;

	/* grow with a quarter of headroom: batch shapes vary from step to step */
	if (need > m->arena_floats)
	{
		need += need / 4;
		if (m->be->set_operands16 != NULL)
			m->be->set_operands16(m->be, NULL, 0);	/* their buffers go */
		m->be->free(m->be, m->arena);
		m->arena = m->be->alloc(m->be, need * sizeof(float));
		m->arena_floats = m->arena != NULL ? need : 0;
	}
	if (layout > m->layout_bytes)
	{
		layout += layout / 4;	/* distinct ids vary from batch to batch */
		m->be->free(m->be, m->layout);
		m->layout = m->be->alloc(m->be, layout);
		m->layout_bytes = m->layout != NULL ? layout : 0;
	}
	if (masks > m->mask_bytes)
	{
		masks += masks / 4;
		m->be->free(m->be, m->mask_arena);
		m->mask_arena = m->be->alloc(m->be, masks);
		m->mask_bytes = m->mask_arena != NULL ? masks : 0;
	}
	if ((size_t) lay->Nt > m->row_loss_capacity)
	{
		m->be->free(m->be, m->row_loss);
		m->row_loss = m->be->alloc(m->be, (size_t) lay->Nt * sizeof(double));
		m->row_loss_capacity = m->row_loss != NULL ? (size_t) lay->Nt : 0;
	}
	if (m->arena == NULL || m->layout == NULL || m->mask_arena == NULL || m->row_loss == NULL ||
		!m->be->reserve(m->be, (size_t) longest * longest, (size_t) lay->B * longest * m->config.num_heads,
						operand))
	{
		snprintf(err, errlen, "out of memory for the activations of %d source and %d target tokens (%zu MB)",
				 lay->Ns, lay->Nt, need * sizeof(float) >> 20);
		return TF_ERROR;
	}
	layout_activations(m, m->arena);
	if (m->be->set_operands16 != NULL)
		m->be->set_operands16(m->be, m->operands16, m->num_operands16);
	layout_masks(m, m->mask_arena);
	m->pstart = m->layout;
	m->idx = (int32_t *) (m->pstart + longs);
	m->be->upload(m->be, m->layout, lay->longs, longs * sizeof(int64_t) + lay->ints_used * sizeof(int32_t));
	return TF_OK;
}

/* The scales of the quantized weight rows that start at q8 offset w (a row of a matrix entry). */
static const float *
row_scales(const TfModel *m, size_t w)
{
	int			i;

	for (i = 0; i < m->num_entries; i++)
	{
		const ParamEntry *e = &m->entries[i];

		if (e->matrix && w >= e->offset && w < e->offset + e->count)
			return m->qscale + e->qrow + (w - e->offset) / (size_t) e->shape[1];
	}
	return NULL;				/* not reached: every caller passes a matrix's rows */
}

/*
 * y[rows, out] (row stride ldy) = x[rows, in] W^T + b with W [out, in] as
 * in nn.Linear. The bias is the product's epilogue where the backend has
 * gemm_bias (CUDA's), else the GEMM's initial C (beta 1), one pass instead
 * of a zeroing and an add; CPU inference goes through the
 * backend's linear where there is one and y is contiguous (the CPU's:
 * oneDNN or OpenBLAS by row count, int8 through oneDNN; bench/cpu_matmul.c;
 * int8 models run only there, so ldy is out for them).
 */
static void
linear_strided(TfModel *m, float *y, int ldy, const float *x, size_t w, size_t b, int rows, int in, int out)
{
	TfBackend  *be = m->be;
	const float *bias = b == SIZE_MAX ? NULL : m->params + b;

	if (m->quantized)			/* the CPU's: its logits are contiguous (vocab_multiple 1) */
		be->linear(be, TF_WEIGHTS_INT8, y, x, m->q8 + w, row_scales(m, w), bias, rows, in, out);
	else if (be->linear != NULL && m->grads == NULL && ldy == out)
		be->linear(be, TF_WEIGHTS_FP32, y, x, m->params + w, NULL, bias, rows, in, out);
	else if (bias != NULL && be->gemm_bias != NULL)
		be->gemm_bias(be, false, true, rows, out, in, 1.0f, x, in, m->params + w, in, 0.0f, y, ldy, bias, NULL);
	else
	{
		if (bias != NULL)
			be->bias_rows(be, y, bias, rows, out, ldy);
		be->gemm(be, false, true, rows, out, in, 1.0f, x, in, m->params + w, in, bias != NULL ? 1.0f : 0.0f,
				 y, ldy);
	}
}

void
tf_linear(TfModel *m, float *y, const float *x, size_t w, size_t b, int rows, int in, int out)
{
	linear_strided(m, y, out, x, w, b, rows, in, out);
}

/*
 * logits[rows, vocab] = h[rows, d_model] E^T (+ final_logits_bias): the
 * output projection through the shared embedding (section 3.4).
 */
void
tf_logits(TfModel *m, float *logits, const float *h, int rows)
{
	const TfConfig *c = &m->config;

	linear_strided(m, logits, m->ldv, h, m->off_embedding, c->logits_bias ? m->off_logits_bias : SIZE_MAX, rows,
				   c->d_model, c->vocab_size);
}

/* The embeddings' scale: sqrt(d_model) (section 3.4), or 1 without scale_embedding. */
static float
embed_scale(const TfModel *m)
{
	return m->config.scale_embedding ? sqrtf((float) m->config.d_model) : 1.0f;
}

void
tf_embed(TfModel *m, float *out, const int32_t *ids, const int32_t *positions, int rows)
{
	int			d = m->config.d_model;

	if (m->quantized)
		m->be->embed_int8(m->be, out, ids, positions, m->q8 + m->off_embedding, m->qscale, m->pe, rows, d,
						  embed_scale(m));
	else
		m->be->embed(m->be, out, ids, positions, m->params + m->off_embedding, m->pe, rows, d, embed_scale(m), 0.0f,
					 0, 0, NULL);
}

/*
 * A training or scoring forward's embeddings (tf_embed) with their dropout
 * at `site` (section 5.4), its mask into keep: one pass where the backend
 * fuses them.
 */
static void
embed_dropout(TfModel *m, float *out, const int32_t *ids, const int32_t *positions, int rows, int site,
			  uint8_t *keep)
{
	uint64_t	stream = tf_dropout_stream(m->step, m->lay.index, site);
	int			d = m->config.d_model;

	if (m->quantized)
	{
		tf_embed(m, out, ids, positions, rows);
		m->be->dropout(m->be, out, out, (size_t) rows * d, m->p_dropout, m->seed, stream, keep);
	}
	else
		m->be->embed(m->be, out, ids, positions, m->params + m->off_embedding, m->pe, rows, d, embed_scale(m),
					 m->p_dropout, m->seed, stream, keep);
}

void
tf_final_norm(TfModel *m, bool decoder, float *out, float *mean, float *rstd, const float *x, int rows)
{
	size_t		g = decoder ? m->off_dec_norm : m->off_enc_norm;

	m->be->layernorm(m->be, out, mean, rstd, x, m->params + g, m->params + g + m->config.d_model, rows,
					 m->config.d_model, m->config.layer_norm_eps);
}

const float *
tf_encoder_output(const TfModel *m)
{
	return m->config.normalize_before ? m->enc_final : m->acts[m->config.num_encoder_layers - 1].out;
}

/* The decoder's output [Nt, d_model] of the last forward: tf_encoder_output's twin. */
static const float *
decoder_output(const TfModel *m)
{
	const TfConfig *c = &m->config;

	return c->normalize_before ? m->dec_final : m->acts[c->num_encoder_layers + c->num_decoder_layers - 1].out;
}

/*
 * Backward of linear: dW = g dW + dy^T x, db = g db + colsum(dy) (the
 * weight gradient's epilogue where the backend has gemm_bias), with g =
 * m->grad_beta (0 when the gradients are known zero: written, not read);
 * and dx = dy W (dx_beta 1 adds into dx).
 */
static void
linear_backward(TfModel *m, float *dx, float dx_beta, float *dw, float *db, const float *dy,
				const float *x, const float *w, int rows, int in, int out)
{
	TfBackend  *be = m->be;

	if (be->gemm_bias != NULL)
		be->gemm_bias(be, true, false, out, in, rows, 1.0f, dy, out, x, in, m->grad_beta, dw, in, NULL, db);
	else
	{
		be->gemm(be, true, false, out, in, rows, 1.0f, dy, out, x, in, m->grad_beta, dw, in);
		be->bias_backward(be, db, dy, rows, out, out, 1.0f);	/* the gradients are zero at beta 0 */
	}
	be->gemm(be, false, false, rows, in, out, 1.0f, dy, out, w, in, dx_beta, dx, in);
}

/* Which attention of a layer. */
typedef enum
{
	ATTN_ENCODER,
	ATTN_DECODER_SELF,
	ATTN_CROSS
} AttnKind;

/* Attention geometry for one call. */
static TfAttentionShape
attn_shape(const TfModel *m, AttnKind kind, uint32_t site)
{
	TfAttentionShape s;
	int			B1 = m->lay.B + 1;

	s.batch = m->lay.B;
	s.num_heads = m->config.num_heads;
	s.head_dim = m->config.d_model / m->config.num_heads;
	s.q_start = kind == ATTN_ENCODER ? SRC_START(m) : TGT_START(m);
	s.k_start = kind == ATTN_DECODER_SELF ? TGT_START(m) : SRC_START(m);
	s.p_start = m->pstart + (kind == ATTN_ENCODER ? 0 : kind == ATTN_DECODER_SELF ? B1 : 2 * B1);
	s.causal = kind == ATTN_DECODER_SELF;
	s.dropout = m->p_attention;
	s.seed = m->seed;
	s.stream = tf_dropout_stream(m->step, m->lay.index, site);
	s.k_len = NULL;
	s.kv_cache = false;
	s.max_q = kind == ATTN_ENCODER ? m->lay.max_src : m->lay.max_tgt;
	s.max_k = kind == ATTN_DECODER_SELF ? m->lay.max_tgt : m->lay.max_src;
	s.p_total = m->lay.longs[(kind == ATTN_ENCODER ? 0 : kind == ATTN_DECODER_SELF ? B1 : 2 * B1) + m->lay.B];
	s.q_rows = kind == ATTN_ENCODER ? m->lay.Ns : m->lay.Nt;
	s.k_rows = kind == ATTN_DECODER_SELF ? m->lay.Nt : m->lay.Ns;
	return s;
}

/* Residual sub-layer output: r = x + Drop(y) (y is overwritten). */
static void
residual(TfModel *m, float *r, const float *x, float *y, int rows, uint32_t site, uint8_t *keep)
{
	TfBackend  *be = m->be;
	size_t		n = (size_t) rows * m->config.d_model;

	be->dropout(be, y, y, n, m->p_dropout, m->seed, tf_dropout_stream(m->step, m->lay.index, site), keep);
	be->add(be, r, x, y, n);
}

/* LayerNorm of x [rows, d] with the parameters at gamma and beta into out, statistics into mean and rstd. */
static void
layer_norm(TfModel *m, float *out, float *mean, float *rstd, const float *x, size_t gamma, size_t beta, int rows)
{
	m->be->layernorm(m->be, out, mean, rstd, x, m->params + gamma, m->params + beta, rows, m->config.d_model,
					 m->config.layer_norm_eps);
}

/* Post-norm sub-layer output: r = x + Drop(y), then out = LN(r) (be->residual_layernorm). */
static void
residual_norm(TfModel *m, float *out, float *mean, float *rstd, float *r, const float *x, const float *y,
			  size_t gamma, size_t beta, int rows, uint32_t site, uint8_t *keep)
{
	m->be->residual_layernorm(m->be, out, mean, rstd, r, x, y, m->params + gamma, m->params + beta, rows,
							  m->config.d_model, m->config.layer_norm_eps, m->p_dropout, m->seed,
							  tf_dropout_stream(m->step, m->lay.index, site), keep);
}

/*
 * Every decoder layer's keys and values of the encoder output enc_out
 * [Ns, d]: kv_all [Ns, ld_kv] in one product with the cross key/value block.
 */
static void
cross_keys_values(TfModel *m, const float *enc_out)
{
	if (m->ld_kv > 0)
		tf_linear(m, m->kv_all, enc_out, m->off_cross_kv_w, m->off_cross_kv_b, m->lay.Ns, m->config.d_model,
				  m->ld_kv);
}

/*
 * One encoder or decoder layer forward: post-norm (the paper's, section
 * 3.1), each sub-layer LN(x + Drop(F(x))); or pre-norm (normalize_before),
 * each x + Drop(F(LN(x))), where the LayerNorms' outputs go to ln_self,
 * ln_cross and ln_ffn and the sums to r_self, r_cross and out.
 */
static void
layer_forward(TfModel *m, int l)
{
	TfBackend  *be = m->be;
	const TfConfig *c = &m->config;
	const LayerOffsets *o = &m->layer_off[l];
	LayerActs  *a = &m->acts[l];
	bool		dec = l >= c->num_encoder_layers,
				pre = c->normalize_before;
	int			d = c->d_model,
				F = c->d_ff;
	int			rows = dec ? m->lay.Nt : m->lay.Ns;
	uint32_t	site = dec ? SITE_DEC_LAYER(l - c->num_encoder_layers) : SITE_ENC_LAYER(l);
	const float *x = a->x;		/* the residual stream */
	const float *in;
	TfAttentionShape sh;

	/* self-attention */
	if (pre)
		layer_norm(m, a->ln_self, a->mean_self, a->rstd_self, x, o->ln_self_g, o->ln_self_b, rows);
	in = pre ? a->ln_self : x;
	tf_linear(m, a->qkv, in, o->self.w_qkv, o->self.b_qkv, rows, d, 3 * d);
	sh = attn_shape(m, dec ? ATTN_DECODER_SELF : ATTN_ENCODER, site + SITE_SELF_PROBS);
	be->attention(be, a->ctx, a->lse, a->probs, a->qkv, 3 * d, a->qkv + d, a->qkv + 2 * d, 3 * d, &sh);
	tf_linear(m, m->tmp, a->ctx, o->self.w_out, o->self.b_out, rows, d, d);
	if (pre)
		residual(m, a->r_self, x, m->tmp, rows, site + SITE_SELF_OUT, a->keep_self);
	else
		residual_norm(m, a->ln_self, a->mean_self, a->rstd_self, a->r_self, x, m->tmp,
					  o->ln_self_g, o->ln_self_b, rows, site + SITE_SELF_OUT, a->keep_self);
	x = pre ? a->r_self : a->ln_self;
	/* encoder-decoder attention: queries from the decoder, keys and values from the encoder output */
	if (dec)
	{
		if (pre)
			layer_norm(m, a->ln_cross, a->mean_cross, a->rstd_cross, x, o->ln_cross_g, o->ln_cross_b, rows);
		in = pre ? a->ln_cross : x;
		tf_linear(m, a->q_cross, in, o->cross.w_qkv, o->cross.b_qkv, rows, d, d);
		sh = attn_shape(m, ATTN_CROSS, site + SITE_CROSS_PROBS);
		be->attention(be, a->ctx_cross, a->lse_cross, a->probs_cross, a->q_cross, d, a->kv_cross, a->kv_cross + d,
					  m->ld_kv, &sh);
		tf_linear(m, m->tmp, a->ctx_cross, o->cross.w_out, o->cross.b_out, rows, d, d);
		if (pre)
			residual(m, a->r_cross, x, m->tmp, rows, site + SITE_CROSS_OUT, a->keep_cross);
		else
			residual_norm(m, a->ln_cross, a->mean_cross, a->rstd_cross, a->r_cross, x, m->tmp,
						  o->ln_cross_g, o->ln_cross_b, rows, site + SITE_CROSS_OUT, a->keep_cross);
		x = pre ? a->r_cross : a->ln_cross;
	}
	/* position-wise feed-forward network (eq. 2) */
	if (pre)
		layer_norm(m, a->ln_ffn, a->mean_ffn, a->rstd_ffn, x, o->ln_ffn_g, o->ln_ffn_b, rows);
	in = pre ? a->ln_ffn : x;
	tf_linear(m, a->f1, in, o->w1, o->b1, rows, d, F);
	be->activation(be, c->activation, a->h, a->f1, (size_t) rows * F);
	be->dropout(be, a->h, a->h, (size_t) rows * F, m->p_relu, m->seed,
				tf_dropout_stream(m->step, m->lay.index, site + SITE_RELU), a->keep_relu);
	tf_linear(m, m->tmp, a->h, o->w2, o->b2, rows, F, d);
	if (pre)
		residual(m, a->out, x, m->tmp, rows, site + SITE_FFN_OUT, a->keep_ffn);
	else
		residual_norm(m, a->out, a->mean_ffn, a->rstd_ffn, a->r_ffn, x, m->tmp,
					  o->ln_ffn_g, o->ln_ffn_b, rows, site + SITE_FFN_OUT, a->keep_ffn);
}

/* The encoder layers, then (pre-norm) the encoder's final LayerNorm. */
static void
encoder_forward(TfModel *m)
{
	int			l;

	for (l = 0; l < m->config.num_encoder_layers; l++)
		layer_forward(m, l);
	if (m->config.normalize_before)
		tf_final_norm(m, false, m->enc_final, m->final_mean, m->final_rstd,
					  m->acts[m->config.num_encoder_layers - 1].out, m->lay.Ns);
}

static int	forward(TfModel *m, const TfBatch *b, bool training, double *loss_sum, int64_t *tokens,
					char *err, size_t errlen);
static int	backward(TfModel *m, float grad_scale, char *err, size_t errlen);

int
tf_model_forward(TfModel *m, const TfBatch *b, bool training, double *loss_sum, int64_t *tokens,
				 char *err, size_t errlen)
{
	sigset_t	old;
	int			rc;

	tf_block_signals(&old);
	rc = forward(m, b, training, loss_sum, tokens, err, errlen);
	tf_restore_signals(&old);
	return rc;
}

int
tf_model_backward(TfModel *m, float grad_scale, char *err, size_t errlen)
{
	sigset_t	old;
	int			rc;

	tf_block_signals(&old);
	rc = backward(m, grad_scale, err, errlen);
	m->grad_beta = 1.0f;		/* written (or partly, on an error): the next backward adds */
	tf_restore_signals(&old);
	return rc;
}

/* Non-pad labels of the current batch (host layout). */
static int64_t
count_tokens(const TfModel *m)
{
	const int32_t *labels = m->lay.ints + 2 * (m->lay.B + 1) + m->lay.Ns + m->lay.Nt;
	int64_t		n = 0;
	int			i;

	for (i = 0; i < m->lay.Nt; i++)
		n += labels[i] != m->config.pad_id;
	return n;
}

/*
 * The start of a forward pass: b laid out (with the attention probabilities
 * when keep_probs, for tf_model_attention), the dropout rates of a training
 * or an inference pass, and the source's embeddings * sqrt(d) + positions
 * with dropout (sections 3.4, 3.5, 5.4) in enc_x0.
 */
static int
forward_start(TfModel *m, const TfBatch *b, bool training, bool keep_probs, char *err, size_t errlen)
{
	const TfConfig *c = &m->config;

	m->have_forward = false;
	if (m->quantized && !m->int8_fitted)
	{
		snprintf(err, errlen, "this int8 model holds quantized tensors only: load them into a new int8 model to compute");
		return TF_ERROR;
	}
	if (training && (b->index < 0 || b->index >= TF_MAX_STEP_BATCHES))
	{
		snprintf(err, errlen, "batch index %d is outside 0 .. %d", b->index, TF_MAX_STEP_BATCHES - 1);
		return TF_ERROR;
	}
	m->training = training;		/* the activations' layout depends on these */
	m->keep_probs = keep_probs;
	if (tf_batch_layout(m, b, err, errlen) != TF_OK || ensure_arena(m, err, errlen) != TF_OK)
		return TF_ERROR;
	m->lay.index = training ? b->index : 0;
	m->p_dropout = training ? c->dropout : 0.0f;
	m->p_attention = training ? c->attention_dropout : 0.0f;
	m->p_relu = training ? c->relu_dropout : 0.0f;
	embed_dropout(m, m->enc_x0, SRC_IDS(m), SRC_POS(m), m->lay.Ns, SITE_ENC_EMBED, m->keep_enc_embed);
	return TF_OK;
}

int
tf_model_encode(TfModel *m, const TfBatch *b, char *err, size_t errlen)
{
	sigset_t	old;
	int			rc;

	tf_block_signals(&old);
	rc = forward_start(m, b, false, false, err, errlen);
	if (rc == TF_OK)
	{
		encoder_forward(m);
		cross_keys_values(m, tf_encoder_output(m));
		rc = m->be->status(m->be, err, errlen);
	}
	tf_restore_signals(&old);
	return rc;
}

/* The forward pass (tf_model_forward without the signal mask). */
static int
forward(TfModel *m, const TfBatch *b, bool training, double *loss_sum, int64_t *tokens,
		char *err, size_t errlen)
{
	TfBackend  *be = m->be;
	int64_t		batch_tokens;
	const TfConfig *c = &m->config;
	int			l;
	int			layers = c->num_encoder_layers + c->num_decoder_layers;
	bool		keep = !training && m->keep_asked;

	m->keep_asked = false;
	if (forward_start(m, b, training, keep, err, errlen) != TF_OK)
		return TF_ERROR;
	if (training)
		m->forwards++;
	embed_dropout(m, m->dec_x0, TGT_IDS(m), TGT_POS(m), m->lay.Nt, SITE_DEC_EMBED, m->keep_dec_embed);
	encoder_forward(m);
	cross_keys_values(m, tf_encoder_output(m));
	for (l = c->num_encoder_layers; l < layers; l++)
		layer_forward(m, l);
	if (c->normalize_before)
		tf_final_norm(m, true, m->dec_final, m->final_mean + m->lay.Ns, m->final_rstd + m->lay.Ns,
					  m->acts[layers - 1].out, m->lay.Nt);

	/* logits through the shared embedding (section 3.4) and the label-smoothed loss */
	tf_logits(m, m->logits, decoder_output(m), m->lay.Nt);
	be->cross_entropy(be, m->logits, training, LABELS(m), m->lay.Nt, c->vocab_size, m->ldv,
					  c->pad_id, c->label_smoothing, m->row_loss);
	be->accumulate(be, m->stats, m->row_loss, (size_t) m->lay.Nt);
	batch_tokens = count_tokens(m);
	m->pending_tokens += batch_tokens;
	if (loss_sum != NULL)
	{
		be->zero(be, (float *) (m->stats + 1), sizeof(double) / sizeof(float));
		be->accumulate(be, m->stats + 1, m->row_loss, (size_t) m->lay.Nt);
		be->download(be, loss_sum, m->stats + 1, sizeof(double));
	}
	if (tokens != NULL)
		*tokens = batch_tokens;
	if (be->status(be, err, errlen) != TF_OK)
		return TF_ERROR;
	m->have_forward = true;
	return TF_OK;
}

const float *
tf_model_logits(const TfModel *m)
{
	return m->logits;
}

int
tf_model_logits_stride(const TfModel *m)
{
	return m->ldv;
}

/* Backward of residual_norm: from d(out) in dout to d(r) in dr and d(y) (pre-dropout) in dy. */
static void
residual_norm_backward(TfModel *m, float *dr, float *dy, const float *dout, const float *r,
					   const float *mean, const float *rstd, size_t gamma, size_t beta, int rows,
					   const uint8_t *keep)
{
	m->be->residual_layernorm_backward(m->be, dr, dy, m->grads + gamma, m->grads + beta, dout, r, mean, rstd,
									   m->params + gamma, rows, m->config.d_model, m->p_dropout, keep);
}

/*
 * Backward of a pre-norm LayerNorm feeding a sub-layer: dln (d of the
 * LayerNorm's output; overwritten) through LN(x) added into dx, with the
 * parameters' gradients. Uses m->tmp.
 */
static void
norm_backward_add(TfModel *m, float *dx, float *dln, const float *x, const float *mean, const float *rstd,
				  size_t gamma, size_t beta, int rows)
{
	TfBackend  *be = m->be;
	int			d = m->config.d_model;

	be->layernorm_backward(be, m->tmp, m->grads + gamma, m->grads + beta, dln, x, mean, rstd, m->params + gamma,
						   rows, d);
	be->add(be, dx, dx, m->tmp, (size_t) rows * d);
}

/* Layer l's site, rows and activations (for the backward helpers). */
#define LAYER_SITE(m, l) ((l) >= (m)->config.num_encoder_layers ? \
						  SITE_DEC_LAYER((l) - (m)->config.num_encoder_layers) : SITE_ENC_LAYER(l))
#define LAYER_ROWS(m, l) ((l) >= (m)->config.num_encoder_layers ? (m)->lay.Nt : (m)->lay.Ns)

/*
 * Backward of layer l's feed-forward network (eq. 2) from d(fc2 output) in
 * m->tmp: its weights' gradients, and d(its input x) into dx (dx_beta 1
 * adds, 0 writes). Uses m->g_h.
 */
static void
ffn_backward(TfModel *m, int l, float *dx, float dx_beta, const float *x)
{
	TfBackend  *be = m->be;
	const TfConfig *c = &m->config;
	const LayerOffsets *o = &m->layer_off[l];
	LayerActs  *a = &m->acts[l];
	int			d = c->d_model,
				F = c->d_ff,
				rows = LAYER_ROWS(m, l);

	linear_backward(m, m->g_h, 0.0f, m->grads + o->w2, m->grads + o->b2, m->tmp, a->h, m->params + o->w2, rows, F, d);
	be->dropout_backward(be, m->g_h, m->g_h, (size_t) rows * F, m->p_relu, a->keep_relu);
	be->activation_backward(be, c->activation, m->g_h, m->g_h, a->f1, (size_t) rows * F);
	linear_backward(m, dx, dx_beta, m->grads + o->w1, m->grads + o->b1, m->g_h, x, m->params + o->w1, rows, d, F);
}

/*
 * Backward of decoder layer l's encoder-decoder attention from d(out_proj
 * output) in m->tmp: d(the queries' input x) into dx (dx_beta as
 * ffn_backward), and d(its keys and values) into its columns of m->g_kv.
 */
static void
cross_backward(TfModel *m, int l, float *dx, float dx_beta, const float *x)
{
	TfBackend  *be = m->be;
	const LayerOffsets *o = &m->layer_off[l];
	LayerActs  *a = &m->acts[l];
	const float *P = m->params;
	float	   *G = m->grads;
	int			d = m->config.d_model,
				rows = LAYER_ROWS(m, l);
	TfAttentionShape sh = attn_shape(m, ATTN_CROSS, LAYER_SITE(m, l) + SITE_CROSS_PROBS);
	float	   *g_kv = m->g_kv + (size_t) (l - m->config.num_encoder_layers) * 2 * d;

	linear_backward(m, m->g_ctx, 0.0f, G + o->cross.w_out, G + o->cross.b_out, m->tmp, a->ctx_cross,
					P + o->cross.w_out, rows, d, d);
	be->attention_backward(be, m->g_qkv, g_kv, g_kv + d, m->g_ctx, a->lse_cross, a->q_cross, d, a->kv_cross,
						   a->kv_cross + d, m->ld_kv, &sh);
	linear_backward(m, dx, dx_beta, G + o->cross.w_qkv, G + o->cross.b_qkv, m->g_qkv, x, P + o->cross.w_qkv,
					rows, d, d);
}

/*
 * Backward of cross_keys_values from every decoder layer's d(keys, values)
 * in g_kv: the cross key/value block's gradients (summed over the ranks
 * at once when the backward reduces), and d(the encoder output) written
 * into m->g_enc, all in one pair of products.
 */
static void
cross_keys_values_backward(TfModel *m)
{
	int			d = m->config.d_model;

	if (m->ld_kv == 0)
	{
		m->be->zero(m->be, m->g_enc, (size_t) m->lay.Ns * d);
		return;
	}
	linear_backward(m, m->g_enc, 0.0f, m->grads + m->off_cross_kv_w, m->grads + m->off_cross_kv_b, m->g_kv,
					tf_encoder_output(m), m->params + m->off_cross_kv_w, m->lay.Ns, d, m->ld_kv);
	if (m->reduce_grads)		/* weights, then biases: one range */
		m->be->all_reduce(m->be, m->grads + m->off_cross_kv_w, (size_t) m->ld_kv * (d + 1), false);
}

/* Backward of layer l's self-attention from d(out_proj output) in m->tmp: d(its input x) into dx (as ffn_backward). */
static void
self_backward(TfModel *m, int l, float *dx, float dx_beta, const float *x)
{
	TfBackend  *be = m->be;
	const LayerOffsets *o = &m->layer_off[l];
	LayerActs  *a = &m->acts[l];
	const float *P = m->params;
	float	   *G = m->grads;
	int			d = m->config.d_model,
				rows = LAYER_ROWS(m, l);
	bool		dec = l >= m->config.num_encoder_layers;
	TfAttentionShape sh = attn_shape(m, dec ? ATTN_DECODER_SELF : ATTN_ENCODER, LAYER_SITE(m, l) + SITE_SELF_PROBS);

	linear_backward(m, m->g_ctx, 0.0f, G + o->self.w_out, G + o->self.b_out, m->tmp, a->ctx, P + o->self.w_out,
					rows, d, d);
	be->attention_backward(be, m->g_qkv, m->g_qkv + d, m->g_qkv + 2 * d, m->g_ctx, a->lse, a->qkv, 3 * d,
						   a->qkv + d, a->qkv + 2 * d, 3 * d, &sh);
	linear_backward(m, dx, dx_beta, G + o->self.w_qkv, G + o->self.b_qkv, m->g_qkv, x, P + o->self.w_qkv, rows, d,
					3 * d);
}

/*
 * Backward of one post-norm layer: dout (gradient of the layer output) in
 * m->g_a; leaves the gradient of the layer input in m->g_a. Decoder layers
 * write the gradient of their keys and values into their columns of
 * m->g_kv (cross_keys_values_backward turns them into m->g_enc's).
 */
static void
post_norm_layer_backward(TfModel *m, int l)
{
	TfBackend  *be = m->be;
	const LayerOffsets *o = &m->layer_off[l];
	LayerActs  *a = &m->acts[l];
	bool		dec = l >= m->config.num_encoder_layers;
	int			rows = LAYER_ROWS(m, l);

	/* feed-forward: g_b = d(r_ffn) = d(ffn_in) so far; tmp = d(fc2 output) */
	residual_norm_backward(m, m->g_b, m->tmp, m->g_a, a->r_ffn, a->mean_ffn, a->rstd_ffn,
						   o->ln_ffn_g, o->ln_ffn_b, rows, a->keep_ffn);
	ffn_backward(m, l, m->g_b, 1.0f, dec ? a->ln_cross : a->ln_self);
	if (dec)
	{
		/* g_a = d(r_cross) = d(ln_self) so far; tmp = d(cross out_proj output) */
		residual_norm_backward(m, m->g_a, m->tmp, m->g_b, a->r_cross, a->mean_cross, a->rstd_cross,
							   o->ln_cross_g, o->ln_cross_b, rows, a->keep_cross);
		cross_backward(m, l, m->g_a, 1.0f, a->ln_self);
		/* move d(ln_self) to g_b for the self-attention block */
		be->copy(be, m->g_b, m->g_a, (size_t) rows * m->config.d_model);
	}
	/* self-attention: g_a = d(r_self) = d(x) so far; tmp = d(self out_proj output) */
	residual_norm_backward(m, m->g_a, m->tmp, m->g_b, a->r_self, a->mean_self, a->rstd_self,
						   o->ln_self_g, o->ln_self_b, rows, a->keep_self);
	self_backward(m, l, m->g_a, 1.0f, a->x);
}

/*
 * Backward of one pre-norm layer, as post_norm_layer_backward: g_a holds
 * d(residual stream) throughout; each sub-layer's branch gradient (tmp:
 * d(its output) before dropout, g_b: d(its LayerNorm's output)) is added
 * through its LayerNorm (norm_backward_add).
 */
static void
pre_norm_layer_backward(TfModel *m, int l)
{
	TfBackend  *be = m->be;
	const LayerOffsets *o = &m->layer_off[l];
	LayerActs  *a = &m->acts[l];
	bool		dec = l >= m->config.num_encoder_layers;
	int			rows = LAYER_ROWS(m, l);
	size_t		n = (size_t) rows * m->config.d_model;

	be->dropout_backward(be, m->tmp, m->g_a, n, m->p_dropout, a->keep_ffn);
	ffn_backward(m, l, m->g_b, 0.0f, a->ln_ffn);
	norm_backward_add(m, m->g_a, m->g_b, dec ? a->r_cross : a->r_self, a->mean_ffn, a->rstd_ffn, o->ln_ffn_g,
					  o->ln_ffn_b, rows);
	if (dec)
	{
		be->dropout_backward(be, m->tmp, m->g_a, n, m->p_dropout, a->keep_cross);
		cross_backward(m, l, m->g_b, 0.0f, a->ln_cross);
		norm_backward_add(m, m->g_a, m->g_b, a->r_self, a->mean_cross, a->rstd_cross, o->ln_cross_g,
						  o->ln_cross_b, rows);
	}
	be->dropout_backward(be, m->tmp, m->g_a, n, m->p_dropout, a->keep_self);
	self_backward(m, l, m->g_b, 0.0f, a->ln_self);
	norm_backward_add(m, m->g_a, m->g_b, a->x, a->mean_self, a->rstd_self, o->ln_self_g, o->ln_self_b, rows);
}

/*
 * Backward of a stack's final LayerNorm (pre-norm): dx = d(the last layer's
 * output) from dout = d(tf_encoder_output or the decoder's output), the
 * norm's gradients summed over the ranks at once when the backward reduces.
 */
static void
final_norm_backward(TfModel *m, bool decoder, float *dx, const float *dout)
{
	const TfConfig *c = &m->config;
	size_t		g = decoder ? m->off_dec_norm : m->off_enc_norm;
	int			off = decoder ? m->lay.Ns : 0,
				rows = decoder ? m->lay.Nt : m->lay.Ns;
	int			last = decoder ? c->num_encoder_layers + c->num_decoder_layers - 1 : c->num_encoder_layers - 1;

	m->be->layernorm_backward(m->be, dx, m->grads + g, m->grads + g + c->d_model, dout, m->acts[last].out,
							  m->final_mean + off, m->final_rstd + off, m->params + g, rows, c->d_model);
	if (m->reduce_grads)
	{
		m->be->layernorm_backward_finish(m->be);
		m->be->all_reduce(m->be, m->grads + g, 2 * (size_t) c->d_model, false);
	}
}

/* A layer's backward (pre- or post-norm), then its gradients summed over the ranks when the backward reduces. */
static void
reduced_layer_backward(TfModel *m, int l)
{
	const LayerOffsets *o = &m->layer_off[l];

	if (m->config.normalize_before)
		pre_norm_layer_backward(m, l);
	else
		post_norm_layer_backward(m, l);
	if (m->reduce_grads)
	{
		m->be->layernorm_backward_finish(m->be);
		m->be->all_reduce(m->be, m->grads + o->begin, o->end - o->begin, false);
	}
}

/* The backward pass (tf_model_backward without the signal mask). */
static int
backward(TfModel *m, float grad_scale, char *err, size_t errlen)
{
	TfBackend  *be = m->be;
	const TfConfig *c = &m->config;
	int			d = c->d_model;
	int			layers = c->num_encoder_layers + c->num_decoder_layers;
	float		emb_scale = embed_scale(m);
	int			Ns = m->lay.Ns,
				Nt = m->lay.Nt;
	int			l;
	size_t		grouped;

	if (m->grads == NULL)
	{
		snprintf(err, errlen, "this model was created for inference: it has no gradients");
		return TF_ERROR;
	}
	if (!m->have_forward || !m->training)
	{
		snprintf(err, errlen, "backward needs a forward pass with training = true first");
		return TF_ERROR;
	}
	m->have_forward = false;

	/*
	 * With reduce_grads (data parallelism), each block of gradients is
	 * summed over the ranks as soon as it is final, so the reductions run
	 * beside the backward of the layers below; the shared embedding, which
	 * the encoder's input adds to last, goes last.
	 */
	/*
	 * The training forward left d(loss_sum)/d(logits) in logits, unscaled:
	 * the products that read it take grad_scale as alpha.
	 */
	if (c->logits_bias)
	{
		be->bias_backward(be, m->grads + m->off_logits_bias, m->logits, Nt, c->vocab_size, m->ldv, grad_scale);
		if (m->reduce_grads)
			be->all_reduce(be, m->grads + m->off_logits_bias, (size_t) c->vocab_size, false);
	}
	be->gemm(be, true, false, c->vocab_size, d, Nt, grad_scale, m->logits, m->ldv,
			 decoder_output(m), d, m->grad_beta, m->grads + m->off_embedding, d);
	be->gemm(be, false, false, Nt, d, c->vocab_size, grad_scale, m->logits, m->ldv,
			 m->params + m->off_embedding, d, 0.0f, c->normalize_before ? m->g_b : m->g_a, d);
	if (c->normalize_before)
		final_norm_backward(m, true, m->g_a, m->g_b);

	for (l = layers - 1; l >= c->num_encoder_layers; l--)
		reduced_layer_backward(m, l);
	cross_keys_values_backward(m);
	/* the target's embedding gradient waits in dec_x0, which no backward reads any more */
	be->dropout_backward(be, m->dec_x0, m->g_a, (size_t) Nt * d, m->p_dropout, m->keep_dec_embed);

	if (c->normalize_before)
		final_norm_backward(m, false, m->g_a, m->g_enc);
	else
		be->copy(be, m->g_a, m->g_enc, (size_t) Ns * d);
	for (l = c->num_encoder_layers - 1; l >= 0; l--)
		reduced_layer_backward(m, l);
	be->dropout_backward(be, m->g_a, m->g_a, (size_t) Ns * d, m->p_dropout, m->keep_enc_embed);
	/*
	 * the rows grouped by id only now: the host sorts while the device
	 * works through the backward queued before it
	 */
	grouped = tf_batch_group_ids(m);
	if (grouped == 0)
	{
		snprintf(err, errlen, "out of memory for the embedding gradient's workspace (%d ids)", c->vocab_size);
		return TF_ERROR;
	}
	be->upload(be, GROUPS(m), m->lay.ints + m->lay.groups, grouped * sizeof(int32_t));
	be->embed_backward(be, m->grads + m->off_embedding, m->g_a, Ns, m->dec_x0, Nt, SRC_IDS(m), GROUPS(m),
					   m->lay.unique, d, emb_scale);
	if (m->reduce_grads)
		be->all_reduce(be, m->grads + m->off_embedding, (size_t) c->vocab_size * d, true);
	/* the LayerNorms' parameter gradients, summed at once (a layer's at a time where they are reduced) */
	be->layernorm_backward_finish(be);
	m->reduce_grads = false;
	return be->status(be, err, errlen);
}

void
tf_model_zero_grad(TfModel *m)
{
	if (m->grads != NULL)
		m->be->zero(m->be, m->grads, m->num_params);
	m->grad_beta = 0.0f;
}

/* The entry of parameter `name`, or NULL. */
static const ParamEntry *
find_entry(const TfModel *m, const char *name)
{
	int			i;

	for (i = 0; i < m->num_entries; i++)
		if (strcmp(m->entries[i].name, name) == 0)
			return &m->entries[i];
	return NULL;
}

float *
tf_model_grad(TfModel *m, const char *name, size_t *count)
{
	const ParamEntry *e = find_entry(m, name);

	if (e == NULL || m->grads == NULL)
		return NULL;
	*count = e->count;
	return m->grads + e->offset;
}

float *
tf_model_param(TfModel *m, const char *name, size_t *count)
{
	const ParamEntry *e = find_entry(m, name);

	if (e == NULL || (m->quantized && e->matrix))
		return NULL;
	*count = e->count;
	return m->params + e->offset;
}
