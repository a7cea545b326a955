/*
 * test_harness.cu - checks of the CUDA emulation harness itself
 * (kernels/emu): the cuBLAS shim against products written out by hand from
 * cuBLAS's documented definition (C = alpha op(A) op(B) + beta C,
 * column-major, element (i, j) of A at A[i + j * lda]; no expected value is
 * computed by code), and planted bugs the harness must catch.
 * Usage: test_harness gemm | nccl | attributes | wmma | wmma-misaligned | mma | barrier | barrier-bug |
 *        host-read | out-of-bounds
 * wmma checks the emulated warp matrix functions (kernels/emu/wmma_emu.h):
 * a product against values written out by hand, and a planted bug (a mask
 * applied to an accumulator's x[] by an assumed element mapping) that must
 * give other values than the same mask applied through shared memory.
 * mma checks PTX's mma.sync.m16n8k16 as kernels/mma.cuh issues it
 * (emulated by kernels/emu/mma_emu.h): registers set by hand from the PTX
 * ISA's fragment tables (not by mma.cuh's loads) give a product written out
 * by hand, and mma.cuh's four fragment loads from shared memory (A and B
 * each straight and transposed) give the same product, every element; and
 * pack_a makes two accumulator tiles (set by the PTX ISA's C table to
 * 16 row + column) an A fragment that products with 0/1 selection matrices
 * give back element for element.
 * nccl checks the emulated NCCL (kernels/emu/nccl_emu.cc) on 3 ranks as
 * threads (CUEMU_DEVICES >= 3): all-reduce and a group of a broadcast and a
 * max-reduction against values written out by hand, the communicator's
 * device enforced, and an abort that frees ranks left waiting.
 * barrier and barrier-bug print a block sum: scripts/test-cuda-emu runs them
 * in three fiber orders and requires equal values for the correct kernel and
 * different ones for the kernel with its barrier removed.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <nccl.h>
#include <chrono>
#include <thread>

#include "emu/cuda_emu.h"
#include "emu/wmma_emu.h"
#include "mma.cuh"

using namespace nvcuda;

static int	failures;

static float *
up(const float *h, int n)
{
	void	   *d = NULL;

	cudaMalloc(&d, n * sizeof(float));
	cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
	return (float *) d;
}

/* Small integers: products are exact, so equality is the test. */
static void
expect(const char *what, const float *d, const float *want, int n)
{
	float		got[16];
	int			bad = 0;

	cudaMemcpy(got, d, n * sizeof(float), cudaMemcpyDeviceToHost);
	for (int i = 0; i < n; i++)
		bad |= !(got[i] == want[i]);
	printf("%s %s\n", bad ? "FAIL" : "ok  ", what);
	failures += bad;
}

/*
 * A cuBLASLt product D = C (beta) with the shim's descriptors, A's minimum
 * alignment preference align_a bytes (0: cuBLASLt's default);
 * CUBLAS_STATUS_* of the heuristic or the product.
 */
static cublasStatus_t
lt_product(cublasLtHandle_t lt, cublasOperation_t ta, cublasOperation_t tb, cublasLtEpilogue_t epilogue,
		   const void *bias, cudaDataType type, const void *A, int ar, int ac, int lda, const void *B, int br,
		   int bc, int ldb, float beta, float *C, int cr, int cc, uint32_t align_a)
{
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t la, lb, lc;
	cublasLtMatmulPreference_t pref;
	cublasLtMatmulHeuristicResult_t r;
	int			found = 0;
	float		one = 1;
	cublasStatus_t st;

	cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
	cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
	cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
	cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue));
	cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
	cublasLtMatrixLayoutCreate(&la, type, ar, ac, lda);
	cublasLtMatrixLayoutCreate(&lb, type, br, bc, ldb);
	cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, cr, cc, cr);
	cublasLtMatmulPreferenceCreate(&pref);
	if (align_a != 0)
		cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a));
	st = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &r, &found);
	if (st == CUBLAS_STATUS_SUCCESS)
		st = cublasLtMatmul(lt, desc, &one, A, la, B, lb, &beta, C, lc, C, lc, &r.algo, NULL, 0, 0);
	cublasLtMatmulPreferenceDestroy(pref);
	cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(lc);
	cublasLtMatmulDescDestroy(desc);
	return st;
}

/*
 * The cuBLASLt shim's epilogues, worked by hand: BIAS adds bias[i] to row i
 * of D (its length D's rows); BGRADB writes the sums over k of op(B) = B^T
 * (its length D's columns), from bf16 operands as stored; a descriptor
 * attribute the shim does not implement and BGRADB with B not transposed
 * are refused.
 */
