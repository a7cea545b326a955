/*
 * backend_cuda.cu - the CUDA backend (src/backend.h) on one device, fp32 or
 * bf16 mixed precision (set_precision): cuBLAS for every matrix product, the
 * kernels of this directory for the rest, all on one stream. Built by nvcc
 * into attention_cuda.so for a GPU, and by g++ with emu/cuda_emu.h and the
 * cuBLAS shim into attention_cuda_emu.so, which runs the same sources on the
 * CPU in CI.
 *
 * Synchronisation (backend.h): upload and download wait for the stream;
 * every other operation is queued. Failures of queued work are sticky and
 * reported by status. Ranks of data-parallel training (join) sum gradients
 * with NCCL on a second stream, ordered against the first by events, so a
 * layer's reduction runs while the backward of the layers below it does.
 * Their communicator is non-blocking: no host call waits for other ranks
 * without polling for NCCL's asynchronous errors and for abort, which
 * another thread may call at any time (NCCL calls and abort hold nccl_mu).
 */
#include <atomic>
#include <chrono>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_map>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <nccl.h>

#include "kernels.h"

extern "C" {
#include "transformer.h"
}

/*
 * A cuBLASLt product (gemm_bias): its descriptors and the heuristic's
 * algorithm, cached per shape and epilogue, LT_PLANS of them reused in turn
 * (a step's layers repeat a few shapes; batches change the row counts).
 */
struct LtPlan
{
	int			key[13];		/* trans_a, trans_b, m, n, k, lda, ldb, ldc, bf16, epilogue, and
								 * the alignments of cuBLASLt's A, B and C (= D) */
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t a,
				b,
				c;
	cublasLtMatmulAlgo_t algo;
	bool		found;			/* the heuristic returned an algorithm */
};

#define LT_PLANS 64

/*
 * cuBLASLt's workspace: 32 MB on a GPU (its split-K algorithms use it);
 * none under emulation, whose shim needs none, and where 32 MB more of
 * guarded device memory doubled the time of every emulated launch's
 * unprotect and protect pass.
 */
#ifdef __CUDACC__
#define LT_WORKSPACE ((size_t) 32 << 20)
#else
#define LT_WORKSPACE ((size_t) 0)
#endif

/*
 * Columns [lo, hi) of the first `rows` rows of row stride ld of a listed
 * buffer whose bf16 copies are current: the dq, dk, dv blocks attention's
 * backward writes with their copies, gathered over calls (the decoder
 * layers' dk and dv side by side in one [Ns, layers * 2d] gradient); when
 * they cover whole rows, the buffer's first rows * ld elements are fresh.
 * Empty: hi <= lo.
 */
typedef struct ColumnCover
{
	int			ld,
				rows,
				lo,
				hi;
} ColumnCover;

/* Backend state: the device, its stream and cuBLAS handles, the first error, workspaces. */
struct CudaState
{
	std::unordered_map<void *, size_t> sizes;	/* of cuda_alloc's allocations (TfBackend.bytes) */
	int			device;
	cudaStream_t stream;
	cublasHandle_t blas;
	cublasLtHandle_t lt;
	void	   *lt_workspace;	/* LT_WORKSPACE bytes */
	LtPlan		plans[LT_PLANS];
	int			plans_next;
	float	   *bgrad;			/* BGRADB's bias gradient, added to the caller's */
	size_t		bgrad_n;
	bool		failed;
	char		error[TF_ERRLEN];
	float	   *attention_work;	/* attention backward (k_attention_workspace) */
	size_t		attention_work_floats;
	double	   *partials;		/* sum_squares' per-block sums */
	float	   *columns;		/* column sums' per-chunk partials, grown as needed */
	size_t		columns_floats;
	/* LayerNorm backwards' parameter-gradient partials, waiting for layernorm_backward_finish */
	float	   *norm_partials;
	size_t		norm_partials_floats,
				norm_partials_used,
				norm_partials_pass;	/* needed since the last finish, internal sums or not */
	LayerNormTotals norm_totals;
	int			norm_max_d;
	/* bf16 mixed precision (set_precision): the weights' copy and two rounded operands */
	bool		bf16;
	const float *weights;
	size_t		weights_n;
	__nv_bfloat16 *weights16;
	__nv_bfloat16 *operand16[2];
	size_t		operand16_n[2];
	/*
	 * set_operands16's list, how many leading elements of each x16 are
	 * current, and the column blocks whose copies attention's backward has
	 * written since (ColumnCover)
	 */
	TfOperand16 *operands;
	size_t	   *fresh;
	ColumnCover *cover;
	int			operands_n,
				operands_cap;
	/* uploads: two page-locked staging buffers used in turn, each with the event of its last copy */
	void	   *staging[2];
	size_t		staging_bytes[2];
	cudaEvent_t staged[2];
	int			staging_next;
	/* data parallelism (join): NCCL communicator, its stream and the events between the two */
	ncclComm_t	comm;
	cudaStream_t comm_stream;
	cudaEvent_t queued,			/* compute stream: what a reduction must follow */
				reduced;		/* comm stream: the reductions the compute stream waits for */
	std::mutex	nccl_mu;		/* NCCL calls on comm, and abort, one at a time */
	std::atomic<bool> aborted;
};

/*
 * The logits' row stride: the vocabulary rounded up to 64 floats, so every
 * row starts at a multiple of 256 bytes (TfBackend.vocab_multiple). An
 * imported vocabulary of odd size (opus-mt's 58,101) would otherwise put
 * the rows off 16 bytes, where cuBLAS falls back to sm_80 kernels.
 */
#define VOCAB_MULTIPLE 64

/* How long a rank waits for the others to join its communicator. */
#define JOIN_TIMEOUT_SECONDS 300

static CudaState *
state(TfBackend *be)
{
	return (CudaState *) be->state;
}

/* Records the first error; later ones are consequences. */
static void
fail(TfBackend *be, const char *what, const char *why)
{
	CudaState  *st = state(be);

	if (st->failed)
		return;
	st->failed = true;
	snprintf(st->error, sizeof(st->error), "CUDA device %d: %s: %s", st->device, what, why);
}

/* Checks a runtime call or the last launch. */
static void
check(TfBackend *be, cudaError_t rc, const char *what)
{
	if (rc != cudaSuccess)
		fail(be, what, cudaGetErrorString(rc));
}

static void
launched(TfBackend *be, const char *what)
{
	check(be, cudaGetLastError(), what);
}

/* The set_operands16 entry whose x holds [x, x + n), or -1. */
static int
operand_entry(const CudaState *st, const float *x, size_t n)
{
	uintptr_t	at = (uintptr_t) x;

	for (int i = 0; i < st->operands_n; i++)
	{
		uintptr_t	start = (uintptr_t) st->operands[i].x;

		if (at >= start && at + n * sizeof(float) <= start + st->operands[i].n * sizeof(float))
			return i;
	}
	return -1;
}

/*
 * A write of x [n floats] (n SIZE_MAX: to the end of the listed buffer
 * holding x, for writers that know no extent on the host) by an op that
 * writes no bf16 copy: the copies it overlaps are stale from its start.
 */
static void
written(CudaState *st, const float *x, size_t n)
{
	uintptr_t	at = (uintptr_t) x;

	for (int i = 0; i < st->operands_n; i++)
	{
		uintptr_t	start = (uintptr_t) st->operands[i].x,
					end = start + st->operands[i].n * sizeof(float);
		size_t		keep;

		if (n == SIZE_MAX ? at < start || at >= end : at >= end || at + n * sizeof(float) <= start)
			continue;
		keep = at > start ? (at - start) / sizeof(float) : 0;
		if (st->fresh[i] > keep)
			st->fresh[i] = keep;
		st->cover[i].hi = st->cover[i].lo = 0;
	}
}

