/*
 * pool.c - the CPU backend's threads (pool.h).
 *
 * A call publishes its loop in two words. `claim` holds the call's
 * generation, its chunk count and the next chunk nobody has started; every
 * thread takes a chunk by compare-and-swap on it, so a thread that saw an
 * older call, or a finished one, cannot take a chunk (the generation or the
 * count differs). `join` holds the generation, how many helpers may take
 * part and how many have: it numbers the helpers for per-thread scratch.
 * The call's function, argument and sizes are valid for any thread that
 * took a chunk of it, as the call cannot end before that chunk is done.
 * Helpers wait on the futex word `wake_seq`, the caller on `done`; each
 * side announces that it sleeps before it checks the word again, so no
 * wake-up is lost.
 *
 * After ONNX Runtime's pool in outline (chunks claimed atomically, the
 * caller takes part, nobody waits for work a descheduled thread never
 * started, a bounded spin before sleeping); the code is ours.
 */
#define _DEFAULT_SOURCE			/* syscall */
#include "pool.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "signals.h"

/* claim: generation (24 bits) | chunk count (20) | next chunk (20) */
#define NEXT_BITS 20
#define COUNT_BITS 20
#define FIELD_MASK ((UINT64_C(1) << NEXT_BITS) - 1)
/* Most chunks of one call: the next-chunk field may run past the count by one per thread. */
#define MAX_CHUNKS ((long) FIELD_MASK - TF_POOL_MAX_THREADS)

struct TfPool
{
	alignas(64) _Atomic uint64_t claim;
	alignas(64) _Atomic uint32_t done;	/* chunks of the current call finished */
	_Atomic int caller_sleeping;
	alignas(64) _Atomic uint64_t join;	/* generation (32) | helpers allowed (16) | joined (16) */
	_Atomic uint32_t wake_seq;	/* futex word of sleeping helpers: bumped by every call and at stop */
	_Atomic int sleepers;
	_Atomic bool stop;
	_Atomic int64_t helper_yield_ns;	/* how long each helper waits for a call before it sleeps */

	/* the current call, set before it is published */
	_Atomic(TfPoolFn) fn;
	_Atomic(void *) arg;
	_Atomic long n;
	_Atomic long grain;

	/* the caller's own */
	uint32_t	generation;
	int			helpers;
	pthread_t	threads[TF_POOL_MAX_THREADS - 1];

	_Atomic uint64_t calls,
				parallel_calls,
				chunks,
				helper_chunks,
				caller_waits;
};