static void
lt_goldens(void)
{
	const float X = NAN;
	cublasLtHandle_t lt;
	/* A = [1 2 3; 4 5 6] column-major, lda 2; B = [7 8; 9 10; 11 12], ldb 3; Bt = B^T stored 2x3, ldb 2 */
	float		hA[] = {1, 4, 2, 5, 3, 6},
				hB[] = {7, 9, 11, 8, 10, 12},
				hBt[] = {7, 8, 9, 10, 11, 12},
				hbias[] = {0.5f, -1},
				hC[] = {X, X, X, X},
				ones[] = {1, 1, 1, 1};
	float	   *A = up(hA, 6),
			   *B = up(hB, 6),
			   *Bt = up(hBt, 6),
			   *bias = up(hbias, 2),
			   *C = up(hC, 4),
			   *grad = up(hC, 2);
	/* A B + bias on rows: [58.5 64.5; 138 153]; A B + 1: [59 65; 140 155]; B's column sums: 27 30 */
	float		w1[] = {58.5f, 138, 64.5f, 153},
				w2[] = {59, 140, 65, 155},
				w3[] = {27, 30};
	__nv_bfloat16 hA16[6],
				hBt16[6];
	void	   *A16,
			   *Bt16;
	cublasLtMatmulDesc_t desc;
	int32_t		mode = 0;
	cublasStatus_t st;

	cublasLtCreate(&lt);
	st = lt_product(lt, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_BIAS, bias, CUDA_R_32F, A, 2, 3, 2, B, 3, 2, 3,
					0.0f, C, 2, 2, 0);
	expect("cuBLASLt BIAS: bias[i] on row i of D, beta 0 ignores NaN in C", C, w1, 4);
	failures += st != CUBLAS_STATUS_SUCCESS;
	cudaMemcpy(C, ones, sizeof(ones), cudaMemcpyHostToDevice);
	st = lt_product(lt, CUBLAS_OP_N, CUBLAS_OP_T, CUBLASLT_EPILOGUE_BGRADB, grad, CUDA_R_32F, A, 2, 3, 2, Bt, 2, 3, 2,
					1.0f, C, 2, 2, 0);
	expect("cuBLASLt BGRADB: the product with B transposed, beta 1", C, w2, 4);
	expect("cuBLASLt BGRADB: op(B) summed over k, one per column of D", grad, w3, 2);
	failures += st != CUBLAS_STATUS_SUCCESS;
	for (int i = 0; i < 6; i++)
		hA16[i] = __float2bfloat16_rn(hA[i]), hBt16[i] = __float2bfloat16_rn(hBt[i]);
	cudaMalloc(&A16, sizeof(hA16)), cudaMalloc(&Bt16, sizeof(hBt16));
	cudaMemcpy(A16, hA16, sizeof(hA16), cudaMemcpyHostToDevice);
	cudaMemcpy(Bt16, hBt16, sizeof(hBt16), cudaMemcpyHostToDevice);
	cudaMemcpy(C, ones, sizeof(ones), cudaMemcpyHostToDevice);
	cudaMemcpy(grad, hC, 2 * sizeof(float), cudaMemcpyHostToDevice);
	st = lt_product(lt, CUBLAS_OP_N, CUBLAS_OP_T, CUBLASLT_EPILOGUE_BGRADB, grad, CUDA_R_16BF, A16, 2, 3, 2, Bt16, 2, 3,
					2, 1.0f, C, 2, 2, 0);
	expect("cuBLASLt BGRADB on bf16 operands: the product", C, w2, 4);
	expect("cuBLASLt BGRADB on bf16 operands: the bias gradient", grad, w3, 2);
	failures += st != CUBLAS_STATUS_SUCCESS;
	st = lt_product(lt, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_BGRADB, grad, CUDA_R_32F, A, 2, 3, 2, B, 3, 2, 3,
					0.0f, C, 2, 2, 0);
	printf("%s BGRADB with B not transposed: refused (%d)\n", st == CUBLAS_STATUS_NOT_SUPPORTED ? "ok  " : "FAIL",
		   (int) st);
	failures += st != CUBLAS_STATUS_NOT_SUPPORTED;
	{
		/* A 4 bytes into its allocation: refused under the default 256-byte alignment, taken when declared */
		float		hA1[] = {X, 1, 4, 2, 5, 3, 6};
		float	   *A1 = up(hA1, 7);

		st = lt_product(lt, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_BIAS, bias, CUDA_R_32F, A1 + 1, 2, 3, 2, B, 3,
						2, 3, 0.0f, C, 2, 2, 0);
		printf("%s A less aligned than the algorithm's 256 bytes: refused (%d)\n",
			   st == CUBLAS_STATUS_INVALID_VALUE ? "ok  " : "FAIL", (int) st);
		failures += st != CUBLAS_STATUS_INVALID_VALUE;
		st = lt_product(lt, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_BIAS, bias, CUDA_R_32F, A1 + 1, 2, 3, 2, B, 3,
						2, 3, 0.0f, C, 2, 2, 4);
		expect("cuBLASLt BIAS with A's alignment preference 4 bytes", C, w1, 4);
		failures += st != CUBLAS_STATUS_SUCCESS;
	}
	cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
	st = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof(mode));
	printf("%s an attribute the shim does not implement: refused (%d)\n",
		   st == CUBLAS_STATUS_NOT_SUPPORTED ? "ok  " : "FAIL", (int) st);
	failures += st != CUBLAS_STATUS_NOT_SUPPORTED;
	cublasLtMatmulDescDestroy(desc);
	cublasLtDestroy(lt);
}