static void *
cuda_alloc(TfBackend *be, size_t bytes)
{
	void	   *p = NULL;

	if (cudaMalloc(&p, bytes > 0 ? bytes : 1) != cudaSuccess)
	{
		(void) cudaGetLastError();	/* out of memory is reported by the caller, not sticky */
		return NULL;
	}
	be->allocations++;
	try
	{
		state(be)->sizes[p] = bytes;
	}
	catch (...)
	{
		(void) cudaFree(p);
		return NULL;
	}
	be->bytes += (int64_t) bytes;
	check(be, cudaMemsetAsync(p, 0, bytes, state(be)->stream), "zeroing an allocation");
	return p;
}

static void
cuda_free(TfBackend *be, void *ptr)
{
	if (ptr != NULL)
	{
		auto		size = state(be)->sizes.find(ptr);

		if (size != state(be)->sizes.end())
		{
			be->bytes -= (int64_t) size->second;
			state(be)->sizes.erase(size);
		}
		check(be, cudaFree(ptr), "cudaFree");
	}
}

/*
 * The state of the communicator's pending work: ncclInProgress until it is
 * done, ncclSuccess, or an error (ncclRemoteError once aborted).
 */
static ncclResult_t
nccl_state(CudaState *st)
{
	std::lock_guard<std::mutex> lock(st->nccl_mu);
	ncclResult_t r = ncclRemoteError;

	if (!st->aborted && ncclCommGetAsyncError(st->comm, &r) != ncclSuccess)
		r = ncclInternalError;
	return r;
}

/*
 * Waits for the compute stream. A rank of several polls instead of blocking,
 * so that a peer that failed (NCCL's asynchronous error) or an abort ends
 * the wait with an error rather than leaving a reduction waiting forever.
 */
static void
stream_wait(TfBackend *be, const char *what)
{
	CudaState  *st = state(be);
	cudaError_t rc;

	if (st->comm == NULL)
	{
		check(be, cudaStreamSynchronize(st->stream), what);
		return;
	}
	while ((rc = cudaStreamQuery(st->stream)) == cudaErrorNotReady)
	{
		ncclResult_t r = nccl_state(st);

		if (r != ncclSuccess && r != ncclInProgress)
		{
			fail(be, what, st->aborted ? "the communicator was aborted (another rank failed)" : ncclGetErrorString(r));
			return;
		}
		std::this_thread::sleep_for(std::chrono::microseconds(20));
	}
	check(be, rc, what);
}

/* Uploads up to this size go through the staging buffers and return at once. */
#define STAGING_MAX ((size_t) 8 << 20)

/*
 * Small uploads (batch layouts, a backward's rows grouped by id, decoding
 * steps) are copied into a page-locked staging buffer and sent
 * asynchronously, so a step has no host synchronisation for them: the
 * source is free on return and the stream's later operations see the data.
 * A buffer is reused two uploads later, once its copy's event has
 * completed: in training long since, the step's synchronisation lying
 * between; where batches accumulate without one, a batch's grouped rows
 * wait for the last batch's copy, queued before its embedding gradient, so
 * the host runs at most about a backward ahead. Larger uploads (weights)
 * wait for the stream.
 */
static void
cuda_upload(TfBackend *be, void *dst, const void *src, size_t bytes)
{
	CudaState  *st = state(be);
	int			i = st->staging_next;

	written(st, (const float *) dst, (bytes + sizeof(float) - 1) / sizeof(float));
	if (bytes > STAGING_MAX)
	{
		check(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, st->stream), "upload");
		stream_wait(be, "upload");
		return;
	}
	st->staging_next ^= 1;
	if (cudaEventQuery(st->staged[i]) == cudaErrorNotReady)
		check(be, cudaEventSynchronize(st->staged[i]), "upload");
	if (bytes > st->staging_bytes[i])
	{
		size_t		grow = bytes < 65536 ? 65536 : bytes + bytes / 4;

		cudaFreeHost(st->staging[i]);
		st->staging_bytes[i] = 0;
		if (cudaMallocHost(&st->staging[i], grow) != cudaSuccess)
		{
			(void) cudaGetLastError();
			st->staging[i] = NULL;
			fail(be, "upload", "out of page-locked host memory for a staging buffer");
			return;
		}
		st->staging_bytes[i] = grow;
	}
	memcpy(st->staging[i], src, bytes);
	check(be, cudaMemcpyAsync(dst, st->staging[i], bytes, cudaMemcpyHostToDevice, st->stream), "upload");
	check(be, cudaEventRecord(st->staged[i], st->stream), "upload");
}

static void
cuda_download(TfBackend *be, void *dst, const void *src, size_t bytes)
{
	check(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, state(be)->stream), "download");
	stream_wait(be, "download");
}

static void
cuda_zero(TfBackend *be, float *x, size_t n)
{
	written(state(be), x, n);
	check(be, cudaMemsetAsync(x, 0, n * sizeof(float), state(be)->stream), "zero");
}

static void
cuda_copy(TfBackend *be, float *dst, const float *src, size_t n)
{
	written(state(be), dst, n);
	check(be, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, state(be)->stream), "copy");
}

/*
 * Grows device buffer *p of *have elements of `size` bytes to hold `need`,
 * with a quarter of headroom (batch shapes vary from step to step; the
 * arena grows the same way); false when out of memory, *p unchanged.
 */
static bool
grow_buffer(TfBackend *be, void **p, size_t *have, size_t need, size_t size)
{
	void	   *q;

	if (need <= *have)
		return true;
	need += need / 4;
	if ((q = cuda_alloc(be, need * size)) == NULL)
		return false;
	cuda_free(be, *p);
	*p = q;
	*have = need;
	return true;
}

/* Grows the attention backward's workspace (k_attention_workspace) to at least `floats`. */
static bool
attention_workspace(TfBackend *be, size_t floats)
{
	CudaState  *st = state(be);

	return grow_buffer(be, (void **) &st->attention_work, &st->attention_work_floats, floats, sizeof(float));
}

/*
 * Grows the attention backward's workspace to the tiled kernels' row
 * statistics and, in bf16, the two rounded-operand workspaces
 * (bf16_operand) to this batch's needs, with a quarter of headroom: batch
 * shapes vary from step to step. False when out of memory.
 */
static bool
cuda_reserve(TfBackend *be, size_t plane, size_t row_stats, size_t operand)
{
	CudaState  *st = state(be);

	(void) plane;				/* attention keeps its planes in shared memory */
	if (!attention_workspace(be, row_stats))
		return false;
	for (int i = 0; st->bf16 && i < 2; i++)
		if (!grow_buffer(be, (void **) &st->operand16[i], &st->operand16_n[i], operand, sizeof(__nv_bfloat16)))
			return false;
	return true;
}

/*
 * Where an op that writes x [n floats] writes their bf16 copy as well: the
 * x16 of the listed buffer that x starts (its first n elements current
 * from then on), or NULL after marking what x overlaps stale (written).
 */
static __nv_bfloat16 *
copy16(TfBackend *be, const float *x, size_t n)
{
	CudaState  *st = state(be);

	for (int i = 0; st->bf16 && i < st->operands_n; i++)
		if (st->operands[i].x == x && n <= st->operands[i].n)
		{
			st->fresh[i] = n;
			st->cover[i].hi = st->cover[i].lo = 0;
			return (__nv_bfloat16 *) st->operands[i].x16;
		}
	written(st, x, n);
	return NULL;
}

