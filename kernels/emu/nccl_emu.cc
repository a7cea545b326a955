/*
 * nccl_emu.cc - the NCCL subset the engine uses, for the emulated CUDA
 * library (attention_cuda_emu.so): ranks are host threads of one process,
 * one device each (cudaSetDevice), as in a worker that drives several GPUs.
 * Compiled against the real nccl.h, so every prototype is NVIDIA's.
 *
 * Semantics kept from NCCL's documentation:
 * - ncclGetUniqueId names a clique; ncclCommInitRank(nranks, id, rank) joins
 *   it and blocks until all nranks ranks have joined; with
 *   ncclCommInitRankConfig and config.blocking = 0 it returns ncclInProgress
 *   at once and ncclCommGetAsyncError says when all have joined (or
 *   ncclRemoteError once the clique is aborted);
 * - every rank issues the same collectives in the same order with the same
 *   counts and roots (a mismatch aborts: real NCCL would hang or mix buffers);
 * - ncclAllReduce (float, sum/prod/max/min/avg) and ncclBroadcast, in place or
 *   not, on device buffers, with the communicator's device current;
 * - ncclGroupStart/End: the collectives between them are issued together;
 * - ncclCommAbort ends the clique: collectives waiting in it and later ones
 *   fail with ncclRemoteError, never hang.
 * A planted failure: CUEMU_JOIN_FAULT_DEVICE=D makes the join of the rank on
 * device D fail at once while the others wait for it.
 * Collectives are synchronous here. A reduction is computed once, by the
 * last rank to arrive, in rank order, so it is deterministic. Cross-process
 * cliques are not emulated (no shared-memory transport): ncclCommInitRank
 * with an id another process made fails with ncclSystemError, and
 * ncclGetLastError names that process.
 */
#include "cuda_emu.h"

#include <condition_variable>
#include <map>
#include <nccl.h>
#include <string>
#include <tuple>
#include <unistd.h>
#include <vector>

namespace ncclemu {

struct Clique
{
	int			ranks = 0;
	int			joined = 0;
	bool		aborted = false;
	std::mutex	mu;
	std::condition_variable cv;
	int			arrived = 0;
	long		generation = 0;
	std::vector<const void *> send;
	std::vector<void *> recv;
	std::vector<std::tuple<size_t, int, int, bool>> signature;	/* count, op, root, broadcast */
	std::vector<char> pending;	/* the rank has arrived at the current collective */
};

}								/* namespace ncclemu */

struct ncclComm
{
	ncclemu::Clique *clique;
	int			rank;
	int			device;
};

