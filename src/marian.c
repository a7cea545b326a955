/*
 * marian.c - between this engine's coordinate order and Marian's (see
 * marian.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "marian.h"

/* Where a parameter's residual dimension lies. */
typedef enum Residual
{
	RESIDUAL_NONE,				/* not in the residual stream */
	RESIDUAL_VECTOR,			/* [d_model] */
	RESIDUAL_COLUMNS,			/* [rows, d_model] */
	RESIDUAL_ROWS				/* [d_model, cols] */
} Residual;

int
tf_marian_coordinate(int e, int d_model)
{
	return e % 2 == 0 ? e / 2 : d_model / 2 + e / 2;
}

float
tf_marian_sinusoid(int pos, int j, int d_model)
{
	int			half = d_model / 2;
	int			k = j < half ? j : j - half;
	double		angle = pos / pow(10000.0, 2.0 * k / d_model);

	return (float) (j < half ? sin(angle) : cos(angle));
}

/* True when name ends with suffix. */
static bool
ends_with(const char *name, const char *suffix)
{
	size_t		n = strlen(name),
				s = strlen(suffix);

	return n >= s && strcmp(name + n - s, suffix) == 0;
}

/* The residual layout of a MarianMT parameter name; -1 for a name it does not know. */
static int
residual_of(const char *name)
{
	static const char *const columns[] = {"q_proj.weight", "k_proj.weight", "v_proj.weight", "fc1.weight"};
	static const char *const none[] = {"q_proj.bias", "k_proj.bias", "v_proj.bias", "fc1.bias"};
	size_t		i;

	if (strcmp(name, "model.shared.weight") == 0)
		return RESIDUAL_COLUMNS;
	if (strcmp(name, "final_logits_bias") == 0)
		return RESIDUAL_NONE;
	if (strncmp(name, "model.encoder.layers.", 21) != 0 && strncmp(name, "model.decoder.layers.", 21) != 0)
		return -1;
	if (ends_with(name, "layer_norm.weight") || ends_with(name, "layer_norm.bias") ||
		ends_with(name, "out_proj.bias") || ends_with(name, "fc2.bias"))
		return RESIDUAL_VECTOR;
	if (ends_with(name, "out_proj.weight") || ends_with(name, "fc2.weight"))
		return RESIDUAL_ROWS;
	for (i = 0; i < sizeof(columns) / sizeof(columns[0]); i++)
		if (ends_with(name, columns[i]))
			return RESIDUAL_COLUMNS;
	for (i = 0; i < sizeof(none) / sizeof(none[0]); i++)
		if (ends_with(name, none[i]))
			return RESIDUAL_NONE;
	return -1;
}

int
tf_marian_permute(TfTensor *t, int d_model, bool to_marian, char *err, size_t errlen)
{
	int			kind = residual_of(t->name);
	int64_t		rows,
				cols,
				r;
	float	   *x = t->data,
			   *tmp;
	int			e;

	if (kind < 0)
	{
		snprintf(err, errlen, "tensor \"%s\" is not a MarianMT parameter", t->name);
		return TF_ERROR;
	}
	if (kind == RESIDUAL_NONE)
		return TF_OK;
	/* a vector is one row; rows are permuted as the columns of the transpose */
	rows = kind == RESIDUAL_VECTOR ? 1 : kind == RESIDUAL_COLUMNS ? t->shape[0] : t->shape[1];
	cols = kind == RESIDUAL_VECTOR ? t->shape[0] : d_model;
	if (t->dtype != TF_FLOAT32 || t->ndim != (kind == RESIDUAL_VECTOR ? 1 : 2) || d_model % 2 != 0 ||
		t->shape[kind == RESIDUAL_ROWS ? 0 : t->ndim - 1] != d_model ||
		t->bytes != (size_t) (rows * d_model) * sizeof(float))
	{
		snprintf(err, errlen, "tensor \"%s\" does not have a float32 residual dimension of d_model %d",
				 t->name, d_model);
		return TF_ERROR;
	}
	tmp = malloc((size_t) d_model * (kind == RESIDUAL_ROWS ? (size_t) rows : 1) * sizeof(float));
	if (tmp == NULL)
	{
		snprintf(err, errlen, "out of memory permuting tensor \"%s\"", t->name);
		return TF_ERROR;
	}
	if (kind == RESIDUAL_ROWS)
	{
		/* [d_model, rows]: whole rows move */
		size_t		row_bytes = (size_t) rows * sizeof(float);

		memcpy(tmp, x, (size_t) d_model * row_bytes);
		for (e = 0; e < d_model; e++)
		{
			int			m = tf_marian_coordinate(e, d_model);

			memcpy(x + (size_t) (to_marian ? m : e) * rows, tmp + (size_t) (to_marian ? e : m) * rows, row_bytes);
		}
	}
	else
	{
		for (r = 0; r < rows; r++)
		{
			float	   *row = x + (size_t) r * cols;

			memcpy(tmp, row, (size_t) cols * sizeof(float));
			for (e = 0; e < d_model; e++)
			{
				int			m = tf_marian_coordinate(e, d_model);

				row[to_marian ? m : e] = tmp[to_marian ? e : m];
			}
		}
	}
	free(tmp);
	return TF_OK;
}
