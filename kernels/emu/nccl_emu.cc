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
 *   fail with ncclRemoteError, never hang;
 * - on a non-blocking communicator a collective returns ncclInProgress and
 *   runs on a thread of its own; ncclCommGetAsyncError says ncclInProgress
 *   until it is done (here: complete, not only enqueued), so the caller
 *   polls and may abort meanwhile from another thread.
 * A planted failure: CUEMU_JOIN_FAULT_DEVICE=D makes the join of the rank on
 * device D fail at once while the others wait for it.
 * A collective ends before its call returns, except on a non-blocking
 * communicator (above). A reduction is computed once, by the last rank to
 * arrive, in rank order, so it is deterministic.
 *
 * Ranks in other processes (other machines: the engine's multi-node
 * training) reach the clique over TCP. ncclGetUniqueId opens a listener on
 * CUEMU_NCCL_ADDRESS (default 127.0.0.1), port chosen by the system, and
 * writes its address into the id; the clique lives in the id's process. A
 * rank of another process connects there and a proxy thread of the id's
 * process stands in for it: it arrives at the clique with the data the
 * rank sent and sends back the result, so the reduction is the same one,
 * in the same rank order, bitwise what one process computes. A closed
 * connection either way (a process that died, ncclCommAbort in the other
 * process) aborts the clique: every rank's pending and later collectives
 * fail with ncclRemoteError. A peer that stays connected but silent
 * (stopped, or cut off without a reset) is waited for, as NCCL would; the
 * caller's ncclCommAbort, from another thread, ends that wait. Both ends
 * are one build on one architecture: the wire format is the host's.
 */
#include "cuda_emu.h"

#include <arpa/inet.h>
#include <condition_variable>
#include <map>
#include <nccl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string>
#include <system_error>
#include <sys/socket.h>
#include <thread>
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
	/*
	 * ranks of other processes (proxy threads), how many were told that
	 * every rank joined, and how many have yet to send the last
	 * collective's result: this process's ranks return from a join or a
	 * collective only once the others have theirs (so this process may
	 * exit when they return, as with NCCL, whose collectives end once
	 * every rank has its data)
	 */
	int			remotes = 0;
	int			told = 0;
	int			sending = 0;
};

/* A rank's connection to the clique of another process (the id's). */
struct Remote
{
	int			fd = -1;
	std::atomic<int> state{ncclInProgress};	/* ncclSuccess once every rank joined, else an error */
	std::atomic<bool> aborted{false};
	int			ready_got = 0;	/* bytes of the join's reply read so far */
	int32_t		ready = 0;
};

/*
 * The collective in flight on a non-blocking communicator: it runs on a
 * thread of its own and the call returns ncclInProgress, so the caller
 * polls ncclCommGetAsyncError and may abort the communicator from another
 * thread meanwhile (a peer that went silent), as with NCCL.
 */
struct Async
{
	std::mutex	mu;
	std::condition_variable cv;
	bool		running = false;
	bool		ran = false;	/* a collective has ended: its result is the communicator's state */
	ncclResult_t result = ncclSuccess;	/* of the last one; an error stays */
	char		error[256] = "";
};

}								/* namespace ncclemu */

struct ncclComm
{
	ncclemu::Clique *clique;	/* NULL for a rank whose clique is in another process */
	int			rank;
	int			device;
	ncclemu::Remote *remote;
	ncclemu::Async *async = nullptr;	/* non-blocking communicators only */
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
	c->sending = c->remotes;
	c->arrived = 0;
	std::fill(c->pending.begin(), c->pending.end(), 0);
	c->cv.notify_all();
	return c->generation++;
}

/*
 * Waits until generation g is done (for this process's own ranks, and its
 * result sent to the ranks of other processes); ncclRemoteError if the
 * clique was aborted first.
 */
ncclResult_t
wait_for(Clique *c, long g, bool own = true)
{
	std::unique_lock<std::mutex> lock(c->mu);

	if (g < 0)
		return ncclRemoteError;
	c->cv.wait(lock, [&] { return (c->generation > g && (!own || c->sending == 0)) || c->aborted; });
	return c->generation > g ? ncclSuccess : ncclRemoteError;
}

/* The clique has every rank, and the ranks of other processes know it. */
bool
complete(const Clique *c)
{
	return c->joined >= c->ranks && c->told >= c->remotes;
}

/* ---- ranks in other processes: TCP ---- */

const uint32_t MAGIC = 0x4e43454du;	/* "NCEM" */

