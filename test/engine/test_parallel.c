/*
 * test_parallel.c - data-parallel training (parallel.h): device lists; one
 * rank against a model accumulating the same batches by hand; with a CUDA
 * library of at least 4 devices (the emulated one: CUEMU_DEVICES=4), 1, 2
 * and 4 ranks on the same 20 steps (dropout on), a run stopped at step 10
 * and resumed on 3 and on 2 ranks, a rank that fails, and the collectives
 * and host synchronisations of a step, counted by the emulator; ranks in
 * two processes (this binary again as the second node, ATTENTION_TEST_NODE)
 * against one process, and that node dying mid-run. With
 * CUEMU_JOIN_FAULT_DEVICE set, only a rank that fails to join.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "fixture.h"
#include "parallel.h"

#define STEPS 20
#define STEP_BATCHES 4
#define ROWS 4
#define LEN 8

/* STEPS * STEP_BATCHES distinct padded batches of the synthetic vocabulary (64 ids). */
static int32_t ids[STEPS * STEP_BATCHES][3][ROWS * LEN];

static void
make_batches(void)
{
	for (int b = 0; b < STEPS * STEP_BATCHES; b++)
	{
		TfBatch		t;

		fixture_synthetic_batch(ids[b][0], ids[b][1], ids[b][2], &t);
		for (int s = 0; s < 3; s++)
			for (int i = 0; i < ROWS * LEN; i++)
				if (ids[b][s][i] >= 4)
					ids[b][s][i] = 4 + (ids[b][s][i] - 4 + 7 * b + s) % 60;
		/* the target input is the labels shifted right after BOS */
		for (int r = 0; r < ROWS; r++)
			for (int i = 1; i < LEN; i++)
				if (ids[b][1][r * LEN + i] != 0)
					ids[b][1][r * LEN + i] = ids[b][2][r * LEN + i - 1];
	}
}

static TfBatch
batch(int b)
{
	TfBatch		t = {ROWS, LEN, LEN, ids[b][0], ids[b][1], ids[b][2], 0};

	return t;
}

static void
tiny_config(TfConfig *c)
{
	tf_config_small(c, 64);
	c->vocab_size = 64;
	c->d_model = 16;
	c->num_heads = 2;
	c->d_ff = 32;
	c->num_encoder_layers = 1;
	c->num_decoder_layers = 1;
	c->max_positions = LEN;
	c->pad_id = 0;
	c->dropout = 0.1f;
	c->attention_dropout = 0.1f;
	c->relu_dropout = 0.1f;
}

/* Labels of step s's batches: the gradient is of the mean over them. */
static float
step_scale(int s)
{
	int64_t		labels = 0;

	for (int a = 0; a < STEP_BATCHES; a++)
		for (int i = 0; i < ROWS * LEN; i++)
			labels += ids[s * STEP_BATCHES + a][2][i] != 0;
	return (float) (1.0 / labels);
}

/*
 * Steps [from, to) on p, the mean loss of each into loss[step]; the first
 * failure's message into err. Returns TF_OK or TF_ERROR.
 */
/* Step s of the schedule every run here follows (its batches, scale and optimizer) on p: tf_parallel_step's result. */
static int
train_step(TfParallel *p, int s, TfStepStats *st, char *err, size_t errlen)
{
	TfOptimizer opt;
	TfBatch		b[STEP_BATCHES];

	tf_optimizer_default(&opt);
	opt.warmup_steps = 100;
	for (int a = 0; a < STEP_BATCHES; a++)
		b[a] = batch(s * STEP_BATCHES + a);
	return tf_parallel_step(p, b, STEP_BATCHES, step_scale(s), &opt, st, err, errlen);
}

static int
train(TfParallel *p, int from, int to, double *loss, char *err, size_t errlen)
{
	for (int s = from; s < to; s++)
	{
		TfStepStats st;

		if (train_step(p, s, &st, err, errlen) != TF_OK)
			return TF_ERROR;
		loss[s] = st.loss_sum / (double) st.tokens;
	}
	return TF_OK;
}

/* The worst relative difference of steps [from, to) of a against b. */
static double
worst(const double *a, const double *b, int from, int to)
{
	double		w = 0;

	for (int s = from; s < to; s++)
		w = fmax(w, fabs(a[s] - b[s]) / fabs(b[s]));
	return w;
}

