/*
 * test_safetensors.c - the safetensors header parser (src/safetensors.h):
 * a well-formed header (escapes, metadata, sorting, offsets), and an
 * ERROR message, never a crash, for each kind of bad header.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "safetensors.h"

/* A file: the 8-byte length of json, json, then data_len zero bytes (buf of cap bytes). */
static size_t
file(char *buf, size_t cap, const char *json, size_t data_len)
{
	size_t		n = strlen(json),
				k;

	for (k = 0; k < 8; k++)
		buf[k] = (char) ((n >> (8 * k)) & 0xff);
	memcpy(buf + 8, json, n);
	memset(buf + 8 + n, 0, data_len);
	(void) cap;
	return 8 + n + data_len;
}

/* Parses json + data_len bytes; returns st_parse's result, err receives the message. */
static int
parse(const char *json, size_t data_len, StHeader *h, char *err, size_t errlen)
{
	static char buf[4096];

	return st_parse(buf, file(buf, sizeof(buf), json, data_len), h, err, errlen);
}

/* Expects json to be refused with a message containing `what`. */
static void
refused(const char *json, size_t data_len, const char *what)
{
	StHeader	h;
	char		err[256] = "";

	CHECK(parse(json, data_len, &h, err, sizeof(err)) == -1 && strstr(err, what) != NULL,
		  "%s: expected an error with \"%s\", got \"%s\"", json, what, err);
	CHECK(h.tensors == NULL && h.meta == NULL && h.count == 0, "%s: nothing left allocated", json);
}

void
test_safetensors(const char *fixtures)
{
	StHeader	h;
	char		err[256] = "";
	static char buf[64];

	(void) fixtures;
	CHECK(parse("{\"__metadata__\": {\"attention.step\": \"12\", \"k\": \"a\\\"b\\u00e9\\ud83d\\ude00\"},"
				" \"z.weight\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [8, 32]},"
				" \"a\\/b\": {\"data_offsets\": [0, 8], \"shape\": [2], \"dtype\": \"BF16\"}}   ",
				32, &h, err, sizeof(err)) == 0, "a good header parses: %s", err);
	CHECK(h.count == 2 && strcmp(h.tensors[0].name, "a/b") == 0 && strcmp(h.tensors[1].name, "z.weight") == 0,
		  "tensors sorted by name, escapes decoded");
	CHECK(h.count == 2 && h.tensors[1].ndim == 2 && h.tensors[1].shape[0] == 2 && h.tensors[1].shape[1] == 3 &&
		  h.tensors[1].begin == 8 && h.tensors[1].end == 32 && strcmp(h.tensors[0].dtype, "BF16") == 0,
		  "shape, offsets and dtype read");
	CHECK(h.data_len == 32 && st_meta(&h, "attention.step") != NULL && strcmp(st_meta(&h, "attention.step"), "12") == 0,
		  "metadata read");
	CHECK(st_meta(&h, "k") != NULL && strcmp(st_meta(&h, "k"), "a\"b\xc3\xa9\xf0\x9f\x98\x80") == 0,
		  "\\u escapes and surrogate pairs become UTF-8");
	CHECK(st_meta(&h, "missing") == NULL, "absent metadata is NULL");
	st_free(&h);
	CHECK(parse("{}", 0, &h, err, sizeof(err)) == 0 && h.count == 0, "an empty header parses");
	st_free(&h);

	CHECK(st_parse(buf, 3, &h, err, sizeof(err)) == -1 && strstr(err, "3 bytes") != NULL, "3 bytes: %s", err);
	memset(buf, 0xff, 16);
	CHECK(st_parse(buf, 16, &h, err, sizeof(err)) == -1 && strstr(err, "exceeds") != NULL, "a length beyond: %s", err);
	refused("[]", 0, "expected '{'");
	refused("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}", 4, "expected '}'");
	refused("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 8]}}", 4, "outside the 4 data bytes");
	refused("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 0]}}", 4, "outside");
	refused("{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4, "non-negative integer");
	refused("{\"a\": {\"dtype\": \"F32\", \"shape\": [01], \"data_offsets\": [0, 4]}}", 4, "leading zero");
	refused("{\"a\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", 4, "fraction");
	refused("{\"a\": {\"dtype\": \"F32\", \"shape\": [99999999999999999999], \"data_offsets\": [0, 4]}}", 4,
			"over 2^63");
	refused("{\"a\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}", 4,
			"more than 8 integers");
	refused("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", 4, "must hold 2 integers");
	refused("{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4, "lacks data_offsets");
	refused("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4], \"x\": 1}}", 4,
			"unknown key \"x\"");
	refused("{\"a\": {\"dtype\": \"F32\", \"dtype\": \"F32\"}}", 4, "\"dtype\" twice");
	refused("{\"a\": {\"dtype\": 5, \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "expected '\"'");
	refused("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
			" \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "tensor \"a\" twice");
	refused("{\"__metadata__\": {\"k\": 1}}", 0, "is not a string");
	refused("{\"__metadata__\": {\"k\": \"v\", \"k\": \"w\"}}", 0, "metadata key \"k\" twice");
	refused("{\"__metadata__\": {}, \"__metadata__\": {}}", 0, "\"__metadata__\" twice");
	refused("{\"a\\u0000\": {}}", 0, "\\u0000");
	refused("{\"a\\ud800\": {}}", 0, "lone high surrogate");
	refused("{\"a\\udc00\": {}}", 0, "lone low surrogate");
	refused("{\"a\\q\": {}}", 0, "bad escape");
	refused("{\"a\tb\": {}}", 0, "control character");
	refused("{\"abc", 0, "unterminated string");
	refused("{} x", 0, "bytes after the header");
	{
		char		json[400];

		snprintf(json, sizeof(json), "{\"%0300d\": {}}", 0);
		refused(json, 0, "a name longer than 255 bytes");
	}
}
