/*
 * optim.c - Adam with the paper's learning-rate schedule (section 5.3,
 * eq. 3), global gradient-norm clipping, and gradient accumulation (the
 * gradients of several backward passes add up until a step).
 */
#include <math.h>
#include <stdio.h>

#include "model.h"

void
tf_optimizer_default(TfOptimizer *opt)
{
	opt->beta1 = 0.9f;
	opt->beta2 = 0.98f;
	opt->epsilon = 1e-9f;
	opt->warmup_steps = 4000;
	opt->learning_rate_scale = 1.0f;
	opt->clip_norm = 0.0f;
}

double
tf_learning_rate(const TfOptimizer *opt, int d_model, int64_t step)
{
	double		s = (double) (step > 0 ? step : 1);
	double		warm = (double) (opt->warmup_steps > 0 ? opt->warmup_steps : 1);

	return opt->learning_rate_scale / sqrt((double) d_model) * fmin(1.0 / sqrt(s), s * pow(warm, -1.5));
}

int
tf_model_step(TfModel *m, const TfOptimizer *opt, double *learning_rate, double *grad_norm,
			  char *err, size_t errlen)
{
	TfBackend  *be = m->be;
	double		norm = sqrt(be->sum_squares(be, m->grads, m->num_params));
	double		lr;
	int64_t		t = m->step + 1;

	if (!isfinite(norm))
	{
		snprintf(err, errlen, "gradient norm is not finite at step %lld; step skipped", (long long) t);
		tf_model_zero_grad(m);
		return TF_ERROR;
	}
	/* torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when above */
	if (opt->clip_norm > 0.0f && norm > opt->clip_norm)
		be->scale(be, m->grads, m->num_params, (float) (opt->clip_norm / (norm + 1e-6)));
	lr = tf_learning_rate(opt, m->config.d_model, t);
	be->adam(be, m->params, m->grads, m->adam_m, m->adam_v, m->num_params, (float) lr,
			 opt->beta1, opt->beta2, opt->epsilon,
			 (float) (1.0 - pow(opt->beta1, (double) t)), (float) (1.0 - pow(opt->beta2, (double) t)));
	m->step = t;
	tf_model_zero_grad(m);
	*learning_rate = lr;
	*grad_norm = norm;
	return TF_OK;
}

int64_t
tf_model_steps(const TfModel *m)
{
	return m->step;
}