static void
test_device_lists(void)
{
	int			d[TF_MAX_LOCAL_RANKS],
				n;
	char		kind[8],
				err[TF_ERRLEN];

	CHECK(tf_device_list_parse("cuda:0,2,5", kind, d, &n, err, sizeof(err)) == TF_OK && n == 3 && d[0] == 0 &&
		  d[1] == 2 && d[2] == 5 && strcmp(kind, "cuda") == 0, "cuda:0,2,5");
	CHECK(tf_device_list_parse("cuda:3", kind, d, &n, err, sizeof(err)) == TF_OK && n == 1 && d[0] == 3, "cuda:3");
	CHECK(tf_device_list_parse("cpu", kind, d, &n, err, sizeof(err)) == TF_OK && n == 1 && strcmp(kind, "cpu") == 0,
		  "cpu");
	CHECK(tf_device_list_parse("cuda:1,1", kind, d, &n, err, sizeof(err)) == TF_ERROR && strstr(err, "twice") != NULL,
		  "a repeated device: %s", err);
	CHECK(tf_device_list_parse("cuda:0,", kind, d, &n, err, sizeof(err)) == TF_ERROR &&
		  strstr(err, "\"cuda:0,\"") != NULL, "a trailing comma: %s", err);
	CHECK(tf_device_list_parse("cpu,cuda", kind, d, &n, err, sizeof(err)) == TF_ERROR, "cpu,cuda");
	CHECK(tf_device_list_parse("cuda:0,2000", kind, d, &n, err, sizeof(err)) == TF_ERROR, "device 2000");
}

/* One rank on the caller's thread equals a model that accumulates the same batches itself. */
static void
test_one_rank(const char *device)
{
	TfConfig	c;
	TfParallel *p;
	TfModel    *m;
	TfOptimizer opt;
	char		err[TF_ERRLEN];
	double		by_parallel[STEPS],
				by_hand[STEPS];

	tiny_config(&c);
	tf_optimizer_default(&opt);
	opt.warmup_steps = 100;
	p = tf_parallel_create(&c, 7, device, 1, NULL, err, sizeof(err));
	m = tf_model_create(&c, 7, device, 1, err, sizeof(err));
	CHECK(p != NULL && m != NULL, "create on %s: %s", device, err);
	if (p == NULL || m == NULL)
		return;
	CHECK(tf_parallel_ranks(p) == 1 && tf_parallel_local_ranks(p) == 1, "one rank");
	CHECK(train(p, 0, 3, by_parallel, err, sizeof(err)) == TF_OK, "steps: %s", err);
	for (int s = 0; s < 3; s++)
	{
		TfStepStats st;

		for (int a = 0; a < STEP_BATCHES; a++)
		{
			TfBatch		b = batch(s * STEP_BATCHES + a);

			b.index = a;
			tf_model_forward(m, &b, true, NULL, NULL, err, sizeof(err));
			tf_model_backward(m, step_scale(s), err, sizeof(err));
		}
		CHECK(tf_model_step(m, &opt, &st, err, sizeof(err)) == TF_OK, "step: %s", err);
		by_hand[s] = st.loss_sum / (double) st.tokens;
	}
	CHECK(worst(by_parallel, by_hand, 0, 3) == 0.0, "one rank on %s: losses differ from accumulating by hand (%.3g)",
		  device, worst(by_parallel, by_hand, 0, 3));
	{
		TfBatch		b = batch(0);

		b.index = TF_MAX_STEP_BATCHES;
		CHECK(tf_model_forward(m, &b, true, NULL, NULL, err, sizeof(err)) == TF_ERROR && strstr(err, "index") != NULL,
			  "batch index out of range: %s", err);
	}
	tf_parallel_free(p);
	tf_model_free(m);
}

/* The emulator's counters of a device: host syncs, all-reduces, bytes, broadcasts (or -1s). */
static void
counters(int device, long out[4])
{
	void	   *lib = dlopen(test_cuda_library, RTLD_NOW | RTLD_NOLOAD);
	void		(*get) (int, long *) = NULL;

	out[0] = out[1] = out[2] = out[3] = -1;
	if (lib != NULL)
		*(void **) &get = dlsym(lib, "cuemu_counters");
	if (get != NULL)
		get(device, out);
	if (lib != NULL)
		dlclose(lib);
}

/* The 4-rank run of test_ranks: its losses and final tensors, for test_processes. */
static double four_loss[STEPS];
static TfTensor *four_tensors;
static int	four_count;

