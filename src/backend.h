/*
 * backend.h - the compute backend interface of the engine.
 *
 * The model code (model.c) calls only these operations; every pointer they
 * take is backend memory (host memory for "cpu", device memory for "cuda"),
 * so the model never touches tensor data element by element and never
 * copies between host and device behind the caller's back. All matrices are
 * row-major. Callers run the operations with every signal blocked
 * (tf_block_signals, as the tf_model_* entry points do), so that threads a
 * backend starts inherit that mask. Operations named *_backward ADD into parameter gradients
 * (dW, dgamma, dbias, dE) and WRITE input gradients unless stated.
 *
 * Synchronisation rules (what lets a GPU backend run ahead of the host):
 * - upload's source is free to reuse when it returns, and every later
 *   operation sees the data (a GPU backend may send it asynchronously);
 *   download is complete when it returns and waits for every operation
 *   before it.
 * - No other operation returns a host result: losses, token-free reductions
 *   and norms are written to backend memory (cross_entropy's row_loss,
 *   accumulate, sum_squares) and reach the host with the one download the
 *   caller makes per step (tf_model_step), per scored batch (tf_model_score)
 *   or per decoding step (one packed buffer).
 * - Operations may run asynchronously; errors they meet (a failed launch,
 *   out of memory growing a workspace) are sticky and reported by the next
 *   status call, which the model makes at the end of every entry point.
 */
#ifndef ATTENTION_BACKEND_H
#define ATTENTION_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transformer.h"

/*
 * Geometry of one multi-head attention call over sentences of different
 * lengths, packed without padding: sentence b's queries are rows
 * q_start[b] .. q_start[b+1]-1, its keys rows k_start[b] .. k_start[b+1]-1,
 * and its probabilities [heads, q len, k len] start at p_start[b]. The
 * arrays are backend memory with batch + 1 entries (k_start: batch entries
 * when k_len is given).
 */
typedef struct TfAttentionShape
{
	int			batch;
	int			num_heads;
	int			head_dim;		/* d_k = d_v = d_model / num_heads */
	const int32_t *q_start;
	const int32_t *k_start;
	const int64_t *p_start;
	bool		causal;			/* query i sees keys 0..i only */
	float		dropout;		/* on the probabilities */
	uint64_t	seed;
	uint64_t	stream;
	const int32_t *k_len;		/* NULL, or [batch] key counts: sentence b's keys are
								 * rows k_start[b] .. k_start[b] + k_len[b] - 1 (incremental
								 * decoding, where rows of one source share its keys) */
	bool		kv_cache;		/* k and v point into a key/value cache: elements of
								 * be->cache_bytes bytes (cache_gather), ldk counted in them */
	/* host copies of the extents, for launch geometry and workspaces */
	int			max_q;			/* most queries of one sentence */
	int			max_k;			/* most keys of one sentence */
	int64_t		p_total;		/* p_start[batch]: probabilities of the whole call */
	int			q_rows;			/* q_start[batch] and, without k_len, k_start[batch]: the rows */
	int			k_rows;			/* of queries and keys; 0: not given (no bf16 copies) */
} TfAttentionShape;

typedef struct TfBackend TfBackend;

/*
 * A buffer with a bf16 copy kept beside it (set_operands16): x [n floats]
 * and x16 [n bf16, 2 bytes each], both device memory, x16 8-byte aligned.
 * only16: every reader of x reads it rounded to bf16 (the training step's
 * logits, which only cross_entropy with gradient reads), so a gemm that
 * writes x from its start with beta 0 may write its result rounded into
 * x16 alone, leaving x undefined, and cross_entropy then reads x16 and
 * writes its gradient there alone.
 */
typedef struct TfOperand16
{
	const float *x;
	void	   *x16;
	size_t		n;
	bool		only16;
} TfOperand16;

/* How the weight of a `linear` product is held. */
typedef enum TfWeightType
{
	TF_WEIGHTS_FP32,			/* float */
	TF_WEIGHTS_INT8				/* int8 with a float scale per output row */
} TfWeightType;

struct TfBackend
{
	const char *name;
	bool		host_memory;	/* backend memory is host memory (the CPU backend) */
	int64_t		allocations;	/* device allocations made so far (tests: none in a steady step) */
	int64_t		bytes;			/* bytes held through alloc now (free gives them back) */
	int			cache_bytes;	/* bytes per key/value cache element (cache_gather) */
	int			vocab_multiple; /* the logits' row stride: the vocabulary rounded up to a multiple of
								 * this (CUDA 64: rows at 256 bytes, as cuBLAS's Hopper kernels want
								 * them; the CPU 1: contiguous) */

