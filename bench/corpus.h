/*
 * corpus.h - reading the corpus files of scripts/fetch-corpus (one sentence
 * per line) and a joint SentencePiece vocabulary on them, for the
 * benchmarks and the engine-level corpus checks.
 */
#ifndef ATTENTION_BENCH_CORPUS_H
#define ATTENTION_BENCH_CORPUS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "spm.h"

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

/*
 * Reads DIR/train.en and DIR/train.de (n pairs: en[i], de[i] of len_en[i],
 * len_de[i] bytes) and trains a BPE vocabulary of vocab_size pieces on both
 * sides; exits with a message on unreadable files or a SentencePiece error.
 */
static SpmModel *
corpus_train_vocabulary(const char *dir, int vocab_size, char ***en, size_t **len_en, char ***de,
						size_t **len_de, size_t *n)
{
	char		path[4096],
				err[512];
	char	  **all;
	size_t	   *len_all;
	char	   *bytes;
	size_t		len;
	SpmModel   *model;
	SpmTrainOptions opt = {vocab_size, "bpe", 1.0, true, 2};

	snprintf(path, sizeof(path), "%s/train.en", dir);
	*n = read_lines(path, en, len_en);
	snprintf(path, sizeof(path), "%s/train.de", dir);
	if (read_lines(path, de, len_de) != *n)
	{
		fprintf(stderr, "%s: line count differs from train.en\n", path);
		exit(1);
	}
	all = malloc(2 * *n * sizeof(char *));
	len_all = malloc(2 * *n * sizeof(size_t));
	memcpy(all, *en, *n * sizeof(char *));
	memcpy(all + *n, *de, *n * sizeof(char *));
	memcpy(len_all, *len_en, *n * sizeof(size_t));
	memcpy(len_all + *n, *len_de, *n * sizeof(size_t));
	if (spm_train((const char *const *) all, len_all, 2 * *n, &opt, &bytes, &len, err, sizeof(err)) != 0 ||
		spm_load(bytes, len, &model, err, sizeof(err)) != 0)
	{
		fprintf(stderr, "sentencepiece: %s\n", err);
		exit(1);
	}
	spm_free_buffer(bytes);
	free(all);
	free(len_all);
	return model;
}

#endif