static void
test_ranks(void)
{
	TfConfig	c;
	char		err[TF_ERRLEN];
	double		one[STEPS],
				two[STEPS],
				four[STEPS],
				resumed[STEPS];
	const char *devices[] = {"cuda:0", "cuda:0,1", "cuda:0,1,2,3"};
	double	   *loss[] = {one, two, four};
	int			count = tf_cuda_device_count(err, sizeof(err)),
				total = -1;

	CHECK(count >= 4, "the data-parallel tests need 4 CUDA devices (CUEMU_DEVICES=4 when emulated); %d: %s", count,
		  err);
	if (count < 4)
		return;
	tiny_config(&c);
	for (int k = 0; k < 3; k++)
	{
		TfParallel *p = tf_parallel_create(&c, 7, devices[k], 1, NULL, err, sizeof(err));

		CHECK(p != NULL, "create on %s: %s", devices[k], err);
		if (p == NULL)
			return;
		CHECK(tf_parallel_ranks(p) == (1 << k), "%s: %d ranks", devices[k], tf_parallel_ranks(p));
		CHECK(train(p, 0, STEPS, loss[k], err, sizeof(err)) == TF_OK, "%s: %s", devices[k], err);
		if (k == 2)
			CHECK(tf_model_tensors(tf_parallel_model(p), &four_tensors, &four_count, err, sizeof(err)) == TF_OK,
				  "tensors: %s", err);
		/* one machine's vote counts once, however many ranks it has */
		CHECK(tf_parallel_agree(p, 7, &total, err, sizeof(err)) == TF_OK && total == 7, "%s: a vote of 7 sums to "
			  "%d: %s", devices[k], total, err);
		CHECK(tf_parallel_agree(p, TF_MAX_VOTE + 1, &total, err, sizeof(err)) == TF_ERROR &&
			  strstr(err, "out of range") != NULL, "%s: a vote out of range: %s", devices[k], err);
		tf_parallel_free(p);
	}
	memcpy(four_loss, four, sizeof(four));
	CHECK(worst(two, one, 0, STEPS) <= 1e-5, "2 ranks against 1: worst relative loss difference %.3g",
		  worst(two, one, 0, STEPS));
	CHECK(worst(four, one, 0, STEPS) <= 1e-5, "4 ranks against 1: worst relative loss difference %.3g",
		  worst(four, one, 0, STEPS));
	CHECK(one[STEPS - 1] < one[0] - 0.1, "training lowers the loss: %.4f -> %.4f", one[0], one[STEPS - 1]);
	printf("  ranks 1, 2, 4 over %d steps of %d batches (dropout on): worst relative loss difference %.2g, %.2g\n",
		   STEPS, STEP_BATCHES, worst(two, one, 0, STEPS), worst(four, one, 0, STEPS));

	/* stopped at step 10 on 4 ranks, resumed on 3 and on 2 */
	for (int k = 0; k < 2; k++)
	{
		const char *fewer = k == 0 ? "cuda:1,2,3" : "cuda:2,3";
		TfParallel *p = tf_parallel_create(&c, 7, "cuda:0,1,2,3", 1, NULL, err, sizeof(err));
		TfParallel *q = tf_parallel_create(&c, 7, fewer, 1, NULL, err, sizeof(err));
		TfTensor   *t = NULL;
		int			n = 0;

		CHECK(p != NULL && q != NULL, "create: %s", err);
		if (p == NULL || q == NULL)
			return;
		CHECK(train(p, 0, STEPS / 2, resumed, err, sizeof(err)) == TF_OK, "first half: %s", err);
		CHECK(tf_model_tensors(tf_parallel_model(p), &t, &n, err, sizeof(err)) == TF_OK, "tensors: %s", err);
		tf_parallel_free(p);
		CHECK(tf_parallel_load(q, t, n, err, sizeof(err)) == TF_OK, "load on %s: %s", fewer, err);
		tf_tensors_free(t);
		CHECK(tf_model_steps(tf_parallel_model(q)) == STEPS / 2, "resumed at step %lld",
			  (long long) tf_model_steps(tf_parallel_model(q)));
		CHECK(train(q, STEPS / 2, STEPS, resumed, err, sizeof(err)) == TF_OK, "second half: %s", err);
		CHECK(worst(resumed, one, 0, STEPS) <= 1e-5, "4 ranks, then %s from step 10: worst relative difference %.3g",
			  fewer, worst(resumed, one, 0, STEPS));
		tf_parallel_free(q);
	}

	/*
	 * A step's collectives and host synchronisations, per rank: those of
	 * one device alone with the same two batches (the reductions add none),
	 * and every parameter all-reduced once, in one call per layer and one
	 * for the embedding.
	 */
	{
		TfParallel *single = tf_parallel_create(&c, 7, "cuda:0", 1, NULL, err, sizeof(err));
		TfParallel *p = tf_parallel_create(&c, 7, "cuda:0,1", 1, NULL, err, sizeof(err));
		long		before[2][4],
					after[2][4],
					single_syncs;
		size_t		params;

		CHECK(single != NULL && p != NULL, "create: %s", err);
		if (single == NULL || p == NULL)
			return;
		params = tf_model_num_parameters(tf_parallel_model(p));
		counters(0, before[0]);
		for (int s = 0; s < 2; s++)
		{
			TfBatch		b[2] = {batch(2 * s), batch(2 * s + 1)};
			TfOptimizer opt;
			TfStepStats st;

			tf_optimizer_default(&opt);
			CHECK(tf_parallel_step(single, b, 2, 0.01f, &opt, &st, err, sizeof(err)) == TF_OK, "%s", err);
		}
		counters(0, after[0]);
		single_syncs = (after[0][0] - before[0][0]) / 2;
		counters(0, before[0]);
		counters(1, before[1]);
		CHECK(train(p, 0, 2, one, err, sizeof(err)) == TF_OK, "%s", err);
		counters(0, after[0]);
		counters(1, after[1]);
		CHECK(before[0][0] >= 0, "the CUDA library has no cuemu_counters: counts need the emulated library");
		for (int r = 0; r < 2 && before[0][0] >= 0; r++)
		{
			long		syncs = (after[r][0] - before[r][0]) / 2,
						calls = (after[r][1] - before[r][1]) / 2,
						bytes = (after[r][2] - before[r][2]) / 2;

			CHECK(syncs == single_syncs, "rank %d: %ld host synchronisations per step of 2 batches; one device: %ld", r,
				  syncs, single_syncs);
			CHECK(calls == c.num_encoder_layers + c.num_decoder_layers + 2,
				  "rank %d: %ld all-reduce calls per step, expected one per layer, one for the cross keys and values, "
				  "one for the embedding", r, calls);
			CHECK(bytes == (long) (params * sizeof(float)), "rank %d: %ld bytes all-reduced per step, expected %zu", r,
				  bytes, params * sizeof(float));
			if (r == 0)
				printf("  per step and rank of 2 batches: %ld host synchronisations (one device alone: %ld), "
					   "%ld all-reduce calls, %ld bytes (%zu parameters)\n", syncs, single_syncs, calls, bytes, params);
		}
		tf_parallel_free(single);
		tf_parallel_free(p);
	}

	/* rank 2 fails in its forward (a batch longer than max_positions): no rank is left waiting */
	{
		TfParallel *p = tf_parallel_create(&c, 7, "cuda:0,1,2,3", 1, NULL, err, sizeof(err));
		TfOptimizer opt;
		TfStepStats st;
		TfBatch		b[STEP_BATCHES];
		int32_t		longer[3][ROWS * (LEN + 2)];

		CHECK(p != NULL, "create: %s", err);
		if (p == NULL)
			return;
		tf_optimizer_default(&opt);
		for (int a = 0; a < STEP_BATCHES; a++)
			b[a] = batch(a);
		for (int s = 0; s < 3; s++)
			for (int i = 0; i < ROWS * (LEN + 2); i++)
				longer[s][i] = s == 1 && i % (LEN + 2) == 0 ? 2 : 5 + i % 7;
		b[2].src_len = b[2].tgt_len = LEN + 2;
		b[2].src = longer[0];
		b[2].tgt_in = longer[1];
		b[2].labels = longer[2];
		CHECK(tf_parallel_step(p, b, STEP_BATCHES, 0.01f, &opt, &st, err, sizeof(err)) == TF_ERROR &&
			  strstr(err, "rank 2 (cuda:2)") != NULL && strstr(err, "max_positions") != NULL,
			  "a failed rank: %s", err);
		CHECK(tf_parallel_step(p, b, STEP_BATCHES, 0.01f, &opt, &st, err, sizeof(err)) == TF_ERROR &&
			  strstr(err, "unusable") != NULL, "after a failure: %s", err);
		tf_parallel_free(p);
	}
	{
		TfParallel *p = tf_parallel_create(&c, 7, "cuda:0,1", 1, NULL, err, sizeof(err));
		TfOptimizer opt;
		TfStepStats st;
		TfBatch		b = batch(0);

		tf_optimizer_default(&opt);
		CHECK(p != NULL && tf_parallel_step(p, &b, 1, 0.01f, &opt, &st, err, sizeof(err)) == TF_ERROR &&
			  strstr(err, "1 batches on 2 ranks") != NULL, "fewer batches than ranks: %s", err);
		tf_parallel_free(p);
	}
}