	/* Memory: zeroed allocation (NULL when out of memory), free, copies. */
	/* Releases the backend and its state (threads, handles, workspaces). */
	void		(*destroy) (TfBackend *be);

	/*
	 * TF_OK, or TF_ERROR with the first error met since the last call (an
	 * asynchronous launch failure, out of memory growing a workspace); the
	 * error is cleared. Results computed after an error are undefined.
	 */
	int			(*status) (TfBackend *be, char *err, size_t errlen);

	void	   *(*alloc) (TfBackend *be, size_t bytes);
	void		(*free) (TfBackend *be, void *ptr);
	void		(*upload) (TfBackend *be, void *dst, const void *src, size_t bytes);
	void		(*download) (TfBackend *be, void *dst, const void *src, size_t bytes);
	void		(*zero) (TfBackend *be, float *x, size_t n);
	void		(*copy) (TfBackend *be, float *dst, const float *src, size_t n);

	/*
	 * Reserves working memory for attention planes [queries, keys] of up to
	 * `plane` elements (the longest sentence squared), for `row_stats`
	 * per-row attention statistics (sentences x the longest x num_heads)
	 * and, in bf16, for matrix-product operands of up to `operand` elements
	 * that are neither weights nor listed by set_operands16 (the largest
	 * such activation or gradient a gemm reads); false when out of memory. Called once per
	 * batch, before its operations: a backend that grows nothing during a
	 * step allocates only here.
	 */
	bool		(*reserve) (TfBackend *be, size_t plane, size_t row_stats, size_t operand);

	/*
	 * C[M,N] = alpha * op(A) op(B) + beta * C, op(X) = X or X^T, row-major
	 * with leading dimensions lda, ldb, ldc.
	 */
	void		(*gemm) (TfBackend *be, bool trans_a, bool trans_b, int m, int n, int k,
						 float alpha, const float *a, int lda, const float *b, int ldb,
						 float beta, float *c, int ldc);

	/*
	 * gemm with a bias folded into the product (NULL where the caller
	 * composes it from bias_rows, gemm and bias_backward: the CPU's), one
	 * of bias and dbias not NULL. bias [n]: C[i, j] = alpha (op(A)
	 * op(B))[i, j] + beta C[i, j] + bias[j] (nn.Linear's forward). dbias
	 * [m]: dbias[i] = beta dbias[i] + sum over k of op(A)[i, k] (linear's
	 * bias gradient from the weight gradient's product, alpha 1, beta 0
	 * or 1: overwritten or accumulated as C is); in bf16 the backend
	 * may sum the rounded operand the product reads (CUDA's epilogue does;
	 * where it composes the ops instead, the fp32 values).
	 */
	void		(*gemm_bias) (TfBackend *be, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
							  const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc,
							  const float *bias, float *dbias);

	/*
	 * The buffers whose bf16 copies the caller keeps (list [count], copied;
	 * count 0: none), so that in bf16 no gemm operand is rounded in a pass
	 * of its own. Until the next call, an op that writes the start of a
	 * listed x writes the same elements of x16 as well, rounded to nearest
	 * even: the out of layernorm, residual_layernorm, activation, dropout
	 * and embed; the dy of residual_layernorm_backward; the dx of
	 * activation_backward and dropout_backward; cross_entropy's gradient.
	 * Any other write to x makes its copy stale. A gemm that reads elements
	 * of x reads x16, rounding x into it first where it is stale. The bits
	 * are those of rounding every operand at every gemm. Listed buffers
	 * hold activations or their gradients: the ops that write parameters,
	 * their gradients, Adam's moments, loss sums or key/value caches do not
	 * look for them. The caller calls it again (count 0 at the latest)
	 * before it frees a listed buffer. NULL on backends that keep no
	 * copies (the CPU's, which rounds each operand as a product reads it).
	 */
	void		(*set_operands16) (TfBackend *be, const TfOperand16 *list, int count);

