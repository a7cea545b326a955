/*
 * tensors.c - the model's state as a flat list of named tensors (what the
 * checkpoint tables store), and loading it back with full checks.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "signals.h"

/* Names of the non-parameter tensors. */
#define STEP_TENSOR "optimizer.step"
#define SEED_TENSOR "rng.seed"
#define COUNTER_TENSOR "rng.counter"
#define EXTRA_TENSORS 3

/* Fills t as a float32 view of count floats at data with the entry's shape. */
static void
float_tensor(TfTensor *t, const char *prefix, const ParamEntry *e, float *data)
{
	snprintf(t->name, sizeof(t->name), "%s%s", prefix, e->name);
	t->dtype = TF_FLOAT32;
	t->ndim = e->ndim;
	t->shape[0] = e->shape[0];
	t->shape[1] = e->ndim > 1 ? e->shape[1] : 0;
	t->data = data;
	t->bytes = e->count * sizeof(float);
}

/* Fills t as an int8 view of a quantized matrix entry, and scale as a float32 view of its row scales. */
static void
int8_tensors(TfTensor *t, TfTensor *scale, const TfModel *m, const ParamEntry *e)
{
	snprintf(t->name, sizeof(t->name), "%s", e->name);
	t->dtype = TF_INT8;
	t->ndim = 2;
	t->shape[0] = e->shape[0];
	t->shape[1] = e->shape[1];
	t->data = m->q8 + e->offset;
	t->bytes = e->count;
	snprintf(scale->name, sizeof(scale->name), "%s_scale", e->name);
	scale->dtype = TF_FLOAT32;
	scale->ndim = 1;
	scale->shape[0] = e->shape[0];
	scale->data = m->qscale + e->qrow;
	scale->bytes = (size_t) e->shape[0] * sizeof(float);
}

const char *
tf_dtype_name(TfDtype dtype)
{
	return dtype == TF_FLOAT32 ? "float32" : dtype == TF_INT8 ? "int8" : "int64";
}

/* Fills t as an int64 scalar view. */
static void
int64_tensor(TfTensor *t, const char *name, void *data)
{
	memset(t, 0, sizeof(*t));
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->dtype = TF_INT64;
	t->ndim = 0;
	t->data = data;
	t->bytes = sizeof(int64_t);
}

/*
 * The model's tensors as views of its memory (backend memory for float and
 * int8 tensors, the model's host fields for int64 ones), in `extra` more
 * bytes after the array; the caller frees the array. A quantized model's
 * matrices come as an int8 tensor and its scales, after the other entries.
 */
static int
list_tensors(TfModel *m, size_t extra, TfTensor **tensors, int *count, char *err, size_t errlen)
{
	bool		train = m->grads != NULL;
	int			matrices = 0,
				n,
				i;
	TfTensor   *t;

	for (i = 0; m->quantized && i < m->num_entries; i++)
		matrices += m->entries[i].matrix;
	n = train ? 3 * m->num_entries + EXTRA_TENSORS : m->num_entries + matrices;
	t = calloc(1, n * sizeof(TfTensor) + extra);
	if (t == NULL)
	{
		snprintf(err, errlen, "out of memory listing %d tensors", n);
		return TF_ERROR;
	}
	matrices = 0;
	for (i = 0; i < m->num_entries; i++)
	{
		const ParamEntry *e = &m->entries[i];

		if (m->quantized && e->matrix)
		{
			int8_tensors(&t[i], &t[m->num_entries + matrices++], m, e);
			continue;
		}
		float_tensor(&t[i], "", e, m->params + e->offset);
		if (!train)
			continue;
		float_tensor(&t[m->num_entries + i], "optimizer.exp_avg.", e, m->adam_m + e->offset);
		float_tensor(&t[2 * m->num_entries + i], "optimizer.exp_avg_sq.", e, m->adam_v + e->offset);
	}
	if (train)
	{
		int64_tensor(&t[n - 3], STEP_TENSOR, &m->step);
		int64_tensor(&t[n - 2], SEED_TENSOR, &m->seed);
		int64_tensor(&t[n - 1], COUNTER_TENSOR, &m->forwards);
	}
	*tensors = t;
	*count = n;
	return TF_OK;
}