static int
gemm_goldens(void)
{
	const float X = NAN;		/* padding and operands that must not be read */
	cublasHandle_t h;
	float		one = 1,
				two = 2,
				zero = 0,
				half = 0.5f;

	cublasCreate(&h);
	/* A = [1 2 3; 4 5 6] (2x3), lda 3 with a padding row; B = [7 8; 9 10; 11 12] (3x2), ldb 3 */
	float		hA[] = {1, 4, X, 2, 5, X, 3, 6, X},
				hB[] = {7, 9, 11, 8, 10, 12},
				hC[] = {X, X, X, X, X, X};
	float	   *A = up(hA, 9),
			   *B = up(hB, 6),
			   *C = up(hC, 6);

	/* A B = [58 64; 139 154], column-major 58 139 64 154 */
	float		w1[] = {58, 139, 64, 154};

	cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, A, 3, B, 3, &zero, C, 2);
	expect("NN, lda > m, beta 0 ignores NaN in C", C, w1, 4);

	/* S = A^T stored 3x2: op(S) = S^T = A; 2 A B + 1 = [117 129; 279 309] */
	float		hS[] = {1, 2, 3, 4, 5, 6},
				ones[] = {1, 1, 1, 1},
				w2[] = {117, 279, 129, 309};
	float	   *S = up(hS, 6);

	cudaMemcpy(C, ones, sizeof(ones), cudaMemcpyHostToDevice);
	cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, 2, 2, 3, &two, S, 3, B, 3, &one, C, 2);
	expect("TN, alpha 2, beta 1", C, w2, 4);

	/* R = B^T stored 2x3 (ldb 2): op(R) = B; A R^T... i.e. NT gives A B again, ldc 3 with padding */
	float		hR[] = {7, 8, 9, 10, 11, 12},
				hC3[] = {X, X, X, X, X, X},
				w3[] = {58, 139, X, 64, 154, X};
	float	   *R = up(hR, 6),
			   *C3 = up(hC3, 6);

	cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, 2, 2, 3, &one, A, 3, R, 2, &zero, C3, 3);
	{
		float		got[6];
		int			bad;

		cudaMemcpy(got, C3, sizeof(got), cudaMemcpyDeviceToHost);
		bad = got[0] != w3[0] || got[1] != w3[1] || !isnan(got[2]) || got[3] != w3[3] || got[4] != w3[4] ||
			!isnan(got[5]);
		printf("%s NT, ldc 3: the padding row of C untouched\n", bad ? "FAIL" : "ok  ");
		failures += bad;
	}

	/* TT: op(S) op(R) = A B; alpha 0.5, beta 0.5 on C = [58 64; 139 154] -> the same */
	cudaMemcpy(C, w1, sizeof(w1), cudaMemcpyHostToDevice);
	cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_T, 2, 2, 3, &half, S, 3, R, 2, &half, C, 2);
	expect("TT, alpha 0.5, beta 0.5", C, w1, 4);

	/*
	 * The backend's row-major idiom: Y[2,2] = X[2,3] W[3,2], all row-major,
	 * as Sgemm(N, N, n, m, k, W, ldw, X, ldx, Y, ldy): Y^T = W^T X^T.
	 * X = [1 2 3; 4 5 6], W = [7 8; 9 10; 11 12]: Y = [58 64; 139 154] row-major.
	 */
	float		hX[] = {1, 2, 3, 4, 5, 6},
				hW[] = {7, 8, 9, 10, 11, 12},
				w4[] = {58, 64, 139, 154};
	float	   *Xd = up(hX, 6),
			   *Wd = up(hW, 6),
			   *Y = up(hC, 4);

	cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, Wd, 2, Xd, 3, &zero, Y, 2);
	expect("row-major Y = X W through the swapped operands", Y, w4, 4);

	/* strided batch: batch 1 uses A1 = [1 0 0; 0 1 0], selecting B's first two rows: [7 8; 9 10] */
	float		hA2[] = {1, 4, X, 2, 5, X, 3, 6, X, 1, 0, X, 0, 1, X, 0, 0, X},
				hB2[] = {7, 9, 11, 8, 10, 12, 7, 9, 11, 8, 10, 12},
				hC2[] = {X, X, X, X, X, X, X, X},
				w5[] = {58, 139, 64, 154, 7, 9, 8, 10};
	float	   *A2 = up(hA2, 18),
			   *B2 = up(hB2, 12),
			   *C2 = up(hC2, 8);

	cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, A2, 3, 9, B2, 3, 6, &zero, C2, 2, 4, 2);
	expect("strided batch of 2", C2, w5, 8);

	/*
	 * bf16 in, bf16 out (cublasGemmEx, CUDA_R_16BF C, fp32 compute): A = [256 1; 256 1],
	 * B = [1 1; 1 3], ldc 3 with a padding row. A B = [257 259; 257 259] rounds to nearest
	 * even: 256 and 260; with beta 1 on a bf16 C of ones, 258 and 260 exactly.
	 */
	{
		float		fa[] = {256, 256, 1, 1},
					fb[] = {1, 1, 1, 3},
					fc[] = {X, X, X, X, X, X},
					want0[] = {256, 256, X, 260, 260, X},
					want1[] = {258, 258, X, 260, 260, X};
		__nv_bfloat16 ha[4],
					hb[4],
					hc[6],
				   *a16,
				   *b16,
				   *c16;
		int			bad = 0;

		for (int i = 0; i < 4; i++)
			ha[i] = __float2bfloat16_rn(fa[i]), hb[i] = __float2bfloat16_rn(fb[i]);
		for (int i = 0; i < 6; i++)
			hc[i] = __float2bfloat16_rn(fc[i]);
		cudaMalloc((void **) &a16, sizeof(ha));
		cudaMalloc((void **) &b16, sizeof(hb));
		cudaMalloc((void **) &c16, sizeof(hc));
		cudaMemcpy(a16, ha, sizeof(ha), cudaMemcpyHostToDevice);
		cudaMemcpy(b16, hb, sizeof(hb), cudaMemcpyHostToDevice);
		cudaMemcpy(c16, hc, sizeof(hc), cudaMemcpyHostToDevice);
		for (int pass = 0; pass < 2; pass++)
		{
			const float *want = pass == 0 ? want0 : want1;

			if (pass == 1)
				for (int i = 0; i < 6; i++)
					hc[i] = __float2bfloat16_rn(i % 3 == 2 ? X : 1.0f);
			cudaMemcpy(c16, hc, sizeof(hc), cudaMemcpyHostToDevice);
			bad |= cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a16, CUDA_R_16BF, 2, b16, CUDA_R_16BF, 2,
								pass == 0 ? &zero : &one, c16, CUDA_R_16BF, 3, CUBLAS_COMPUTE_32F,
								CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS;
			cudaMemcpy(hc, c16, sizeof(hc), cudaMemcpyDeviceToHost);
			for (int i = 0; i < 6; i++)
				bad |= i % 3 == 2 ? !isnan(__bfloat162float(hc[i])) : __bfloat162float(hc[i]) != want[i];
		}
		/* fp32 operands with a bf16 C: not a combination cuBLAS offers */
		bad |= cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, A, CUDA_R_32F, 3, B, CUDA_R_32F, 3, &zero,
							c16, CUDA_R_16BF, 3, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_NOT_SUPPORTED;
		printf("%s bf16 C: rounded to nearest even, widened for beta, padding untouched; fp32 A/B refused\n",
			   bad ? "FAIL" : "ok  ");
		failures += bad;
		cudaFree(a16);
		cudaFree(b16);
		cudaFree(c16);
	}

	/* a documented argument check: lda < max(1, m) with op N */
	{
		cublasStatus_t st = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, A, 1, B, 3, &zero, C, 2);

		printf("%s lda < m gives CUBLAS_STATUS_INVALID_VALUE (%d)\n",
			   st == CUBLAS_STATUS_INVALID_VALUE ? "ok  " : "FAIL", (int) st);
		failures += st != CUBLAS_STATUS_INVALID_VALUE;
	}
	cublasDestroy(h);
	lt_goldens();
	printf("gemm goldens: %d failed\n", failures);
	return failures != 0;
}