struct Hello
{
	uint32_t	magic;
	int32_t		nranks;
	int32_t		rank;
};

struct OpHeader
{
	uint64_t	count;
	int32_t		op;
	int32_t		root;
	int32_t		broadcast;
	int32_t		has_data;
};

/* This process in ids: its pid and a random nonce (pids repeat across machines). */
unsigned long long
process_nonce()
{
	static const unsigned long long nonce = [] {
		unsigned long long n = 0;
		FILE	   *f = fopen("/dev/urandom", "rb");

		if (f == nullptr || fread(&n, sizeof(n), 1, f) != 1)
			n = (unsigned long long) time(nullptr) ^ ((unsigned long long) getpid() << 32);
		if (f != nullptr)
			fclose(f);
		return n;
	}();
	return nonce;
}

struct IdParts
{
	int			pid = 0;
	unsigned long long nonce = 0;
	char		host[64] = "";
	int			port = 0;
};

/* The parts of an id of ncclGetUniqueId; false if it is none. */
bool
parse_id(const ncclUniqueId &id, IdParts *p)
{
	long		seq;

	return strnlen(id.internal, sizeof(id.internal)) < sizeof(id.internal) &&
		sscanf(id.internal, "nccl_emu:%d:%ld:%llx:%63[^:]:%d", &p->pid, &seq, &p->nonce, p->host, &p->port) == 5;
}

/*
 * n bytes to or from fd, waiting in polls of 100 ms that end early once
 * *stop is set (NULL: never). false on EOF, an error or a stop.
 */
