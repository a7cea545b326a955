/*
 * parallel.c - data-parallel training over several devices (parallel.h):
 * one engine thread per local rank, each owning its replica and device;
 * the calling thread hands every rank the same piece of work and waits
 * for all of them.
 */
#define _POSIX_C_SOURCE 200809L
#include "blas.h"
#include "parallel.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "model.h"
#include "signals.h"

typedef enum Work
{
	WORK_CREATE,
	WORK_JOIN,
	WORK_LOAD,
	WORK_PRECISION,
	WORK_STEP,
	WORK_AGREE,
	WORK_QUIT
} Work;

typedef struct Rank
{
	TfParallel *p;
	int			rank;			/* in all ranks */
	int			device;
	pthread_t	thread;
	bool		started;
	TfModel    *model;
	int			rc;
	char		err[TF_ERRLEN];
	TfStepStats stats;
	float	   *vote;			/* one float of backend memory for tf_parallel_agree; NULL before the first */
	float		total;			/* the sum it read back */
} Rank;

struct TfParallel
{
	char		kind[8];
	int			local;
	int			first;
	int			world;
	Rank	   *ranks;
	bool		threaded;		/* engine threads (several ranks here or elsewhere) */
	bool		broken;			/* a rank failed: only tf_parallel_free is left */

	/* the work handed out, and its completion */
	pthread_mutex_t mu;
	pthread_cond_t go,
				done;
	long		generation;
	int			finished;
	Work		work;
	int			first_failure;	/* local index of the first rank that failed; -1 */
	bool		(*abandon) (void *arg); /* TfWorld.abandon, polled while joining; then tf_parallel_set_poll's */
	void	   *abandon_arg;
	bool		abandoned;		/* abandon returned true */

	/* arguments of the work */
	TfConfig	config;
	uint64_t	seed;
	int			threads;
	uint8_t		id[TF_UNIQUE_ID_BYTES];
	const TfTensor *tensors;
	int			tensor_count;
	TfPrecision precision;
	const TfBatch *batches;
	int			count;
	float		grad_scale;
	const TfOptimizer *opt;
	int			vote;
};

int
tf_device_list_parse(const char *device, char kind[8], int devices[TF_MAX_LOCAL_RANKS], int *count,
					 char *err, size_t errlen)
{
	const char *s;

	*count = 0;
	if (strcmp(device, "cuda:all") == 0)
	{
		int			n = tf_cuda_device_count(err, errlen);

		if (n < 0)
			return TF_ERROR;
		if (n == 0)
		{
			snprintf(err, errlen, "device \"cuda:all\": the CUDA library sees no device");
			return TF_ERROR;
		}
		strcpy(kind, "cuda");
		*count = n < TF_MAX_LOCAL_RANKS ? n : TF_MAX_LOCAL_RANKS;
		for (int i = 0; i < *count; i++)
			devices[i] = i;
		return TF_OK;
	}
	if (strchr(device, ',') == NULL)
	{
		*count = 1;
		return tf_device_parse(device, kind, &devices[0], err, errlen);
	}
	if (strncmp(device, "cuda:", 5) != 0)
		goto bad;
	for (s = device + 5;; s++)
	{
		char	   *end;
		long		n;

		if (*s < '0' || *s > '9')
			goto bad;
		n = strtol(s, &end, 10);
		if (n > TF_MAX_DEVICE || (*end != ',' && *end != '\0'))
			goto bad;
		for (int i = 0; i < *count; i++)
			if (devices[i] == n)
			{
				snprintf(err, errlen, "device \"%s\" lists device %ld twice", device, n);
				return TF_ERROR;
			}
		if (*count == TF_MAX_LOCAL_RANKS)
		{
			snprintf(err, errlen, "device \"%s\" lists more than %d devices", device, TF_MAX_LOCAL_RANKS);
			return TF_ERROR;
		}
		devices[(*count)++] = (int) n;
		s = end;
		if (*s == '\0')
			break;
	}
	strcpy(kind, "cuda");
	return TF_OK;
bad:
	snprintf(err, errlen, "invalid device \"%s\" (expected \"cpu\", \"cuda\", \"cuda:N\", \"cuda:N,M,...\" or "
			 "\"cuda:all\", N <= %d)", device, TF_MAX_DEVICE);
	return TF_ERROR;
}

