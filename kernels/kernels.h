/*
 * kernels.h - the launchers of the CUDA backend's kernels (one .cu file per
 * CPU op family of src/backend_cpu.c), called by backend_cuda.cu. Every
 * pointer is device memory; shapes and semantics are those of the TfBackend
 * operation of the same name (src/backend.h). Launches are asynchronous on
 * `stream`; launch errors surface through cudaGetLastError.
 */
#ifndef ATTENTION_KERNELS_H
#define ATTENTION_KERNELS_H

#include "common.cuh"

#include <cuda_bf16.h>

extern "C" {
#include "backend.h"
}

/*
 * An out16 or dx16 argument (NULL: none) receives the bf16 copy of out or
 * dx, each element as k_round_bf16 would round it (set_operands16).
 */

/* elementwise.cu (column sums: workspace of column_chunks(...) * cols floats) */
void		k_add(float *out, const float *a, const float *b, size_t n, cudaStream_t stream);
/* out[i] = x[i] rounded to bfloat16, to nearest, ties to even (__float2bfloat16_rn) */
void		k_round_bf16(__nv_bfloat16 *out, const float *x, size_t n, cudaStream_t stream);
/* out and dout [rows, cols] with row stride ld */
void		k_bias_rows(float *out, const float *bias, int rows, int cols, int ld, cudaStream_t stream);
void		k_bias_backward(float *dbias, const float *dout, int rows, int cols, int ld, float scale, float *workspace,
							size_t workspace_floats, cudaStream_t stream);
void		k_activation(TfActivation f, float *out, __nv_bfloat16 *out16, const float *x, size_t n,
						 cudaStream_t stream);
void		k_activation_backward(TfActivation f, float *dx, __nv_bfloat16 *dx16, const float *dout, const float *x,
								  size_t n, cudaStream_t stream);

/* dropout.cu: p > 0 (at p 0 each is a copy, or nothing in place: the caller's) */
void		k_dropout(float *out, __nv_bfloat16 *out16, const float *x, size_t n, float p, uint64_t seed,
					  uint64_t stream_id, uint8_t *keep_mask, cudaStream_t stream);
void		k_dropout_backward(float *dx, __nv_bfloat16 *dx16, const float *dout, size_t n, float p,
							   const uint8_t *keep_mask, cudaStream_t stream);

/* embed.cu (dropout at p > 0, as dropout.cu's) */
void		k_embed(float *out, __nv_bfloat16 *out16, const int32_t *ids, const int32_t *positions,
					const float *embedding, const float *pe, int rows, int d, float scale, float p, uint64_t seed,
					uint64_t stream_id, uint8_t *keep_mask, cudaStream_t stream);
/* groups: the rows grouped by id (tf_group_by_id), of unique ids */
void		k_embed_backward(float *dembedding, const float *dout, int rows, const float *dout2,
							 const int32_t *groups, int unique, int d, float scale, cudaStream_t stream);

/*
 * layernorm.cu. The backwards write their parameter gradients' partial
 * sums per chunk of LAYERNORM_CHUNK_ROWS rows, `partials` holding
 * k_layernorm_chunks(rows) * 2 * d floats (dgamma's [chunks, d], then
 * dbeta's); k_layernorm_dparams_totals then adds the partials of up to
 * LAYERNORM_TOTALS_MAX backwards into their dgamma and dbeta, each over its
 * chunks in order, in one launch.
 */
#define LAYERNORM_CHUNK_ROWS 16
static inline int
k_layernorm_chunks(int rows)
{
	return (rows + LAYERNORM_CHUNK_ROWS - 1) / LAYERNORM_CHUNK_ROWS;
}

#define LAYERNORM_TOTALS_MAX 48
/* The backwards whose parameter gradients wait for k_layernorm_dparams_totals (passed by value). */
typedef struct LayerNormTotals
{
	int			n;
	float	   *dgamma[LAYERNORM_TOTALS_MAX],
			   *dbeta[LAYERNORM_TOTALS_MAX];
	const float *partials[LAYERNORM_TOTALS_MAX];
	int			chunks[LAYERNORM_TOTALS_MAX],
				d[LAYERNORM_TOTALS_MAX];
} LayerNormTotals;

void		k_layernorm(float *out, __nv_bfloat16 *out16, float *mean, float *rstd, const float *x,
						const float *gamma, const float *beta, int rows, int d, float eps, cudaStream_t stream);
