/*
 * parallel.h - data-parallel training: one model replica (rank) per device,
 * each driven by an engine thread, gradients summed across the ranks with
 * NCCL (backend.h: join, all_reduce) after every rank's share of a step.
 *
 * A step is `count` batches with indices 0 .. count - 1 (TfBatch.index, the
 * key of their dropout masks with the step number); rank r of `world` ranks
 * takes batches r, r + world, r + 2 world, ...; every rank scales its
 * gradients by the same grad_scale (1 / the labels of the whole step),
 * the all-reduce sums them, and every rank applies the same Adam step to
 * identical parameters. So N ranks follow the trajectory of one rank that
 * accumulates all `count` batches, up to the order of the float sums.
 *
 * The engine threads never call back into the caller; the calling thread
 * waits for each call to finish on every rank (polling TfWorld.abandon
 * while they join other machines' ranks). One rank on this machine
 * alone (the "cpu", "cuda" and "cuda:N" devices) runs on the calling
 * thread, exactly as a TfModel does.
 */
#ifndef ATTENTION_PARALLEL_H
#define ATTENTION_PARALLEL_H

#include "transformer.h"

/* Most ranks (devices) of one machine. */
#define TF_MAX_LOCAL_RANKS 64
/* Interval of TfWorld.abandon's polls, milliseconds. */
#define JOIN_POLL_MS 100

typedef struct TfParallel TfParallel;

/*
 * Where this machine's ranks sit among all machines' (NULL: this machine
 * alone). The ranks of this machine are first_rank .. first_rank + (its
 * device count) - 1 of `ranks`; every machine passes the same id
 * (tf_cuda_unique_id on one of them).
 */
typedef struct TfWorld
{
	int			first_rank;
	int			ranks;
	uint8_t		id[TF_UNIQUE_ID_BYTES];

	/*
	 * Called on the calling thread about every JOIN_POLL_MS while this
	 * machine's ranks wait for the others to join (NULL: never): true
	 * abandons the join (every local rank's communicator is aborted, and
	 * tf_parallel_create fails), e.g. when another machine's ranks failed.
	 */
	bool		(*abandon) (void *arg);
	void	   *abandon_arg;
} TfWorld;

/*
 * Parses a device list: "cpu", "cuda", "cuda:N" (one device), "cuda:N,M,..."
 * (distinct devices, at most TF_MAX_LOCAL_RANKS) or "cuda:all" (devices 0 ..
 * count - 1, counted through the CUDA library). Fills kind ("cpu" or
 * "cuda"), devices[] and *count. TF_ERROR with a message naming the bad
 * name, a repeated device, or why no CUDA device can be counted.
 */
int			tf_device_list_parse(const char *device, char kind[8], int devices[TF_MAX_LOCAL_RANKS],
								 int *count, char *err, size_t errlen);

/*
 * Creates one training replica per device of `device` (tf_device_list_parse),
 * each initialised as tf_model_create(config, seed, ...) does, so all start
 * from the same bits; with several ranks (here or in `world`) they join one
 * communicator. threads: CPU compute threads (the CPU backend). NULL with a
 * message: as tf_model_create, more than one rank on the CPU, or a
 * communicator that could not be made; whatever was created is freed.
 */
TfParallel *tf_parallel_create(const TfConfig *config, uint64_t seed, const char *device, int threads,
							   const TfWorld *world, char *err, size_t errlen);

/* Ranks on this machine, and in all. */
int			tf_parallel_local_ranks(const TfParallel *p);
int			tf_parallel_ranks(const TfParallel *p);

/*
 * Rank first_rank's replica (rank 0 on one machine) for what needs one:
 * checkpoints (tf_model_tensors), validation, the step count. Its device
 * becomes the calling thread's current one. Only between the other calls.
 */
TfModel    *tf_parallel_model(TfParallel *p);

/* tf_model_load on every replica (each on its own thread). Errors as tf_model_load. */
int			tf_parallel_load(TfParallel *p, const TfTensor *tensors, int count, char *err, size_t errlen);

/* tf_model_set_precision on every replica (each on its own thread). Errors as it. */
int			tf_parallel_set_precision(TfParallel *p, TfPrecision precision, char *err, size_t errlen);

/*
 * One optimizer step over batches[0 .. count - 1] (count >= the ranks in
 * all, <= TF_MAX_STEP_BATCHES; each batch's index is set to its position):
 * forward with dropout and backward of each batch on its rank with
 * grad_scale (1 / labels of all count batches for the mean loss), the
 * gradients summed over the ranks, then tf_model_step on every replica.
 * stats: learning rate and gradient norm (the same on every rank), loss_sum
 * and tokens summed over this machine's ranks, skipped as tf_model_step.
 * TF_ERROR with a message: invalid arguments, a skipped step (stats->skipped,
 * the replicas stay equal and usable), or a rank's failure ("rank R (cuda:D):
 * ..."; the first rank to fail; the others are aborted, never left waiting),
 * after which the replicas are unusable: free them.
 */
int			tf_parallel_step(TfParallel *p, const TfBatch *batches, int count, float grad_scale,
							 const TfOptimizer *opt, TfStepStats *stats, char *err, size_t errlen);

/*
 * With ranks on other machines: `poll` (NULL: none) replaces
 * TfWorld.abandon after the join. It is called on the calling thread about
 * every JOIN_POLL_MS while this machine's ranks run a step or a vote; true
 * aborts their communicators (NCCL's abort path), so the work fails ("ranks
 * .. were stopped by the caller") and the replicas are unusable. The caller
 * uses it to give up on another machine that went silent, and to show its
 * own liveness meanwhile. No-op with every rank on this machine.
 */
void		tf_parallel_set_poll(TfParallel *p, bool (*poll) (void *arg), void *arg);

/* Largest vote of tf_parallel_agree: totals stay exact in a float sum over 2^24 / TF_MAX_VOTE nodes. */
#define TF_MAX_VOTE 1023

/*
 * Every node's vote summed over all nodes: this machine's vote (0 ..
 * TF_MAX_VOTE) enters the all-reduce on its first rank, 0 on its others;
 * every node calls it at the same point (between steps) and gets the same
 * *total. With no other rank it is the vote itself. It is how the nodes
 * of a job across machines decide together, after each step, whether to
 * stop: one small reduction on the gradients' communicator. TF_ERROR with
 * a message: a vote out of range, or a rank's failure as tf_parallel_step
 * (a node that died or aborted: the replicas are unusable then).
 */
int			tf_parallel_agree(TfParallel *p, int vote, int *total, char *err, size_t errlen);

/* Stops the engine threads and frees every replica and device resource. NULL is a no-op. */
void		tf_parallel_free(TfParallel *p);

#endif