static void
futex_wait(_Atomic uint32_t *word, uint32_t expected)
{
	syscall(SYS_futex, (uint32_t *) word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void
futex_wake(_Atomic uint32_t *word, int count)
{
	syscall(SYS_futex, (uint32_t *) word, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
}

static inline void
cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static int64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A thread's wait before it sleeps (pool.h): pauses until spin_until, then sched_yield until yield_until. */
typedef struct Wait
{
	int64_t		spin_until,
				yield_until;
	int			turns;
	bool		yielding;
} Wait;

static void
wait_begin(Wait *w, int64_t yield_ns)
{
	int64_t		now = now_ns();

	w->spin_until = now + TF_POOL_SPIN_US * 1000;
	w->yield_until = now + yield_ns;
	w->turns = 0;
	w->yielding = false;
}

/*
 * One turn of a wait: a pause while it is young, then sched_yield, which
 * returns at once on an idle CPU but hands a busy one to whatever else wants
 * it (the thread waited for, or another program). True when its time is up
 * and the thread should sleep (the clock is read every 64 turns).
 */
static bool
wait_turn(Wait *w)
{
	int64_t		now;

	if (w->yielding)
		sched_yield();
	else
		cpu_relax();
	if (++w->turns % 64 != 0)
		return false;
	now = now_ns();
	w->yielding = now > w->spin_until;
	return now > w->yield_until;
}

static inline uint32_t
claim_generation(uint64_t c)
{
	return (uint32_t) (c >> (NEXT_BITS + COUNT_BITS));
}

/*
 * Runs chunks of call `generation` until none is left to start; returns how
 * many this thread ran.
 */
static uint64_t
run_chunks(TfPool *pool, uint32_t generation, int worker)
{
	uint64_t	ran = 0;

	for (;;)
	{
		uint64_t	c = atomic_load_explicit(&pool->claim, memory_order_relaxed);
		long		chunk,
					n,
					grain,
					end;

		for (;;)
		{
			if (claim_generation(c) != generation ||
				(c & FIELD_MASK) >= ((c >> NEXT_BITS) & FIELD_MASK))
				return ran;
			if (atomic_compare_exchange_weak_explicit(&pool->claim, &c, c + 1, memory_order_acquire,
													  memory_order_relaxed))
				break;
		}
		chunk = (long) (c & FIELD_MASK);
		n = atomic_load_explicit(&pool->n, memory_order_relaxed);
		grain = atomic_load_explicit(&pool->grain, memory_order_relaxed);
		end = n - chunk * grain > grain ? chunk * grain + grain : n;
		atomic_load_explicit(&pool->fn, memory_order_relaxed) (atomic_load_explicit(&pool->arg, memory_order_relaxed),
															   chunk * grain, end, worker);
		ran++;
		if (atomic_fetch_add(&pool->done, 1) + 1 == ((c >> NEXT_BITS) & FIELD_MASK) &&
			atomic_load(&pool->caller_sleeping))
			futex_wake(&pool->done, 1);
	}
}

/* A helper: waits for a call newer than the last it saw, joins it if a place is left, runs chunks. */
static void *
helper_main(void *p)
{
	TfPool	   *pool = p;
	uint32_t	seen = claim_generation(atomic_load(&pool->claim));

	/* libraries called inside a chunk (oneDNN's OpenMP build) run on this thread alone */
	omp_set_num_threads(1);
	for (;;)
	{
		Wait		w;
		uint64_t	j;

		wait_begin(&w, atomic_load_explicit(&pool->helper_yield_ns, memory_order_relaxed));
		while (claim_generation(atomic_load_explicit(&pool->claim, memory_order_relaxed)) == seen &&
			   !atomic_load_explicit(&pool->stop, memory_order_relaxed))
		{
			if (wait_turn(&w))
			{
				uint32_t	seq = atomic_load(&pool->wake_seq);

				atomic_fetch_add(&pool->sleepers, 1);
				if (claim_generation(atomic_load(&pool->claim)) == seen && !atomic_load(&pool->stop))
					futex_wait(&pool->wake_seq, seq);
				atomic_fetch_sub(&pool->sleepers, 1);
			}
		}
		if (atomic_load(&pool->stop))
			return NULL;
		seen = claim_generation(atomic_load_explicit(&pool->claim, memory_order_acquire));
		j = atomic_load(&pool->join);
		while ((uint32_t) (j >> 32) == seen && (j & 0xffff) < ((j >> 16) & 0xffff))
		{
			if (atomic_compare_exchange_weak(&pool->join, &j, j + 1))
			{
				uint64_t	ran = run_chunks(pool, seen, (int) (j & 0xffff) + 1);

				atomic_fetch_add_explicit(&pool->helper_chunks, ran, memory_order_relaxed);
				break;
			}
		}
	}
}

TfPool *
tf_pool_create(void)
{
	TfPool	   *pool;

	if (posix_memalign((void **) &pool, 64, sizeof(TfPool)) != 0)
		return NULL;
	atomic_init(&pool->claim, 0);
	atomic_init(&pool->done, 0);
	atomic_init(&pool->caller_sleeping, 0);
	atomic_init(&pool->join, 0);
	atomic_init(&pool->wake_seq, 0);
	atomic_init(&pool->sleepers, 0);
	atomic_init(&pool->stop, false);
	atomic_init(&pool->helper_yield_ns, (int64_t) TF_POOL_YIELD_US * 1000);
	atomic_init(&pool->fn, NULL);
	atomic_init(&pool->arg, NULL);
	atomic_init(&pool->n, 0);
	atomic_init(&pool->grain, 1);
	atomic_init(&pool->calls, 0);
	atomic_init(&pool->parallel_calls, 0);
	atomic_init(&pool->chunks, 0);
	atomic_init(&pool->helper_chunks, 0);
	atomic_init(&pool->caller_waits, 0);
	pool->generation = 0;
	pool->helpers = 0;
	return pool;
}

void
tf_pool_free(TfPool *pool)
{
	int			i;

	if (pool == NULL)
		return;
	atomic_store(&pool->stop, true);
	atomic_fetch_add(&pool->wake_seq, 1);
	futex_wake(&pool->wake_seq, INT_MAX);
	for (i = 0; i < pool->helpers; i++)
		pthread_join(pool->threads[i], NULL);
	free(pool);
}

/* Starts helpers up to `want` (with every signal blocked: they never take one); fewer if the system refuses. */
static void
start_helpers(TfPool *pool, int want)
{
	sigset_t	old;

	if (pool->helpers >= want)
		return;
	tf_block_signals(&old);
	while (pool->helpers < want &&
		   pthread_create(&pool->threads[pool->helpers], NULL, helper_main, pool) == 0)
		pool->helpers++;
	tf_restore_signals(&old);
	if (pool->helpers > 0)
		atomic_store(&pool->helper_yield_ns, (int64_t) (TF_POOL_YIELD_TOTAL_US / pool->helpers < TF_POOL_YIELD_US ?
													  TF_POOL_YIELD_TOTAL_US / pool->helpers : TF_POOL_YIELD_US) * 1000);
}

void
tf_pool_for(TfPool *pool, int threads, long n, long grain, TfPoolFn fn, void *arg)
{
	long		chunks,
				helpers;
	Wait		w;

	if (n <= 0)
		return;
	if (grain < 1)
		grain = 1;
	chunks = n / grain + (n % grain != 0);
	atomic_fetch_add_explicit(&pool->calls, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&pool->chunks, (uint64_t) chunks, memory_order_relaxed);
	threads = threads < TF_POOL_MAX_THREADS ? threads : TF_POOL_MAX_THREADS;
	/* more chunks than the claim word counts (over a million): the same chunks, on the caller */
	helpers = chunks > MAX_CHUNKS ? 0 : (threads < chunks ? threads : chunks) - 1;
	if (helpers > 0)
	{
		start_helpers(pool, (int) helpers);
		helpers = helpers < pool->helpers ? helpers : pool->helpers;
	}
	if (helpers <= 0)
	{
		long		c;

		for (c = 0; c < chunks; c++)
			fn(arg, c * grain, n - c * grain > grain ? c * grain + grain : n, 0);
		return;
	}
	atomic_fetch_add_explicit(&pool->parallel_calls, 1, memory_order_relaxed);

	/* publish: the call's fields, then join, then claim (the release the helpers' acquire pairs with) */
	pool->generation = (pool->generation + 1) & 0xffffff;
	atomic_store_explicit(&pool->fn, fn, memory_order_relaxed);
	atomic_store_explicit(&pool->arg, arg, memory_order_relaxed);
	atomic_store_explicit(&pool->n, n, memory_order_relaxed);
	atomic_store_explicit(&pool->grain, grain, memory_order_relaxed);
	atomic_store_explicit(&pool->done, 0, memory_order_relaxed);
	atomic_store(&pool->join, (uint64_t) pool->generation << 32 | (uint64_t) helpers << 16);
	atomic_store_explicit(&pool->claim, (uint64_t) pool->generation << (NEXT_BITS + COUNT_BITS) |
						  (uint64_t) chunks << NEXT_BITS, memory_order_release);
	atomic_fetch_add(&pool->wake_seq, 1);
	if (atomic_load(&pool->sleepers) > 0)
		futex_wake(&pool->wake_seq, (int) helpers);

	(void) run_chunks(pool, pool->generation, 0);

	/* the chunks helpers took: pause, yield, then sleep until the last one ends */
	wait_begin(&w, (int64_t) TF_POOL_YIELD_US * 1000);
	while (atomic_load_explicit(&pool->done, memory_order_acquire) < (uint32_t) chunks)
	{
		if (wait_turn(&w))
		{
			uint32_t	d;

			atomic_store(&pool->caller_sleeping, 1);
			d = atomic_load(&pool->done);
			if (d < (uint32_t) chunks)
			{
				atomic_fetch_add_explicit(&pool->caller_waits, 1, memory_order_relaxed);
				futex_wait(&pool->done, d);
			}
			atomic_store(&pool->caller_sleeping, 0);
		}
	}
	atomic_thread_fence(memory_order_acquire);
}

void
tf_pool_stats(const TfPool *pool, TfPoolStats *stats)
{
	TfPool	   *p = (TfPool *) pool;

	stats->calls = atomic_load(&p->calls);
	stats->parallel_calls = atomic_load(&p->parallel_calls);
	stats->chunks = atomic_load(&p->chunks);
	stats->helper_chunks = atomic_load(&p->helper_chunks);
	stats->caller_waits = atomic_load(&p->caller_waits);
	stats->helpers = p->helpers;
}