/*
 * Where a gemm writing c [n floats] from the start of a listed only16
 * buffer writes its result instead: that buffer's x16, rounded (its first
 * n elements current from then on, the fp32 ones left undefined); NULL
 * where c is no such buffer.
 */
static __nv_bfloat16 *
rounded_output(CudaState *st, const float *c, size_t n)
{
	for (int i = 0; i < st->operands_n; i++)
		if (st->operands[i].only16 && st->operands[i].x == c && n <= st->operands[i].n)
		{
			st->fresh[i] = n;
			st->cover[i].hi = st->cover[i].lo = 0;
			return (__nv_bfloat16 *) st->operands[i].x16;
		}
	return NULL;
}

/*
 * Where attention's backward writes the copies of dq, dk and dv (out[3],
 * row strides ld[3], rows[3], each width columns): out[i]'s place in the
 * copy of the listed buffer holding it (entry[i]), where out[i] is a block
 * of whole columns of that buffer's first rows[i] rows of stride ld[i];
 * else NULL (entry[i] -1).
 */
static void
gradient_copies(const CudaState *st, float *const out[3], const int ld[3], const int rows[3], int width,
				__nv_bfloat16 *copies[3], int entry[3])
{
	for (int i = 0; i < 3; i++)
	{
		size_t		at;

		copies[i] = NULL;
		entry[i] = st->bf16 && rows[i] > 0 ? operand_entry(st, out[i], (size_t) (rows[i] - 1) * ld[i] + width) : -1;
		if (entry[i] < 0)
			continue;
		at = (size_t) (out[i] - st->operands[entry[i]].x);
		if (at + width <= (size_t) ld[i])
			copies[i] = (__nv_bfloat16 *) st->operands[entry[i]].x16 + at;
		else
			entry[i] = -1;
	}
}

/*
 * Columns [lo, hi) of listed buffer `entry` (rows of stride ld) now have
 * current copies: joined to its cover where they extend it, else a cover
 * of their own; a cover of whole rows makes them fresh.
 */
static void
cover_columns(CudaState *st, int entry, int ld, int rows, int lo, int hi)
{
	ColumnCover *c = &st->cover[entry];

	if (c->hi > c->lo && c->ld == ld && c->rows == rows && lo <= c->hi && hi >= c->lo)
	{
		c->lo = std::min(c->lo, lo);
		c->hi = std::max(c->hi, hi);
	}
	else
		*c = {ld, rows, lo, hi};
	if (c->lo == 0 && c->hi == ld)
		st->fresh[entry] = std::max(st->fresh[entry], std::min((size_t) rows * ld, st->operands[entry].n));
}

static void
cuda_set_operands16(TfBackend *be, const TfOperand16 *list, int count)
{
	CudaState  *st = state(be);

	st->operands_n = 0;
	if (count > st->operands_cap)
	{
		TfOperand16 *ops = (TfOperand16 *) realloc(st->operands, count * sizeof(TfOperand16));
		size_t	   *fresh = ops != NULL ? (size_t *) realloc(st->fresh, count * sizeof(size_t)) : NULL;
		ColumnCover *cover = fresh != NULL ? (ColumnCover *) realloc(st->cover, count * sizeof(ColumnCover)) : NULL;

		if (ops != NULL)
			st->operands = ops;
		if (fresh != NULL)
			st->fresh = fresh;
		if (cover == NULL)
		{
			fail(be, "set_operands16", "out of host memory");
			return;
		}
		st->cover = cover;
		st->operands_cap = count;
	}
	for (int i = 0; i < count; i++)
	{
		st->operands[i] = list[i];
		st->fresh[i] = 0;
		st->cover[i].hi = st->cover[i].lo = 0;
	}
	st->operands_n = count;
}

/*
 * A gemm operand in bf16 (set_precision TF_BF16): [rows, cols] row-major
 * with leading dimension ld. Inside the weights: their bf16 copy at the same
 * offset; inside a buffer of set_operands16: its copy, its stale part
 * rounded first; otherwise rounded into operand workspace `which` (0 or 1), which
 * reserve sizes per batch (grown here only past that). NULL after recording
 * out of memory.
 */
static const __nv_bfloat16 *
bf16_operand(TfBackend *be, int which, const float *x, int rows, int cols, int ld)
{
	CudaState  *st = state(be);
	size_t		n = (size_t) (rows - 1) * ld + cols;
	uintptr_t	at = (uintptr_t) x,
				w = (uintptr_t) st->weights;
	int			kept;

	if (at >= w && at + n * sizeof(float) <= w + st->weights_n * sizeof(float))
		return st->weights16 + (x - st->weights);
	if ((kept = operand_entry(st, x, n)) >= 0)
	{
		const TfOperand16 *e = &st->operands[kept];
		size_t		end = (size_t) (x - e->x) + n,
					from = st->fresh[kept];

		if (from < end)
		{
			k_round_bf16((__nv_bfloat16 *) e->x16 + from, e->x + from, end - from, st->stream);
			launched(be, "bf16 rounding");
			st->fresh[kept] = end;
		}
		return (const __nv_bfloat16 *) e->x16 + (x - e->x);
	}
	if (!grow_buffer(be, (void **) &st->operand16[which], &st->operand16_n[which], n, sizeof(__nv_bfloat16)))
	{
		fail(be, "bf16 gemm", "out of device memory for a rounded operand");
		return NULL;
	}
	k_round_bf16(st->operand16[which], x, n, st->stream);
	launched(be, "bf16 rounding");
	return st->operand16[which];
}

/*
 * Row-major C = alpha op(A) op(B) + beta C is column-major
 * C^T = alpha op(B)^T op(A)^T + beta C^T: cuBLAS with the operands swapped.
 * In bf16, both operands rounded (bf16_operand) and fp32 accumulation
 * (cublasGemmEx, CUBLAS_COMPUTE_32F) into fp32 C, or into C's bf16 copy
 * alone where C is only16 (rounded_output).
 */