bool
transfer(int fd, void *buf, size_t n, bool sending, const std::atomic<bool> *stop)
{
	char	   *b = (char *) buf;

	while (n > 0)
	{
		struct pollfd pfd = {fd, (short) (sending ? POLLOUT : POLLIN), 0};
		ssize_t		got;

		if (stop != nullptr && stop->load())
			return false;
		if (poll(&pfd, 1, 100) <= 0)
			continue;
		got = sending ? send(fd, b, n, MSG_NOSIGNAL) : recv(fd, b, n, 0);
		if (got <= 0)
		{
			if (got < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			return false;
		}
		b += got;
		n -= (size_t) got;
	}
	return true;
}

/* The clique named key, made for nranks if new; NULL if it exists with another size. */
Clique *
clique_for(const std::string &key, int nranks)
{
	std::lock_guard<std::mutex> lock(cliques_mu);
	Clique	  *&slot = cliques[key];

	if (slot == nullptr)
	{
		slot = new Clique;
		slot->ranks = nranks;
		slot->send.resize(nranks);
		slot->recv.resize(nranks);
		slot->signature.resize(nranks);
		slot->pending.resize(nranks);
	}
	return slot->ranks == nranks ? slot : nullptr;
}

void
abort_clique(Clique *c)
{
	std::lock_guard<std::mutex> lock(c->mu);

	c->aborted = true;
	c->cv.notify_all();
}

/*
 * The id's process's stand-in for a rank of another process connected on
 * fd: joins the clique for it, then arrives with each collective it sends
 * and sends back the result, until the connection ends (which aborts the
 * clique: the peer died or gave up) or the clique is aborted.
 */
void
proxy(std::string key, int fd)
{
	Hello		h;
	Clique	   *c = nullptr;
	int32_t		status = ncclInvalidArgument;

	if (!transfer(fd, &h, sizeof(h), false, nullptr) || h.magic != MAGIC || h.nranks < 1 || h.rank < 0 ||
		h.rank >= h.nranks || (c = clique_for(key, h.nranks)) == nullptr)
	{
		transfer(fd, &status, sizeof(status), true, nullptr);
		close(fd);
		return;
	}
	{
		std::unique_lock<std::mutex> lock(c->mu);

		c->joined++;
		c->remotes++;
		c->cv.notify_all();
		c->cv.wait(lock, [&] { return c->joined >= c->ranks || c->aborted; });
		status = c->aborted ? ncclRemoteError : ncclSuccess;
	}
	ncclComm	stand_in{c, h.rank, -1, nullptr};
	bool		ok = transfer(fd, &status, sizeof(status), true, nullptr) && status == ncclSuccess;

	{
		std::lock_guard<std::mutex> lock(c->mu);

		c->told++;
		c->cv.notify_all();
	}

	while (ok)
	{
		OpHeader	op;
		std::vector<float> in, out;

		if (!(ok = transfer(fd, &op, sizeof(op), false, nullptr)))
			break;
		in.resize(op.has_data ? op.count : 0);
		out.resize(op.count);
		if (!(ok = transfer(fd, in.data(), in.size() * sizeof(float), false, nullptr)))
			break;
		status = wait_for(c, arrive(Collective{&stand_in, op.has_data ? in.data() : nullptr, out.data(),
											   (size_t) op.count, (ncclRedOp_t) op.op, op.root, op.broadcast != 0}),
						  false);
		ok = transfer(fd, &status, sizeof(status), true, nullptr) && status == ncclSuccess &&
			transfer(fd, out.data(), out.size() * sizeof(float), true, nullptr);
		if (status == ncclSuccess)	/* computed: this process's ranks wait for the result to be sent */
		{
			std::lock_guard<std::mutex> lock(c->mu);

			c->sending--;
			c->cv.notify_all();
		}
	}
	abort_clique(c);			/* a rank is gone: no collective can complete */
	close(fd);
}

/*
 * The listener of an id: accepts ranks of other processes (a proxy thread
 * each) until the id's clique has every rank or is aborted.
 */
void
listen_for_ranks(std::string key, int fd)
{
	for (;;)
	{
		struct pollfd pfd = {fd, POLLIN, 0};

		if (poll(&pfd, 1, 200) > 0)
		{
			int			conn = accept(fd, nullptr, nullptr);

			if (conn >= 0)
				std::thread(proxy, key, conn).detach();
		}
		{
			std::lock_guard<std::mutex> lock(cliques_mu);
			auto		it = cliques.find(key);

			if (it != cliques.end())
			{
				std::lock_guard<std::mutex> clock(it->second->mu);

				if (complete(it->second) || it->second->aborted)
					break;
			}
		}
	}
	close(fd);
}

/*
 * A listening socket on CUEMU_NCCL_ADDRESS (default 127.0.0.1) at a port
 * the system picks: its fd and address, or -1 with last_error set.
 */
int
open_listener(char host[64], int *port)
{
	const char *addr = getenv("CUEMU_NCCL_ADDRESS");
	struct sockaddr_in sa = {};
	socklen_t	len = sizeof(sa);
	int			fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(host, 64, "%s", addr != nullptr && addr[0] != '\0' ? addr : "127.0.0.1");
	sa.sin_family = AF_INET;
	if (fd < 0 || inet_pton(AF_INET, host, &sa.sin_addr) != 1 || bind(fd, (struct sockaddr *) &sa, sizeof(sa)) != 0 ||
		listen(fd, 64) != 0 || getsockname(fd, (struct sockaddr *) &sa, &len) != 0)
	{
		snprintf(last_error, sizeof(last_error), "cannot listen on %s (CUEMU_NCCL_ADDRESS): %s", host,
				 strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*port = ntohs(sa.sin_port);
	return fd;
}

/*
 * Joins, as `rank`, the clique that lives in the process at p's address:
 * connects, says which rank it is, and (blocking) waits for every rank to
 * have joined; non-blocking, ncclCommGetAsyncError reads that reply.
 */
ncclResult_t
join_remote(ncclComm_t *comm, const IdParts &p, int nranks, int rank, int device, bool blocking)
{
	struct sockaddr_in sa = {};
	int			fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0),
				one = 1;
	Hello		h = {MAGIC, nranks, rank};

	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t) p.port);
	if (fd < 0 || inet_pton(AF_INET, p.host, &sa.sin_addr) != 1 ||
		connect(fd, (struct sockaddr *) &sa, sizeof(sa)) != 0 || !transfer(fd, &h, sizeof(h), true, nullptr))
	{
		snprintf(last_error, sizeof(last_error), "cannot reach the communicator's process at %s:%d: %s", p.host,
				 p.port, strerror(errno));
		if (fd >= 0)
			close(fd);
		return ncclSystemError;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	*comm = new ncclComm{nullptr, rank, device, new Remote, blocking ? nullptr : new Async};
	(*comm)->remote->fd = fd;
	if (!blocking)
		return ncclInProgress;
	if (!transfer(fd, &(*comm)->remote->ready, sizeof(int32_t), false, &(*comm)->remote->aborted))
		(*comm)->remote->ready = ncclRemoteError;
	(*comm)->remote->state = (*comm)->remote->ready;
	return (ncclResult_t) (*comm)->remote->ready;
}

/* A remote rank's join state, reading the join's reply if it has come (without waiting). */
ncclResult_t
remote_state(Remote *r)
{
	while (r->state == ncclInProgress && !r->aborted)
	{
		struct pollfd pfd = {r->fd, POLLIN, 0};
		ssize_t		got;

		if (poll(&pfd, 1, 0) <= 0)
			break;
		got = recv(r->fd, (char *) &r->ready + r->ready_got, sizeof(int32_t) - r->ready_got, 0);
		if (got <= 0)
			r->state = ncclRemoteError;
		else if ((r->ready_got += (int) got) == sizeof(int32_t))
			r->state = r->ready;
	}
	return r->aborted ? ncclRemoteError : (ncclResult_t) r->state.load();
}

/*
 * A collective of a rank whose clique is in another process: sends its
 * data, waits for the result (an abort of this communicator ends the
 * wait) and writes it to recv. A broken connection aborts the communicator.
 */
ncclResult_t
remote_collective(const Collective &o)
{
	Remote	   *r = o.comm->remote;
	OpHeader	op = {o.count, o.op, o.root, o.broadcast, o.send != nullptr};
	std::vector<float> buf(o.count);
	int32_t		status = ncclRemoteError;

	if (remote_state(r) != ncclSuccess)
		return ncclRemoteError;
	if (o.send != nullptr)
	{
		cuemu::Open open;

		memcpy(buf.data(), o.send, o.count * sizeof(float));
	}
	if (!transfer(r->fd, &op, sizeof(op), true, &r->aborted) ||
		(o.send != nullptr && !transfer(r->fd, buf.data(), o.count * sizeof(float), true, &r->aborted)) ||
		!transfer(r->fd, &status, sizeof(status), false, &r->aborted) || status != ncclSuccess ||
		!transfer(r->fd, buf.data(), o.count * sizeof(float), false, &r->aborted))
	{
		snprintf(last_error, sizeof(last_error), "rank %d: the communicator's process %s", o.comm->rank,
				 status != ncclSuccess && status != ncclRemoteError ? "refused the collective" :
				 "ended the connection (a rank failed or exited)");
		r->aborted = true;
		return ncclRemoteError;
	}
	{
		cuemu::Open open;

		memcpy(o.recv, buf.data(), o.count * sizeof(float));
	}
	return ncclSuccess;
}

/* Runs one collective to its end on the calling thread. */
ncclResult_t
run(const Collective &o)
{
	return o.comm->remote != nullptr ? remote_collective(o) : wait_for(o.comm->clique, arrive(o));
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
	if (o.comm->async == nullptr)
		return run(o);
	{
		Async	   *a = o.comm->async;
		std::unique_lock<std::mutex> lock(a->mu);

		a->cv.wait(lock, [&] { return !a->running; });	/* a rank's collectives in order */
		if (a->result != ncclSuccess)
			return a->result;
		a->running = true;
		try
		{
			std::thread([a, o] {
				ncclResult_t rc;

				cudaSetDevice(o.comm->device);
				rc = run(o);
				std::lock_guard<std::mutex> done(a->mu);
				if (rc != ncclSuccess)
					snprintf(a->error, sizeof(a->error), "%s", last_error[0] != '\0' ? last_error :
							 "the communicator was aborted during the collective");
				a->result = rc;
				a->ran = true;
				a->running = false;
				a->cv.notify_all();
			}).detach();
		}
		catch (const std::system_error &)
		{
			a->running = false;
			return ncclSystemError;
		}
	}
	return ncclInProgress;
}

}								/* namespace ncclemu */

