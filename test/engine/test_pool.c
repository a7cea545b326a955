/*
 * test_pool.c - the CPU backend's threads (src/pool.h): every index runs
 * once, in chunks fixed by n and grain; a helper that stalls does not hold
 * up the chunks nobody started; nothing spins after a call; and a model's
 * training steps, translations and scores give the same bits on 1, 2, 3 and
 * 8 threads.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "pool.h"
#include "transformer.h"

#define STRESS_N 5000

typedef struct Marks
{
	int		   *stamp;			/* [n]: the call that last ran the index */
	long	   *chunk_begin;	/* [chunks] */
	int			call;
	int			threads;
	_Atomic int bad_worker;
} Marks;

static void
mark(void *arg, long begin, long end, int worker)
{
	Marks	   *m = arg;
	long		i;

	if (worker < 0 || worker >= m->threads)
		atomic_store(&m->bad_worker, 1);
	for (i = begin; i < end; i++)
		m->stamp[i] = m->call;
}

/* Random loops on random teams: each index exactly once per call, workers in range. */
static void
check_every_index_once(TfPool *pool)
{
	Marks		m = {calloc(STRESS_N, sizeof(int)), NULL, 0, 1, 0};
	unsigned	state = 7;
	int			call,
				wrong = 0;

	for (call = 1; call <= 20000; call++)
	{
		long		n,
					grain,
					i;

		state = state * 1664525u + 1013904223u;
		n = 1 + (long) (state >> 8) % STRESS_N;
		state = state * 1664525u + 1013904223u;
		grain = 1 + (long) (state >> 8) % 300;
		m.threads = 1 + call % 8;
		m.call = call;
		tf_pool_for(pool, m.threads, n, grain, mark, &m);
		for (i = 0; i < n; i++)
			wrong += m.stamp[i] != call;
	}
	CHECK(wrong == 0, "%d indices not run exactly by their call", wrong);
	CHECK(atomic_load(&m.bad_worker) == 0, "a chunk ran with a worker number outside the team");
	free(m.stamp);
}

static void
record_chunk(void *arg, long begin, long end, int worker)
{
	Marks	   *m = arg;

	(void) worker;
	m->chunk_begin[begin / 37] = begin * 100000 + end;
}

/* The chunks are [c * grain, min(n, (c + 1) * grain)) whatever the team. */
static void
check_fixed_chunks(TfPool *pool)
{
	long		begins[100];
	Marks		m = {NULL, begins, 0, 1, 0};
	int			threads,
				c,
				wrong = 0;

	for (threads = 1; threads <= 8; threads++)
	{
		memset(begins, 0, sizeof(begins));
		tf_pool_for(pool, threads, 1000, 37, record_chunk, &m);
		for (c = 0; c < 28; c++)
			wrong += begins[c] != (long) c * 37 * 100000 + (c == 27 ? 1000 : (c + 1) * 37);
	}
	CHECK(wrong == 0, "%d chunks not where n and grain put them", wrong);
}

typedef struct Stall
{
	_Atomic int stalled;
	_Atomic int by_caller;
	_Atomic int by_helpers;
} Stall;

/*
 * Every chunk takes 50 us (so that a helper has time to join), the first
 * one a helper takes 50 ms: a helper descheduled mid-call.
 */
static void
stall_chunk(void *arg, long begin, long end, int worker)
{
	Stall	   *s = arg;
	struct timespec chunk = {0, 50 * 1000};

	(void) begin;
	(void) end;
	nanosleep(&chunk, NULL);
	if (worker != 0 && atomic_exchange(&s->stalled, 1) == 0)
	{
		struct timespec ts = {0, 50 * 1000 * 1000};

		nanosleep(&ts, NULL);
	}
	atomic_fetch_add(worker == 0 ? &s->by_caller : &s->by_helpers, 1);
}

