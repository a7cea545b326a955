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
	size_t		offset;			/* floats into params; bytes into q8 for a quantized matrix */
	int			init;
	bool		matrix;			/* a product's weight: int8 in a quantized model */
	size_t		qrow;			/* quantized matrix: its first row's scale in qscale */
} ParamEntry;

/*
 * Offsets of one attention block: W_q, W_k, W_v contiguous ([3d, d]),
 * biases contiguous; encoder-decoder attention's W_q and b_q alone (its k
 * and v are in TfModel's cross key/value block).
 */
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
	size_t		begin,
				end;			/* the layer's parameters: [begin, end) of the flat vector */
} LayerOffsets;

/* Activations of one layer kept for backward (rows = batch * length). */
typedef struct LayerActs
{
	float	   *x;				/* layer input [rows, d] */
	float	   *qkv;			/* [rows, 3d] */
	float	   *lse;			/* training: [rows, H] log-sum-exp of each query row's scores */
	float	   *probs;			/* a forward for inspection: per sentence [H, len, len]
								 * softmax, back to back; else NULL */
	float	   *ctx;			/* [rows, d] */
	float	   *r_self,
			   *mean_self,
			   *rstd_self,
			   *ln_self;		/* residual sum, LayerNorm stats and output */
	float	   *q_cross;		/* [rows, d] (decoder) */
	float	   *kv_cross;		/* [Ns, 2d] of row stride ld_kv (decoder): columns of kv_all */
	float	   *lse_cross;		/* training: [rows, H] (decoder) */
	float	   *probs_cross;	/* inspection: per sentence [H, tgt len, src len] (decoder) */
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
	float	   *ln_ffn;			/* pre-norm: LN(feed-forward input) [rows, d]; NULL post-norm */
	float	   *out;			/* layer output [rows, d] */
	uint8_t    *keep_self,
			   *keep_cross,
			   *keep_ffn,
			   *keep_relu;		/* dropout masks of the sub-layer outputs and the FFN hidden layer */
} LayerActs;

/*
 * The padding-free layout of the current batch (batch.c). Host staging:
 * ints = src_start [B+1], tgt_start [B+1], src ids [Ns], tgt ids [Nt],
 * labels [Nt], src positions [Ns], tgt positions [Nt], then the source's
 * and the target's ids grouped [3 (Ns + Nt) + 1 at most] (the embedding
 * gradient's rows by id, tf_group_by_id); longs = offsets of
 * the encoder self, decoder self and cross attention probabilities
 * [3 x (B+1)]. One host buffer holds longs, then ints; the model keeps a
 * device copy of it, uploaded in one copy per batch but for the grouped
 * ids, which the backward makes and uploads when it reaches the embedding
 * gradient (tf_batch_group_ids).
 */
typedef struct BatchLayout
{
	int			B;
	int			Ns,
				Nt;				/* real source / target tokens */
	int			max_src,
				max_tgt;		/* longest sentence of each side */
	int			index;			/* training: TfBatch.index (dropout key); else 0 */
	int			groups;			/* offset in ints of the source's then the target's ids
								 * grouped (tf_group_by_id, rows counted over both) */
	int			unique;			/* their distinct ids (0 until grouped) */
	int64_t    *longs;			/* the staging buffer: longs, then ints right after them */
	int32_t    *ints;
	size_t		ints_used,
				staging_bytes;
	int32_t    *counts;			/* tf_group_by_id's workspace: [vocab_size], at the
								 * first backward */
} BatchLayout;

/*
 * Buffers carved out of an arena (model.c's activations and dropout masks,
 * decode.c's stream buffers) start at multiples of TF_CARVE_ALIGN bytes, as
 * cudaMalloc's own allocations do: cuBLAS's Hopper kernels need 16-byte
 * aligned operands, and on an H200 it ran the products whose output sat 4
 * bytes off (after a carve of an odd number of floats) on an sm_80 kernel
 * at about half the speed (docs/gpus.md). tf_carve_count(n, elem_size): the
 * elements a carve of n takes, n rounded up to a multiple of that.
 */
#define TF_CARVE_ALIGN 256

static inline size_t
tf_carve_count(size_t n, size_t elem_size)
{
	return (n * elem_size + TF_CARVE_ALIGN - 1) / TF_CARVE_ALIGN * TF_CARVE_ALIGN / elem_size;
}