static void
cuda_gemm(TfBackend *be, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a, int lda,
		  const float *b, int ldb, float beta, float *c, int ldc)
{
	CudaState  *st = state(be);
	cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
				op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
	cublasStatus_t rc;
	size_t		extent;
	__nv_bfloat16 *c16 = NULL;

	if (m == 0 || n == 0)
		return;
	extent = (size_t) (m - 1) * ldc + n;
	if (st->bf16 && k > 0 && beta == 0.0f)
		c16 = rounded_output(st, c, extent);
	if (c16 == NULL)
		written(st, c, extent);
	if (st->bf16 && k > 0)
	{
		const __nv_bfloat16 *a16 = bf16_operand(be, 0, a, trans_a ? k : m, trans_a ? m : k, lda),
				   *b16 = bf16_operand(be, 1, b, trans_b ? n : k, trans_b ? k : n, ldb);

		if (a16 == NULL || b16 == NULL)
			return;
		rc = cublasGemmEx(st->blas, op_b, op_a, n, m, k, &alpha, b16, CUDA_R_16BF, ldb, a16, CUDA_R_16BF, lda,
						  &beta, c16 != NULL ? (void *) c16 : (void *) c, c16 != NULL ? CUDA_R_16BF : CUDA_R_32F,
						  ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
	}
	else
		rc = cublasSgemm(st->blas, op_b, op_a, n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc);
	if (rc != CUBLAS_STATUS_SUCCESS)
	{
		char		why[64];

		snprintf(why, sizeof(why), "cuBLAS status %d (m %d, n %d, k %d)", (int) rc, m, n, k);
		fail(be, st->bf16 ? "cublasGemmEx (bf16)" : "cublasSgemm", why);
	}
}

/*
 * Mixed precision: (re)makes the bf16 copy of the weights, allocated when
 * their count changes; TF_FP32 frees it and the operand workspaces.
 */
static bool
cuda_set_precision(TfBackend *be, TfPrecision precision, const float *weights, size_t n)
{
	CudaState  *st = state(be);

	if (precision == TF_FP32 || n != st->weights_n)
	{
		cuda_free(be, st->weights16);
		for (int i = 0; i < 2; i++)
		{
			cuda_free(be, st->operand16[i]);
			st->operand16[i] = NULL;
			st->operand16_n[i] = 0;
		}
		st->weights16 = NULL;
		st->weights = NULL;
		st->weights_n = 0;
	}
	st->bf16 = precision == TF_BF16;
	be->cache_bytes = st->bf16 ? (int) sizeof(__nv_bfloat16) : (int) sizeof(float);
	if (!st->bf16)
		return true;
	if (st->weights16 == NULL &&
		(st->weights16 = (__nv_bfloat16 *) cuda_alloc(be, (n > 0 ? n : 1) * sizeof(__nv_bfloat16))) == NULL)
	{
		st->bf16 = false;
		be->cache_bytes = sizeof(float);
		return false;
	}
	st->weights = weights;
	st->weights_n = n;
	k_round_bf16(st->weights16, weights, n, st->stream);
	launched(be, "bf16 copy of the weights");
	return true;
}

/* bias_backward's workspace for `cols` columns in `chunks` chunks; NULL after recording out of memory. *floats: its size. */
static float *
columns_workspace(TfBackend *be, int chunks, int cols, size_t *floats)
{
	CudaState  *st = state(be);

	if (!grow_buffer(be, (void **) &st->columns, &st->columns_floats, (size_t) chunks * cols, sizeof(float)))
	{
		fail(be, "column sums", "out of device memory for the workspace");
		return NULL;
	}
	*floats = st->columns_floats;
	return st->columns;
}

static void
cuda_bias_rows(TfBackend *be, float *out, const float *bias, int rows, int cols, int ld)
{
	written(state(be), out, (size_t) (rows - 1) * ld + cols);
	k_bias_rows(out, bias, rows, cols, ld, state(be)->stream);
	launched(be, "bias_rows");
}

static void
cuda_bias_backward(TfBackend *be, float *dbias, const float *dout, int rows, int cols, int ld, float scale)
{
	size_t		floats;
	float	   *ws = columns_workspace(be, rows < MAX_CHUNKS ? rows : MAX_CHUNKS, cols, &floats);

	if (ws == NULL)
		return;
	k_bias_backward(dbias, dout, rows, cols, ld, scale, ws, floats, state(be)->stream);
	launched(be, "bias_backward");
}

/* Frees a plan's descriptors (a plan never built has none). */
static void
lt_plan_free(LtPlan *p)
{
	if (p->desc != NULL)
		cublasLtMatmulDescDestroy(p->desc);
	if (p->a != NULL)
		cublasLtMatrixLayoutDestroy(p->a);
	if (p->b != NULL)
		cublasLtMatrixLayoutDestroy(p->b);
	if (p->c != NULL)
		cublasLtMatrixLayoutDestroy(p->c);
	memset(p, 0, sizeof(*p));
}

/* The largest power of two up to 256 that divides p's address: cuBLASLt's alignment preferences, in bytes. */
static int
alignment(const void *p)
{
	int			align = 256;

	while (align > 1 && (uintptr_t) p % align != 0)
		align /= 2;
	return align;
}

/*
 * The plan of row-major C[m, n] = op(A) op(B) with the given epilogue, as
 * cuda_gemm swaps it into column-major C^T = op(B)^T op(A)^T: cuBLASLt's A
 * is our B, its B our A, so the bias (BIAS: one per row of its D) runs
 * along our columns and the bias gradient (BGRADB: its B summed over k) is
 * our op(A)'s rows summed. found is false when cuBLASLt offers no
 * algorithm; the caller then composes the product from other ops.
 */
static LtPlan *
lt_plan(CudaState *st, const int key[13])
{
	bool		ta = key[0],
				tb = key[1];
	int			m = key[2],
				n = key[3],
				k = key[4];
	cublasOperation_t op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N,
				op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
	cudaDataType_t type = key[8] ? CUDA_R_16BF : CUDA_R_32F,
				bias_type = CUDA_R_32F;
	cublasLtEpilogue_t epilogue = (cublasLtEpilogue_t) key[9];
	cublasLtMatmulPreference_t pref = NULL;
	cublasLtMatmulHeuristicResult_t result;
	uint64_t	workspace = LT_WORKSPACE;
	uint32_t	align_a = key[10],
				align_b = key[11],
				align_c = key[12];
	int			found = 0;
	LtPlan	   *p;

	for (int i = 0; i < LT_PLANS; i++)
		if (memcmp(st->plans[i].key, key, sizeof(st->plans[i].key)) == 0)
			return &st->plans[i];
	p = &st->plans[st->plans_next];
	st->plans_next = (st->plans_next + 1) % LT_PLANS;
	lt_plan_free(p);
	memcpy(p->key, key, sizeof(p->key));
	p->found = cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
		cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a,
									   sizeof(op_a)) == CUBLAS_STATUS_SUCCESS &&
		cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b,
									   sizeof(op_b)) == CUBLAS_STATUS_SUCCESS &&
		cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
									   sizeof(epilogue)) == CUBLAS_STATUS_SUCCESS &&
		cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
									   sizeof(bias_type)) == CUBLAS_STATUS_SUCCESS &&
		cublasLtMatrixLayoutCreate(&p->a, type, tb ? k : n, tb ? n : k, key[6]) == CUBLAS_STATUS_SUCCESS &&
		cublasLtMatrixLayoutCreate(&p->b, type, ta ? m : k, ta ? k : m, key[5]) == CUBLAS_STATUS_SUCCESS &&
		cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, n, m, key[7]) == CUBLAS_STATUS_SUCCESS &&
		cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
		cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
											 sizeof(workspace)) == CUBLAS_STATUS_SUCCESS &&
		cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
											 sizeof(align_a)) == CUBLAS_STATUS_SUCCESS &&
		cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
											 sizeof(align_b)) == CUBLAS_STATUS_SUCCESS &&
		cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
											 sizeof(align_c)) == CUBLAS_STATUS_SUCCESS &&
		cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
											 sizeof(align_c)) == CUBLAS_STATUS_SUCCESS &&
		cublasLtMatmulAlgoGetHeuristic(st->lt, p->desc, p->a, p->b, p->c, p->c, pref, 1, &result,
									   &found) == CUBLAS_STATUS_SUCCESS && found > 0;
	if (pref != NULL)
		cublasLtMatmulPreferenceDestroy(pref);
	if (p->found)
		p->algo = result.algo;
	return p;
}

/*
 * gemm_bias: cuBLASLt with the BIAS or BGRADB epilogue; BGRADB writes the
 * gradient into dbias at beta 0 (where dbias is 16-byte aligned), else
 * into a scratch vector, which one add accumulates into dbias (a copy at
 * beta 0). The plan's alignment
 * preferences are the operands' own (weights sit at any multiple of 4 or 2
 * bytes in the flat vector; cuBLASLt's default assumes 256). Where
 * cuBLASLt has no algorithm, or the bias is not 16-byte aligned, bias_rows
 * and gemm, or gemm and bias_backward (which sums the fp32 values). bias
 * needs beta 0, dbias trans_a and beta 0 or 1 (the uses backend.h names).
 */