	/*
	 * Inference products with weights fixed for the model's life (NULL on
	 * backends without them: CUDA's; the model then uses gemm):
	 * y[rows, out] = x[rows, in] W^T + bias (bias [out] or NULL), W [out, in]
	 * row-major as nn.Linear. TF_WEIGHTS_FP32: w is float. TF_WEIGHTS_INT8:
	 * w is int8 (|w| <= int8_weight_max) with W[n, :] = scales[n] w[n, :];
	 * each row of x is quantized on the fly (symmetric, sx = max |x| / 127,
	 * round to nearest even) and the integer sums are exact:
	 * y[r, n] = sx[r] scales[n] sum_k xq[r, k] w[n, k] + bias[n].
	 */
	void		(*linear) (TfBackend *be, TfWeightType type, float *y, const float *x, const void *w,
						   const float *scales, const float *bias, int rows, int in, int out);

	/*
	 * embed with an int8 embedding (NULL where linear is):
	 * out[i, :] = E[ids[i], :] * escale[ids[i]] * scale + pe[positions[i], :].
	 */
	void		(*embed_int8) (TfBackend *be, float *out, const int32_t *ids, const int32_t *positions,
							   const int8_t *embedding, const float *escale, const float *pe, int rows, int d,
							   float scale);

	/*
	 * The largest int8 weight magnitude linear takes without saturating
	 * (127, or 63 on CPUs without VNNI: cpu_matmul.h); 0 without linear.
	 */
	int			int8_weight_max;

	/*
	 * out[r, :] = bias for every row r (out [rows, cols], row stride ld >=
	 * cols): the C of a GEMM with beta 1.
	 */
	void		(*bias_rows) (TfBackend *be, float *out, const float *bias, int rows, int cols, int ld);

	/* dbias += scale * the column sums of dout [rows, cols] (row stride ld >= cols). */
	void		(*bias_backward) (TfBackend *be, float *dbias, const float *dout, int rows, int cols, int ld,
								  float scale);

	/*
	 * out[i, :] = E[ids[i], :] * scale + pe[positions[i], :]. out [rows, d],
	 * E [vocab, d], pe [max position + 1, d] (tf_positional_encoding). Then
	 * out = Drop(out) as `dropout` at p with seed and stream, its mask into
	 * keep_mask (NULL: not wanted; p 0: no dropout), the same bits as
	 * dropout in place, in one pass where the backend fuses them.
	 */
	void		(*embed) (TfBackend *be, float *out, const int32_t *ids, const int32_t *positions,
						  const float *embedding, const float *pe, int rows, int d, float scale, float p,
						  uint64_t seed, uint64_t stream, uint8_t *keep_mask);

	/*
	 * dE[ids[i], :] += scale * row i, rows in order: row i of dout [rows, d]
	 * for i < rows, else row i - rows of dout2 [rows2, d] (the source's and
	 * the target's gradients in one pass; dout2 NULL when rows2 = 0).
	 * ids [rows + rows2]. groups: the same rows grouped by id
	 * (tf_group_by_id, uploaded), of `unique` ids; the CPU backend reads
	 * ids, the CUDA backend groups.
	 */
	void		(*embed_backward) (TfBackend *be, float *dembedding, const float *dout, int rows,
								   const float *dout2, int rows2, const int32_t *ids, const int32_t *groups,
								   int unique, int d, float scale);

	/*
	 * out = x * keep / (1 - p), keep = uniform(seed, stream, i) >= p; with
	 * p = 0 a copy. out may equal x. When keep_mask is not NULL it receives
	 * the mask (1 = kept) for dropout_backward.
	 */
	void		(*dropout) (TfBackend *be, float *out, const float *x, size_t n, float p,
							uint64_t seed, uint64_t stream, uint8_t *keep_mask);

	/* dx = dout * keep / (1 - p) with the mask of the forward (dx may equal dout). */
	void		(*dropout_backward) (TfBackend *be, float *dx, const float *dout, size_t n, float p,
									 const uint8_t *keep_mask);

	/* out = a + b (n elements; out may equal a or b). */
	void		(*add) (TfBackend *be, float *out, const float *a, const float *b, size_t n);

	/*
	 * out = f(x) for the feed-forward activation f (TfActivation): ReLU
	 * max(x, 0); swish x * sigmoid(x); GELU x * Phi(x) = x (1 + erf(x / sqrt 2)) / 2.
	 * out may equal x. Backward: dx = dout * f'(x) (dx may equal dout).
	 */
	void		(*activation) (TfBackend *be, TfActivation f, float *out, const float *x, size_t n);
	void		(*activation_backward) (TfBackend *be, TfActivation f, float *dx, const float *dout,
										const float *x, size_t n);