/* Chunks nobody has started go to whoever runs: the caller takes the stalled helper's share. */
static void
check_stalled_helper(TfPool *pool)
{
	Stall		s;
	int			tries;

	for (tries = 0; tries < 5; tries++)
	{
		atomic_init(&s.stalled, 0);
		atomic_init(&s.by_caller, 0);
		atomic_init(&s.by_helpers, 0);
		tf_pool_for(pool, 2, 200, 1, stall_chunk, &s);
		if (atomic_load(&s.stalled))
			break;				/* a helper took part (else the caller ran it all: try again) */
	}
	CHECK(atomic_load(&s.by_caller) + atomic_load(&s.by_helpers) == 200, "%d chunks of 200 ran",
		  atomic_load(&s.by_caller) + atomic_load(&s.by_helpers));
	CHECK(atomic_load(&s.stalled), "no helper joined a call of 200 chunks of 50 us in 5 tries");
	CHECK(atomic_load(&s.by_caller) >= 190,
		  "the caller ran %d of 200 chunks while the helper stalled 50 ms in its first",
		  atomic_load(&s.by_caller));
	printf("  stalled helper: the caller ran %d of 200 chunks\n", atomic_load(&s.by_caller));
}

/* CPU time of every thread of this process but the calling one, nanoseconds (schedstat's first field). */
static long long
other_threads_cpu_ns(void)
{
	DIR		   *dir = opendir("/proc/self/task");
	struct dirent *e;
	long long	total = 0;

	if (dir == NULL)
		return -1;
	while ((e = readdir(dir)) != NULL)
	{
		char		path[300];
		FILE	   *f;
		long long	ns;

		if (e->d_name[0] == '.' || atoi(e->d_name) == (int) getpid())
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/schedstat", e->d_name);
		if ((f = fopen(path, "r")) == NULL)
			continue;
		if (fscanf(f, "%lld", &ns) == 1)
			total += ns;
		fclose(f);
	}
	closedir(dir);
	return total;
}

static void
busy_chunk(void *arg, long begin, long end, int worker)
{
	volatile double *sink = arg;
	double		x = 0.0;
	long		i;

	(void) worker;
	for (i = begin; i < end; i++)
		x += sqrt((double) i);
	*sink += x * 0.0;
}

/* After a call the helpers wait at most TF_POOL_YIELD_TOTAL_US together, then sleep: under 5 ms of CPU in the next 200 ms. */
static void
check_no_spin_after_call(TfPool *pool)
{
	volatile double sink = 0.0;
	struct timespec ts = {0, 200 * 1000 * 1000};
	long long	before,
				after;
	TfPoolStats st;
	int			i;

	for (i = 0; i < 50; i++)
		tf_pool_for(pool, 4, 1 << 20, 1 << 14, busy_chunk, (void *) &sink);
	tf_pool_stats(pool, &st);
	before = other_threads_cpu_ns();
	nanosleep(&ts, NULL);
	after = other_threads_cpu_ns();
	CHECK(st.helpers >= 3, "%d helpers started for 4 threads", st.helpers);
	CHECK(before >= 0 && after - before < 5 * 1000 * 1000,
		  "the pool's helpers used %.3f ms of CPU in the 200 ms after a call", (after - before) / 1e6);
	printf("  after a call: helpers used %.3f ms of CPU in 200 ms (%d helpers, %llu of %llu chunks theirs)\n",
		   (after - before) / 1e6, st.helpers, (unsigned long long) st.helper_chunks,
		   (unsigned long long) st.chunks);
}

/* --- a model's results on 1, 2, 3 and 8 threads --- */

#define SENTENCES 200
#define SRC_LEN 14
#define STEPS 20
#define TRAIN_BATCH 8
#define TRAIN_LEN 16

/* Sources [SENTENCES, SRC_LEN]: 3-12 random ids, EOS, padding; and training batches. */
static void
make_data(int32_t *src, int32_t *tsrc, int32_t *tin, int32_t *tlab, int vocab)
{
	unsigned	state = 11;
	int			i,
				t;

	for (i = 0; i < SENTENCES; i++)
	{
		int			len = 3 + i % 10;

		for (t = 0; t < SRC_LEN; t++)
		{
			state = state * 1664525u + 1013904223u;
			src[i * SRC_LEN + t] = t < len ? 4 + (int) ((state >> 8) % (vocab - 4)) : t == len ? 3 : 0;
		}
	}
	for (i = 0; i < STEPS * TRAIN_BATCH; i++)
	{
		int			len = 4 + i % (TRAIN_LEN - 4);

		for (t = 0; t < TRAIN_LEN; t++)
		{
			int			id;

			state = state * 1664525u + 1013904223u;
			id = 4 + (int) ((state >> 8) % (vocab - 4));
			tsrc[i * TRAIN_LEN + t] = t < len - 1 ? id : t == len - 1 ? 3 : 0;
			tin[i * TRAIN_LEN + t] = t == 0 ? 2 : t < len ? 4 + (id * 7 + t) % (vocab - 4) : 0;
			tlab[i * TRAIN_LEN + t] = t < len - 1 ? 4 + (id * 7 + t + 1) % (vocab - 4) : t == len - 1 ? 3 : 0;
		}
	}
}