/*
 * With CUEMU_JOIN_FAULT_DEVICE=2 (scripts/test-cuda-emu): the rank on device 2
 * fails to join while ranks 0, 1 and 3 wait for it in non-blocking joins;
 * the engine must abort them and report rank 2 at once, not after the
 * 300-second join timeout.
 */
static void
test_join_failure(void)
{
	TfConfig	c;
	char		err[TF_ERRLEN];
	struct timespec t0,
				t1;
	TfParallel *p;
	double		seconds;

	tiny_config(&c);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	p = tf_parallel_create(&c, 7, "cuda:0,1,2,3", 1, NULL, err, sizeof(err));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	seconds = (double) (t1.tv_sec - t0.tv_sec) + 1e-9 * (double) (t1.tv_nsec - t0.tv_nsec);
	CHECK(p == NULL && strstr(err, "rank 2 (cuda:2)") != NULL && strstr(err, "planted join failure") != NULL,
		  "a failed join: %s", p == NULL ? err : "created");
	CHECK(seconds < 60, "the ranks waiting to join were left waiting %.0f s", seconds);
	printf("  rank 2 failed to join: the others aborted, create returned in %.2f s: %s\n", seconds, err);
	tf_parallel_free(p);
}

/* TfWorld.abandon that gives up at its third poll, counting the polls. */
static bool
abandon_third(void *arg)
{
	return ++*(int *) arg >= 3;
}

