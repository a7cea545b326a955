/*
 * transformer.h - the engine's public API: the encoder-decoder Transformer of
 * Vaswani et al. 2017 ("Attention Is All You Need"), forward, backward,
 * label-smoothed loss, Adam, and checkpoint tensors.
 *
 * Plain C11, no PostgreSQL headers. Every fallible call returns TF_OK or
 * TF_ERROR and writes a message to the caller's buffer; nothing exits,
 * aborts or prints. All matrices are row-major; shapes are given as
 * [rows, cols] or [batch, seq, d_model].
 */
#ifndef ATTENTION_TRANSFORMER_H
#define ATTENTION_TRANSFORMER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TF_OK 0
#define TF_ERROR (-1)
#define TF_ERRLEN 256

/*
 * The feed-forward network's activation: the paper's ReLU (eq. 2), or
 * those of models imported from elsewhere: swish (SiLU, x * sigmoid(x)) and
 * GELU (exact: x * Phi(x), as Hugging Face's "gelu").
 */
typedef enum TfActivation
{
	TF_RELU = 0,
	TF_SWISH,
	TF_GELU
} TfActivation;

/*
 * The sinusoidal position encoding's layout. TF_POSITIONS_PAPER (section
 * 3.5): PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...),
 * positions from 0. TF_POSITIONS_FAIRSEQ (fairseq's and Hugging Face's
 * M2M-100 and NLLB): sines in columns 0 .. d/2-1, cosines in d/2 .. d-1,
 * frequency exp(-i ln 10000 / (d/2 - 1)), positions from pad_id + 1; a
 * pad token inside a sentence takes the padding position (zeros) and is not
 * counted, as transformers' create_position_ids_from_input_ids does.
 */
typedef enum TfPositions
{
	TF_POSITIONS_PAPER = 0,
	TF_POSITIONS_FAIRSEQ
} TfPositions;

/* Model configuration (docs/design.md §2; paper section 3 and table 3). */
typedef struct TfConfig
{
	int			num_encoder_layers;
	int			num_decoder_layers;
	int			d_model;
	int			num_heads;
	int			d_ff;
	float		dropout;		/* embeddings + positions, every sub-layer output */
	float		attention_dropout;	/* on attention probabilities */
	float		relu_dropout;	/* on the FFN's hidden activations */
	float		label_smoothing;
	int			vocab_size;
	int			max_positions;	/* longest sequence, source or target */
	float		layer_norm_eps;
	int			pad_id;
	TfActivation activation;	/* the FFN's; TF_RELU */
	bool		logits_bias;	/* a bias on the output projection ("final_logits_bias" [1, vocab]); false */
	/*
	 * Pre-LayerNorm (Wang et al. 2019; fairseq's normalize_before): every
	 * sub-layer is x + Drop(F(LN(x))), and each stack ends in a LayerNorm
	 * ("model.encoder.layer_norm", "model.decoder.layer_norm"); false: the
	 * paper's post-norm, LN(x + Drop(F(x))).
	 */
	bool		normalize_before;
	bool		scale_embedding;	/* embeddings times sqrt(d_model) (section 3.4); true */
	TfPositions positions;		/* TF_POSITIONS_PAPER */
} TfConfig;

/* The paper's base model (N=6, d=512, h=8, d_ff=2048, dropout 0.1). */
void		tf_config_base(TfConfig *config, int vocab_size);

/* The paper's big model (N=6, d=1024, h=16, d_ff=4096, dropout 0.3). */
void		tf_config_big(TfConfig *config, int vocab_size);

/* The small model for 2-core machines (N=3, d=256, h=4, d_ff=1024, dropout 0.1). */
void		tf_config_small(TfConfig *config, int vocab_size);

/* TF_OK, or TF_ERROR with a message naming the first invalid field. */
int			tf_config_validate(const TfConfig *config, char *err, size_t errlen);

/*
 * A padded batch of sentence pairs (host memory, int32 ids). A row's
 * padding is the trailing run of pad_id (a pad_id before a token is a
 * token: "<pad>" in a text, as transformers reads it; sentences end in EOS),
 * and tgt_in must be padding wherever its labels are, its first token
 * excepted: the decoder start (BOS, or for Marian's models the pad id),
 * which counts as a token whatever its id. The engine packs the sentences
 * without their padding.
 */
