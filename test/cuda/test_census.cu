/*
 * test_census.cu - the census build's counts (kernels/emu/census.h) against
 * values worked out by hand for kernels whose traffic is known: a coalesced
 * read (32 lanes, 4 consecutive bytes each: 4 sectors per warp
 * instruction), a strided one (lanes 256 bytes apart: 32 sectors), a
 * broadcast (every lane the same word: 1 sector), a serial loop (one thread,
 * 100 dependent reads: a chain of 100), a block re-reading what an earlier
 * block read (unique sectors once, block sectors twice); and dynamic
 * shared memory: lane i on word i (1 wavefront per warp instruction), all
 * lanes on one word (1), lane i on word 32 i (32: every lane in bank 0),
 * on word 33 i (1: padded rows), 8-byte words (2), 16-byte loads (load4:
 * one instruction; the same 16 bytes in every lane 1 wavefront, lane i's
 * own 16 bytes 4); wmma (wmma_emu.h): a 16 x 16 bf16 tile of contiguous
 * rows as ldmatrix moves it (one instruction, 4 wavefronts), one count per
 * warp-wide mma_sync; PTX mma.sync (mma.cuh): an A and a B fragment
 * loaded from rows of 48 bytes (6 32-bit loads, 1 wavefront each: the
 * padding puts the 8 groups' rows in other banks), one count per warp-wide
 * m16n8k16 product; Philox blocks per lane (device_keep8's 8 draws from
 * each alignment: 2 or 3 blocks, and its bits equal device_uniform's).
 * Built like the
 * census library (instrumented, census_hooks.cc instead of ThreadSanitizer).
 * Prints "N checks, M failed"; exit 1 on a failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.cuh"
#include "emu/wmma_emu.h"
#include "mma.cuh"

using namespace nvcuda;

static int	checks, failures;

__global__ void
copy_kernel(float *out, const float *in, int stride)
{
	int			i = blockIdx.x * blockDim.x + threadIdx.x;

	out[i] = in[(size_t) i * stride];
}

__global__ void
chain_kernel(float *out, const float *in, int n)
{
	float		s = 0.0f;

	for (int i = 0; i < n; i++)
		s += in[i];
	out[0] = s;
}

/*
 * Writes dynamic shared memory at element lane * stride (8-byte elements
 * when wide), then reads the next lane's element, one warp.
 */
__global__ void
shared_kernel(float *out, int stride, bool wide)
{
	DYNAMIC_SHARED(float, s);
	double	   *d = (double *) s;
	int			i = threadIdx.x * stride,
				next = (threadIdx.x + 1) % 32 * stride;

	if (wide)
		d[i] = 1.0;
	else
		s[i] = 1.0f;
	__syncthreads();
	out[threadIdx.x] = wide ? (float) d[next] : s[next];
}

/* One 16-byte load per lane from dynamic shared memory: all lanes the first 16 bytes, or lane i's own. */
__global__ void
shared_vector_kernel(float *out, bool own)
{
	DYNAMIC_SHARED(float4, s4);
	float4		x = load4((const float *) s4 + (own ? 4 * threadIdx.x : 0));

	out[threadIdx.x] = x.x + x.w;
}

/* One warp: two 16 x 16 bf16 tiles from dynamic shared memory (rows of 32 bytes, contiguous), two products. */
__global__ void
mma_kernel(float *out)
{
	DYNAMIC_SHARED(__nv_bfloat16, s);
	wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
	wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
	wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;

	wmma::load_matrix_sync(a, s, 16);
	wmma::load_matrix_sync(b, s + 256, 16);
	wmma::fill_fragment(c, 0.0f);
	wmma::mma_sync(c, a, b, c);
	wmma::mma_sync(c, a, b, c);
	out[threadIdx.x] = c.x[0];
}

/* One warp: an A fragment (16 x 16) and a B fragment (16 x 8) from bf16 rows of 24 elements, three m16n8k16 products. */
__global__ void
mma8_kernel(float *out)
{
	DYNAMIC_SHARED(__nv_bfloat16, s);
	uint32_t	a[4],
				b[2];
	float		d[4] = {0.0f, 0.0f, 0.0f, 0.0f};

	load_a(a, s, 24);
	load_b(b, s + 16 * 24, 24);
	for (int i = 0; i < 3; i++)
		mma16816(d, a, b);
	out[threadIdx.x] = d[0];
}