/* Device pointers into the uploaded layout (see BatchLayout). */
#define SRC_START(m) ((m)->idx)
#define TGT_START(m) ((m)->idx + (m)->lay.B + 1)
#define SRC_IDS(m) (TGT_START(m) + (m)->lay.B + 1)
#define TGT_IDS(m) (SRC_IDS(m) + (m)->lay.Ns)
#define LABELS(m) (TGT_IDS(m) + (m)->lay.Nt)
#define SRC_POS(m) (LABELS(m) + (m)->lay.Nt)
#define TGT_POS(m) (SRC_POS(m) + (m)->lay.Ns)
#define GROUPS(m) ((m)->idx + (m)->lay.groups)

/*
 * y[rows, out] = x[rows, in] W^T + b with W [out, in] as in nn.Linear
 * (model.c): W the weight rows starting at offset w of a matrix parameter
 * (into params, or q8 in a quantized model), b the bias at offset b of
 * params. Inference models compute it with the backend's linear where it
 * has one (int8 in a quantized model), training models with gemm.
 */
void		tf_linear(TfModel *m, float *y, const float *x, size_t w, size_t b, int rows, int in, int out);

/* out [rows, d_model] = E[ids] * sqrt(d_model) + pe[positions] (backend's embed or embed_int8; model.c). */
void		tf_embed(TfModel *m, float *out, const int32_t *ids, const int32_t *positions, int rows);

/*
 * Symmetric per-row int8 quantization (quantize.c): q[j] = round(w[j] / s)
 * to nearest even, s = max_j |w[j]| / qmax (0 for a zero row, whose q are
 * 0); returns s. So |w[j] - s q[j]| <= s / 2.
 */
float		tf_quantize_row(const float *w, size_t n, int qmax, int8_t *q);

/*
 * After a quantized model's weights were loaded: where the backend's
 * int8_weight_max is below 127 (no VNNI), rounds every weight row to that
 * range (q' = round(q * max / 127), scale' = scale * 127 / max) so that
 * the products cannot saturate (quantize.c).
 */
void		tf_model_fit_int8(TfModel *m);

/*
 * After the parameters changed (an Adam step, a load): refreshes the
 * backend's bf16 copy of the weights when the model computes in TF_BF16
 * (a failure is the backend's sticky error).
 */
void		tf_model_weights_changed(TfModel *m);

/* Zeroes the loss totals of the step (backend stats and the host token count). */
void		tf_model_reset_stats(TfModel *m);

/*
 * The encoder half of an inference forward pass (decoding, decode.c): b's
 * sources through the encoder, and every decoder layer's keys and values
 * of the encoder output into acts[num_encoder_layers + l].kv_cross
 * [lay.Ns, 2 d_model] of row stride ld_kv; b's target is only laid out. Errors as
 * tf_model_forward.
 */
int			tf_model_encode(TfModel *m, const TfBatch *b, char *err, size_t errlen);

/*
 * The encoder's output [Ns, d_model] of the last forward or encode: the last
 * layer's output, through the encoder's final LayerNorm in a pre-norm model.
 */
const float *tf_encoder_output(const TfModel *m);

/*
 * The stack's final LayerNorm (pre-norm models; decoder true: the decoder's)
 * of x [rows, d_model] into out, with its statistics into mean and rstd
 * [rows].
 */
void		tf_final_norm(TfModel *m, bool decoder, float *out, float *mean, float *rstd, const float *x, int rows);

/*
 * logits [rows, vocab] (row stride TfModel.ldv) = h [rows, d_model] E^T, plus
 * final_logits_bias when the model has one (model.c).
 */
void		tf_logits(TfModel *m, float *logits, const float *h, int rows);

/* Checks a padded batch and builds m->lay; TF_ERROR with a message naming the problem. */
int			tf_batch_layout(TfModel *m, const TfBatch *b, char *err, size_t errlen);

/*
 * Groups the current batch's source and target rows by id into the host
 * layout (at lay.groups; lay.unique set) and returns how many ints that
 * took: 2 unique + 1 + Ns + Nt; 0 when out of memory for the workspace.
 */
size_t		tf_batch_group_ids(TfModel *m);

struct TfModel
{
	TfConfig	config;
	TfBackend  *be;
	uint64_t	seed;
	int64_t		step;			/* optimizer steps */
	TfPrecision precision;		/* of the matrix products (tf_model_set_precision) */
	int64_t		forwards;		/* training forward passes (a count; "rng.counter") */