typedef struct TfBatch
{
	int			batch_size;
	int			src_len;		/* source ids + EOS, padded */
	int			tgt_len;		/* decoder start + target ids (decoder input), padded */
	const int32_t *src;			/* [batch_size, src_len] */
	const int32_t *tgt_in;		/* [batch_size, tgt_len], BOS + target */
	const int32_t *labels;		/* [batch_size, tgt_len], target + EOS; pad ignored */
	int			index;			/* training: the batch's place in its optimizer step,
								 * 0 .. TF_MAX_STEP_BATCHES - 1 (a key of its dropout
								 * masks, with the step); unused otherwise */
} TfBatch;

/* Most batches one optimizer step may accumulate (across all ranks). */
#define TF_MAX_STEP_BATCHES 4096

/* A named tensor of a checkpoint: parameters, optimizer state, counters. */
typedef enum TfDtype
{
	TF_FLOAT32,
	TF_INT64,
	TF_INT8						/* a quantized matrix (tf_model_create_quantized) */
} TfDtype;

/* The dtype's name in checkpoints: "float32", "int64", "int8". */
const char *tf_dtype_name(TfDtype dtype);

#define TF_MAX_DIMS 2

typedef struct TfTensor
{
	char		name[128];
	TfDtype		dtype;
	int			ndim;			/* 0 for a scalar */
	int64_t		shape[TF_MAX_DIMS];
	void	   *data;			/* see tf_model_tensors and tf_model_load */
	size_t		bytes;
} TfTensor;

typedef struct TfModel TfModel;

/*
 * Path of the CUDA backend's shared object (attention_cuda.so, or the
 * emulated attention_cuda_emu.so in tests) for the "cuda" models created
 * after it; NULL restores the default, "attention_cuda.so" on the loader's
 * search path. Copied. Libraries stay loaded once used; models created
 * earlier keep theirs.
 */
void		tf_backend_set_cuda_library(const char *path);

/*
 * Number of CUDA devices the CUDA library can use, loading the library;
 * -1 with a message when it cannot be loaded or the driver cannot be used
 * (no driver, a driver too old: the driver's own reason). Creates no CUDA
 * context, so it is safe in processes that will not compute on a GPU.
 */
int			tf_cuda_device_count(char *err, size_t errlen);

/* Bytes of a communicator name (NCCL's ncclUniqueId). */
#define TF_UNIQUE_ID_BYTES 128

/*
 * A new name for a communicator of ranks on several devices, possibly on
 * several machines (ncclGetUniqueId of the CUDA library): id receives
 * TF_UNIQUE_ID_BYTES opaque bytes that every rank passes to
 * tf_parallel_create. TF_ERROR with a message (no library, no NCCL).
 */
int			tf_cuda_unique_id(void *id, char *err, size_t errlen);

/* Highest CUDA device number a device name may give. */
#define TF_MAX_DEVICE 1023

/*
 * Parses a device name: "cpu", "cuda" (device 0) or "cuda:N" into kind
 * ("cpu" or "cuda") and index. TF_ERROR with a message naming the bad name.
 */
int			tf_device_parse(const char *device, char kind[8], int *index, char *err, size_t errlen);

/*
 * Creates a model with freshly initialised parameters on `device`
 * (tf_device_parse): Xavier-uniform projections, zero biases, LayerNorm
 * weight 1 / bias 0, embeddings N(0, d_model^-0.5); all drawn from the
 * counter-based generator with `seed`, on the host, so every device starts
 * from the same bits. threads is the number of CPU compute threads (>= 1).
 * Returns NULL with a message on an invalid configuration or device, a
 * device that cannot be used (the driver's reason), or no memory.
 */
TfModel    *tf_model_create(const TfConfig *config, uint64_t seed, const char *device, int threads,
							char *err, size_t errlen);