	/*
	 * LayerNorm over the last dimension (Ba et al. 2016): out = (x - mean) *
	 * rstd * gamma + beta, saving mean and rstd [rows] for the backward,
	 * which writes dx and adds to dgamma and dbeta [d]. The backwards'
	 * dgamma and dbeta (both ops') are final after the next
	 * layernorm_backward_finish, not before: a backend may hold their
	 * partial sums until then, and sum those of every backward since the
	 * last finish in one pass (the CUDA backend's one launch). Call it before
	 * anything reads, reduces or frees those gradients.
	 */
	void		(*layernorm) (TfBackend *be, float *out, float *mean, float *rstd, const float *x,
							  const float *gamma, const float *beta, int rows, int d, float eps);
	void		(*layernorm_backward) (TfBackend *be, float *dx, float *dgamma, float *dbeta,
									   const float *dout, const float *x, const float *mean,
									   const float *rstd, const float *gamma, int rows, int d);

	/*
	 * The post-norm residual of a sub-layer (paper section 5.4): r = x +
	 * Drop(y), dropout as `dropout` (its mask into keep_mask, NULL: not
	 * wanted), then out = LayerNorm(r) as `layernorm`; r, x, y and out
	 * [rows, d], none the same. The same bits as dropout, add and layernorm
	 * in turn, in one pass where the backend fuses them. Backward: dr =
	 * layernorm_backward's dx (dgamma, dbeta accumulated), dy =
	 * dropout_backward(dr).
	 */
	void		(*residual_layernorm) (TfBackend *be, float *out, float *mean, float *rstd, float *r,
									   const float *x, const float *y, const float *gamma, const float *beta,
									   int rows, int d, float eps, float p, uint64_t seed, uint64_t stream,
									   uint8_t *keep_mask);
	void		(*residual_layernorm_backward) (TfBackend *be, float *dr, float *dy, float *dgamma,
												float *dbeta, const float *dout, const float *r,
												const float *mean, const float *rstd, const float *gamma,
												int rows, int d, float p, const uint8_t *keep_mask);
	void		(*layernorm_backward_finish) (TfBackend *be);

	/*
	 * Scaled dot-product attention (paper eq. 1) for all heads:
	 * ctx = Drop(softmax(Q K^T / sqrt(d_k) + mask)) V, within each sentence.
	 * q [query rows, ldq], k and v [key rows, ldk] with head h in columns
	 * h*d_k .. (h+1)*d_k; ctx [query rows, num_heads*d_k]. lse (NULL: not
	 * wanted) [query rows, num_heads] receives each row's log-sum-exp of
	 * its scaled scores over the keys it sees (natural log; the row max
	 * plus the log of the sum of exp(score - max)), which is what the
	 * backward needs; probs (NULL: not wanted, the fast path) the softmax
	 * before dropout at shape->p_start, for inspection.
	 */
	void		(*attention) (TfBackend *be, float *ctx, float *lse, float *probs, const float *q, int ldq,
							  const float *k, const float *v, int ldk, const TfAttentionShape *shape);

	/*
	 * Gradients of attention: writes dq (ldq), dk and dv (ldk). The
	 * probabilities are recomputed from q, k and the forward's lse
	 * (P = exp(Q K^T / sqrt(d_k) - lse), FlashAttention's backward), so no
	 * [queries, keys] plane is kept between the passes.
	 */
	void		(*attention_backward) (TfBackend *be, float *dq, float *dk, float *dv,
									   const float *dctx, const float *lse, const float *q, int ldq,
									   const float *k, const float *v, int ldk,
									   const TfAttentionShape *shape);

	/*
	 * Label-smoothed cross-entropy (PyTorch's definition, q = (1 - eps) onehot
	 * + eps / V) of logits [rows, vocab] (row stride ld >= vocab; the columns
	 * past vocab are never read) against labels: row_loss [rows] receives each
	 * row's loss in nats, 0 where the label is pad_id (-1: no label is
	 * ignored). With gradient
	 * (training) each row is replaced by the gradient of its loss, softmax -
	 * q, unscaled (the consumers apply the step's scale: the logits'
	 * backward products take it as alpha), 0 on ignored rows; otherwise the
	 * logits are kept. In bf16 (set_precision) with gradient, the logits
	 * are read rounded to bf16 first (the training step's numerics: the
	 * logits are the output of a bf16 product, as under torch.autocast);
	 * scoring and decoding read them in fp32.
	 */
	void		(*cross_entropy) (TfBackend *be, float *logits, bool gradient, const int32_t *labels,
								  int rows, int vocab, int ld, int pad_id, float label_smoothing,
								  double *row_loss);