	ParamEntry *entries;
	int			num_entries;
	size_t		num_params;
	bool		quantized;		/* matrices held as int8 (q8, qscale), inference only */
	bool		int8_fitted;	/* tf_model_fit_int8 ran: the model may compute */
	int8_t	   *q8;				/* quantized matrices, row-major, back to back */
	float	   *qscale;			/* one scale per row of them */
	size_t		num_q8,
				num_qrows;
	size_t		off_embedding;
	/*
	 * The decoder layers' encoder-decoder k_proj and v_proj: weights
	 * [num_decoder_layers * 2d, d] (layer l's k at rows 2 l d, its v at
	 * (2 l + 1) d; a quantized model's in q8, row scales from qscale +
	 * cross_kv_qrow), biases [num_decoder_layers * 2d] in params.
	 */
	size_t		off_cross_kv_w,
				off_cross_kv_b,
				cross_kv_qrow;
	size_t		off_logits_bias;	/* final_logits_bias [1, vocab] when config.logits_bias */
	int			ldv;			/* the logits' row stride: vocab_size rounded up to the backend's
								 * vocab_multiple (TfBackend) */
	size_t		off_enc_norm,
				off_dec_norm;	/* pre-norm: the stacks' final LayerNorms, weight [d] then bias [d] */
	LayerOffsets *layer_off;	/* encoder layers, then decoder layers */
	float	   *params,
			   *grads,
			   *adam_m,
			   *adam_v;
	float	   *pe;				/* positional encoding [max_positions + 1, d_model]: the
								 * last row zeros (a pad token's position: batch.c) */

	/*
	 * Step statistics in backend memory: [0] loss summed since the last
	 * step, [1] one batch's loss (when a caller asks for it), [2] the
	 * squared gradient norm. Tokens are counted on the host from the layout.
	 */
	double	   *stats;
	double	   *row_loss;		/* [rows] per-row losses of the last cross_entropy */
	size_t		row_loss_capacity;
	int64_t		pending_tokens; /* non-pad labels since the last step */

	/* the current batch, and the arena of its activations */
	BatchLayout lay;
	void	   *layout;			/* device copy of lay's staging buffer */
	size_t		layout_bytes;
	int32_t    *idx;			/* its ints (lay.ints) */
	int64_t    *pstart;			/* its longs (lay.longs) */
	float	   *arena;
	size_t		arena_floats;
	TfOperand16 *operands16;	/* bf16: the arena's buffers that gemms read, each with its
								 * copy carved after it (be->set_operands16) */
	int			num_operands16;
	uint8_t    *mask_arena;		/* dropout masks kept for the backward */
	size_t		mask_bytes;
	uint8_t    *keep_enc_embed,
			   *keep_dec_embed;
	LayerActs  *acts;
	float	   *enc_x0,
			   *dec_x0,			/* the decoder's input [Nt, d]; late in the backward, the
								 * target's embedding gradient */
			   *enc_final,		/* pre-norm: LN(last encoder layer's output) [Ns, d] */
			   *dec_final,		/* pre-norm: LN(last decoder layer's output) [Nt, d] */
			   *final_mean,
			   *final_rstd,		/* their LayerNorm statistics [Ns + Nt] */
			   *logits,			/* [Nt, vocab], row stride ldv; after a training forward the loss's gradient (unscaled) */
			   *kv_all,			/* every decoder layer's keys and values of the encoder output
								 * [Ns, ld_kv], ld_kv = num_decoder_layers * 2d: one product */
			   *tmp;
	int			ld_kv;
	float	   *g_a,
			   *g_b,
			   *g_qkv,
			   *g_ctx,
			   *g_h,
			   *g_kv,			/* [Ns, ld_kv]: d(kv_all) */
			   *g_enc;			/* backward scratch */
	/* beam search state (decode.c), grown as needed */
	float	   *dec_arena;
	size_t		dec_arena_floats;
	int32_t    *dec_idx;
	size_t		dec_idx_capacity;
	int64_t    *dec_pstart;
	size_t		dec_pstart_capacity;

	bool		have_forward;
	bool		training;
	bool		keep_asked;		/* tf_model_keep_attention: the next inference forward keeps them */
	bool		keep_probs;		/* the last forward kept the attention probabilities */
	float		grad_beta;		/* 0 while the gradients are known zero (allocated,
								 * zero_grad, adam): the next backward's weight
								 * products write them; else 1, they add */
	bool		reduce_grads;	/* the next backward sums the gradients over the ranks
								 * (be->all_reduce), each layer's as soon as it is final */
	float		p_dropout,
				p_attention,
				p_relu;
};

#endif