/*
 * Creates a model for inference only: parameters (zero until tf_model_load)
 * without gradients or optimizer state, a quarter of a training model's
 * memory. tf_model_tensors and tf_model_load then cover the parameters
 * only; backward and step are refused. Errors as tf_model_create.
 */
TfModel    *tf_model_create_inference(const TfConfig *config, const char *device, int threads,
									  char *err, size_t errlen);

/*
 * Creates an int8 model for inference on the CPU: every matrix product's
 * weight (attention projections, feed-forward layers, the shared embedding
 * and so the output projection) is int8 with one float scale per output row
 * (W[n, :] = scale[n] q[n, :]); biases, LayerNorms and final_logits_bias
 * stay float32. Its tensors (tf_model_tensors, tf_model_load) are each such
 * weight as an int8 tensor of the same name and shape plus
 * "<name>_scale" [rows] float32, and the other parameters as float32. On a
 * CPU without VNNI, tf_model_load rounds the weights to 7 bits
 * (|q| <= 63, scales doubled: backend.h's int8_weight_max). Errors as
 * tf_model_create_inference.
 */
TfModel    *tf_model_create_quantized(const TfConfig *config, int threads, char *err, size_t errlen);

/*
 * A new int8 model (tf_model_create_quantized) with the weights of model (an
 * fp32 model on the CPU) quantized per output row (|q| <= 127, round to
 * nearest even, scale max |row| / 127) and its other parameters copied:
 * the tensors of an int8 checkpoint, the same on every CPU. It computes
 * nothing itself (forward passes are refused): load its tensors into a
 * model of tf_model_create_quantized, which fits them to the CPU. NULL with
 * a message when out of memory or when model is not an fp32 CPU model.
 */
TfModel    *tf_model_quantize(TfModel *model, int threads, char *err, size_t errlen);

/*
 * An inference model of the kind the tensors hold: tf_model_create_quantized
 * when any is int8 (device must be "cpu"), else tf_model_create_inference.
 * Errors as those, or an int8 checkpoint on a CUDA device.
 */
TfModel    *tf_model_create_for(const TfConfig *config, const TfTensor *tensors, int count, const char *device,
								int threads, char *err, size_t errlen);

/* True for a model of tf_model_create_quantized. */
bool		tf_model_quantized(const TfModel *model);

/* Bytes of parameter memory the model holds (fp32 parameters, int8 weights and their scales). */
size_t		tf_model_weight_bytes(const TfModel *model);

/*
 * Bytes the model's backend allocator holds now: parameters (and, when
 * training, gradients and Adam's moments), activation arenas, and the key
 * and value caches of its decoding streams; host memory on the CPU backend,
 * device memory on CUDA (where cuBLAS's and the kernels' own workspaces
 * are not counted).
 */
size_t		tf_model_memory_bytes(const TfModel *model);

/* The backend's name: "cpu" or "cuda". */
const char *tf_model_backend(const TfModel *model);

/*
 * Copies `bytes` of the model's backend memory at src (a pointer from
 * tf_model_logits, tf_model_grad or tf_model_param) into host memory dst;
 * complete on return. TF_ERROR with the backend's message if an earlier
 * operation failed.
 */
int			tf_model_download(TfModel *model, void *dst, const void *src, size_t bytes,
							  char *err, size_t errlen);

/*
 * Sets the number of compute threads (>= 1) for the model's next calls
 * (on the CPU the count is process-wide, as OpenBLAS's is).
 */
void		tf_model_set_threads(TfModel *model, int threads);

/*
 * Arithmetic of the matrix products. TF_FP32: everything in fp32 (the
 * default). TF_BF16 (mixed precision, docs/gpus.md#bf16-mixed-precision;
 * CUDA and the CPU): every matrix product takes its operands rounded to
 * bfloat16 (round-to-nearest-even from fp32) and accumulates in fp32; so do
 * the products inside attention; LayerNorm, softmax, the loss, the
 * gradients' sums and Adam stay fp32, on fp32 master weights of which a
 * bf16 copy is refreshed after every optimizer step and load.
 */
typedef enum TfPrecision
{
	TF_FP32 = 0,
	TF_BF16
} TfPrecision;