	/* *out += x[0] + ... + x[n-1], summed in a fixed order (out, x backend memory). */
	void		(*accumulate) (TfBackend *be, double *out, const double *x, size_t n);

	/* *out = sum of squares of x (n elements), in double (out backend memory). */
	void		(*sum_squares) (TfBackend *be, const float *x, size_t n, double *out);

	/*
	 * Adam (Kingma & Ba 2015) as PyTorch computes it, in one pass over the
	 * n parameters: g = grad_scale * grads (the global-norm clipping's
	 * factor, 1 without); m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
	 * p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps), bc1 = 1 - b1^t,
	 * bc2 = 1 - b2^t; then grads = 0 for the next step. Where params and n
	 * are the whole of set_precision's weights, their bf16 copy is refreshed
	 * in the same pass (a part of them: the caller refreshes it).
	 */
	void		(*adam) (TfBackend *be, float *params, float *grads, float *m, float *v, size_t n,
						 float grad_scale, float lr, float beta1, float beta2, float eps, float bc1, float bc2);

	/*
	 * Strided row gather: dst[i * dst_stride + j] = src[rows[i] * src_stride + j]
	 * for i < n, j < count; rows NULL means rows[i] = i. rows is backend
	 * memory; dst and src must not overlap, except dst == src with strides
	 * equal and rows strictly increasing with rows[i] >= i (dropping rows).
	 * Beam reordering of key/value caches and writes into them.
	 */
	void		(*gather) (TfBackend *be, float *dst, size_t dst_stride, const float *src,
						   size_t src_stride, const int32_t *rows, int n, size_t count);

	/*
	 * Key/value caches of incremental decoding hold cache_bytes bytes per
	 * element: 4 (fp32), or 2 (bfloat16) while set_precision TF_BF16 is in
	 * force on a backend that keeps bf16 caches (CUDA's; the CPU's stay fp32
	 * and its attention rounds keys and values as it reads them: the same
	 * values). cache_gather is gather on cache elements (rows, strides and
	 * count in elements); with from_fp32, src is fp32 memory whose values
	 * are rounded into the cache's format (appending keys and values).
	 */
	void		(*cache_gather) (TfBackend *be, void *dst, size_t dst_stride, const void *src,
								 size_t src_stride, bool from_fp32, const int32_t *rows, int n, size_t count);

	/*
	 * Per row of logits [rows, vocab] (row stride ld >= vocab): the k
	 * largest log-probabilities (log_softmax over the whole vocabulary) in
	 * descending order, ties by
	 * ascending id, of every id but skip_id (the pad id, never generated),
	 * into top_logp and top_id [rows, k], and the log-probability of eos_id
	 * into eos_logp [rows]. k < vocab. Outputs are backend memory. Beam
	 * search.
	 */
	void		(*log_softmax_topk) (TfBackend *be, const float *logits, int rows, int vocab, int ld, int k,
									 float *top_logp, int32_t *top_id, int skip_id, int eos_id,
									 float *eos_logp);

	/*
	 * Mixed precision (docs/gpus.md#bf16-mixed-precision; NULL on backends
	 * without it). With TF_BF16 gemm rounds both operands to bfloat16
	 * (round-to-nearest-even) and accumulates in fp32, attention and
	 * attention_backward round the operands of their products so (keys,
	 * values, queries, P~, dctx, dS; the softmax divides last), training's
	 * cross_entropy reads the logits rounded, and key/value caches hold
	 * bfloat16 (cache_bytes 2) where the backend keeps bf16 caches; every
	 * other operation is unchanged. weights [n]
	 * (fp32, the master copy) get a bf16 copy now, which gemm reads for
	 * operands inside them: call again whenever the weights change (after
	 * adam, an upload). TF_FP32 frees the copy. false when out of memory.
	 */
	bool		(*set_precision) (TfBackend *be, TfPrecision precision, const float *weights, size_t n);

	/* Sets the number of compute threads (>= 1) for the operations that follow. */
	void		(*set_threads) (TfBackend *be, int threads);