/* Trains STEPS steps from seed 5 on `threads` threads; returns the state's tensors (caller frees the model). */
static TfModel *
train_on(const TfConfig *c, int threads, const int32_t *tsrc, const int32_t *tin, const int32_t *tlab)
{
	char		err[TF_ERRLEN];
	TfModel    *m = tf_model_create(c, 5, "cpu", threads, err, sizeof(err));
	TfOptimizer opt;
	int			s;

	CHECK(m != NULL, "model: %s", err);
	if (m == NULL)
		return NULL;
	tf_optimizer_default(&opt);
	opt.warmup_steps = 5;
	opt.clip_norm = 0.5f;		/* the clip factor comes from the gradient norm's sum */
	for (s = 0; s < STEPS; s++)
	{
		TfBatch		b = {TRAIN_BATCH, TRAIN_LEN, TRAIN_LEN, tsrc + (size_t) s * TRAIN_BATCH * TRAIN_LEN,
		tin + (size_t) s * TRAIN_BATCH * TRAIN_LEN, tlab + (size_t) s * TRAIN_BATCH * TRAIN_LEN, 0};
		TfStepStats st;

		CHECK(tf_model_forward(m, &b, true, NULL, NULL, err, sizeof(err)) == TF_OK, "forward: %s", err);
		CHECK(tf_model_backward(m, 1.0f / 64, err, sizeof(err)) == TF_OK, "backward: %s", err);
		CHECK(tf_model_step(m, &opt, &st, err, sizeof(err)) == TF_OK, "step: %s", err);
	}
	return m;
}

/* Translations (tokens and log-probabilities) and scores of the sources, as bytes to compare. */
typedef struct Outputs
{
	int32_t		tokens[SENTENCES][SRC_LEN + 8];
	double		log_prob[SENTENCES];
	double		score[SENTENCES];
} Outputs;

static void
translate_all(TfModel *m, const int32_t *src, Outputs *o)
{
	TfDecodeOptions opt;
	TfHypothesis hyp[25];
	char		err[TF_ERRLEN];
	int			first,
				i;

	memset(o, 0, sizeof(*o));
	tf_decode_options_default(&opt);
	opt.max_length_offset = 6;
	for (first = 0; first < SENTENCES; first += 25)
	{
		int			rc = tf_model_translate(m, src + (size_t) first * SRC_LEN, 25, SRC_LEN, &opt, hyp, err,
											sizeof(err));

		CHECK(rc == TF_OK, "translate: %s", err);
		if (rc != TF_OK)
			return;
		for (i = 0; i < 25; i++)
		{
			memcpy(o->tokens[first + i], hyp[i].tokens,
				   (size_t) (hyp[i].length < SRC_LEN + 8 ? hyp[i].length : SRC_LEN + 8) * sizeof(int32_t));
			o->log_prob[first + i] = hyp[i].log_prob;
		}
		tf_hypotheses_free(hyp, 25 * opt.nbest);
	}
	/* teacher-forced: each source scored as its own target */
	for (first = 0; first < SENTENCES; first += 25)
	{
		int32_t		tin[25 * SRC_LEN],
					lab[25 * SRC_LEN];
		TfBatch		b = {25, SRC_LEN, SRC_LEN, src + (size_t) first * SRC_LEN, tin, lab, 0};

		for (i = 0; i < 25 * SRC_LEN; i++)
		{
			lab[i] = src[(size_t) first * SRC_LEN + i];
			tin[i] = i % SRC_LEN == 0 ? 2 : src[(size_t) first * SRC_LEN + i - 1] == 3 ? 0 :
				src[(size_t) first * SRC_LEN + i - 1];
		}
		CHECK(tf_model_score(m, &b, o->score + first, err, sizeof(err)) == TF_OK, "score: %s", err);
	}
}