static void
cuda_gemm_bias(TfBackend *be, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a, int lda,
			   const float *b, int ldb, float beta, float *c, int ldc, const float *bias, float *dbias)
{
	CudaState  *st = state(be);
	const void *a_op = a,
			   *b_op = b;
	const void *vector;
	LtPlan	   *p = NULL;
	cublasStatus_t rc;
	bool		direct = dbias != NULL && beta == 0.0f && (uintptr_t) dbias % 16 == 0;

	if ((bias == NULL) == (dbias == NULL) || (bias != NULL && beta != 0.0f) ||
		(dbias != NULL && (!trans_a || (beta != 0.0f && beta != 1.0f))))
	{
		fail(be, "gemm_bias", "needs a bias with beta 0 or a bias gradient of op(A) = A^T with beta 0 or 1");
		return;
	}
	if (m == 0 || n == 0)
		return;
	if (k > 0 && st->bf16 && ((a_op = bf16_operand(be, 0, a, trans_a ? k : m, trans_a ? m : k, lda)) == NULL ||
							  (b_op = bf16_operand(be, 1, b, trans_b ? n : k, trans_b ? k : n, ldb)) == NULL))
		return;
	if (k > 0 && (bias == NULL || (uintptr_t) bias % 16 == 0))
	{
		int			key[13] = {trans_a, trans_b, m, n, k, lda, ldb, ldc, st->bf16,
			bias != NULL ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_BGRADB, alignment(b_op), alignment(a_op),
		alignment(c)};

		p = lt_plan(st, key);
	}
	if (p == NULL || !p->found)
	{
		if (bias != NULL)
			cuda_bias_rows(be, c, bias, m, n, ldc);
		cuda_gemm(be, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, bias != NULL ? 1.0f : beta, c, ldc);
		if (dbias != NULL && beta == 0.0f)
			cuda_zero(be, dbias, (size_t) m);
		if (dbias != NULL)
			cuda_bias_backward(be, dbias, a, k, m, lda, 1.0f);
		return;
	}
	if (dbias != NULL && !direct && !grow_buffer(be, (void **) &st->bgrad, &st->bgrad_n, (size_t) m, sizeof(float)))
	{
		fail(be, "gemm_bias", "out of device memory for a bias gradient");
		return;
	}
	written(st, c, (size_t) (m - 1) * ldc + n);
	vector = bias != NULL ? (const void *) bias : direct ? (const void *) dbias : (const void *) st->bgrad;
	rc = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vector, sizeof(vector));
	if (rc == CUBLAS_STATUS_SUCCESS)
		rc = cublasLtMatmul(st->lt, p->desc, &alpha, b_op, p->a, a_op, p->b, &beta, c, p->c, c, p->c, &p->algo,
							st->lt_workspace, LT_WORKSPACE, st->stream);
	if (rc != CUBLAS_STATUS_SUCCESS)
	{
		char		why[80];

		snprintf(why, sizeof(why), "cuBLASLt status %d (m %d, n %d, k %d)", (int) rc, m, n, k);
		fail(be, "cublasLtMatmul", why);
		return;
	}
	if (dbias != NULL && !direct && beta == 0.0f)
		cuda_copy(be, dbias, st->bgrad, (size_t) m);
	else if (dbias != NULL && !direct)
	{
		k_add(dbias, dbias, st->bgrad, (size_t) m, st->stream);
		launched(be, "bias gradient");
	}
}

static void
cuda_embed(TfBackend *be, float *out, const int32_t *ids, const int32_t *positions, const float *embedding,
		   const float *pe, int rows, int d, float scale, float p, uint64_t seed, uint64_t stream,
		   uint8_t *keep_mask)
{
	k_embed(out, copy16(be, out, (size_t) rows * d), ids, positions, embedding, pe, rows, d, scale, p, seed, stream,
			keep_mask, state(be)->stream);
	launched(be, "embed");
}

static void
cuda_embed_backward(TfBackend *be, float *dembedding, const float *dout, int rows, const float *dout2, int rows2,
					const int32_t *ids, const int32_t *groups, int unique, int d, float scale)
{
	k_embed_backward(dembedding, dout, rows, dout2, groups, unique, d, scale, state(be)->stream);
	launched(be, "embed_backward");
}

static void
cuda_dropout(TfBackend *be, float *out, const float *x, size_t n, float p, uint64_t seed, uint64_t stream,
			 uint8_t *keep_mask)
{
	CudaState  *st = state(be);

	if (p <= 0.0f)				/* a copy, or nothing in place */
	{
		if (out != x)
			cuda_copy(be, out, x, n);
		return;
	}
	k_dropout(out, copy16(be, out, n), x, n, p, seed, stream, keep_mask, st->stream);
	launched(be, "dropout");
}

static void
cuda_dropout_backward(TfBackend *be, float *dx, const float *dout, size_t n, float p, const uint8_t *keep_mask)
{
	if (p <= 0.0f)				/* a copy, or nothing in place */
	{
		if (dx != dout)
			cuda_copy(be, dx, dout, n);
		return;
	}
	k_dropout_backward(dx, copy16(be, dx, n), dout, n, p, keep_mask, state(be)->stream);
	launched(be, "dropout_backward");
}

static void
cuda_add(TfBackend *be, float *out, const float *a, const float *b, size_t n)
{
	written(state(be), out, n);
	k_add(out, a, b, n, state(be)->stream);
	launched(be, "add");
}

static void
cuda_activation(TfBackend *be, TfActivation f, float *out, const float *x, size_t n)
{
	k_activation(f, out, copy16(be, out, n), x, n, state(be)->stream);
	launched(be, "activation");
}

static void
cuda_activation_backward(TfBackend *be, TfActivation f, float *dx, const float *dout, const float *x, size_t n)
{
	k_activation_backward(f, dx, copy16(be, dx, n), dout, x, n, state(be)->stream);
	launched(be, "activation_backward");
}

static void
cuda_layernorm(TfBackend *be, float *out, float *mean, float *rstd, const float *x, const float *gamma,
			   const float *beta, int rows, int d, float eps)
{
	k_layernorm(out, copy16(be, out, (size_t) rows * d), mean, rstd, x, gamma, beta, rows, d, eps,
				state(be)->stream);
	launched(be, "layernorm");
}

/* Adds the queued LayerNorm backwards' partials to their dgamma and dbeta: one launch. */
static void
norm_totals(TfBackend *be)
{
	CudaState  *st = state(be);

	if (st->norm_totals.n > 0)
	{
		k_layernorm_dparams_totals(&st->norm_totals, st->norm_max_d, st->stream);
		launched(be, "layernorm_dparams_totals");
	}
	st->norm_totals.n = 0;
	st->norm_max_d = 0;
	st->norm_partials_used = 0;
}

/* Grows the partials' workspace to `floats`; false after recording out of memory. Nothing may be queued. */
static bool
grow_norm_partials(TfBackend *be, size_t floats)
{
	CudaState  *st = state(be);

	if (grow_buffer(be, (void **) &st->norm_partials, &st->norm_partials_floats, floats, sizeof(float)))
		return true;
	fail(be, "LayerNorm backward", "out of device memory for the parameter gradients' partial sums");
	return false;
}

/*
 * The queued backwards' totals; then, where this pass's backwards did not
 * fit the workspace at once, it grows to hold them all, so that the next
 * pass of the same shapes sums in one launch.
 */