/* A block sum over 256 threads; with `bug` the barrier between writing and reading the warp partials is gone. */
__global__ void
block_sum_kernel(const float *x, float *out, int bug)
{
	__shared__ float part[8];
	float		v = x[threadIdx.x];

	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	if ((threadIdx.x & 31) == 0)
		part[threadIdx.x >> 5] = v;
	if (!bug)
		__syncthreads();
	if (threadIdx.x == 0)
	{
		float		s = 0.0f;

		for (int w = 0; w < 8; w++)
			s += part[w];
		*out = s;
	}
}

/* Prints the sum (the script compares it across fiber orders). */
static int
block_sum(int bug)
{
	float		x[256],
				s;
	float	   *dx,
			   *ds;

	for (int i = 0; i < 256; i++)
		x[i] = (float) (i % 7 + 1);
	dx = up(x, 256);
	cudaMalloc((void **) &ds, sizeof(float));
	LAUNCH(block_sum_kernel, 1, 256, 0, 0)(dx, ds, bug);
	cudaMemcpy(&s, ds, sizeof(float), cudaMemcpyDeviceToHost);
	printf("block sum %g\n", s);
	return 0;
}

__global__ void
write_kernel(float *x, int n)
{
	x[threadIdx.x] = (float) n;	/* threads past n write past the allocation */
}

