/*
 * optim.c - Adam with the paper's learning-rate schedule (section 5.3,
 * eq. 3), global gradient-norm clipping, and gradient accumulation (the
 * gradients of several backward passes add up until a step).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <signal.h>
#include <stdio.h>

#include "model.h"
#include "signals.h"

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

/* TF_OK, or TF_ERROR naming the first invalid optimizer setting. */
static int
check_optimizer(const TfOptimizer *opt, char *err, size_t errlen)
{
	const char *bad = NULL;

	if (!(opt->beta1 >= 0.0f && opt->beta1 < 1.0f))
		bad = "beta1 must be in [0, 1)";
	else if (!(opt->beta2 >= 0.0f && opt->beta2 < 1.0f))
		bad = "beta2 must be in [0, 1)";
	else if (!(opt->epsilon >= 0.0f && isfinite(opt->epsilon)))
		bad = "epsilon must be a finite number >= 0";
	else if (opt->warmup_steps < 1)
		bad = "warmup_steps must be at least 1";
	else if (!(opt->learning_rate_scale > 0.0f && isfinite(opt->learning_rate_scale)))
		bad = "learning_rate_scale must be a finite number > 0";
	else if (!(opt->clip_norm >= 0.0f && isfinite(opt->clip_norm)))
		bad = "clip_norm must be a finite number >= 0";
	if (bad == NULL)
		return TF_OK;
	snprintf(err, errlen, "invalid optimizer setting: %s", bad);
	return TF_ERROR;
}

int
tf_model_step(TfModel *m, const TfOptimizer *opt, TfStepStats *stats, char *err, size_t errlen)
{
	TfBackend  *be = m->be;
	double		host[4];
	double		norm;
	double		lr;
	float		clip = 1.0f;
	int64_t		t = m->step + 1;
	sigset_t	old;

	stats->skipped = false;
	if (check_optimizer(opt, err, errlen) != TF_OK)
		return TF_ERROR;
	if (m->grads == NULL)
	{
		snprintf(err, errlen, "this model was created for inference: it has no optimizer state");
		return TF_ERROR;
	}
	tf_block_signals(&old);
	/* the step's one download: loss total and squared gradient norm together */
	be->sum_squares(be, m->grads, m->num_params, m->stats + 2);
	be->download(be, host, m->stats, sizeof(host));
	tf_restore_signals(&old);
	if (be->status(be, err, errlen) != TF_OK)
		return TF_ERROR;
	stats->loss_sum = host[0];
	stats->tokens = m->pending_tokens;
	norm = sqrt(host[2]);
	stats->grad_norm = norm;
	tf_block_signals(&old);
	tf_model_reset_stats(m);
	if (!isfinite(norm))
	{
		snprintf(err, errlen, "gradient norm is not finite at step %lld; step skipped", (long long) t);
		stats->skipped = true;
		tf_model_zero_grad(m);
		tf_restore_signals(&old);
		return TF_ERROR;
	}
	/* torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when above */
	if (opt->clip_norm > 0.0f && norm > opt->clip_norm)
		clip = (float) (opt->clip_norm / (norm + 1e-6));
	lr = tf_learning_rate(opt, m->config.d_model, t);
	/* one pass: the clipped gradients, the moments, the weights and their bf16 copy; gradients zeroed */
	be->adam(be, m->params, m->grads, m->adam_m, m->adam_v, m->num_params, clip, (float) lr,
			 opt->beta1, opt->beta2, opt->epsilon,
			 (float) (1.0 - pow(opt->beta1, (double) t)), (float) (1.0 - pow(opt->beta2, (double) t)));
	m->step = t;
	m->grad_beta = 0.0f;		/* adam zeroed the gradients */
	tf_restore_signals(&old);
	stats->learning_rate = lr;
	return be->status(be, err, errlen);
}

int64_t
tf_model_steps(const TfModel *m)
{
	return m->step;
}
