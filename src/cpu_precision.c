/*
 * cpu_precision.c - how much faster this CPU trains in bf16 than in fp32,
 * timed on the CPU backend's own products: what training's "auto"
 * precision decides by (transformer.h, tf_cpu_bf16_speedup).
 *
 * Whether the CPU has bf16 instructions does not say which is faster: with
 * AMX a bf16 step ran 1.62x an fp32 one on this project's Intel Xeon, but
 * with AMX hidden from oneDNN (its AVX512_BF16 kernels alone, whose dot
 * products there have about fp32's peak) 0.61x
 * (bench/results/train_step-noamx-vm-20261129-1228.txt); an AMD EPYC with
 * AVX512_BF16 and no AMX multiplied bf16 about 3x as fast as fp32.
 */
#define _POSIX_C_SOURCE 200809L

#include "backend.h"
#include "signals.h"
#include "transformer.h"

#include <pthread.h>
#include <time.h>

/*
 * The products timed: the small configuration's feed-forward layer on a
 * batch of 2,048 tokens, as a training step runs them (d_model 256, d_ff
 * 1024): the forward x W^T with W a weight (bf16: its copy), the input's
 * gradient dY W, and the weight's gradient dY^T x with both operands
 * rounded at the call. Best of SPEEDUP_ROUNDS, the precisions alternating.
 * One shape on one thread whatever the job's model and team: a property of
 * the CPU's bf16 and fp32 units, not of the job.
 */
#define SPEEDUP_TOKENS 2048
#define SPEEDUP_IN 256
#define SPEEDUP_OUT 1024
#define SPEEDUP_ROUNDS 3

static double measured_speedup;
static pthread_once_t measure_once = PTHREAD_ONCE_INIT;

static double
seconds_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Seconds of the three products in `precision`, or -1 when the backend fails. */
static double
time_products(TfBackend *be, TfPrecision precision, float *w, float *x, float *y, float *dy, float *dx,
			  float *dw)
{
	char		err[TF_ERRLEN];
	double		start;

	if (!be->set_precision(be, precision, w, (size_t) SPEEDUP_OUT * SPEEDUP_IN))
		return -1.0;
	start = seconds_now();
	be->gemm(be, false, true, SPEEDUP_TOKENS, SPEEDUP_OUT, SPEEDUP_IN, 1.0f, x, SPEEDUP_IN, w, SPEEDUP_IN,
			 0.0f, y, SPEEDUP_OUT);
	be->gemm(be, false, false, SPEEDUP_TOKENS, SPEEDUP_IN, SPEEDUP_OUT, 1.0f, dy, SPEEDUP_OUT, w, SPEEDUP_IN,
			 0.0f, dx, SPEEDUP_IN);
	be->gemm(be, true, false, SPEEDUP_OUT, SPEEDUP_IN, SPEEDUP_TOKENS, 1.0f, dy, SPEEDUP_OUT, x, SPEEDUP_IN,
			 0.0f, dw, SPEEDUP_IN);
	if (be->status(be, err, sizeof(err)) != TF_OK)
		return -1.0;
	return seconds_now() - start;
}

/*
 * Sets measured_speedup: fp32 seconds over bf16 seconds of the products
 * above (best of each), 0 where bf16 is not native, -1 where the backend
 * failed (out of memory, oneDNN). Runs once per process (pthread_once),
 * with every signal blocked as backend operations want them.
 */
static void
measure_speedup(void)
{
	TfBackend  *be;
	size_t		nw = (size_t) SPEEDUP_OUT * SPEEDUP_IN,
				nx = (size_t) SPEEDUP_TOKENS * SPEEDUP_IN,
				ny = (size_t) SPEEDUP_TOKENS * SPEEDUP_OUT;
	float	   *buf = NULL;
	double		best[2] = {0.0, 0.0};
	bool		failed = false;
	sigset_t	old;

	measured_speedup = 0.0;
	if (!tf_cpu_bf16_native())
		return;
	tf_block_signals(&old);
	be = tf_backend_cpu_create(1);
	if (be != NULL)
		buf = be->alloc(be, (2 * nw + 2 * nx + 2 * ny) * sizeof(float));
	/* the CPU backend grows its operand scratch at the call; reserve says so up front */
	if (buf != NULL && be->reserve(be, 0, 0, ny))
	{
		float	   *w = buf,
				   *dw = w + nw,	/* outside [w, w + nw): set_precision's weights */
				   *x = dw + nw,
				   *dx = x + nx,
				   *y = dx + nx,
				   *dy = y + ny;
		size_t		i;
		int			round,
					p;

		/* values of a layer's scale, so that no operand is denormal */
		for (i = 0; i < nw; i++)
			w[i] = (float) ((i * 7919) % 1000) / 16000.0f - 0.03f;
		for (i = 0; i < nx; i++)
			x[i] = (float) ((i * 104729) % 1000) / 500.0f - 1.0f;
		for (i = 0; i < ny; i++)
			dy[i] = (float) ((i * 15485863) % 1000) / 500000.0f - 0.001f;
		for (round = 0; round < SPEEDUP_ROUNDS && !failed; round++)
			for (p = 0; p < 2 && !failed; p++)
			{
				double		t = time_products(be, p == 0 ? TF_FP32 : TF_BF16, w, x, y, dy, dx, dw);

				failed = t <= 0.0;
				if (!failed && (best[p] == 0.0 || t < best[p]))
					best[p] = t;
			}
	}
	else
		failed = true;
	if (buf != NULL)
		be->free(be, buf);
	if (be != NULL)
		be->destroy(be);
	tf_restore_signals(&old);
	measured_speedup = failed ? -1.0 : best[0] / best[1];
}

double
tf_cpu_bf16_speedup(void)
{
	pthread_once(&measure_once, measure_speedup);
	return measured_speedup;
}

bool
tf_cpu_bf16_preferred(double speedup)
{
	return speedup >= TF_CPU_BF16_MIN_SPEEDUP;
}