/*
 * Ranks 0 .. 1 of a world of 4 whose ranks 2 .. 3 never come (another
 * machine's): the join waits, polling abandon, and fails as soon as it
 * says so (not after the join's timeout).
 */
static void
test_join_abandoned(void)
{
	char		err[TF_ERRLEN];
	TfConfig	c;
	int			polls = 0;
	TfWorld		world = {.first_rank = 0, .ranks = 4, .abandon = abandon_third, .abandon_arg = &polls};
	struct timespec t0,
				t1;

	tiny_config(&c);
	CHECK(tf_cuda_unique_id(world.id, err, sizeof(err)) == TF_OK, "unique id: %s", err);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK(tf_parallel_create(&c, 7, "cuda:0,1", 1, &world, err, sizeof(err)) == NULL &&
		  strstr(err, "join of ranks 0 .. 1 was abandoned") != NULL, "an abandoned join: %s", err);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	CHECK(polls == 3, "the join polled %d times before abandoning", polls);
	CHECK(t1.tv_sec - t0.tv_sec < 60, "the abandoned join took %ld s", (long) (t1.tv_sec - t0.tv_sec));
}

/* The id as hex (2 characters a byte) into out [2 * TF_UNIQUE_ID_BYTES + 1], and back; false on bad hex. */
static void
id_hex(const uint8_t *id, char *out)
{
	for (int i = 0; i < TF_UNIQUE_ID_BYTES; i++)
		sprintf(out + 2 * i, "%02x", id[i]);
}

static bool
id_unhex(const char *hex, uint8_t *id)
{
	if (strlen(hex) != 2 * TF_UNIQUE_ID_BYTES)
		return false;
	for (int i = 0; i < TF_UNIQUE_ID_BYTES; i++)
	{
		unsigned	b;

		if (sscanf(hex + 2 * i, "%2x", &b) != 1)
			return false;
		id[i] = (uint8_t) b;
	}
	return true;
}

/*
 * The second node of test_processes, in its own process. With
 * ATTENTION_TEST_NODE a hex id: ranks 2 .. 3 of 4 on cuda:2,3 joining that
 * id; with "first": it makes the id, writes "id HEX" to
 * ATTENTION_TEST_NODE_FD and holds ranks 0 .. 1 on cuda:0,1. Each step's
 * loss sum and tokens as "step loss_sum tokens" (%a: exact) to that fd;
 * with ATTENTION_TEST_NODE_DIE=K it exits abruptly (_exit, no cleanup, as
 * a killed process) after step K (0 with "first": once it wrote the id),
 * or with ATTENTION_TEST_NODE_STOP also set stops itself (SIGSTOP) there.
 * Returns the exit status.
 */
