/*
 * quantize.c - int8 models: per-row symmetric quantization of the weights
 * of every matrix product (tf_model_quantize), and fitting loaded int8
 * weights to what the CPU's int8 products take without saturating.
 *
 * The rule (as CTranslate2's and PyTorch's dynamic quantization with
 * per-channel weights): W[n, :] ~ s[n] q[n, :], s[n] = max |W[n, :]| / 127,
 * q rounded to nearest even; activations are quantized per row at each
 * product by the backend (backend.h, linear).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model.h"
#include "signals.h"

float
tf_quantize_row(const float *w, size_t n, int qmax, int8_t *q)
{
	float		amax = 0.0f,
				inv;
	size_t		j;

	for (j = 0; j < n; j++)
		amax = fmaxf(amax, fabsf(w[j]));
	inv = amax > 0.0f ? (float) qmax / amax : 0.0f;
	for (j = 0; j < n; j++)
		q[j] = (int8_t) lrintf(fminf(fmaxf(w[j] * inv, (float) -qmax), (float) qmax));
	return amax / (float) qmax;
}

void
tf_model_fit_int8(TfModel *m)
{
	int			qmax = m->be->int8_weight_max;
	int			i;

	m->int8_fitted = true;
	if (qmax >= 127)
		return;
	for (i = 0; i < m->num_entries; i++)
	{
		const ParamEntry *e = &m->entries[i];
		int64_t		r;

		if (!e->matrix)
			continue;
		for (r = 0; r < e->shape[0]; r++)
		{
			int8_t	   *q = m->q8 + e->offset + (size_t) r * e->shape[1];
			int64_t		j;

			for (j = 0; j < e->shape[1]; j++)
				q[j] = (int8_t) lrintf((float) q[j] * (float) qmax / 127.0f);
			m->qscale[e->qrow + r] *= 127.0f / (float) qmax;
		}
	}
}

TfModel *
tf_model_create_for(const TfConfig *config, const TfTensor *tensors, int count, const char *device, int threads,
					char *err, size_t errlen)
{
	int			i;

	for (i = 0; i < count; i++)
		if (tensors[i].dtype == TF_INT8)
		{
			if (strcmp(device, "cpu") != 0)
			{
				snprintf(err, errlen, "an int8 checkpoint runs on the CPU only, not on device \"%s\"", device);
				return NULL;
			}
			return tf_model_create_quantized(config, threads, err, errlen);
		}
	return tf_model_create_inference(config, device, threads, err, errlen);
}

TfModel *
tf_model_quantize(TfModel *model, int threads, char *err, size_t errlen)
{
	TfModel    *q;
	int			i;

	if (model->quantized || !model->be->host_memory)
	{
		snprintf(err, errlen, "only an fp32 model on the CPU can be quantized (this one is %s on %s)",
				 model->quantized ? "int8" : "fp32", model->be->name);
		return NULL;
	}
	q = tf_model_create_quantized(&model->config, threads, err, errlen);
	if (q == NULL)
		return NULL;
	/* both layouts list the same entries in the same order */
	for (i = 0; i < model->num_entries; i++)
	{
		const ParamEntry *src = &model->entries[i],
				   *dst = &q->entries[i];
		const float *w = model->params + src->offset;
		int64_t		r;

		if (!dst->matrix)
		{
			memcpy(q->params + dst->offset, w, src->count * sizeof(float));
			continue;
		}
		for (r = 0; r < src->shape[0]; r++)
			q->qscale[dst->qrow + r] = tf_quantize_row(w + (size_t) r * src->shape[1], src->shape[1], 127,
													   q->q8 + dst->offset + (size_t) r * src->shape[1]);
	}
	return q;
}