static void
check_same_bits_on_any_team(void)
{
	static const int teams[] = {1, 2, 3, 8};
	TfConfig	c;
	int32_t    *src = malloc(sizeof(int32_t) * SENTENCES * SRC_LEN);
	int32_t    *tsrc = malloc(sizeof(int32_t) * STEPS * TRAIN_BATCH * TRAIN_LEN);
	int32_t    *tin = malloc(sizeof(int32_t) * STEPS * TRAIN_BATCH * TRAIN_LEN);
	int32_t    *tlab = malloc(sizeof(int32_t) * STEPS * TRAIN_BATCH * TRAIN_LEN);
	Outputs    *first = malloc(sizeof(Outputs)),
			   *first_int8 = malloc(sizeof(Outputs)),
			   *now = malloc(sizeof(Outputs));
	TfTensor   *ref = NULL;
	int			ref_count = 0,
				differ_train = 0,
				differ_fp32 = 0,
				differ_int8 = 0,
				t;
	char		err[TF_ERRLEN];

	tf_config_small(&c, 512);
	make_data(src, tsrc, tin, tlab, c.vocab_size);
	for (t = 0; t < 4; t++)
	{
		TfModel    *m = train_on(&c, teams[t], tsrc, tin, tlab);
		TfModel    *q;
		TfTensor   *tensors;
		int			count,
					i;

		if (m == NULL)
			break;
		CHECK(tf_model_tensors(m, &tensors, &count, err, sizeof(err)) == TF_OK, "tensors: %s", err);
		if (t == 0)
		{
			/* keep copies: the tensors are views of the model */
			ref = calloc(count, sizeof(TfTensor));
			ref_count = count;
			for (i = 0; i < count; i++)
			{
				size_t		bytes = tensors[i].bytes;

				ref[i] = tensors[i];
				ref[i].data = malloc(bytes);
				memcpy(ref[i].data, tensors[i].data, bytes);
			}
		}
		else
			for (i = 0; i < count && i < ref_count; i++)
				differ_train += strcmp(ref[i].name, tensors[i].name) != 0 ||
					memcmp(ref[i].data, tensors[i].data, tensors[i].bytes) != 0;
		tf_tensors_free(tensors);

		translate_all(m, src, t == 0 ? first : now);
		if (t > 0)
			differ_fp32 += memcmp(first, now, sizeof(Outputs)) != 0;
		q = tf_model_quantize(m, teams[t], err, sizeof(err));
		CHECK(q != NULL, "quantize: %s", err);
		tf_model_free(m);
		m = q != NULL ? tf_model_create_quantized(&c, teams[t], err, sizeof(err)) : NULL;
		CHECK(q == NULL || m != NULL, "int8 model: %s", err);
		if (m != NULL && tf_model_tensors(q, &tensors, &count, err, sizeof(err)) == TF_OK)
		{
			CHECK(tf_model_load(m, tensors, count, err, sizeof(err)) == TF_OK, "int8 load: %s", err);
			tf_tensors_free(tensors);
			translate_all(m, src, t == 0 ? first_int8 : now);
			if (t > 0)
				differ_int8 += memcmp(first_int8, now, sizeof(Outputs)) != 0;
		}
		tf_model_free(q);
		tf_model_free(m);
	}
	CHECK(differ_train == 0, "%d tensors differ after %d training steps on 2, 3 or 8 threads from 1", differ_train,
		  STEPS);
	CHECK(differ_fp32 == 0, "fp32 translations or scores of %d sentences differ on %d of 3 teams from 1 thread",
		  SENTENCES, differ_fp32);
	CHECK(differ_int8 == 0, "int8 translations or scores of %d sentences differ on %d of 3 teams from 1 thread",
		  SENTENCES, differ_int8);
	printf("  1, 2, 3, 8 threads: the same bits after %d training steps (%d tensors), "
		   "for %d translations and scores in fp32 and int8\n", STEPS, ref_count, SENTENCES);
	for (t = 0; t < ref_count; t++)
		free(ref[t].data);
	free(ref);
	free(src);
	free(tsrc);
	free(tin);
	free(tlab);
	free(first);
	free(first_int8);
	free(now);
}

void
test_pool(const char *fixtures)
{
	TfPool	   *pool = tf_pool_create();

	(void) fixtures;
	CHECK(pool != NULL, "no pool");
	if (pool == NULL)
		return;
	check_every_index_once(pool);
	check_fixed_chunks(pool);
	check_stalled_helper(pool);
	check_no_spin_after_call(pool);
	tf_pool_free(pool);
	if (strcmp(test_device, "cpu") == 0)
		check_same_bits_on_any_team();
}