/*
 * Dropout draws: lane i's 8 keep bits from index first + 8 i (device_keep8)
 * beside the same 8 draws one by one (device_uniform), into keep[2 i] and
 * keep[2 i + 1]; one_by_one false leaves the second out.
 */
__global__ void
philox_kernel(uint32_t *keep, uint64_t first, bool one_by_one)
{
	uint64_t	index = first + 8 * threadIdx.x;
	uint32_t	bits = 0;

	keep[2 * threadIdx.x] = device_keep8(7, 3, index, 0.3f);
	for (int c = 0; one_by_one && c < 8; c++)
		bits |= (uint32_t) (device_uniform(7, 3, index + c) >= 0.3f) << c;
	keep[2 * threadIdx.x + 1] = bits;
}

/* The last launch's record: its counts by key. */
static unsigned long long
field(const char *line, const char *key)
{
	char		k[32];
	const char *p;

	snprintf(k, sizeof(k), " %s=", key);
	p = strstr(line, k);
	return p ? strtoull(p + strlen(k), NULL, 10) : ~0ull;
}

static void
last_launch(const char *path, char *line, size_t n)
{
	FILE	   *f = fopen(path, "r");
	char		buf[1024];

	line[0] = 0;
	while (f && fgets(buf, sizeof(buf), f))
		if (strncmp(buf, "launch ", 7) == 0)
			snprintf(line, n, "%s", buf);
	if (f)
		fclose(f);
}

static void
expect(const char *what, const char *line, const char *key, unsigned long long want)
{
	unsigned long long got = field(line, key);

	checks++;
	if (got != want)
	{
		failures++;
		printf("FAIL %s: %s = %llu, expected %llu\n", what, key, got, want);
	}
}