void		k_layernorm_backward(float *dx, const float *dout, const float *x, const float *mean, const float *rstd,
								 const float *gamma, int rows, int d, float *partials, cudaStream_t stream);
void		k_residual_layernorm(float *out, __nv_bfloat16 *out16, float *mean, float *rstd, float *r,
								 const float *x, const float *y, const float *gamma, const float *beta, int rows,
								 int d, float eps, float p, uint64_t seed, uint64_t stream_id, uint8_t *keep_mask,
								 cudaStream_t stream);
/* dy16: the bf16 copy of dy */
void		k_residual_layernorm_backward(float *dr, float *dy, __nv_bfloat16 *dy16, const float *dout, const float *r,
										  const float *mean, const float *rstd, const float *gamma, int rows, int d,
										  float p, const uint8_t *keep_mask, float *partials, cudaStream_t stream);
/* the totals of t's backwards (t->n > 0), the largest d of them max_d */
void		k_layernorm_dparams_totals(const LayerNormTotals *t, int max_d, cudaStream_t stream);

/*
 * attention.cu (lse [query rows, num_heads]; probs NULL unless kept for
 * inspection; work: k_attention_workspace(sh) floats for the backward;
 * bf16_kv: bf16 mixed precision, as set_precision TF_BF16 says: every
 * product inside attention reads bf16 operands, docs/gpus.md's bf16 rules)
 */
bool		k_attention_fits(const TfAttentionShape *sh);
size_t		k_attention_workspace(const TfAttentionShape *sh, bool bf16_kv);
/*
 * ctx16 and copies (dq16, dk16, dv16; NULL: none): bf16 copies in the
 * outputs' layouts. k_attention writes ctx16 on every path but the fp32
 * tiles' (which serve fp32 only), k_attention_backward its copies on the
 * tensor-core kernels only; true when the call wrote the copies given.
 */
bool		k_attention(float *ctx, __nv_bfloat16 *ctx16, float *lse, float *probs, const float *q, int ldq,
						const float *k, const float *v, int ldk, const TfAttentionShape *sh, bool bf16_kv,
						cudaStream_t stream);
bool		k_attention_backward(float *dq, float *dk, float *dv, __nv_bfloat16 *const copies[3], const float *dctx,
								 const float *lse, const float *q, int ldq, const float *k, const float *v, int ldk,
								 const TfAttentionShape *sh, bool bf16_kv, float *work, cudaStream_t stream);

/* cross_entropy.cu (logits [rows, vocab] with row stride ld) */
void		k_cross_entropy(float *logits, __nv_bfloat16 *logits16, bool round, bool gradient, const int32_t *labels,
							int rows, int vocab, int ld, int pad_id, float label_smoothing, double *row_loss,
							cudaStream_t stream);
/* the same over bf16 logits (a product's rounded output), its gradient written over them in bf16 */
void		k_cross_entropy16(__nv_bfloat16 *logits, bool gradient, const int32_t *labels, int rows, int vocab,
							  int ld, int pad_id, float label_smoothing, double *row_loss, cudaStream_t stream);
void		k_accumulate(double *out, const double *x, size_t n, cudaStream_t stream);
void		k_log_softmax_topk(const float *logits, int rows, int vocab, int ld, int k, float *top_logp,
							   int32_t *top_id, int skip_id, int eos_id, float *eos_logp, cudaStream_t stream);

/* optim.cu (partials: k_sum_squares_partials() doubles of workspace) */
size_t		k_sum_squares_partials(void);
void		k_sum_squares(const float *x, size_t n, double *out, double *partials, cudaStream_t stream);
void		k_adam(float *params, __nv_bfloat16 *params16, float *grads, float *m, float *v, size_t n,
				   float grad_scale, float lr, float beta1, float beta2, float eps, float bc1, float bc2,
				   cudaStream_t stream);

/* gather.cu: fp32, bf16, and fp32 rounded into bf16 (src must not overlap dst then) */
void		k_gather(float *dst, size_t dst_stride, const float *src, size_t src_stride, const int32_t *rows,
					 int n, size_t count, cudaStream_t stream);
void		k_gather_bf16(__nv_bfloat16 *dst, size_t dst_stride, const __nv_bfloat16 *src, size_t src_stride,
						  const int32_t *rows, int n, size_t count, cudaStream_t stream);
void		k_gather_to_bf16(__nv_bfloat16 *dst, size_t dst_stride, const float *src, size_t src_stride,
							 const int32_t *rows, int n, size_t count, cudaStream_t stream);

#endif
