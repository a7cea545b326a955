/*
 * check.h - the engine test runner's assertions: CHECK counts a failure and
 * prints where, without stopping the suite.
 */
#ifndef ATTENTION_CHECK_H
#define ATTENTION_CHECK_H

#include <stdio.h>

extern int	check_failures;
extern int	check_count;

/* The device the model and decode suites run on: "cpu" or "cuda" (main.c). */
extern const char *test_device;

/* The CUDA library given on the command line, or NULL; the fixtures directory. */
extern const char *test_cuda_library;
extern const char *test_fixtures;

#define CHECK(cond, ...) \
	do { \
		check_count++; \
		if (!(cond)) \
		{ \
			check_failures++; \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__); \
			fprintf(stderr, "\n"); \
		} \
	} while (0)

/* Suites; fixtures is the directory of test fixtures. */
void		test_bleu(const char *fixtures);
void		test_spm(const char *fixtures);
void		test_ops(const char *fixtures);
void		test_model(const char *fixtures);
void		test_precision(const char *fixtures);
void		test_decode(const char *fixtures);
void		test_backend(const char *fixtures);
void		test_parallel(const char *fixtures);
void		test_pool(const char *fixtures);
void		test_safetensors(const char *fixtures);
void		test_marian(const char *fixtures);
void		test_quantize(const char *fixtures);

/* test_parallel's second node, run in a process of its own (ATTENTION_TEST_NODE): its exit status. */
int			test_parallel_node(void);

#endif