int
main(void)
{
	const char *path = getenv("CUEMU_CENSUS");
	char		line[1024];
	float	   *in,
			   *out;

	if (!path)
	{
		fprintf(stderr, "set CUEMU_CENSUS to a file\n");
		return 2;
	}
	cudaMalloc((void **) &in, 64 * 64 * sizeof(float));
	cudaMalloc((void **) &out, 256 * sizeof(float));
	cudaMemset(in, 0, 64 * 64 * sizeof(float));

	/* 2 blocks of 32 lanes, 4 consecutive bytes each: per warp 4 read and 4 written sectors */
	LAUNCH(copy_kernel, 2, 32, 0, 0)(out, in, 1);
	last_launch(path, line, sizeof(line));
	expect("coalesced", line, "rreq", 2);
	expect("coalesced", line, "rsec", 8);
	expect("coalesced", line, "wsec", 8);
	expect("coalesced", line, "lanes", 128);
	expect("coalesced", line, "unique", 16);
	expect("coalesced", line, "chain", 2);

	/* lanes 64 floats (256 bytes) apart: a sector per lane */
	LAUNCH(copy_kernel, 1, 32, 0, 0)(out, in, 64);
	last_launch(path, line, sizeof(line));
	expect("strided", line, "rreq", 1);
	expect("strided", line, "rsec", 32);
	expect("strided", line, "wsec", 4);

	/* every lane the same word */
	LAUNCH(copy_kernel, 1, 32, 0, 0)(out, in, 0);
	last_launch(path, line, sizeof(line));
	expect("broadcast", line, "rsec", 1);

	/* one thread, 100 reads then a write: a chain of 101, 100 floats = 13 sectors (4-byte aligned start) */
	LAUNCH(chain_kernel, 1, 1, 0, 0)(out, in, 100);
	last_launch(path, line, sizeof(line));
	expect("serial", line, "chain", 101);
	expect("serial", line, "rreq", 100);
	expect("serial", line, "lanes", 101);

	/* two blocks read the same 32 floats: each block's 4 sectors count, the launch's once */
	LAUNCH(copy_kernel, 2, 32, 0, 0)(out, in, 0);	/* warm: broadcast, both blocks one sector */
	LAUNCH(chain_kernel, 2, 1, 0, 0)(out, in, 32);
	last_launch(path, line, sizeof(line));
	expect("re-read", line, "bsec", 2 * (4 + 1));
	expect("re-read", line, "unique", 4 + 1);

	/* dynamic shared memory: a write and a read instruction per launch */
	LAUNCH(shared_kernel, 1, 32, 33 * 32 * sizeof(float) + 64, 0)(out, 1, false);
	last_launch(path, line, sizeof(line));
	expect("shared, consecutive words", line, "sreq", 2);
	expect("shared, consecutive words", line, "swave", 2);
	LAUNCH(shared_kernel, 1, 32, 33 * 32 * sizeof(float) + 64, 0)(out, 0, false);
	last_launch(path, line, sizeof(line));
	expect("shared, one word", line, "swave", 2);
	LAUNCH(shared_kernel, 1, 32, 33 * 32 * sizeof(float) + 64, 0)(out, 32, false);
	last_launch(path, line, sizeof(line));
	expect("shared, 32-way bank conflict", line, "swave", 2 * 32);
	LAUNCH(shared_kernel, 1, 32, 33 * 32 * sizeof(float) + 64, 0)(out, 33, false);
	last_launch(path, line, sizeof(line));
	expect("shared, padded rows", line, "swave", 2);
	LAUNCH(shared_kernel, 1, 32, 33 * 32 * sizeof(float) + 64, 0)(out, 1, true);
	last_launch(path, line, sizeof(line));
	expect("shared, 8-byte words", line, "sreq", 2);
	expect("shared, 8-byte words", line, "swave", 2 * 2);
	expect("shared, not global", line, "rreq", 0);
	LAUNCH(shared_vector_kernel, 1, 32, 32 * sizeof(float4), 0)(out, false);
	last_launch(path, line, sizeof(line));
	expect("shared, 16-byte broadcast", line, "sreq", 1);
	expect("shared, 16-byte broadcast", line, "swave", 1);
	LAUNCH(shared_vector_kernel, 1, 32, 32 * sizeof(float4), 0)(out, true);
	last_launch(path, line, sizeof(line));
	expect("shared, 16 bytes a lane", line, "sreq", 1);
	expect("shared, 16 bytes a lane", line, "swave", 4);

	/* wmma: a tile load is ldmatrix's 16-byte row pieces, 512 contiguous bytes: 4 wavefronts; a product per warp */
	LAUNCH(mma_kernel, 1, 32, 512 * sizeof(__nv_bfloat16), 0)(out);
	last_launch(path, line, sizeof(line));
	expect("wmma tiles", line, "sreq", 2);
	expect("wmma tiles", line, "swave", 2 * 4);
	expect("wmma products", line, "mma", 2);

	/* mma.sync: 4 + 2 loads of 32 bits, each warp instruction one wavefront; a product per warp */
	LAUNCH(mma8_kernel, 1, 32, 24 * 24 * sizeof(__nv_bfloat16), 0)(out);
	last_launch(path, line, sizeof(line));
	expect("mma.sync fragment loads", line, "sreq", 6);
	expect("mma.sync fragment loads", line, "swave", 6);
	expect("mma.sync products", line, "mma8", 3);

	/* Philox blocks, one per lane and block: 8 draws from a multiple of 4 span 2 blocks, else 3; one by one 8 */
	for (int first = 0; first < 4; first++)
	{
		uint32_t	keep[64];
		int			same = 0;

		LAUNCH(philox_kernel, 1, 32, 0, 0)((uint32_t *) out, (uint64_t) first, false);
		last_launch(path, line, sizeof(line));
		expect(first ? "Philox, 8 draws across 3 blocks" : "Philox, 8 draws in 2 blocks", line, "philox",
			   32 * (first ? 3 : 2));
		LAUNCH(philox_kernel, 1, 32, 0, 0)((uint32_t *) out, (uint64_t) first, true);
		last_launch(path, line, sizeof(line));
		expect("Philox, one a draw", line, "philox", 32 * (first ? 3 : 2) + 32 * 8);
		cudaMemcpy(keep, out, sizeof(keep), cudaMemcpyDeviceToHost);
		for (int i = 0; i < 32; i++)
			same += keep[2 * i] == keep[2 * i + 1];
		checks++;
		if (same != 32)
		{
			failures++;
			printf("FAIL device_keep8 from %d: %d of 32 lanes' bits as device_uniform's\n", first, same);
		}
	}

	printf("census: %d checks, %d failed\n", checks, failures);
	return failures ? 1 : 0;
}