/* Parses "fp32" or "bf16"; TF_ERROR with a message naming the bad value. */
int			tf_precision_parse(const char *name, TfPrecision *precision, char *err, size_t errlen);

/* "fp32" or "bf16". */
const char *tf_precision_name(TfPrecision precision);

/*
 * Sets the model's precision for its next calls (either way at any time;
 * parameters and checkpoints stay fp32). TF_ERROR with a message: TF_BF16
 * on a backend without it, out of memory for the bf16 copy of the weights.
 */
int			tf_model_set_precision(TfModel *model, TfPrecision precision, char *err, size_t errlen);

/*
 * True when this CPU multiplies bf16 natively (AVX512_BF16 or AMX, as
 * oneDNN sees it: ONEDNN_MAX_CPU_ISA lowers it): there the CPU backend's
 * bf16 products run through oneDNN (faster than fp32 or not: see
 * tf_cpu_bf16_speedup); elsewhere it follows the same rules by widening
 * the rounded operands, slower than fp32.
 */
bool		tf_cpu_bf16_native(void);

/*
 * How many times faster the CPU backend runs a training step's products in
 * bf16 than in fp32 here (cpu_precision.c): fp32 time over bf16 time of a
 * feed-forward layer's forward and both gradients (2,048 tokens, 256 x
 * 1,024), each product's operand rounding included, on one thread, best
 * of 3 alternating rounds. Measured at the first call in the process
 * (0.1-0.5 s; a second thread calling meanwhile waits for it) and kept: 0
 * where bf16 is not native (tf_cpu_bf16_native), -1 where the measurement
 * failed (out of memory, oneDNN); both are kept too.
 */
double		tf_cpu_bf16_speedup(void);

/*
 * Whether training's "auto" precision picks bf16 on the CPU for a
 * tf_cpu_bf16_speedup of `speedup`: from TF_CPU_BF16_MIN_SPEEDUP up (0, -1
 * and NaN give false). A step also rounds activations and keeps fp32
 * master weights, so products merely as fast as fp32 make a slower step:
 * on this project's Intel Xeon the products measured 2.35x with AMX and
 * 0.60x with oneDNN held to AVX512_BF16
 * (bench/results/bf16_speedup-vm-20261207-1857.txt), where whole steps of
 * the small model ran 1.62x and 0.61x on another day
 * (train_step-vm-20261129-0754.txt, train_step-noamx-vm-20261129-1228.txt):
 * the timed products (rounding included) are then about 82% of an fp32
 * step and the rest costs 27% of it in bf16, so a step gains from about
 * 1.12x, and 1.25x (a step about 1.08x) leaves room for the timing's
 * noise.
 */
bool		tf_cpu_bf16_preferred(double speedup);

#define TF_CPU_BF16_MIN_SPEEDUP 1.25

/* The model's precision (TF_FP32 until set). */
TfPrecision tf_model_precision(const TfModel *model);

/* Frees a model and everything it allocated (NULL is allowed). */
void		tf_model_free(TfModel *model);

/* The configuration the model was created with. */
const TfConfig *tf_model_config(const TfModel *model);

/* Number of float32 parameters (a quantized model's int8 weights not counted). */
size_t		tf_model_num_parameters(const TfModel *model);

/*
 * Forward pass over a batch, keeping activations for backward. training
 * true applies dropout (masks from seed, step, site and index). The summed
 * label-smoothed cross-entropy over non-pad labels (nats) and their number
 * are added to the totals tf_model_step reports; when loss_sum and tokens
 * are not NULL they also receive this batch's (one download: evaluation,
 * tests), so the mean is loss_sum / tokens. Training loops pass NULL and
 * read the totals from the step, so that a GPU never waits mid-step.
 * After a forward with training = false the logits are available through
 * tf_model_logits.
 * Errors: ids out of [0, vocab_size), sentences longer than max_positions,
 * padding inside a sentence, labels not aligned with tgt_in, an empty batch,
 * no memory.
 */
int			tf_model_forward(TfModel *model, const TfBatch *batch, bool training,
							 double *loss_sum, int64_t *tokens, char *err, size_t errlen);