int
test_parallel_node(void)
{
	const char *role = getenv("ATTENTION_TEST_NODE");
	bool		first = strcmp(role, "first") == 0;
	TfWorld		world = {.first_rank = first ? 0 : 2, .ranks = 4};
	TfConfig	c;
	char		err[TF_ERRLEN],
				hex[2 * TF_UNIQUE_ID_BYTES + 1];
	int			fd = atoi(getenv("ATTENTION_TEST_NODE_FD") ? getenv("ATTENTION_TEST_NODE_FD") : "-1");
	int			die = getenv("ATTENTION_TEST_NODE_DIE") ? atoi(getenv("ATTENTION_TEST_NODE_DIE")) : -1;
	FILE	   *out = fd >= 0 ? fdopen(fd, "w") : NULL;
	TfParallel *p;
	int			total;

	if (out == NULL || (first ? tf_cuda_unique_id(world.id, err, sizeof(err)) != TF_OK : !id_unhex(role, world.id)))
		return 2;
	if (first)
	{
		id_hex(world.id, hex);
		fprintf(out, "id %s\n", hex);
		fflush(out);
		if (die == 0)
			_exit(3);			/* gone before anyone joined */
	}
	make_batches();
	tiny_config(&c);
	if ((p = tf_parallel_create(&c, 7, first ? "cuda:0,1" : "cuda:2,3", 1, &world, err, sizeof(err))) == NULL)
	{
		fprintf(out, "error %s\n", err);
		return 1;
	}
	for (int s = 0; s < STEPS; s++)
	{
		TfStepStats st;

		if (train_step(p, s, &st, err, sizeof(err)) != TF_OK)
		{
			fprintf(out, "error %s\n", err);
			return 1;
		}
		fprintf(out, "%d %a %lld\n", s, st.loss_sum, (long long) st.tokens);
		fflush(out);
		if (s + 1 == die && getenv("ATTENTION_TEST_NODE_STOP") != NULL)
			raise(SIGSTOP);		/* silent: alive, connected, answering nothing */
		else if (s + 1 == die)
			_exit(3);
	}
	if (tf_parallel_agree(p, world.first_rank + 1, &total, err, sizeof(err)) != TF_OK)
		fprintf(out, "error %s\n", err);
	else
		fprintf(out, "agree %d\n", total);
	tf_parallel_free(p);
	fclose(out);
	return 0;
}

/* TfWorld.abandon: the second node's process has exited (it cannot join any more); it is left to reap. */
static bool
node_exited(void *arg)
{
	pid_t	   *pid = arg;
	siginfo_t	info = {0};

	return *pid <= 0 || (waitid(P_PID, (id_t) *pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == *pid);
}

/*
 * Starts this binary as the second node (test_parallel_node) with role
 * (a hex id, or "first"), dying (or with stop, stopping) after step die;
 * its lines to *read_fd; the pid, or -1.
 */
static pid_t
start_node(const char *role, int die, bool stop, int *read_fd)
{
	extern char **environ;
	char		exe[4096],
				node[64 + 2 * TF_UNIQUE_ID_BYTES],
				fdvar[64],
				dievar[64];
	char	   *argv[] = {exe, (char *) test_fixtures, "cuda", (char *) test_cuda_library, NULL};
	int			n = 0,
				pipefd[2];
	ssize_t		len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	pid_t		pid;
	char	  **env;

	if (len <= 0 || pipe(pipefd) != 0)
		return -1;
	exe[len] = '\0';
	fcntl(pipefd[0], F_SETFD, FD_CLOEXEC);
	snprintf(node, sizeof(node), "ATTENTION_TEST_NODE=%s", role);
	snprintf(fdvar, sizeof(fdvar), "ATTENTION_TEST_NODE_FD=%d", pipefd[1]);
	snprintf(dievar, sizeof(dievar), "ATTENTION_TEST_NODE_DIE=%d", die);
	while (environ[n] != NULL)
		n++;
	env = calloc(n + 5, sizeof(char *));
	memcpy(env, environ, n * sizeof(char *));
	env[n] = node, env[n + 1] = fdvar, env[n + 2] = dievar;
	if (stop)
		env[n + 3] = (char *) "ATTENTION_TEST_NODE_STOP=1";
	if (posix_spawn(&pid, exe, NULL, NULL, argv, env) != 0)
		pid = -1;
	free(env);
	close(pipefd[1]);
	*read_fd = pipefd[0];
	return pid;
}

/* tf_parallel_set_poll: true once the step that began at *arg (CLOCK_MONOTONIC) has lasted 2 s. */
static bool
step_overdue(void *arg)
{
	const struct timespec *t0 = arg;
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double) (now.tv_sec - t0->tv_sec) + 1e-9 * (double) (now.tv_nsec - t0->tv_nsec) >= 2.0;
}

/*
 * Ranks in two processes: one node holds ranks 0 .. 1 of 4 (cuda:0,1) and
 * makes the id, the other ranks 2 .. 3 (cuda:2,3); the second node is
 * this binary again (test_parallel_node), the emulated NCCL connects them
 * over TCP. Case 0: this process makes the id; over the 20 steps of
 * test_ranks the two nodes' loss sums add up to the one-process 4-rank
 * run's, and the replicas end bitwise equal to its. Case 1: the second
 * node exits abruptly after step 5; case 2: so does the id's maker, the
 * second node there, with this process joining it. Either way this node's
 * step 6 fails at once (the connection closed), never waits. Last, an id
 * whose maker exited before anyone joined: the join fails at once, naming
 * the address it could not reach.
 */