namespace ncclemu {

struct Collective
{
	ncclComm_t	comm;
	const void *send;
	void	   *recv;
	size_t		count;
	ncclRedOp_t op;
	int			root;
	bool		broadcast;
};

std::mutex cliques_mu;
thread_local char last_error[256];
std::map<std::string, Clique *> cliques;
thread_local int group_depth;
thread_local std::vector<Collective> group_queue;

float
reduce(ncclRedOp_t op, float a, float b)
{
	return op == ncclMax ? std::max(a, b) : op == ncclMin ? std::min(a, b) : op == ncclProd ? a * b : a + b;
}

/*
 * Arrives at the clique with one collective (after the rank's previous one,
 * issued in the same group, is done); the last rank computes it. Returns the
 * generation to wait for, -1 if aborted.
 */
long
arrive(const Collective &o)
{
	Clique	   *c = o.comm->clique;
	std::unique_lock<std::mutex> lock(c->mu);

	c->cv.wait(lock, [&] { return !c->pending[o.comm->rank] || c->aborted; });
	if (c->aborted)
		return -1;
	c->pending[o.comm->rank] = 1;
	c->send[o.comm->rank] = o.send;
	c->recv[o.comm->rank] = o.recv;
	c->signature[o.comm->rank] = {o.count, o.op, o.root, o.broadcast};
	if (++c->arrived < c->ranks)
		return c->generation;
	for (int r = 1; r < c->ranks; r++)
		if (c->signature[r] != c->signature[0])
		{
			fprintf(stderr, "nccl_emu: ranks 0 and %d issued different collectives (count, op, root)\n", r);
			abort();
		}
	{
		cuemu::Open open;
		std::vector<float> result(o.count);

		for (size_t i = 0; i < o.count; i++)
		{
			float		v = ((const float *) c->send[o.broadcast ? o.root : 0])[i];

			for (int r = 1; !o.broadcast && r < c->ranks; r++)
				v = reduce(o.op, v, ((const float *) c->send[r])[i]);
			result[i] = o.op == ncclAvg && !o.broadcast ? v / c->ranks : v;
		}
		for (int r = 0; r < c->ranks; r++)
			memcpy(c->recv[r], result.data(), o.count * sizeof(float));
	}
	c->arrived = 0;
	std::fill(c->pending.begin(), c->pending.end(), 0);
	c->cv.notify_all();
	return c->generation++;
}

/* Waits until generation g is done; ncclRemoteError if the clique was aborted first. */
ncclResult_t
wait_for(Clique *c, long g)
{
	std::unique_lock<std::mutex> lock(c->mu);

	if (g < 0)
		return ncclRemoteError;
	c->cv.wait(lock, [&] { return c->generation > g || c->aborted; });
	return c->generation > g ? ncclSuccess : ncclRemoteError;
}

ncclResult_t
submit(const Collective &o, ncclDataType_t type)
{
	int			device = -1;
	cuemu::DeviceCounts &counts = cuemu::device_counts();

	if (o.comm == nullptr || type != ncclFloat32 || o.op < ncclSum || o.op > ncclAvg)
		return ncclInvalidArgument;
	cudaGetDevice(&device);
	if ((o.send != nullptr && !cuemu::is_dev(o.send, o.count * sizeof(float))) ||
		!cuemu::is_dev(o.recv, o.count * sizeof(float)) || device != o.comm->device)
		return ncclInvalidArgument;	/* device buffers, and the communicator's device current */
	if (o.broadcast)
		counts.broadcasts++;
	else
	{
		counts.all_reduces++;
		counts.all_reduce_bytes += (long) (o.count * sizeof(float));
		CENSUS(cuemu::census::record("allreduce bytes=%zu", o.count * sizeof(float)));
	}
	if (group_depth > 0)
	{
		group_queue.push_back(o);
		return ncclSuccess;
	}
	return wait_for(o.comm->clique, arrive(o));
}

}								/* namespace ncclemu */

using namespace ncclemu;

extern "C" {

ncclResult_t
ncclGetUniqueId(ncclUniqueId *id)
{
	static std::atomic<long> next{1};

	memset(id, 0, sizeof(*id));
	snprintf(id->internal, sizeof(id->internal), "nccl_emu:%d:%ld", (int) getpid(), next++);
	return ncclSuccess;
}

/* Joins the clique of id as `rank`; waits for the other ranks unless non-blocking. */
static ncclResult_t
join(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, bool blocking)
{
	Clique	   *c;
	int			device = 0;

	static const long fail_device = cuemu::env("CUEMU_JOIN_FAULT_DEVICE", -1);

	if (nranks < 1 || rank < 0 || rank >= nranks || strncmp(id.internal, "nccl_emu:", 9) != 0)
		return ncclInvalidArgument;
	cudaGetDevice(&device);
	if (device == fail_device)
	{
		snprintf(last_error, sizeof(last_error), "planted join failure on device %d (CUEMU_JOIN_FAULT_DEVICE)", device);
		return ncclSystemError;
	}
	if (atol(id.internal + 9) != (long) getpid())
	{
		snprintf(last_error, sizeof(last_error), "communicator id %.40s was made by process %ld; communicators "
				 "across processes are not emulated (no shared-memory transport)", id.internal, atol(id.internal + 9));
		return ncclSystemError;
	}
	{
		std::lock_guard<std::mutex> lock(cliques_mu);
		Clique	  *&slot = cliques[std::string(id.internal, strnlen(id.internal, sizeof(id.internal)))];

		if (slot == nullptr)
		{
			slot = new Clique;
			slot->ranks = nranks;
			slot->send.resize(nranks);
			slot->recv.resize(nranks);
			slot->signature.resize(nranks);
			slot->pending.resize(nranks);
		}
		c = slot;
	}
	if (c->ranks != nranks)
		return ncclInvalidArgument;
	*comm = new ncclComm{c, rank, device};
	{
		std::unique_lock<std::mutex> lock(c->mu);

		c->joined++;
		c->cv.notify_all();
		if (!blocking)
			return c->aborted ? ncclRemoteError : c->joined >= c->ranks ? ncclSuccess : ncclInProgress;
		c->cv.wait(lock, [&] { return c->joined >= c->ranks || c->aborted; });
		return c->aborted ? ncclRemoteError : ncclSuccess;
	}
}

ncclResult_t
ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
	return join(comm, nranks, id, rank, true);
}