	/*
	 * Data parallelism across devices (NULL on backends without it, the
	 * CPU's). One backend per rank, each driven by its own host thread.
	 * - join: makes this backend rank `rank` of `ranks` in the communicator
	 *   named by id (TF_UNIQUE_ID_BYTES from tf_cuda_unique_id); every rank
	 *   calls it at the same time and it returns when all have joined.
	 *   TF_ERROR with a message.
	 * - all_reduce: x[n] (backend memory) becomes its sum over the ranks, in
	 *   place, after every operation queued before it, possibly on a second
	 *   queue that runs beside the next operations (which must not touch x);
	 *   with `last`, the operations queued after it wait for every reduction.
	 *   Every rank issues the same reductions in the same order.
	 * - abort: ends the communicator from any thread: reductions waiting in it,
	 *   on any rank, and later ones fail (sticky errors) instead of hanging.
	 * - bind: makes the backend's device the calling thread's current one
	 *   (a thread other than its rank's may then use it).
	 */
	int			(*join) (TfBackend *be, const void *id, int ranks, int rank, char *err, size_t errlen);
	void		(*all_reduce) (TfBackend *be, float *x, size_t n, bool last);
	void		(*abort) (TfBackend *be);
	void		(*bind) (TfBackend *be);

	/* Backend state (threads, handles); owned by the backend. */
	void	   *state;
};

/*
 * The sinusoidal position encoding of the paper (section 3.5) into pe
 * [positions, d] (host memory): PE(pos, 2i) = sin(pos / 10000^(2i/d)),
 * PE(pos, 2i+1) = cos(pos / 10000^(2i/d)), positions from 0.
 */
/*
 * Groups rows 0 .. n-1 by ids[row] (every id in [0, vocab)) for
 * embed_backward: writes groups = start [u+1], id [u], rows [n] (the rows of
 * id[j] are rows[start[j]] .. rows[start[j+1] - 1], increasing; ids
 * increasing), at most 3n + 1 ints, and returns u, the distinct ids.
 * counts: vocab ints of workspace. groups and counts must not overlap ids:
 * they are written while ids is read.
 */
int			tf_group_by_id(const int32_t *ids, int n, int vocab, int32_t *groups, int32_t *counts);

void		tf_positional_encoding(float *pe, int positions, int d);

/*
 * fairseq's sinusoids (TF_POSITIONS_FAIRSEQ; Hugging Face's
 * M2M100SinusoidalPositionalEmbedding) into pe [positions, d], d even:
 * row p is position p + first (first = padding_idx + 1 there);
 * pe[p, i] = sin((p + first) f_i), pe[p, d/2 + i] = cos((p + first) f_i),
 * f_i = exp(-i ln 10000 / (d/2 - 1)), i < d/2, computed in float32 as
 * PyTorch does.
 */
void		tf_positional_encoding_fairseq(float *pe, int positions, int d, int first);

/*
 * Creates a backend: kind "cpu" (OpenBLAS and OpenMP across `threads`
 * threads; device must be 0) or "cuda" (device number `device`, from the
 * CUDA library named by tf_backend_set_cuda_library, loaded on first use).
 * Returns NULL with a message: an unknown kind, no CUDA library or device
 * (the driver's reason), out of memory. Free with be->destroy(be).
 */
TfBackend  *tf_backend_create(const char *kind, int device, int threads, char *err, size_t errlen);

/* The CPU backend (backend_cpu.c); NULL when out of memory or OpenBLAS cannot be loaded (tf_blas says why). */
TfBackend  *tf_backend_cpu_create(int threads);

/*
 * The entry point a CUDA library exports (kernels/backend_cuda.cu), looked
 * up by tf_backend_create: a backend on `device`, or NULL with a message.
 */
typedef TfBackend *(*TfCudaCreate) (int device, char *err, size_t errlen);
#define TF_CUDA_CREATE_SYMBOL "tf_backend_cuda_create"

/* Its device count: >= 0, or -1 with the driver's reason (no context is created). */
typedef int (*TfCudaDeviceCount) (char *err, size_t errlen);
#define TF_CUDA_COUNT_SYMBOL "tf_cuda_device_count"

/* A new communicator name (ncclGetUniqueId) into id[TF_UNIQUE_ID_BYTES]; TF_ERROR with a message. */
typedef int (*TfCudaUniqueId) (void *id, char *err, size_t errlen);
#define TF_CUDA_UNIQUE_ID_SYMBOL "tf_cuda_unique_id"

#endif
