/*
 * main.c - engine unit-test runner (no PostgreSQL): runs every suite and
 * exits non-zero when any check failed.
 * Usage: run_tests FIXTURES_DIR [cuda CUDA_LIBRARY]
 * With "cuda" the model and decode suites run on the CUDA backend of
 * CUDA_LIBRARY (attention_cuda.so on a GPU, attention_cuda_emu.so under
 * emulation) and the backend suite compares every op of it with the CPU's.
 * ATTENTION_TEST_SUITES=backend,model runs only the suites named.
 * ATTENTION_TEST_NODE (set by test_parallel for a process it starts): runs
 * that suite's second node only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "blas.h"
#include "check.h"
#include "transformer.h"

int			check_failures = 0;
int			check_count = 0;
const char *test_device = "cpu";
const char *test_cuda_library = NULL;
const char *test_fixtures = "test/fixtures";

/* oneDNN's effective ISA (ONEDNN_MAX_CPU_ISA caps it), by its variable's name. */
static const char *
onednn_isa(void)
{
	switch (dnnl_get_effective_cpu_isa())
	{
		case dnnl_cpu_isa_sse41:
			return "SSE41";
		case dnnl_cpu_isa_avx:
			return "AVX";
		case dnnl_cpu_isa_avx2:
			return "AVX2";
		case dnnl_cpu_isa_avx2_vnni:
			return "AVX2_VNNI";
		case dnnl_cpu_isa_avx512_core:
			return "AVX512_CORE";
		case dnnl_cpu_isa_avx512_core_vnni:
			return "AVX512_CORE_VNNI";
		case dnnl_cpu_isa_avx512_core_bf16:
			return "AVX512_CORE_BF16";
		case dnnl_cpu_isa_avx512_core_amx:
			return "AVX512_CORE_AMX";
		default:
			return "other";
	}
}

/* One suite: its name and entry point. */
typedef struct Suite
{
	const char *name;
	void		(*run) (const char *fixtures);
} Suite;

int
main(int argc, char **argv)
{
	const Suite suites[] = {{"bleu", test_bleu}, {"safetensors", test_safetensors}, {"sentencepiece", test_spm},
	{"ops", test_ops}, {"backend", test_backend}, {"model", test_model}, {"decode", test_decode}, {"parallel", test_parallel},
	{"precision", test_precision}, {"marian", test_marian}, {"quantize", test_quantize}, {"pool", test_pool}};
	const char *fixtures = argc > 1 ? argv[1] : "test/fixtures";
	size_t		i;

	if (argc > 3 && strcmp(argv[2], "cuda") == 0)
	{
		test_device = "cuda";
		test_cuda_library = argv[3];
		tf_backend_set_cuda_library(argv[3]);
	}
	else if (argc > 2)
	{
		fprintf(stderr, "usage: %s FIXTURES_DIR [cuda CUDA_LIBRARY]\n", argv[0]);
		return 2;
	}
	test_fixtures = fixtures;
	if (getenv("ATTENTION_TEST_NODE") != NULL)
		return test_parallel_node();	/* test_parallel's second node, in this process */
	/*
	 * the kernels this run's sums come from (fixtures must hold under every
	 * family); loading OpenBLAS first makes them the engine's choice
	 */
	{
		char		err[512];
		const TfBlas *blas = tf_blas(err, sizeof(err));

		if (blas == NULL)
		{
			fprintf(stderr, "%s\n", err);
			return 1;
		}
		printf("engine tests (%s): OpenBLAS's %s kernels, oneDNN's %s ISA\n", test_device, blas->get_corename(),
			   onednn_isa());
	}

	for (i = 0; i < sizeof(suites) / sizeof(suites[0]); i++)
	{
		int			before_checks = check_count;
		int			before_failures = check_failures;
		const char *only = getenv("ATTENTION_TEST_SUITES");
		char		padded[64];

		snprintf(padded, sizeof(padded), ",%s,", suites[i].name);
		if (only != NULL && only[0] != '\0')
		{
			char		list[512];

			snprintf(list, sizeof(list), ",%s,", only);
			if (strstr(list, padded) == NULL)
				continue;
		}

		suites[i].run(fixtures);
		printf("%-14s %5d checks, %d failed\n", suites[i].name,
			   check_count - before_checks, check_failures - before_failures);
	}
	printf("engine tests (%s): %d checks, %d failed\n", test_device, check_count, check_failures);
	return check_failures == 0 ? 0 : 1;
}