/*
 * Backward pass of the last (training) forward: adds grad_scale * d(loss_sum)/d(params)
 * to the gradients (so several batches accumulate). For the mean loss of one
 * batch, grad_scale = 1 / tokens.
 */
int			tf_model_backward(TfModel *model, float grad_scale, char *err, size_t errlen);

/*
 * Logits of the last forward with training = false, for the target
 * positions whose label is not padding, in batch order: [non-pad labels,
 * vocab_size] with row stride tf_model_logits_stride (backend memory: read
 * it with tf_model_download). A training forward keeps what its backward
 * needs there instead.
 */
const float *tf_model_logits(const TfModel *model);

/*
 * The row stride of tf_model_logits, in floats: vocab_size, rounded up on a
 * GPU (to 64: rows at 256-byte boundaries, as cuBLAS's fast kernels want
 * them); the columns past vocab_size hold nothing.
 */
int			tf_model_logits_stride(const TfModel *model);

/* Sets every gradient to zero. */
void		tf_model_zero_grad(TfModel *model);

/* Optimizer settings: Adam and the paper's learning-rate schedule (eq. 3). */
typedef struct TfOptimizer
{
	float		beta1;			/* 0.9 */
	float		beta2;			/* 0.98 */
	float		epsilon;		/* 1e-9 */
	int			warmup_steps;	/* 4000 */
	float		learning_rate_scale;	/* 1.0 multiplies the schedule */
	float		clip_norm;		/* 0 = no clipping */
} TfOptimizer;

/* The paper's settings. */
void		tf_optimizer_default(TfOptimizer *opt);

/* lr(step) = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step >= 1. */
double		tf_learning_rate(const TfOptimizer *opt, int d_model, int64_t step);

/* What one optimizer step reports (tf_model_step). */
typedef struct TfStepStats
{
	double		learning_rate;	/* the rate this step used */
	double		grad_norm;		/* global L2 norm of the gradients before clipping */
	double		loss_sum;		/* label-smoothed loss summed over the forwards since the last step */
	int64_t		tokens;			/* their non-pad labels */
	bool		skipped;		/* the gradient norm was not finite: no update */
} TfStepStats;

/*
 * One Adam step over the accumulated gradients (step counter + 1), after
 * optional clipping of their global L2 norm; zeroes the gradients and the
 * loss totals. Fills *stats (one download from the backend). Errors: an
 * invalid setting (nothing changes), a backend failure, or a non-finite
 * gradient norm (stats->skipped: the step is skipped, the gradients are
 * zeroed, the message says so).
 */
int			tf_model_step(TfModel *model, const TfOptimizer *opt, TfStepStats *stats,
						  char *err, size_t errlen);

/* Optimizer steps taken so far. */
int64_t		tf_model_steps(const TfModel *model);

/*
 * The model's state as named tensors: every parameter under its Hugging
 * Face MarianMT name, "optimizer.exp_avg.<name>" and
 * "optimizer.exp_avg_sq.<name>" for Adam's moments, and the int64 scalars
 * "optimizer.step", "rng.seed" and "rng.counter" (training forwards, a
 * count only: dropout masks are keyed by the step and TfBatch.index).
 * Every tensor's data is host memory: views of the model's memory on the
 * CPU backend, one download into a host copy on others; valid until
 * tf_tensors_free (and, for views, until the model changes). *count
 * receives their number.
 */
int			tf_model_tensors(TfModel *model, TfTensor **tensors, int *count,
							 char *err, size_t errlen);

/* Frees what tf_model_tensors handed out (NULL is allowed). */
void		tf_tensors_free(TfTensor *tensors);

/*
 * Loads state from named tensors in host memory (e.g. read back from a
 * checkpoint): exactly the tensors of tf_model_tensors, each once, with the
 * same dtype and shape; a missing, extra, repeated or mismatched tensor is
 * refused with its name and nothing is changed. Gradients are zeroed.
 */
int			tf_model_load(TfModel *model, const TfTensor *tensors, int count,
						  char *err, size_t errlen);

