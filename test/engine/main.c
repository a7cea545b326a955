/*
 * main.c - engine unit-test runner (no PostgreSQL): runs every suite and
 * exits non-zero when any check failed.
 * Usage: run_tests FIXTURES_DIR
 */
#include <stdio.h>

#include "check.h"

int			check_failures = 0;
int			check_count = 0;

/* One suite: its name and entry point. */
typedef struct Suite
{
	const char *name;
	void		(*run) (const char *fixtures);
} Suite;

int
main(int argc, char **argv)
{
	const Suite suites[] = {{"bleu", test_bleu}, {"sentencepiece", test_spm}, {"ops", test_ops},
	{"model", test_model}, {"decode", test_decode}};
	const char *fixtures = argc > 1 ? argv[1] : "test/fixtures";
	size_t		i;

	for (i = 0; i < sizeof(suites) / sizeof(suites[0]); i++)
	{
		int			before_checks = check_count;
		int			before_failures = check_failures;

		suites[i].run(fixtures);
		printf("%-14s %5d checks, %d failed\n", suites[i].name,
			   check_count - before_checks, check_failures - before_failures);
	}
	printf("engine tests: %d checks, %d failed\n", check_count, check_failures);
	return check_failures == 0 ? 0 : 1;
}