/*
 * One warp: C = A B + 7 with A = 2 I plus A[0][1] = 1 and B[k][c] = k + 16 c
 * (bf16 holds them exactly), into out[0..255] (row-major); then C's strictly
 * upper triangle zeroed through shared memory (out[256..511], the portable
 * way) and by assuming lane l holds row l / 2, columns 8 (l % 2) + i
 * (out[512..767], the planted bug). misaligned: C stored 4 bytes off 32.
 */
__global__ void
wmma_kernel(float *out, bool misaligned)
{
	__shared__ __align__(32) __nv_bfloat16 a[256], b[256];
	__shared__ __align__(32) float c[264];
	wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
	wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
	wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
	int			lane = threadIdx.x;

	for (int e = lane; e < 256; e += 32)
	{
		int			r = e / 16,
					col = e % 16;

		a[e] = __float2bfloat16_rn(r == col ? 2.0f : r == 0 && col == 1 ? 1.0f : 0.0f);
		b[e] = __float2bfloat16_rn((float) (r + 16 * col));
	}
	__syncwarp();
	wmma::load_matrix_sync(fa, a, 16);
	wmma::load_matrix_sync(fb, b, 16);
	wmma::fill_fragment(fc, 7.0f);
	wmma::mma_sync(fc, fa, fb, fc);
	wmma::store_matrix_sync(c + (misaligned ? 1 : 0), fc, 16, wmma::mem_row_major);
	__syncwarp();
	for (int e = lane; e < 256; e += 32)
	{
		out[e] = c[e];
		out[256 + e] = e % 16 > e / 16 ? 0.0f : c[e];
	}
	for (int i = 0; i < fc.num_elements; i++)
		if (8 * (lane % 2) + i > lane / 2)
			fc.x[i] = 0.0f;
	__syncwarp();
	wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
	__syncwarp();
	for (int e = lane; e < 256; e += 32)
		out[512 + e] = c[e];
}