using namespace ncclemu;

extern "C" {

/* An id naming a new clique of this process, with the address its listener for other processes' ranks took. */
ncclResult_t
ncclGetUniqueId(ncclUniqueId *id)
{
	static std::atomic<long> next{1};
	char		host[64];
	int			port = 0,
				fd = open_listener(host, &port);

	if (fd < 0)
		return ncclSystemError;
	memset(id, 0, sizeof(*id));
	snprintf(id->internal, sizeof(id->internal), "nccl_emu:%d:%ld:%016llx:%s:%d", (int) getpid(), next++,
			 process_nonce(), host, port);
	std::thread(listen_for_ranks, std::string(id->internal), fd).detach();
	return ncclSuccess;
}

/*
 * Joins the clique of id as `rank`: in this process, or over TCP where id
 * was made by another; waits for the other ranks unless non-blocking.
 */
static ncclResult_t
join(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, bool blocking)
{
	Clique	   *c;
	int			device = 0;
	IdParts		parts;

	static const long fail_device = cuemu::env("CUEMU_JOIN_FAULT_DEVICE", -1);

	if (nranks < 1 || rank < 0 || rank >= nranks || !parse_id(id, &parts))
		return ncclInvalidArgument;
	cudaGetDevice(&device);
	if (device == fail_device)
	{
		snprintf(last_error, sizeof(last_error), "planted join failure on device %d (CUEMU_JOIN_FAULT_DEVICE)", device);
		return ncclSystemError;
	}
	if (parts.pid != (int) getpid() || parts.nonce != process_nonce())
		return join_remote(comm, parts, nranks, rank, device, blocking);
	if ((c = clique_for(std::string(id.internal), nranks)) == nullptr)
		return ncclInvalidArgument;
	*comm = new ncclComm{c, rank, device, nullptr, blocking ? nullptr : new Async};
	{
		std::unique_lock<std::mutex> lock(c->mu);

		c->joined++;
		c->cv.notify_all();
		if (!blocking)
			return c->aborted ? ncclRemoteError : complete(c) ? ncclSuccess : ncclInProgress;
		c->cv.wait(lock, [&] { return complete(c) || c->aborted; });
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

	if (comm->async != nullptr)
	{
		std::lock_guard<std::mutex> lock(comm->async->mu);

		/*
		 * After a collective ended, its result: a peer that closed its
		 * connection once it had the result (a node that exits after the
		 * last collective) fails the next collective, not this one (the
		 * engine polls here after its vote; reading the clique's abort
		 * first made a finished vote fail now and then)
		 */
		if (comm->async->running || comm->async->result != ncclSuccess || comm->async->ran)
		{
			*state = comm->async->running ? ncclInProgress : comm->async->result;
			return ncclSuccess;
		}
	}
	if (comm->remote != nullptr)
	{
		*state = remote_state(comm->remote);
		return ncclSuccess;
	}
	std::lock_guard<std::mutex> lock(c->mu);

	*state = c->aborted ? ncclRemoteError : complete(c) ? ncclSuccess : ncclInProgress;
	return ncclSuccess;
}

/*
 * Ends the clique: here, or over TCP by closing the connection (its process
 * then aborts it). Returns once the communicator's collective in flight,
 * if any, has ended (the abort ends it at once), so nothing touches the
 * caller's buffers afterwards.
 */
ncclResult_t
ncclCommAbort(ncclComm_t comm)
{
	if (comm == nullptr)
		return ncclSuccess;
	if (comm->remote != nullptr)
	{
		comm->remote->aborted = true;
		shutdown(comm->remote->fd, SHUT_RDWR);
	}
	else
		abort_clique(comm->clique);
	if (comm->async != nullptr)
	{
		std::unique_lock<std::mutex> lock(comm->async->mu);

		comm->async->cv.wait(lock, [&] { return !comm->async->running; });
	}
	return ncclSuccess;
}

ncclResult_t
ncclCommDestroy(ncclComm_t comm)
{
	if (comm != nullptr && comm->async != nullptr)
	{
		{
			std::unique_lock<std::mutex> lock(comm->async->mu);

			comm->async->cv.wait(lock, [&] { return !comm->async->running; });
		}
		delete comm->async;
	}
	if (comm != nullptr && comm->remote != nullptr)
	{
		close(comm->remote->fd);
		delete comm->remote;
	}
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
ncclGetLastError(ncclComm_t comm)
{
	if (comm != nullptr && comm->async != nullptr)
	{
		std::lock_guard<std::mutex> lock(comm->async->mu);

		if (comm->async->error[0] != '\0')
			return comm->async->error;	/* written once, when its collective failed */
	}
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
	for (const Collective &o : group_queue)	/* a remote rank's one at a time: its process computes them in order */
		if (o.comm->remote != nullptr)
			rc = remote_collective(o) != ncclSuccess ? ncclRemoteError : rc;
		else
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
	if (comm == nullptr || root < 0 || (comm->clique != nullptr && root >= comm->clique->ranks))
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

/*
 * Under CUEMU_HOST_ONLY=1: when the first and the last launch (kernel or
 * matrix product) since the previous call were issued (CLOCK_MONOTONIC,
 * seconds; 0 without any) and how many there were; the record starts anew.
 */
__attribute__((visibility("default"))) long
cuemu_launch_times(double *first, double *last)
{
	std::lock_guard<std::mutex> l(cuemu::launch_times.mu);
	long		n = cuemu::launch_times.count;

	*first = n ? cuemu::launch_times.first : 0.0;
	*last = n ? cuemu::launch_times.last : 0.0;
	cuemu::launch_times.count = 0;
	return n;
}

}