/*
 * The model's pointer to the gradient of parameter `name`, or NULL (tests,
 * diagnostics), for reading (tf_model_download): the first backward after
 * the gradients were zeroed writes them without reading them.
 */
float	   *tf_model_grad(TfModel *model, const char *name, size_t *count);

/*
 * The model's pointer to parameter `name`, or NULL. A bf16 model's products
 * read its bf16 copy: after writing through the pointer, call
 * tf_model_set_precision again.
 */
float	   *tf_model_param(TfModel *model, const char *name, size_t *count);

/*
 * Log-probability of each target given its source (natural log, nats):
 * the sum over the labels (target ids + EOS) of log softmax(logits), no
 * dropout and no label smoothing (teacher forcing, one forward pass).
 * log_prob [batch_size]. Errors as tf_model_forward. Afterwards the
 * attention probabilities are available through tf_model_attention when
 * tf_model_keep_attention asked for them.
 */
int			tf_model_score(TfModel *model, const TfBatch *batch, double *log_prob,
						   char *err, size_t errlen);

/*
 * tf_model_score without each target's first `prefix` labels (forced
 * tokens, e.g. M2M-100's target language after the decoder start: they
 * score 0, as TfDecodeOptions.forced_id). Errors as tf_model_score, or a
 * negative prefix.
 */
int			tf_model_score_prefixed(TfModel *model, const TfBatch *batch, int prefix, double *log_prob,
									char *err, size_t errlen);

/* The attention of a layer (tf_model_attention). */
typedef enum TfAttentionKind
{
	TF_ENCODER_SELF,
	TF_DECODER_SELF,
	TF_CROSS
} TfAttentionKind;

/*
 * Asks the next forward pass with training = false (a score) to keep its
 * attention probabilities for tf_model_attention; passes that were not
 * asked keep only what their backward needs ([heads] floats per query row).
 */
void		tf_model_keep_attention(TfModel *model);

/*
 * Attention probabilities of the last forward or score, which
 * tf_model_keep_attention asked for, for sentence `sentence` of its batch:
 * [num_heads, queries, keys] (query rows sum to 1; decoder self-attention
 * is causal) copied into out (host memory; NULL only reports the sizes).
 * queries and keys receive the sentence's lengths. Errors: no such pass
 * yet, layer or sentence out of range.
 */
int			tf_model_attention(const TfModel *model, TfAttentionKind kind, int layer, int sentence,
							   float *out, int *queries, int *keys, char *err, size_t errlen);

/*
 * The decoding defaults (docs/design.md §3): beam 4, length penalty alpha
 * 0.6, at most source tokens + 50 output tokens. The SQL functions'
 * DEFAULTs equal them (scripts/check-structure compares them).
 */
#define TF_DEFAULT_BEAM_SIZE 4
#define TF_DEFAULT_LENGTH_PENALTY 0.6
#define TF_DEFAULT_MAX_LENGTH_OFFSET 50

/* Beam search settings (docs/design.md §3; Wu et al. 2016 for the length penalty). */
typedef struct TfDecodeOptions
{
	int			beam_size;		/* 4; 1 = greedy; 1 .. 64 */
	int			nbest;			/* hypotheses returned per sentence, 1 .. beam_size */
	float		length_penalty; /* alpha >= 0 in lp(Y) = ((5 + |Y|) / 6)^alpha; 0.6 */
	int			max_length_offset;	/* output tokens <= source tokens + offset; 50 */
	int			max_output_tokens;	/* and <= this where > 0 (the forced token and EOS not
									 * counted: transformers' max_new_tokens less the
									 * forced token); 0: no such limit */
	int			bos_id;
	int			eos_id;
	/*
	 * -1, or a token the decoder is given after BOS before it generates
	 * (M2M-100's and NLLB's target language: transformers'
	 * forced_bos_token_id). It scores 0 and is not part of the output:
	 * hypotheses, log_prob and the length limit count the tokens after it.
	 */
	int			forced_id;
	/*
	 * Tokens at the start of each source that the length limit does not
	 * count (M2M-100's and NLLB's source language token: 1); 0.
	 */
	int			source_prefix;
	/* polled between decoding steps; true stops the search with TF_ERROR */
	bool		(*interrupted) (void *arg);
	void	   *interrupt_arg;
} TfDecodeOptions;

