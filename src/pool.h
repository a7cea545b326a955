/*
 * pool.h - the CPU backend's threads (pool.c): a loop over [0, n) cut into
 * fixed chunks of `grain` indices, run by the calling thread and up to
 * threads - 1 helpers of the pool, each claiming the next chunk nobody has
 * started.
 *
 * Why not OpenMP: at the end of every parallel region libgomp's team waits
 * in a barrier that spins (300,000 iterations before sleeping); when another
 * program holds a core, a descheduled member makes every other member spin
 * for its time slice, and a decoding step has a hundred regions
 * (bench/results/busy_machine-vm-20261127.txt: 14x slower on a busy 2-core
 * machine). Here nobody waits for a thread that has not started: the chunks
 * a descheduled helper never claimed are run by whoever is running (the
 * caller included), and the caller waits only for chunks already under way.
 * Idle helpers spin briefly, then yield the CPU for up to TF_POOL_YIELD_US
 * each and TF_POOL_YIELD_TOTAL_US all together, then sleep on a futex, so
 * little CPU is burnt after a call (a few milliseconds at most, whatever the
 * team).
 *
 * Determinism: the chunks are fixed by n and grain alone, never by the
 * thread count or by who runs them; a function that writes only its own
 * chunk's outputs (and reductions that keep one partial per chunk, summed
 * in chunk order by the caller) gives the same bits on any team.
 */
#ifndef ATTENTION_POOL_H
#define ATTENTION_POOL_H

#include <stdbool.h>
#include <stdint.h>

/* Most threads of one call, the caller included. */
#define TF_POOL_MAX_THREADS 64
/*
 * How a thread waits, for the next call (a helper) or for the chunks
 * helpers took (the caller): TF_POOL_SPIN_US of pauses, then sched_yield
 * until TF_POOL_YIELD_US from the start (the helpers together at most
 * TF_POOL_YIELD_TOTAL_US: each waits the total over their number), then a
 * futex sleep; microseconds. A decoding step's regions come a few hundred
 * microseconds apart: a helper that sleeps between them makes every call
 * pay a futex wake-up, and one that spins on a busy machine takes a CPU
 * that other work wants. Measured against the OpenMP build (bench/decode_pool
 * 6: the small model, beam 4, fp32 and int8, batch 1 and 32, 2 threads,
 * idle, medians; bench/busy 20 2 for the busy server): 100 us of pauses then
 * sleep: 0.86-0.93x idle (bench/results/decode_pool-vm-20261129-0343.txt);
 * 1,000 us of pauses: 0.95-1.05x idle (-0406.txt), but beside two busy loops
 * 8 clients kept 0.33x of their idle rate and TPC-B beside them 0.32x of
 * its own (busy-vm-20261129-0418.txt; 0.40x and 0.51x with 100 us). As
 * here: 0.42x and 0.39x busy (-0432.txt), 0.83-1.06x idle (-0438.txt: int8
 * at batch 32 the lowest).
 */
#define TF_POOL_SPIN_US 100
#define TF_POOL_YIELD_US 1000
#define TF_POOL_YIELD_TOTAL_US 3000

typedef struct TfPool TfPool;

/*
 * One chunk: indices [begin, end) of the loop, run on thread `worker`
 * (0: the caller, 1 .. threads - 1: helpers; for per-thread scratch).
 */
typedef void (*TfPoolFn) (void *arg, long begin, long end, int worker);

/* A pool with no threads yet (they start at the first call that wants them); NULL when out of memory. */
TfPool	   *tf_pool_create(void);

/* Stops and joins the helpers and frees the pool. NULL is a no-op. */
void		tf_pool_free(TfPool *pool);

/*
 * fn over [0, n) in chunks of `grain` (>= 1) indices, on up to `threads`
 * threads (clamped to 1 .. TF_POOL_MAX_THREADS and to the chunk count);
 * returns when every chunk has run. One chunk, or one thread, runs inline
 * on the caller with no synchronisation, and so do loops of more chunks
 * than the pool counts (about a million). Helpers that cannot be started
 * leave their chunks to the others. Not reentrant: fn must not call back
 * into the same pool, and one pool serves one calling thread at a time.
 */
void		tf_pool_for(TfPool *pool, int threads, long n, long grain, TfPoolFn fn, void *arg);

/* Counters of a pool since it was made (tests and benchmarks). */
typedef struct TfPoolStats
{
	uint64_t	calls;			/* tf_pool_for calls */
	uint64_t	parallel_calls; /* ... that offered chunks to helpers */
	uint64_t	chunks;			/* chunks run in all */
	uint64_t	helper_chunks;	/* ... of them by helpers */
	uint64_t	caller_waits;	/* times the caller slept for a helper's chunk under way */
	int			helpers;		/* helper threads started */
} TfPoolStats;

void		tf_pool_stats(const TfPool *pool, TfPoolStats *stats);

#endif