/* Every local rank's communicator ends: no rank is left waiting in a reduction. */
static void
abort_all(TfParallel *p)
{
	for (int i = 0; i < p->local; i++)
		if (p->ranks[i].model != NULL && p->ranks[i].model->be->abort != NULL)
			p->ranks[i].model->be->abort(p->ranks[i].model->be);
}

/* Records rank r's failure (its message is in r->err); the first one aborts the others. */
static void
rank_failed(Rank *r)
{
	TfParallel *p = r->p;
	bool		first;

	r->rc = TF_ERROR;
	pthread_mutex_lock(&p->mu);
	first = p->first_failure < 0;
	if (first)
		p->first_failure = (int) (r - p->ranks);
	pthread_mutex_unlock(&p->mu);
	if (first && p->threaded)
		abort_all(p);
}

/* Rank r's share of a step: its batches, forward and backward, the reductions, the Adam step. */
static void
rank_step(Rank *r)
{
	TfParallel *p = r->p;
	TfModel    *m = r->model;

	if (m->be->bind != NULL)
		m->be->bind(m->be);
	for (int i = r->rank; i < p->count; i += p->world)
	{
		TfBatch		b = p->batches[i];

		b.index = i;
		if (tf_model_forward(m, &b, true, NULL, NULL, r->err, sizeof(r->err)) != TF_OK)
			return rank_failed(r);
		/* the rank's last batch: its backward sums every gradient over the ranks */
		m->reduce_grads = p->threaded && i + p->world >= p->count;
		if (tf_model_backward(m, p->grad_scale, r->err, sizeof(r->err)) != TF_OK)
			return rank_failed(r);
	}
	if (tf_model_step(m, p->opt, &r->stats, r->err, sizeof(r->err)) != TF_OK && !r->stats.skipped)
		return rank_failed(r);
	r->rc = r->stats.skipped ? TF_ERROR : TF_OK;
}

/*
 * Rank r's part of tf_parallel_agree: the node's vote on its first local
 * rank, 0 on the others, summed over every rank of every node.
 */
static void
rank_agree(Rank *r)
{
	TfParallel *p = r->p;
	TfBackend  *be = r->model->be;
	float		mine = r == &p->ranks[0] ? (float) p->vote : 0.0f;

	if (be->bind != NULL)
		be->bind(be);
	if (r->vote == NULL && (r->vote = be->alloc(be, sizeof(float))) == NULL)
	{
		snprintf(r->err, sizeof(r->err), "out of memory");
		return rank_failed(r);
	}
	be->upload(be, r->vote, &mine, sizeof(float));
	be->all_reduce(be, r->vote, 1, true);
	be->download(be, &r->total, r->vote, sizeof(float));
	if (be->status(be, r->err, sizeof(r->err)) != TF_OK)
		rank_failed(r);
}