static int
wmma_checks(bool misaligned)
{
	float		got[768];
	float	   *d = NULL;
	int			bad = 0,
				same = 0;

	cudaMalloc((void **) &d, sizeof(got));
	LAUNCH(wmma_kernel, 1, 32, 0, 0)(d, misaligned);
	cudaMemcpy(got, d, sizeof(got), cudaMemcpyDeviceToHost);
	/* C[r][c] = 2 B[r][c] + (r == 0) B[1][c] + 7, B[k][c] = k + 16 c */
	bad |= got[0 * 16 + 0] != 2 * 0 + 1 + 7;	/* B[0][0] = 0, B[1][0] = 1 */
	bad |= got[0 * 16 + 3] != 2 * 48 + 49 + 7;	/* B[0][3] = 48, B[1][3] = 49 */
	bad |= got[5 * 16 + 2] != 2 * 37 + 7;	/* B[5][2] = 37 */
	bad |= got[15 * 16 + 15] != 2 * 255 + 7;	/* B[15][15] = 255 */
	bad |= got[256 + 3] != 0.0f || got[256 + 15 * 16 + 15] != 2 * 255 + 7;
	for (int e = 0; e < 256; e++)
		same += got[256 + e] == got[512 + e];
	printf("%s wmma: hand-written product\n", bad ? "FAIL" : "ok  ");
	printf("%s wmma: a mask by an assumed element mapping gives other values (%d of 256 equal)\n",
		   same < 256 ? "ok  " : "FAIL", same);
	return bad || same == 256;
}

/*
 * One warp's m16n8k16 product D = A B + 7 of A = 2 I + (1 at row 0, column
 * 1) (16 x 16) and B[k][n] = k + 16 n (16 x 8): out[0..127] from registers
 * set by the PTX ISA's tables (group g = lane / 4, t = lane % 4: A's
 * register x holds row g + 8 (x % 2), columns 2t + 8 (x / 2) and the next;
 * B's register x rows 2t + 8 x and the next, column g; D's element e row g
 * + 8 (e / 2), column 2t + e % 2), out[128..255] from mma.cuh's loads of A
 * and B as stored row-major, out[256..383] of A and B stored transposed
 * (load_a_transposed, load_b_rows: the other two layouts); out[384..639]
 * the 16 x 16 A fragment pack_a makes of C tiles holding 16 r + c (columns
 * 0-7 and 8-15), multiplied by B[k][n] = (k == n) and then (k == n + 8).
 */
__global__ void
mma_kernel(float *out)
{
	__shared__ __align__(16) __nv_bfloat16 a[16 * 24], at[16 * 24], b[8 * 24], bt[16 * 16];
	int			lane = threadIdx.x,
				g = lane / 4,
				t = lane % 4;
	uint32_t	ra[4],
				rb[2];
	float		d[3][4];

	for (int e = lane; e < 256; e += 32)
	{
		int			r = e / 16,
					c = e % 16;
		float		x = r == c ? 2.0f : r == 0 && c == 1 ? 1.0f : 0.0f;

		a[r * 24 + c] = at[c * 24 + r] = __float2bfloat16_rn(x);
	}
	for (int e = lane; e < 128; e += 32)
	{
		int			k = e / 8,
					n = e % 8;
		float		x = (float) (k + 16 * n);

		b[n * 24 + k] = bt[k * 16 + n] = __float2bfloat16_rn(x);	/* b: (k, n) at [n][k]; bt: at [k][n] */
	}
	__syncwarp();
	for (int x = 0; x < 4; x++)
	{
		int			r = g + 8 * (x % 2),
					c = 2 * t + 8 * (x / 2);

		ra[x] = pack_bf16(r == c ? 2.0f : r == 0 && c == 1 ? 1.0f : 0.0f,
						  r == c + 1 ? 2.0f : r == 0 && c + 1 == 1 ? 1.0f : 0.0f);
	}
	for (int x = 0; x < 2; x++)
		rb[x] = pack_bf16((float) (2 * t + 8 * x + 16 * g), (float) (2 * t + 8 * x + 1 + 16 * g));
	for (int i = 0; i < 3; i++)
		for (int e = 0; e < 4; e++)
			d[i][e] = 7.0f;
	mma16816(d[0], ra, rb);
	load_a(ra, a, 24);
	load_b(rb, b, 24);
	mma16816(d[1], ra, rb);
	load_a_transposed(ra, at, 24);
	load_b_rows(rb, bt, 16);
	mma16816(d[2], ra, rb);
	for (int i = 0; i < 3; i++)
		for (int e = 0; e < 4; e++)
			out[128 * i + (g + 8 * (e / 2)) * 8 + 2 * t + e % 2] = d[i][e];
	{
		float		left[4],
					right[4];

		for (int e = 0; e < 4; e++)
		{
			left[e] = (float) (16 * (g + 8 * (e / 2)) + 2 * t + e % 2);
			right[e] = left[e] + 8.0f;
		}
		pack_a(ra, left, right);
	}
	for (int sel = 0; sel < 2; sel++)
	{
		float		p[4] = {0.0f, 0.0f, 0.0f, 0.0f};

		for (int x = 0; x < 2; x++)		/* rows 2t + 8 x and the next, column g */
			rb[x] = pack_bf16(2 * t + 8 * x == g + 8 * sel ? 1.0f : 0.0f, 2 * t + 8 * x + 1 == g + 8 * sel ? 1.0f : 0.0f);
		mma16816(p, ra, rb);
		for (int e = 0; e < 4; e++)
			out[384 + 128 * sel + (g + 8 * (e / 2)) * 8 + 2 * t + e % 2] = p[e];
	}
}