static void
cuda_layernorm_backward_finish(TfBackend *be)
{
	CudaState  *st = state(be);

	norm_totals(be);
	if (st->norm_partials_pass > st->norm_partials_floats)
		(void) grow_norm_partials(be, st->norm_partials_pass);
	st->norm_partials_pass = 0;
}

/* Whether the vectors a [na] and b [nb] share an element. */
static bool
shares(const float *a, const float *b, int na, int nb)
{
	return a < b + nb && b < a + na;
}

/*
 * The partials' room (k_layernorm_chunks(rows) * 2 * d floats) of a
 * LayerNorm backward (rows > 0), queued for layernorm_backward_finish with
 * its dgamma and dbeta; NULL after recording out of memory. Where the
 * queue or the workspace is full, or a queued backward adds into the same
 * gradients, the queued ones are summed first; a workspace too small for
 * this one alone grows. The finish then grows it to hold the whole pass's
 * (an eighth of one [rows, d] activation a LayerNorm), so that from a
 * training run's second step on one launch sums them all.
 */
static float *
norm_partials(TfBackend *be, float *dgamma, float *dbeta, int rows, int d)
{
	CudaState  *st = state(be);
	LayerNormTotals *t = &st->norm_totals;
	int			chunks = k_layernorm_chunks(rows);
	size_t		need = (size_t) chunks * 2 * d;
	bool		full = t->n == LAYERNORM_TOTALS_MAX;
	float	   *p;

	/* one launch's blocks must not add into the same gradient: a queued one's first */
	for (int i = 0; i < t->n && !full; i++)
		full = shares(dgamma, t->dgamma[i], d, t->d[i]) || shares(dgamma, t->dbeta[i], d, t->d[i]) ||
			shares(dbeta, t->dgamma[i], d, t->d[i]) || shares(dbeta, t->dbeta[i], d, t->d[i]);
	if (full)
		norm_totals(be);
	st->norm_partials_pass += need;
	if (st->norm_partials_used + need > st->norm_partials_floats)
	{
		norm_totals(be);
		if (need > st->norm_partials_floats && !grow_norm_partials(be, need))
			return NULL;
	}
	p = st->norm_partials + st->norm_partials_used;
	st->norm_partials_used += need;
	t->dgamma[t->n] = dgamma;
	t->dbeta[t->n] = dbeta;
	t->partials[t->n] = p;
	t->chunks[t->n] = chunks;
	t->d[t->n] = d;
	t->n++;
	if (d > st->norm_max_d)
		st->norm_max_d = d;
	return p;
}

static void
cuda_layernorm_backward(TfBackend *be, float *dx, float *dgamma, float *dbeta, const float *dout, const float *x,
						const float *mean, const float *rstd, const float *gamma, int rows, int d)
{
	float	   *partials = rows > 0 ? norm_partials(be, dgamma, dbeta, rows, d) : NULL;

	if (partials == NULL)
		return;
	written(state(be), dx, (size_t) rows * d);
	k_layernorm_backward(dx, dout, x, mean, rstd, gamma, rows, d, partials, state(be)->stream);
	launched(be, "layernorm_backward");
}

static void
cuda_residual_layernorm(TfBackend *be, float *out, float *mean, float *rstd, float *r, const float *x,
						const float *y, const float *gamma, const float *beta, int rows, int d, float eps, float p,
						uint64_t seed, uint64_t stream, uint8_t *keep_mask)
{
	written(state(be), r, (size_t) rows * d);
	k_residual_layernorm(out, copy16(be, out, (size_t) rows * d), mean, rstd, r, x, y, gamma, beta, rows, d, eps, p,
						 seed, stream, keep_mask, state(be)->stream);
	launched(be, "residual_layernorm");
}

static void
cuda_residual_layernorm_backward(TfBackend *be, float *dr, float *dy, float *dgamma, float *dbeta,
								 const float *dout, const float *r, const float *mean, const float *rstd,
								 const float *gamma, int rows, int d, float p, const uint8_t *keep_mask)
{
	float	   *partials = rows > 0 ? norm_partials(be, dgamma, dbeta, rows, d) : NULL;

	if (partials == NULL)
		return;
	written(state(be), dr, (size_t) rows * d);
	k_residual_layernorm_backward(dr, dy, copy16(be, dy, (size_t) rows * d), dout, r, mean, rstd, gamma, rows, d, p,
								  keep_mask, partials, state(be)->stream);
	launched(be, "residual_layernorm_backward");
}

/* Sentences longer than one block's shared memory can hold a row of scores for. */
static bool
attention_fits(TfBackend *be, const TfAttentionShape *sh)
{
	char		why[96];

	if (k_attention_fits(sh))
		return true;
	snprintf(why, sizeof(why), "%d keys in one sentence exceed the kernel's shared-memory row", sh->max_k);
	fail(be, "attention", why);
	return false;
}

static void
cuda_attention(TfBackend *be, float *ctx, float *lse, float *probs, const float *q, int ldq, const float *k,
			   const float *v, int ldk, const TfAttentionShape *sh)
{
	CudaState  *st = state(be);
	size_t		n = (size_t) sh->q_rows * sh->num_heads * sh->head_dim;
	int			kept = st->bf16 && sh->q_rows > 0 ? operand_entry(st, ctx, n) : -1;
	__nv_bfloat16 *ctx16 = kept >= 0 && st->operands[kept].x == ctx ? (__nv_bfloat16 *) st->operands[kept].x16 : NULL;

	if (!attention_fits(be, sh))
		return;
	written(st, ctx, SIZE_MAX);
	if (k_attention(ctx, ctx16, lse, probs, q, ldq, k, v, ldk, sh, st->bf16, st->stream) && ctx16 != NULL)
		st->fresh[kept] = n;
	launched(be, "attention");
}

static void
cuda_attention_backward(TfBackend *be, float *dq, float *dk, float *dv, const float *dctx, const float *lse,
						const float *q, int ldq, const float *k, const float *v, int ldk,
						const TfAttentionShape *sh)
{
	CudaState  *st = state(be);

	if (!attention_fits(be, sh))
		return;
	/* reserve sized the tiled kernels' share; the per-row kernels' planes grow here */
	if (!attention_workspace(be, k_attention_workspace(sh, st->bf16)))
	{
		fail(be, "attention_backward", "out of device memory for the workspace");
		return;
	}
	{
		float	   *const out[3] = {dq, dk, dv};
		const int	ld[3] = {ldq, ldk, ldk},
					rows[3] = {sh->q_rows, sh->k_rows, sh->k_rows};
		int			width = sh->num_heads * sh->head_dim,
					entry[3];
		__nv_bfloat16 *copies[3];
		bool		wrote;

		gradient_copies(st, out, ld, rows, width, copies, entry);
		wrote = k_attention_backward(dq, dk, dv, copies, dctx, lse, q, ldq, k, v, ldk, sh, st->bf16,
									 st->attention_work, st->stream);
		/*
		 * The outputs with copies keep their buffers' copies current where
		 * they were; the others stale them. Joined from dv to dq: the
		 * decoder layers' backward runs from the last, whose dk and dv
		 * columns are the last of their buffer.
		 */
		for (int i = 2; i >= 0; i--)
			if (wrote && copies[i] != NULL)
			{
				int			lo = (int) (out[i] - st->operands[entry[i]].x);

				cover_columns(st, entry[i], ld[i], rows[i], lo, lo + width);
			}
			else
				written(st, out[i], SIZE_MAX);
	}
	launched(be, "attention_backward");
}