/* Runs the current work on rank r (its own thread, or the caller's when not threaded). */
static void
run(Rank *r, Work work)
{
	TfParallel *p = r->p;
	char		name[16];

	r->rc = TF_OK;
	switch (work)
	{
		case WORK_CREATE:
			if (strcmp(p->kind, "cpu") == 0)
				strcpy(name, "cpu");
			else
				snprintf(name, sizeof(name), "cuda:%d", r->device);
			r->model = tf_model_create(&p->config, p->seed, name, p->threads, r->err, sizeof(r->err));
			if (r->model == NULL)
				r->rc = TF_ERROR;
			break;
		case WORK_JOIN:
			if (r->model->be->join == NULL)
			{
				snprintf(r->err, sizeof(r->err), "the %s backend cannot join several ranks", r->model->be->name);
				r->rc = TF_ERROR;
			}
			else if (r->model->be->join(r->model->be, p->id, p->world, r->rank, r->err, sizeof(r->err)) != TF_OK)
				rank_failed(r);	/* the ranks still waiting to join are aborted */
			break;
		case WORK_LOAD:
			r->rc = tf_model_load(r->model, p->tensors, p->tensor_count, r->err, sizeof(r->err));
			break;
		case WORK_PRECISION:
			r->rc = tf_model_set_precision(r->model, p->precision, r->err, sizeof(r->err));
			break;
		case WORK_STEP:
			rank_step(r);
			break;
		case WORK_AGREE:
			rank_agree(r);
			break;
		case WORK_QUIT:			/* rank_main returns instead */
			break;
	}
}

static void *
rank_main(void *arg)
{
	Rank	   *r = arg;
	TfParallel *p = r->p;
	long		seen = 0;

	for (;;)
	{
		Work		work;

		pthread_mutex_lock(&p->mu);
		while (p->generation == seen)
			pthread_cond_wait(&p->go, &p->mu);
		seen = p->generation;
		work = p->work;
		pthread_mutex_unlock(&p->mu);
		if (work == WORK_QUIT)
			return NULL;
		run(r, work);
		pthread_mutex_lock(&p->mu);
		p->finished++;
		pthread_cond_signal(&p->done);
		pthread_mutex_unlock(&p->mu);
	}
}

/*
 * Runs `work` on every local rank and waits for all. TF_ERROR with the
 * first failed rank's message, prefixed with its rank and device.
 */
static int
run_all(TfParallel *p, Work work, char *err, size_t errlen)
{
	int			f;

	p->first_failure = -1;
	if (!p->threaded)
		run(&p->ranks[0], work);
	else
	{
		pthread_mutex_lock(&p->mu);
		p->work = work;
		p->finished = 0;
		p->generation++;
		pthread_cond_broadcast(&p->go);
		while (p->finished < p->local)
		{
			struct timespec until;

			/* the works that wait for other machines' ranks poll the caller's function */
			if ((work != WORK_JOIN && work != WORK_STEP && work != WORK_AGREE) || p->abandon == NULL ||
				p->abandoned)
			{
				pthread_cond_wait(&p->done, &p->mu);
				continue;
			}
			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_nsec += JOIN_POLL_MS * 1000000L;
			until.tv_sec += until.tv_nsec / 1000000000L;
			until.tv_nsec %= 1000000000L;
			if (pthread_cond_timedwait(&p->done, &p->mu, &until) == 0 || p->finished == p->local)
				continue;
			/* the caller's poll runs without the lock: the ranks may finish meanwhile */
			pthread_mutex_unlock(&p->mu);
			if (p->abandon(p->abandon_arg))
			{
				p->abandoned = true;
				abort_all(p);
			}
			pthread_mutex_lock(&p->mu);
		}
		pthread_mutex_unlock(&p->mu);
	}
	for (f = 0; f < p->local && p->ranks[f].rc == TF_OK; f++)
		;
	if (f == p->local)
		return TF_OK;
	if (p->first_failure >= 0)
		f = p->first_failure;
	if (p->abandoned && work == WORK_JOIN)
		snprintf(err, errlen, "the join of ranks %d .. %d was abandoned", p->first, p->first + p->local - 1);
	else if (p->abandoned)
		snprintf(err, errlen, "ranks %d .. %d were stopped by the caller: rank %d (%s:%d): %s", p->first,
				 p->first + p->local - 1, p->ranks[f].rank, p->kind, p->ranks[f].device, p->ranks[f].err);
	else if (p->threaded)
		snprintf(err, errlen, "rank %d (%s:%d): %s", p->ranks[f].rank, p->kind, p->ranks[f].device, p->ranks[f].err);
	else
		snprintf(err, errlen, "%s", p->ranks[f].err);
	return TF_ERROR;
}