static int
mma_checks(void)
{
	float		got[640];
	float	   *d = NULL;
	int			bad = 0,
				same = 0,
				every = 0,
				packed = 0;

	cudaMalloc((void **) &d, sizeof(got));
	LAUNCH(mma_kernel, 1, 32, 0, 0)(d);
	cudaMemcpy(got, d, sizeof(got), cudaMemcpyDeviceToHost);
	/* D[r][n] = 2 B[r][n] + (r == 0) B[1][n] + 7, B[k][n] = k + 16 n */
	bad |= got[0 * 8 + 0] != 2 * 0 + 1 + 7;		/* B[0][0] = 0, B[1][0] = 1 */
	bad |= got[0 * 8 + 3] != 2 * 48 + 49 + 7;	/* B[0][3] = 48, B[1][3] = 49 */
	bad |= got[5 * 8 + 2] != 2 * 37 + 7;		/* B[5][2] = 37 */
	bad |= got[9 * 8 + 6] != 2 * 105 + 7;		/* B[9][6] = 105 */
	bad |= got[15 * 8 + 7] != 2 * 127 + 7;		/* B[15][7] = 127 */
	for (int e = 0; e < 128; e++)
	{
		int			r = e / 8,
					n = e % 8;

		same += got[128 + e] == got[e] && got[256 + e] == got[e];
		every += got[e] == (float) (2 * (r + 16 * n) + (r == 0 ? 1 + 16 * n : 0) + 7);
		packed += got[384 + e] == (float) (16 * r + n) && got[512 + e] == (float) (16 * r + n + 8);
	}
	printf("%s mma: m16n8k16 from registers set by the PTX ISA's fragment tables, hand-written product (%d of 128)\n",
		   bad || every != 128 ? "FAIL" : "ok  ", every);
	printf("%s mma: mma.cuh's fragment loads (row-major and transposed A and B) give the same product (%d of 128)\n",
		   same == 128 ? "ok  " : "FAIL", same);
	printf("%s mma: pack_a of two accumulator tiles is their A fragment (%d of 128 pairs)\n",
		   packed == 128 ? "ok  " : "FAIL", packed);
	return bad || every != 128 || same != 128 || packed != 128;
}

/* Rank r of the nccl check: its results into got[r][0..4], its abort outcome into got[r][5]. */
static void
nccl_rank(ncclUniqueId id, int r, float got[3][6])
{
	ncclComm_t	comm;
	float		h[2] = {(float) (r + 1), 10.0f * (r + 1)},
				b[2] = {7.0f, 8.0f},
				m = (float) (5 - 2 * r);	/* 5, 3, 1: the max is rank 0's */
	float	   *d = up(h, 2),
			   *db = up(r == 1 ? b : h, 2),
			   *dm = up(&m, 1);

	cudaSetDevice(r);
	if (ncclCommInitRank(&comm, 3, id, r) != ncclSuccess)
		return;
	ncclAllReduce(d, d, 2, ncclFloat32, ncclSum, comm, 0);
	ncclGroupStart();
	ncclBroadcast(db, db, 2, ncclFloat32, 1, comm, 0);
	ncclAllReduce(dm, dm, 1, ncclFloat32, ncclMax, comm, 0);
	ncclGroupEnd();
	cudaMemcpy(got[r], d, 2 * sizeof(float), cudaMemcpyDeviceToHost);
	cudaMemcpy(got[r] + 2, db, 2 * sizeof(float), cudaMemcpyDeviceToHost);
	cudaMemcpy(got[r] + 4, dm, sizeof(float), cudaMemcpyDeviceToHost);
	if (r == 0)
	{
		cudaSetDevice(1);		/* not the communicator's device */
		got[0][5] = ncclAllReduce(d, d, 2, ncclFloat32, ncclSum, comm, 0) == ncclInvalidArgument;
		cudaSetDevice(0);
		std::this_thread::sleep_for(std::chrono::milliseconds(200));
		ncclCommAbort(comm);	/* ranks 1 and 2 wait for an all-reduce rank 0 never issues */
	}
	else
	{
		got[r][5] = ncclAllReduce(d, d, 2, ncclFloat32, ncclSum, comm, 0) == ncclRemoteError;
		ncclCommDestroy(comm);
	}
}

