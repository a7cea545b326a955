/*
 * corpus.h - reading the corpus files of scripts/fetch-corpus (one sentence
 * per line) for the benchmarks and the engine-level corpus checks.
 */
#ifndef ATTENTION_BENCH_CORPUS_H
#define ATTENTION_BENCH_CORPUS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

/* Reads the lines of a file into a malloc'd array; returns the count. */
static size_t
read_lines(const char *path, char ***lines, size_t **lengths)
{
	FILE	   *f = fopen(path, "r");
	char	   *line = NULL;
	size_t		cap = 0,
				n = 0,
				room = 1024;
	ssize_t		len;

	if (f == NULL)
	{
		fprintf(stderr, "cannot open %s\n", path);
		exit(1);
	}
	*lines = malloc(room * sizeof(char *));
	*lengths = malloc(room * sizeof(size_t));
	while ((len = getline(&line, &cap, f)) >= 0)
	{
		if (len > 0 && line[len - 1] == '\n')
			line[--len] = '\0';
		if (n == room)
		{
			room *= 2;
			*lines = realloc(*lines, room * sizeof(char *));
			*lengths = realloc(*lengths, room * sizeof(size_t));
		}
		(*lines)[n] = strdup(line);
		(*lengths)[n++] = (size_t) len;
	}
	free(line);
	fclose(f);
	return n;
}

#endif
