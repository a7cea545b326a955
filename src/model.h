/*
 * model.h - the engine's internal model state (model.c, optim.c, tensors.c).
 * Callers use transformer.h.
 */
#ifndef ATTENTION_MODEL_H
#define ATTENTION_MODEL_H

#include "backend.h"
#include "transformer.h"

/* One named parameter: offset and size in the parameter allocation. */
typedef struct ParamEntry
{
	char		name[96];
	int			ndim;
	int64_t		shape[2];
	size_t		count;
	size_t		offset;
	int			init;
} ParamEntry;

/* Offsets of one attention block: W_q, W_k, W_v contiguous ([3d, d]), biases contiguous. */
typedef struct AttnOffsets
{
	size_t		w_qkv,
				b_qkv,
				w_out,
				b_out;
} AttnOffsets;

/* Offsets of one layer's parameters (cross and ln_cross only in decoder layers). */
typedef struct LayerOffsets
{
	AttnOffsets self;
	size_t		ln_self_g,
				ln_self_b;
	AttnOffsets cross;
	size_t		ln_cross_g,
				ln_cross_b;
	size_t		w1,
				b1,
				w2,
				b2;
	size_t		ln_ffn_g,
				ln_ffn_b;
} LayerOffsets;

/* Activations of one layer kept for backward (rows = batch * length). */
typedef struct LayerActs
{
	float	   *x;				/* layer input [rows, d] */
	float	   *qkv;			/* [rows, 3d] */
	float	   *probs;			/* [B, H, len, len] softmax */
	float	   *ctx;			/* [rows, d] */
	float	   *r_self,
			   *mean_self,
			   *rstd_self,
			   *ln_self;		/* residual sum, LayerNorm stats and output */
	float	   *q_cross;		/* [rows, d] (decoder) */
	float	   *kv_cross;		/* [B * S, 2d] (decoder) */
	float	   *probs_cross;	/* [B, H, T, S] (decoder) */
	float	   *ctx_cross;
	float	   *r_cross,
			   *mean_cross,
			   *rstd_cross,
			   *ln_cross;
	float	   *f1;				/* [rows, d_ff] before ReLU */
	float	   *h;				/* [rows, d_ff] after ReLU and its dropout */
	float	   *r_ffn,
			   *mean_ffn,
			   *rstd_ffn;
	float	   *out;			/* layer output [rows, d] */
} LayerActs;

struct TfModel
{
	TfConfig	config;
	TfBackend  *be;
	uint64_t	seed;
	int64_t		step;			/* optimizer steps */
	int64_t		forwards;		/* training forward passes: the dropout counter */

	ParamEntry *entries;
	int			num_entries;
	size_t		num_params;
	size_t		off_embedding;
	LayerOffsets *layer_off;	/* encoder layers, then decoder layers */
	float	   *params,
			   *grads,
			   *adam_m,
			   *adam_v;
	float	   *pe;				/* positional encoding [max_positions, d_model] */

	/* activation arena for the current batch shape */
	int			B,
				S,
				T;
	float	   *arena;
	size_t		arena_floats;
	int32_t    *ids;			/* src [B*S], tgt_in [B*T], label rows [B*T], their labels [B*T] */
	int			label_rows;		/* target positions with a real label */
	uint8_t    *pads;			/* src [B*S], tgt_in [B*T]: 1 = pad */
	size_t		ids_capacity;
	LayerActs  *acts;
	float	   *enc_x0,
			   *dec_x0,
			   *dec_rows,		/* decoder output at the label rows [label_rows, d] */
			   *logits,			/* [label_rows, vocab] */
			   *lse,			/* log-sum-exp of each logits row */
			   *tmp;
	float	   *g_a,
			   *g_b,
			   *g_qkv,
			   *g_ctx,
			   *g_h,
			   *g_kv,
			   *g_enc;			/* backward scratch */
	bool		have_forward;
	bool		training;
	float		p_dropout,
				p_attention,
				p_relu;
};

#endif