TfParallel *
tf_parallel_create(const TfConfig *config, uint64_t seed, const char *device, int threads, const TfWorld *world,
				   char *err, size_t errlen)
{
	TfParallel *p;
	int			devices[TF_MAX_LOCAL_RANKS];
	char		kind[8];
	int			count;
	sigset_t	old;

	if (tf_device_list_parse(device, kind, devices, &count, err, errlen) != TF_OK)
		return NULL;
	if (world != NULL && (world->first_rank < 0 || world->ranks < 1 || world->first_rank + count > world->ranks))
	{
		snprintf(err, errlen, "ranks %d .. %d of %d do not fit: this machine has %d", world->first_rank,
				 world->first_rank + count - 1, world->ranks, count);
		return NULL;
	}
	if (strcmp(kind, "cpu") == 0 && (count > 1 || (world != NULL && world->ranks > 1)))
	{
		snprintf(err, errlen, "data-parallel training needs CUDA devices; the CPU backend trains on one rank");
		return NULL;
	}
	p = calloc(1, sizeof(TfParallel));
	if (p == NULL || (p->ranks = calloc(count, sizeof(Rank))) == NULL)
	{
		free(p);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	strcpy(p->kind, kind);
	p->local = count;
	p->first = world != NULL ? world->first_rank : 0;
	p->world = world != NULL ? world->ranks : count;
	p->threaded = p->world > 1;
	if (world != NULL)
	{
		p->abandon = world->abandon;
		p->abandon_arg = world->abandon_arg;
	}
	p->config = *config;
	p->seed = seed;
	p->threads = threads;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done, NULL);
	for (int i = 0; i < count; i++)
	{
		p->ranks[i].p = p;
		p->ranks[i].rank = p->first + i;
		p->ranks[i].device = devices[i];
	}
	if (p->threaded)
	{
		if (world != NULL)
			memcpy(p->id, world->id, sizeof(p->id));
		else if (tf_cuda_unique_id(p->id, err, errlen) != TF_OK)
		{
			tf_parallel_free(p);
			return NULL;
		}
		/* OpenBLAS is loaded before the rank threads: its load sets the environment (blas.h) */
		(void) tf_blas(NULL, 0);
		/* engine threads start with every signal blocked: the caller's handlers stay the caller's */
		tf_block_signals(&old);
		for (int i = 0; i < count; i++)
			p->ranks[i].started = pthread_create(&p->ranks[i].thread, NULL, rank_main, &p->ranks[i]) == 0;
		tf_restore_signals(&old);
		for (int i = 0; i < count; i++)
			if (!p->ranks[i].started)
			{
				snprintf(err, errlen, "could not start the engine thread of rank %d", p->ranks[i].rank);
				tf_parallel_free(p);
				return NULL;
			}
	}
	/* every replica exists before any joins: a failed one must not leave the others waiting */
	if (run_all(p, WORK_CREATE, err, errlen) != TF_OK ||
		(p->threaded && run_all(p, WORK_JOIN, err, errlen) != TF_OK))
	{
		tf_parallel_free(p);
		return NULL;
	}
	p->abandon = NULL;			/* TfWorld's is for the join; tf_parallel_set_poll's for later work */
	p->abandon_arg = NULL;
	return p;
}

int
tf_parallel_local_ranks(const TfParallel *p)
{
	return p->local;
}

int
tf_parallel_ranks(const TfParallel *p)
{
	return p->world;
}

TfModel *
tf_parallel_model(TfParallel *p)
{
	TfModel    *m = p->ranks[0].model;

	if (m->be->bind != NULL)
		m->be->bind(m->be);
	return m;
}