/*
 * Logits that a product wrote into an only16 buffer's copy alone are read
 * there (any gradient written there alone); otherwise from fp32, in bf16
 * with gradient rounded as they are read (the same bits).
 */
static void
cuda_cross_entropy(TfBackend *be, float *logits, bool gradient, const int32_t *labels, int rows, int vocab,
				   int ld, int pad_id, float label_smoothing, double *row_loss)
{
	CudaState  *st = state(be);
	size_t		n = rows > 0 ? (size_t) (rows - 1) * ld + vocab : 0;
	int			e = st->bf16 && rows > 0 ? operand_entry(st, logits, n) : -1;

	if (e >= 0 && st->operands[e].only16 && st->operands[e].x == logits && st->fresh[e] >= n)
		k_cross_entropy16((__nv_bfloat16 *) st->operands[e].x16, gradient, labels, rows, vocab, ld, pad_id,
						  label_smoothing, row_loss, st->stream);
	else
		k_cross_entropy(logits, gradient && rows > 0 ? copy16(be, logits, n) : NULL, st->bf16 && gradient, gradient,
						labels, rows, vocab, ld, pad_id, label_smoothing, row_loss, st->stream);
	launched(be, "cross_entropy");
}

static void
cuda_accumulate(TfBackend *be, double *out, const double *x, size_t n)
{
	k_accumulate(out, x, n, state(be)->stream);
	launched(be, "accumulate");
}

static void
cuda_sum_squares(TfBackend *be, const float *x, size_t n, double *out)
{
	k_sum_squares(x, n, out, state(be)->partials, state(be)->stream);
	launched(be, "sum_squares");
}

/* In bf16, Adam on the weights of set_precision writes their bf16 copy as well. */
static void
cuda_adam(TfBackend *be, float *params, float *grads, float *m, float *v, size_t n, float grad_scale, float lr,
		  float beta1, float beta2, float eps, float bc1, float bc2)
{
	CudaState  *st = state(be);
	__nv_bfloat16 *params16 = st->bf16 && params == st->weights && n == st->weights_n ? st->weights16 : NULL;

	k_adam(params, params16, grads, m, v, n, grad_scale, lr, beta1, beta2, eps, bc1, bc2, st->stream);
	launched(be, "adam");
}

static void
cuda_gather(TfBackend *be, float *dst, size_t dst_stride, const float *src, size_t src_stride,
			const int32_t *rows, int n, size_t count)
{
	written(state(be), dst, SIZE_MAX);
	k_gather(dst, dst_stride, src, src_stride, rows, n, count, state(be)->stream);
	launched(be, "gather");
}

/* Key/value caches: fp32, or bf16 in mixed precision (be->cache_bytes, set by set_precision). */
static void
cuda_cache_gather(TfBackend *be, void *dst, size_t dst_stride, const void *src, size_t src_stride, bool from_fp32,
				  const int32_t *rows, int n, size_t count)
{
	cudaStream_t stream = state(be)->stream;

	if (be->cache_bytes == (int) sizeof(float))
		k_gather((float *) dst, dst_stride, (const float *) src, src_stride, rows, n, count, stream);
	else if (from_fp32)
		k_gather_to_bf16((__nv_bfloat16 *) dst, dst_stride, (const float *) src, src_stride, rows, n, count, stream);
	else
		k_gather_bf16((__nv_bfloat16 *) dst, dst_stride, (const __nv_bfloat16 *) src, src_stride, rows, n, count,
					  stream);
	launched(be, "cache_gather");
}

static void
cuda_log_softmax_topk(TfBackend *be, const float *logits, int rows, int vocab, int ld, int k, float *top_logp,
					  int32_t *top_id, int skip_id, int eos_id, float *eos_logp)
{
	k_log_softmax_topk(logits, rows, vocab, ld, k, top_logp, top_id, skip_id, eos_id, eos_logp,
					   state(be)->stream);
	launched(be, "log_softmax_topk");
}

/* The GPU needs no host threads: the CPU thread count does not apply. */
static void
cuda_set_threads(TfBackend *be, int threads)
{
	(void) be;
	(void) threads;
}

static int
cuda_status(TfBackend *be, char *err, size_t errlen)
{
	CudaState  *st = state(be);

	if (!st->failed)
		return TF_OK;
	snprintf(err, errlen, "%s", st->error);
	st->failed = false;
	st->norm_totals.n = 0;		/* the failed pass's gradients are lost: nothing to sum into them */
	st->norm_partials_used = st->norm_partials_pass = 0;
	return TF_ERROR;
}

/* Checks an NCCL call. */
static void
check_nccl(TfBackend *be, ncclResult_t rc, const char *what)
{
	if (rc != ncclSuccess)
		fail(be, what, ncclGetErrorString(rc));
}

static void cuda_abort(TfBackend *be);

static int
cuda_join(TfBackend *be, const void *id, int ranks, int rank, char *err, size_t errlen)
{
	CudaState  *st = state(be);
	ncclUniqueId uid;
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	ncclComm_t	comm = NULL;
	ncclResult_t nrc;
	auto		deadline = std::chrono::steady_clock::now() + std::chrono::seconds(JOIN_TIMEOUT_SECONDS);

	static_assert(sizeof(ncclUniqueId) == TF_UNIQUE_ID_BYTES, "TF_UNIQUE_ID_BYTES is NCCL's id size");
	memcpy(&uid, id, sizeof(uid));
	config.blocking = 0;		/* so that waiting for the other ranks can be abandoned */
	{
		std::lock_guard<std::mutex> lock(st->nccl_mu);

		if (cudaSetDevice(st->device) == cudaSuccess && !st->aborted)
			nrc = ncclCommInitRankConfig(&comm, ranks, uid, rank, &config);
		else
			nrc = ncclInvalidUsage;
		if (nrc == ncclSuccess || nrc == ncclInProgress)
			st->comm = comm;
	}
	while (nrc == ncclInProgress && std::chrono::steady_clock::now() < deadline)
	{
		std::this_thread::sleep_for(std::chrono::milliseconds(1));
		nrc = nccl_state(st);
	}
	if (nrc != ncclSuccess)
	{
		snprintf(err, errlen, "CUDA device %d: NCCL could not make rank %d of %d: %s", st->device, rank, ranks,
				 st->aborted ? "aborted (another rank failed)" : nrc == ncclInProgress ?
				 "the other ranks did not join in time" : ncclGetLastError(NULL));
		cuda_abort(be);
		return TF_ERROR;
	}
	return TF_OK;
}

static void
cuda_all_reduce(TfBackend *be, float *x, size_t n, bool last)
{
	CudaState  *st = state(be);
	ncclResult_t rc;

	check(be, cudaEventRecord(st->queued, st->stream), "all-reduce");
	check(be, cudaStreamWaitEvent(st->comm_stream, st->queued, 0), "all-reduce");
	{
		std::lock_guard<std::mutex> lock(st->nccl_mu);

		rc = st->aborted ? ncclRemoteError : ncclAllReduce(x, x, n, ncclFloat32, ncclSum, st->comm, st->comm_stream);
	}
	while (rc == ncclInProgress)	/* a non-blocking communicator may still be queueing it */
	{
		std::this_thread::sleep_for(std::chrono::microseconds(20));
		rc = nccl_state(st);
	}
	if (st->aborted)
	{
		fail(be, "all-reduce", "the communicator was aborted (another rank failed)");
		return;
	}
	check_nccl(be, rc, "all-reduce");
	if (last)
	{
		check(be, cudaEventRecord(st->reduced, st->comm_stream), "all-reduce");
		check(be, cudaStreamWaitEvent(st->stream, st->reduced, 0), "all-reduce");
	}
}