int
tf_model_tensors(TfModel *m, TfTensor **tensors, int *count, char *err, size_t errlen)
{
	TfTensor   *t;
	size_t		bytes;
	char	   *copy;
	int			n,
				i;
	sigset_t	old;

	if (m->be->host_memory)
		return list_tensors(m, 0, tensors, count, err, errlen);
	/* host copies after the array, 8-byte aligned (the array's entries are); quantized models are CPU-only */
	bytes = (size_t) (m->grads != NULL ? 3 : 1) * m->num_params * sizeof(float) + EXTRA_TENSORS * sizeof(int64_t);
	if (list_tensors(m, bytes, &t, &n, err, errlen) != TF_OK)
		return TF_ERROR;
	copy = (char *) (t + n);
	tf_block_signals(&old);
	for (i = 0; i < n; i++)
	{
		if (t[i].dtype == TF_FLOAT32)
			m->be->download(m->be, copy, t[i].data, t[i].bytes);
		else
			memcpy(copy, t[i].data, t[i].bytes);
		t[i].data = copy;
		copy += (t[i].bytes + 7) & ~(size_t) 7;
	}
	tf_restore_signals(&old);
	if (m->be->status(m->be, err, errlen) != TF_OK)
	{
		free(t);
		return TF_ERROR;
	}
	*tensors = t;
	*count = n;
	return TF_OK;
}

void
tf_tensors_free(TfTensor *tensors)
{
	free(tensors);
}

/* Index of the tensor called name in list, or -1. */
static int
find_tensor(const TfTensor *list, int count, const char *name)
{
	int			i;

	for (i = 0; i < count; i++)
		if (strcmp(list[i].name, name) == 0)
			return i;
	return -1;
}

int
tf_model_load(TfModel *m, const TfTensor *in, int count, char *err, size_t errlen)
{
	TfTensor   *mine;
	int			n,
				i;
	int			rc = TF_OK;

	if (list_tensors(m, 0, &mine, &n, err, errlen) != TF_OK)
		return TF_ERROR;
	/* check everything before changing anything */
	for (i = 0; i < n && rc == TF_OK; i++)
	{
		int			j = find_tensor(in, count, mine[i].name);

		if (j < 0)
		{
			snprintf(err, errlen, "tensor \"%s\" is missing", mine[i].name);
			rc = TF_ERROR;
		}
		else if (in[j].dtype != mine[i].dtype)
		{
			snprintf(err, errlen, "tensor \"%s\" has dtype %s, expected %s", mine[i].name,
					 tf_dtype_name(in[j].dtype), tf_dtype_name(mine[i].dtype));
			rc = TF_ERROR;
		}
		else if (in[j].ndim != mine[i].ndim ||
				 (mine[i].ndim > 0 && in[j].shape[0] != mine[i].shape[0]) ||
				 (mine[i].ndim > 1 && in[j].shape[1] != mine[i].shape[1]) ||
				 in[j].bytes != mine[i].bytes)
		{
			snprintf(err, errlen, "tensor \"%s\" has shape [%lld, %lld] (%d dims, %zu bytes), expected [%lld, %lld] (%d dims)",
					 mine[i].name, (long long) in[j].shape[0], (long long) in[j].shape[1], in[j].ndim,
					 in[j].bytes, (long long) mine[i].shape[0], (long long) mine[i].shape[1], mine[i].ndim);
			rc = TF_ERROR;
		}
	}
	for (i = 0; i < count && rc == TF_OK; i++)
		if (find_tensor(mine, n, in[i].name) < 0)
		{
			snprintf(err, errlen, "tensor \"%s\" does not belong to this model", in[i].name);
			rc = TF_ERROR;
		}
		else if (find_tensor(in, count, in[i].name) != i)
		{
			snprintf(err, errlen, "tensor \"%s\" is given twice", in[i].name);
			rc = TF_ERROR;
		}
	if (rc == TF_OK)
	{
		m->have_forward = false;
		tf_model_zero_grad(m);
		tf_model_reset_stats(m);
	}
	for (i = 0; i < n && rc == TF_OK; i++)
	{
		const TfTensor *src = &in[find_tensor(in, count, mine[i].name)];

		if (mine[i].dtype == TF_INT64)
			memcpy(mine[i].data, src->data, sizeof(int64_t));
		else
			m->be->upload(m->be, mine[i].data, src->data, src->bytes);
	}
	free(mine);
	if (rc == TF_OK && m->quantized)
		tf_model_fit_int8(m);
	if (rc == TF_OK)
	{
		tf_model_weights_changed(m);
		rc = m->be->status(m->be, err, errlen);
	}
	return rc;
}