/* Beam 4, one hypothesis, alpha 0.6, offset 50, no max_output_tokens, BOS 2, EOS 3, no forced token, no interrupt callback. */
void		tf_decode_options_default(TfDecodeOptions *opt);

/* One translation hypothesis. */
typedef struct TfHypothesis
{
	int32_t    *tokens;			/* output ids without BOS and EOS (malloc'd) */
	int			length;			/* number of tokens */
	double		log_prob;		/* sum of the log-probabilities of tokens and EOS (nats) */
	double		score;			/* log_prob / lp(length + 1): what the search ranks by */
	bool		finished;		/* ended by EOS (false: stopped at the length limit) */
} TfHypothesis;

/*
 * Beam search (batched over sentences x beams, incremental decoding with a
 * key/value cache per decoder layer; encoder keys and values computed once
 * per source). src [batch, src_len]: each row a source's ids followed by
 * EOS, then padding. Every step a sentence's live hypotheses are extended
 * by the best `live` candidates of all their continuations; candidates
 * ending in EOS are finished and leave the beam, so the beam shrinks (as
 * Marian's). A sentence stops when its beam is empty, at its length limit
 * (min(source tokens + max_length_offset, max_positions - 1) output tokens,
 * where EOS is forced), or early once nbest hypotheses are finished and no
 * live one can beat the nbest-th. out [batch, nbest] receives the best
 * hypotheses of each sentence in descending score; free the tokens with
 * tf_hypotheses_free. Errors: invalid options, bad ids, no memory,
 * interrupted (nothing is returned then).
 */
int			tf_model_translate(TfModel *model, const int32_t *src, int batch, int src_len,
							   const TfDecodeOptions *opt, TfHypothesis *out, char *err, size_t errlen);

/*
 * Continuous batching: a beam search (as tf_model_translate's, options fixed
 * at creation) that sentences join between steps and leave when done.
 * Sentences in one stream compute as rows of the same engine calls, each at
 * its own position, so their results are those of translating them alone
 * (up to the rounding of GEMMs of other row counts). The stream keeps its
 * own caches and source keys/values; the model may run other work between
 * the stream's calls (tf_stream_add runs a forward pass itself).
 */
typedef struct TfStream TfStream;

/* An empty stream on model with options opt. Errors: invalid options, no memory. */
int			tf_stream_create(TfModel *model, const TfDecodeOptions *opt, TfStream **out, char *err, size_t errlen);

/*
 * Sentences join: src [batch, src_len] as for tf_model_translate, tags[i]
 * (NULL: i) returned with sentence i's hypotheses. Runs their encoder and
 * first decoder position; their first step is taken by the next
 * tf_stream_step. Errors: bad ids, an empty source, no memory (the stream
 * is then unchanged).
 */
int			tf_stream_add(TfStream *stream, const int32_t *src, int batch, int src_len, const int64_t *tags,
						  char *err, size_t errlen);

/*
 * One step of every sentence in the stream: chooses the continuations of
 * the live hypotheses (a sentence that is done becomes available to
 * tf_stream_take) and runs the decoder for them. Errors: the backend's, no
 * memory (the stream is then unusable: free it).
 */
int			tf_stream_step(TfStream *stream, char *err, size_t errlen);

/* Sentences still searched: added and not yet done. */
int			tf_stream_sentences(const TfStream *stream);

/*
 * A done sentence, in the order they finished: its tag and its opt.nbest
 * best hypotheses in out [nbest] (free with tf_hypotheses_free); false
 * when none is done.
 */
bool		tf_stream_take(TfStream *stream, int64_t *tag, TfHypothesis *out);

/* Frees the stream and the hypotheses it still holds (NULL is ignored). */
void		tf_stream_free(TfStream *stream);

/* Frees the tokens of n hypotheses (from tf_model_translate). */
void		tf_hypotheses_free(TfHypothesis *hyps, int n);

#endif