static void
cuda_abort(TfBackend *be)
{
	CudaState  *st = state(be);
	std::lock_guard<std::mutex> lock(st->nccl_mu);

	if (!st->aborted.exchange(true) && st->comm != NULL)
		ncclCommAbort(st->comm);
}

static void
cuda_bind(TfBackend *be)
{
	check(be, cudaSetDevice(state(be)->device), "bind");
}

static void
cuda_destroy(TfBackend *be)
{
	CudaState  *st = state(be);

	cudaSetDevice(st->device);
	cudaStreamSynchronize(st->stream);
	if (st->comm != NULL && !st->aborted)
		ncclCommDestroy(st->comm);
	if (st->comm_stream != NULL)
		cudaStreamDestroy(st->comm_stream);
	if (st->queued != NULL)
		cudaEventDestroy(st->queued);
	if (st->reduced != NULL)
		cudaEventDestroy(st->reduced);
	for (int i = 0; i < 2; i++)
	{
		if (st->staged[i] != NULL)
			cudaEventDestroy(st->staged[i]);
		cudaFreeHost(st->staging[i]);
	}
	cudaFree(st->attention_work);
	cudaFree(st->partials);
	cudaFree(st->columns);
	cudaFree(st->norm_partials);
	cudaFree(st->weights16);
	cudaFree(st->operand16[0]);
	cudaFree(st->operand16[1]);
	cudaFree(st->bgrad);
	cudaFree(st->lt_workspace);
	for (int i = 0; i < LT_PLANS; i++)
		lt_plan_free(&st->plans[i]);
	if (st->lt != NULL)
		cublasLtDestroy(st->lt);
	free(st->operands);
	free(st->fresh);
	free(st->cover);
	if (st->blas != NULL)
		cublasDestroy(st->blas);
	if (st->stream != NULL)
		cudaStreamDestroy(st->stream);
	delete st;
	free(be);
}

extern "C" __attribute__((visibility("default"))) int
tf_cuda_device_count(char *err, size_t errlen)
{
	int			count = 0;
	cudaError_t rc = cudaGetDeviceCount(&count);

	if (rc == cudaSuccess)
		return count;
	snprintf(err, errlen, "no usable CUDA device: %s (CUDA error %d)", cudaGetErrorString(rc), (int) rc);
	(void) cudaGetLastError();
	return -1;
}

extern "C" __attribute__((visibility("default"))) TfBackend *
tf_backend_cuda_create(int device, char *err, size_t errlen)
{
	TfBackend  *be;
	CudaState  *st;
	int			count = 0;
	cudaError_t rc = cudaGetDeviceCount(&count);

	if (rc != cudaSuccess)
	{
		snprintf(err, errlen, "no usable CUDA device: %s (CUDA error %d)", cudaGetErrorString(rc), (int) rc);
		(void) cudaGetLastError();
		return NULL;
	}
	if (device >= count)
	{
		snprintf(err, errlen, "CUDA device %d does not exist (%d device%s)", device, count, count == 1 ? "" : "s");
		return NULL;
	}
	be = (TfBackend *) calloc(1, sizeof(TfBackend));
	st = new (std::nothrow) CudaState();
	if (be == NULL || st == NULL)
	{
		free(be);
		delete st;
		snprintf(err, errlen, "out of memory creating the CUDA backend");
		return NULL;
	}
	st->device = device;
	be->state = st;
	if ((rc = cudaSetDevice(device)) != cudaSuccess || (rc = cudaStreamCreate(&st->stream)) != cudaSuccess ||
		(rc = cudaStreamCreateWithFlags(&st->comm_stream, cudaStreamNonBlocking)) != cudaSuccess ||
		(rc = cudaEventCreateWithFlags(&st->queued, cudaEventDisableTiming)) != cudaSuccess ||
		(rc = cudaEventCreateWithFlags(&st->reduced, cudaEventDisableTiming)) != cudaSuccess ||
		(rc = cudaEventCreateWithFlags(&st->staged[0], cudaEventDisableTiming)) != cudaSuccess ||
		(rc = cudaEventCreateWithFlags(&st->staged[1], cudaEventDisableTiming)) != cudaSuccess ||
		(rc = cudaMalloc((void **) &st->partials, k_sum_squares_partials() * sizeof(double))) != cudaSuccess)
	{
		snprintf(err, errlen, "CUDA device %d: %s", device, cudaGetErrorString(rc));
		cuda_destroy(be);
		return NULL;
	}
	if (cublasCreate(&st->blas) != CUBLAS_STATUS_SUCCESS ||
		cublasSetStream(st->blas, st->stream) != CUBLAS_STATUS_SUCCESS ||
		cublasLtCreate(&st->lt) != CUBLAS_STATUS_SUCCESS ||
		(LT_WORKSPACE > 0 && cudaMalloc(&st->lt_workspace, LT_WORKSPACE) != cudaSuccess))
	{
		snprintf(err, errlen, "CUDA device %d: cuBLAS and cuBLASLt could not be initialised", device);
		cuda_destroy(be);
		return NULL;
	}
	be->name = "cuda";
	be->host_memory = false;
	be->destroy = cuda_destroy;
	be->status = cuda_status;
	be->alloc = cuda_alloc;
	be->free = cuda_free;
	be->upload = cuda_upload;
	be->download = cuda_download;
	be->zero = cuda_zero;
	be->copy = cuda_copy;
	be->reserve = cuda_reserve;
	be->gemm = cuda_gemm;
	be->gemm_bias = cuda_gemm_bias;
	be->set_operands16 = cuda_set_operands16;
	be->vocab_multiple = VOCAB_MULTIPLE;
	be->bias_rows = cuda_bias_rows;
	be->bias_backward = cuda_bias_backward;
	be->embed = cuda_embed;
	be->embed_backward = cuda_embed_backward;
	be->dropout = cuda_dropout;
	be->dropout_backward = cuda_dropout_backward;
	be->add = cuda_add;
	be->activation = cuda_activation;
	be->activation_backward = cuda_activation_backward;
	be->layernorm = cuda_layernorm;
	be->layernorm_backward = cuda_layernorm_backward;
	be->residual_layernorm = cuda_residual_layernorm;
	be->residual_layernorm_backward = cuda_residual_layernorm_backward;
	be->layernorm_backward_finish = cuda_layernorm_backward_finish;
	be->attention = cuda_attention;
	be->attention_backward = cuda_attention_backward;
	be->cross_entropy = cuda_cross_entropy;
	be->accumulate = cuda_accumulate;
	be->sum_squares = cuda_sum_squares;
	be->adam = cuda_adam;
	be->gather = cuda_gather;
	be->cache_gather = cuda_cache_gather;
	be->cache_bytes = sizeof(float);
	be->log_softmax_topk = cuda_log_softmax_topk;
	be->set_precision = cuda_set_precision;
	be->set_threads = cuda_set_threads;
	be->join = cuda_join;
	be->all_reduce = cuda_all_reduce;
	be->abort = cuda_abort;
	be->bind = cuda_bind;
	return be;
}

extern "C" __attribute__((visibility("default"))) int
tf_cuda_unique_id(void *id, char *err, size_t errlen)
{
	ncclUniqueId uid;
	ncclResult_t rc = ncclGetUniqueId(&uid);

	if (rc != ncclSuccess)
	{
		snprintf(err, errlen, "NCCL could not make a communicator id: %s", ncclGetErrorString(rc));
		return TF_ERROR;
	}
	memcpy(id, &uid, sizeof(uid));
	return TF_OK;
}