static int
nccl_checks(void)
{
	ncclUniqueId id;
	float		got[3][6] = {{0}};
	std::thread ranks[3];

	ncclGetUniqueId(&id);
	for (int r = 0; r < 3; r++)
		ranks[r] = std::thread(nccl_rank, id, r, got);
	for (int r = 0; r < 3; r++)
		ranks[r].join();
	for (int r = 0; r < 3; r++)
	{
		/* sums 1 + 2 + 3 and 10 + 20 + 30; rank 1's 7, 8; the max of 5, 3, 1 */
		if (got[r][0] != 6.0f || got[r][1] != 60.0f || got[r][2] != 7.0f || got[r][3] != 8.0f || got[r][4] != 5.0f)
		{
			fprintf(stderr, "nccl: rank %d got %g %g %g %g %g, expected 6 60 7 8 5\n", r, got[r][0], got[r][1],
					got[r][2], got[r][3], got[r][4]);
			failures++;
		}
		if (got[r][5] != 1.0f)
		{
			fprintf(stderr, "nccl: rank %d: %s\n", r,
					r == 0 ? "an all-reduce off the communicator's device was accepted"
					: "an aborted all-reduce did not fail with ncclRemoteError");
			failures++;
		}
	}
	printf("nccl: %d failures\n", failures);
	return failures != 0;
}

/*
 * Host threads (ranks) setting kernels' shared-memory limits at once, as
 * the attention launchers do on each device's first call: every limit set
 * must be there after, and the ThreadSanitizer build must see no race (the
 * emulator's table was once unguarded: its tree broke under 4 ranks in a
 * test run, and TSan reports the race at once where timing rarely shows it).
 */
static int
attribute_threads(void)
{
	enum {THREADS = 4, KEYS = 2000};
	static char keys[THREADS * KEYS];
	static std::atomic<int> ready;
	std::thread t[THREADS];
	size_t		before = cuemu::max_dyn().size();
	int			bad = 0;

	for (int i = 0; i < THREADS; i++)
		t[i] = std::thread([i] {
			for (ready++; ready < THREADS;)	/* all start together */
				;
			for (int k = 0; k < KEYS; k++)
				cudaFuncSetAttribute((const void *) &keys[i * KEYS + k], cudaFuncAttributeMaxDynamicSharedMemorySize,
									 64 * 1024 + k);
		});
	for (int i = 0; i < THREADS; i++)
		t[i].join();
	bad = cuemu::max_dyn().size() != before + THREADS * KEYS;
	for (int k = 0; k < THREADS * KEYS && !bad; k++)
		bad = cuemu::max_dyn()[(const void *) &keys[k]] != 64 * 1024 + k % KEYS;
	printf("%s %d threads setting %d kernel attributes at once: all kept\n", bad ? "FAIL" : "ok  ", THREADS,
		   THREADS * KEYS);
	return bad;
}

int
main(int argc, char **argv)
{
	const char *c = argc > 1 ? argv[1] : "";
	float	   *d = NULL;

	if (strcmp(c, "gemm") == 0)
		return gemm_goldens();
	if (strcmp(c, "nccl") == 0)
		return nccl_checks();
	if (strcmp(c, "attributes") == 0)
		return attribute_threads();
	if (strcmp(c, "wmma") == 0 || strcmp(c, "wmma-misaligned") == 0)
		return wmma_checks(strcmp(c, "wmma-misaligned") == 0);
	if (strcmp(c, "mma") == 0)
		return mma_checks();
	if (strcmp(c, "barrier") == 0 || strcmp(c, "barrier-bug") == 0)
		return block_sum(strcmp(c, "barrier-bug") == 0);
	cudaMalloc((void **) &d, 64 * sizeof(float));
	if (strcmp(c, "host-read") == 0)
		printf("host read of device memory gave %g\n", d[0]);	/* must fault */
	else if (strcmp(c, "out-of-bounds") == 0)
		LAUNCH(write_kernel, 1, 128, 0, 0)(d, 64);	/* must fault */
	else
	{
		fprintf(stderr, "usage: %s gemm | nccl | attributes | wmma | wmma-misaligned | mma | barrier | barrier-bug | "
				"host-read | out-of-bounds\n", argv[0]);
		return 2;
	}
	printf("%s: not caught\n", c);
	return 0;
}