static void
test_processes(void)
{
	TfConfig	c;
	char		err[TF_ERRLEN],
				line[512],
				failures[4][TF_ERRLEN] = {"", "", "", ""};
	double		worst_loss = 0.0,
				fail_seconds[4] = {0.0, 0.0, 0.0, 0.0};

	tiny_config(&c);
	for (int kind = 0; kind < 4; kind++)
	{
		bool		here = kind != 2;	/* this process makes the id */
		bool		silent = kind == 3; /* the second node stops instead of dying */
		int			die = kind == 0 ? -1 : 5;
		TfWorld		world = {.first_rank = here ? 0 : 2, .ranks = 4, .abandon = node_exited};
		char		hex[2 * TF_UNIQUE_ID_BYTES + 1];
		double		sums[STEPS][2] = {{0}};
		int			rfd = -1,
					status = 0,
					total = -1,
					agreed = -1,
					done = 0,
					failed_step = -1;
		pid_t		pid;
		TfParallel *p = NULL;
		FILE	   *in;
		struct timespec t0 = {0};

		if (here)
		{
			CHECK(tf_cuda_unique_id(world.id, err, sizeof(err)) == TF_OK, "unique id: %s", err);
			id_hex(world.id, hex);
		}
		pid = start_node(here ? hex : "first", die, silent, &rfd);
		CHECK(pid > 0, "could not start the second node");
		if (pid <= 0)
			return;
		in = fdopen(rfd, "r");
		if (!here)				/* the id the second node made */
			CHECK(in != NULL && fgets(line, sizeof(line), in) != NULL && sscanf(line, "id %256s", hex) == 1 &&
				  id_unhex(hex, world.id), "the second node's id: %s", line);
		world.abandon_arg = &pid;
		p = tf_parallel_create(&c, 7, here ? "cuda:0,1" : "cuda:2,3", 1, &world, err, sizeof(err));
		CHECK(p != NULL, "two processes: create: %s", err);
		/* a silent node: this one gives up on a step that lasted 2 s (the others take ~0.05 s) */
		if (p != NULL && silent)
			tf_parallel_set_poll(p, step_overdue, &t0);
		for (int s = 0; p != NULL && s < STEPS; s++, done++)
		{
			TfStepStats st;
			struct timespec t1;
			int			rc;

			clock_gettime(CLOCK_MONOTONIC, &t0);
			rc = train_step(p, s, &st, err, sizeof(err));
			clock_gettime(CLOCK_MONOTONIC, &t1);
			if (rc != TF_OK)
			{
				failed_step = s;
				fail_seconds[kind] = (double) (t1.tv_sec - t0.tv_sec) + 1e-9 * (double) (t1.tv_nsec - t0.tv_nsec);
				snprintf(failures[kind], TF_ERRLEN, "%s", err);
				break;
			}
			sums[s][0] += st.loss_sum;
			sums[s][1] += (double) st.tokens;
		}
		if (silent && pid > 0)
			kill(pid, SIGKILL);	/* stopped: it would never close its pipe */
		/* after the steps, a vote: this node's 1 and the other's 3 */
		if (p != NULL && done == STEPS)
			CHECK(tf_parallel_agree(p, world.first_rank + 1, &total, err, sizeof(err)) == TF_OK && total == 4,
				  "two processes: the votes 1 and 3 summed to %d: %s", total, err);
		while (in != NULL && fgets(line, sizeof(line), in) != NULL)
		{
			int			s;
			double		loss;
			long long	tokens;

			if (sscanf(line, "%d %la %lld", &s, &loss, &tokens) == 3 && s >= 0 && s < STEPS)
				sums[s][0] += loss, sums[s][1] += (double) tokens;
			else if (sscanf(line, "agree %d", &s) == 1)
				agreed = s;
			else
				CHECK(false, "second node: %s", line);
		}
		if (in != NULL)
			fclose(in);
		if (pid > 0)
			waitpid(pid, &status, 0);
		if (silent)
		{
			CHECK(failed_step == die && fail_seconds[kind] >= 2.0 && fail_seconds[kind] < 10 &&
				  strstr(err, "stopped by the caller") != NULL,
				  "the second node silent after step %d: this node failed at step %d in %.2f s: %s", die,
				  failed_step + 1, fail_seconds[kind], failed_step >= 0 ? err : "no failure");
			CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the silent node's status %d", status);
		}
		else if (kind == 0)
		{
			CHECK(done == STEPS && WIFEXITED(status) && WEXITSTATUS(status) == 0,
				  "two processes: %d steps here, the second node's exit status %d", done, status);
			CHECK(agreed == 4, "two processes: the second node's total of the votes is %d", agreed);
			for (int s = 0; s < done; s++)
				worst_loss = fmax(worst_loss, fabs(sums[s][0] / sums[s][1] - four_loss[s]) / fabs(four_loss[s]));
			CHECK(worst_loss <= 1e-12, "two processes x two ranks against one process x four: worst relative "
				  "loss difference %.3g", worst_loss);
			if (p != NULL && four_tensors != NULL)
			{
				TfTensor   *t = NULL;
				int			n = 0,
							differ = 0;

				CHECK(tf_model_tensors(tf_parallel_model(p), &t, &n, err, sizeof(err)) == TF_OK && n == four_count,
					  "tensors: %s", err);
				for (int i = 0; t != NULL && i < n && i < four_count; i++)
					differ += memcmp(t[i].data, four_tensors[i].data, t[i].bytes) != 0;
				CHECK(differ == 0, "two processes: %d of %d tensors differ from one process's after %d steps",
					  differ, n, STEPS);
				tf_tensors_free(t);
			}
		}
		else
		{
			CHECK(failed_step == die && fail_seconds[kind] < 30 && strstr(err, "rank") != NULL,
				  "%s dead after step %d: this node failed at step %d in %.2f s: %s",
				  here ? "the second node" : "the id's maker", die, failed_step + 1, fail_seconds[kind],
				  failed_step >= 0 ? err : "no failure");
			CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 3, "the second node's exit status %d", status);
		}
		tf_parallel_free(p);
	}
	/* the id's maker gone before anyone joined: a clear error at once, not the join's timeout */
	{
		TfWorld		world = {.first_rank = 2, .ranks = 4};
		char		hex[2 * TF_UNIQUE_ID_BYTES + 1] = "";
		int			rfd = -1,
					status = 0;
		pid_t		pid = start_node("first", 0, false, &rfd);
		FILE	   *in = rfd >= 0 ? fdopen(rfd, "r") : NULL;
		struct timespec t0,
					t1;
		TfParallel *p;

		CHECK(pid > 0 && in != NULL && fgets(line, sizeof(line), in) != NULL &&
			  sscanf(line, "id %256s", hex) == 1 && id_unhex(hex, world.id), "the second node's id");
		if (in != NULL)
			fclose(in);
		if (pid > 0)
			waitpid(pid, &status, 0);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		p = tf_parallel_create(&c, 7, "cuda:2,3", 1, &world, err, sizeof(err));
		clock_gettime(CLOCK_MONOTONIC, &t1);
		CHECK(p == NULL && strstr(err, "cannot reach the communicator's process at 127.0.0.1:") != NULL &&
			  t1.tv_sec - t0.tv_sec < 10, "joining an id whose process is gone: %s",
			  p == NULL ? err : "created");
		printf("  joining an id whose process is gone: %s\n", err);
		tf_parallel_free(p);
	}
	printf("  2 processes x 2 ranks over %d steps: losses %.2g from 1 process x 4, tensors bitwise; the other node "
		   "dead after step 5: step 6 failed in %.2f s (%s), the id's maker dead: in %.2f s (%s); the other node "
		   "silent (SIGSTOP) after step 5, given up after 2 s: step 6 failed in %.2f s (%s)\n", STEPS,
		   worst_loss, fail_seconds[1], failures[1], fail_seconds[2], failures[2], fail_seconds[3], failures[3]);
}

void
test_parallel(const char *fixtures)
{
	char		err[TF_ERRLEN];
	TfConfig	c;

	if (getenv("CUEMU_JOIN_FAULT_DEVICE") != NULL && strcmp(test_device, "cuda") == 0)
	{
		test_join_failure();
		return;
	}
	make_batches();
	test_device_lists();
	test_one_rank("cpu");
	tiny_config(&c);
	CHECK(tf_parallel_create(&c, 7, "cpu", 1, &(TfWorld) {0, 2, {0}}, err, sizeof(err)) == NULL &&
		  strstr(err, "CPU backend trains on one rank") != NULL, "two CPU ranks: %s", err);
	if (strcmp(test_device, "cuda") != 0)
		return;
	test_one_rank("cuda:0");
	test_ranks();
	test_join_abandoned();
	test_processes();
	tf_tensors_free(four_tensors);
}