ncclResult_t
ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config)
{
	return join(comm, nranks, id, rank, config == nullptr || config->blocking != 0);
}

ncclResult_t
ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *state)
{
	Clique	   *c = comm->clique;
	std::lock_guard<std::mutex> lock(c->mu);

	*state = c->aborted ? ncclRemoteError : c->joined >= c->ranks ? ncclSuccess : ncclInProgress;
	return ncclSuccess;
}

ncclResult_t
ncclCommAbort(ncclComm_t comm)
{
	if (comm == nullptr)
		return ncclSuccess;
	{
		std::lock_guard<std::mutex> lock(comm->clique->mu);

		comm->clique->aborted = true;
		comm->clique->cv.notify_all();
	}
	return ncclSuccess;
}

ncclResult_t
ncclCommDestroy(ncclComm_t comm)
{
	delete comm;				/* the clique stays: its id may not be reused */
	return ncclSuccess;
}

const char *
ncclGetErrorString(ncclResult_t r)
{
	return r == ncclSuccess ? "no error" : r == ncclRemoteError ? "remote process exited or there was a network error"
		: r == ncclInvalidArgument ? "invalid argument" : r == ncclSystemError ? "unhandled system error"
		: "unhandled error";
}

const char *
ncclGetLastError(ncclComm_t)
{
	return last_error;
}

ncclResult_t
ncclGroupStart(void)
{
	group_depth++;
	return ncclSuccess;
}

ncclResult_t
ncclGroupEnd(void)
{
	std::vector<std::pair<Clique *, long>> pending;
	ncclResult_t rc = ncclSuccess;

	if (group_depth == 0)
		return ncclInvalidUsage;
	if (--group_depth > 0)
		return ncclSuccess;
	for (const Collective &o : group_queue)
		pending.push_back({o.comm->clique, arrive(o)});
	group_queue.clear();
	for (auto &p : pending)
		if (wait_for(p.first, p.second) != ncclSuccess)
			rc = ncclRemoteError;
	return rc;
}

ncclResult_t
ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
			  cudaStream_t)
{
	return submit(Collective{comm, send, recv, count, op, 0, false}, type);
}

ncclResult_t
ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm, cudaStream_t)
{
	if (comm == nullptr || root < 0 || root >= comm->clique->ranks)
		return ncclInvalidArgument;
	return submit(Collective{comm, comm->rank == root ? send : nullptr, recv, count, ncclSum, root, true}, type);
}

/*
 * Counts of device `device` since the library was loaded (benchmarks and
 * tests): [0] host synchronisations, [1] all-reduce calls, [2] bytes
 * all-reduced, [3] broadcast calls.
 */
__attribute__((visibility("default"))) void
cuemu_counters(int device, long out[4])
{
	cuemu::DeviceCounts &c = cuemu::counts[(unsigned) device % cuemu::MAX_DEVICES];

	out[0] = c.syncs;
	out[1] = c.all_reduces;
	out[2] = c.all_reduce_bytes;
	out[3] = c.broadcasts;
}

}