int
tf_parallel_load(TfParallel *p, const TfTensor *tensors, int count, char *err, size_t errlen)
{
	if (p->broken)
	{
		snprintf(err, errlen, "a rank failed earlier: the replicas are unusable");
		return TF_ERROR;
	}
	p->tensors = tensors;
	p->tensor_count = count;
	return run_all(p, WORK_LOAD, err, errlen);
}

int
tf_parallel_set_precision(TfParallel *p, TfPrecision precision, char *err, size_t errlen)
{
	if (p->broken)
	{
		snprintf(err, errlen, "a rank failed earlier: the replicas are unusable");
		return TF_ERROR;
	}
	p->precision = precision;
	return run_all(p, WORK_PRECISION, err, errlen);
}

int
tf_parallel_step(TfParallel *p, const TfBatch *batches, int count, float grad_scale, const TfOptimizer *opt,
				 TfStepStats *stats, char *err, size_t errlen)
{
	int			rc;

	memset(stats, 0, sizeof(*stats));
	if (p->broken)
	{
		snprintf(err, errlen, "a rank failed earlier: the replicas are unusable");
		return TF_ERROR;
	}
	if (count < p->world || count > TF_MAX_STEP_BATCHES)
	{
		snprintf(err, errlen, "a step of %d batches on %d ranks: expected %d .. %d batches", count, p->world,
				 p->world, TF_MAX_STEP_BATCHES);
		return TF_ERROR;
	}
	p->batches = batches;
	p->count = count;
	p->grad_scale = grad_scale;
	p->opt = opt;
	rc = run_all(p, WORK_STEP, err, errlen);
	for (int i = 0; i < p->local; i++)
	{
		stats->loss_sum += p->ranks[i].stats.loss_sum;
		stats->tokens += p->ranks[i].stats.tokens;
	}
	stats->learning_rate = p->ranks[0].stats.learning_rate;
	stats->grad_norm = p->ranks[0].stats.grad_norm;
	stats->skipped = p->ranks[0].stats.skipped;
	if (rc != TF_OK && p->first_failure >= 0)
		p->broken = true;
	else if (rc != TF_OK && stats->skipped)
		snprintf(err, errlen, "%s", p->ranks[0].err);
	return rc;
}

void
tf_parallel_set_poll(TfParallel *p, bool (*poll) (void *arg), void *arg)
{
	p->abandon = p->world > p->local ? poll : NULL;
	p->abandon_arg = arg;
}

int
tf_parallel_agree(TfParallel *p, int vote, int *total, char *err, size_t errlen)
{
	*total = vote;
	if (p->broken)
	{
		snprintf(err, errlen, "a rank failed earlier: the replicas are unusable");
		return TF_ERROR;
	}
	if (vote < 0 || vote > TF_MAX_VOTE)
	{
		snprintf(err, errlen, "vote %d is out of range 0 .. %d", vote, TF_MAX_VOTE);
		return TF_ERROR;
	}
	if (!p->threaded)
		return TF_OK;
	p->vote = vote;
	if (run_all(p, WORK_AGREE, err, errlen) != TF_OK)
	{
		p->broken = true;
		return TF_ERROR;
	}
	*total = (int) p->ranks[0].total;
	return TF_OK;
}

void
tf_parallel_free(TfParallel *p)
{
	if (p == NULL)
		return;
	if (p->threaded)
	{
		pthread_mutex_lock(&p->mu);
		p->work = WORK_QUIT;
		p->generation++;
		pthread_cond_broadcast(&p->go);
		pthread_mutex_unlock(&p->mu);
		for (int i = 0; i < p->local; i++)
			if (p->ranks[i].started)
				pthread_join(p->ranks[i].thread, NULL);
	}
	for (int i = 0; i < p->local; i++)
	{
		if (p->ranks[i].vote != NULL)
			p->ranks[i].model->be->free(p->ranks[i].model->be, p->ranks[i].vote);
		tf_model_free(p->ranks[i].model);
	}
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done);
	free(p->ranks);
	free(p);
}
