/*
 * census.h - what a GPU would have to move for one emulated step, counted
 * (the census build, attention_cuda_census.so; bench/gpu_census reads it).
 * Included by cuda_emu.h when CUEMU_CENSUS is defined; CUEMU_CENSUS=FILE at
 * run time names the file the records go to (one line each).
 *
 * How accesses are seen: the kernel sources of the census build are compiled
 * with -fsanitize=thread but linked without its runtime; census_hooks.cc
 * defines the __tsan_read/__tsan_write hooks the compiler inserts before each
 * memory access, and they forward the accesses that fall inside the device
 * arena while a kernel runs, and those to the block's dynamic shared memory
 * (locals, static __shared__ arrays — one copy per OS thread in the
 * emulator, only reductions' partials in our kernels — and the emulator's
 * own data are elsewhere, so not counted). Vectorisation and store merging
 * are off in that build, so one hook is one access of the source as written.
 *
 * Warp-wide accesses: fibers of a warp do not run in lockstep, so the k-th
 * global access of each lane of a warp is taken as one warp instruction (true
 * where lanes do not diverge); its cost is the number of distinct 32-byte
 * sectors the lanes touch, reads and writes apart, as the GPU's memory
 * system counts it (16 lanes reading 4 consecutive bytes: 2 sectors; 16
 * lanes reading 4 bytes 6 KB apart: 16). The serial chain of a launch is the
 * most global accesses one thread made. The unique sectors of a launch (its
 * footprint) are counted in a bitmap over the arena; the distinct sectors
 * of each block (what it fetches past an L1 that holds its data) in a hash
 * set per block. Launches are counted one at a time: a census is of one
 * device's work (data-parallel ranks, launching from several host threads
 * at once, would mix their counts).
 *
 * Shared memory: the k-th dynamic-shared access of each lane of a warp is
 * one warp instruction too; it costs as many wavefronts (passes of the 32
 * banks of 4 bytes) as the most distinct words any one bank holds among the
 * lanes' words (all lanes on one word: 1, a broadcast; lane i on word i: 1;
 * lane i on word 32 i: 32, a 32-way bank conflict).
 *
 * Records (space-separated key=value after the kind):
 *   launch name= grid=XxYxZ block=XxYxZ shmem= rreq= rsec= wreq= wsec= lanes= unique= chain= bsec=
 *       (rreq/wreq: warp instructions; rsec/wsec: sectors; lanes: active lanes summed over instructions;
 *       unique: distinct sectors of the launch; bsec: distinct sectors of each block, summed)
 *       sreq= swave= (dynamic shared memory: warp instructions, wavefronts)
 *       mma= (warp-wide 16x16x16 bf16 tensor-core products, wmma::mma_sync: wmma_emu.h)
 *       mma8= (warp-wide m16n8k16 bf16 products, PTX mma.sync: mma_emu.h, kernels/mma.cuh)
 *       philox= (Philox4x32-10 blocks computed, summed over lanes: common.cuh device_philox)
 *   gemm m= n= k= batch= type=fp32|bf16 beta=0|1
 *   sync | malloc bytes= | free | memset bytes= | copy kind=h2d|d2h|d2d bytes= | allreduce bytes= | mark label=
 */
#ifndef CUEMU_CENSUS_H
#define CUEMU_CENSUS_H

namespace cuemu {
namespace census {

inline FILE *
out()
{
	static FILE *f = [] {
		const char *p = getenv("CUEMU_CENSUS");
		FILE *o = p && *p ? fopen(p, "w") : nullptr;
		if (p && *p && !o) perror(p);
		return o;
	}();
	return f;
}
inline std::mutex mu;

/* A line to the census file (nothing without CUEMU_CENSUS). */
__attribute__((format(printf, 1, 2))) inline void
record(const char *fmt, ...)
{
	FILE	   *f = out();
	va_list		ap;

	if (!f) return;
	std::lock_guard<std::mutex> l(mu);
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fputc('\n', f);
	fflush(f);
}

struct Totals { uint64_t rreq = 0, rsec = 0, wreq = 0, wsec = 0, lanes = 0, chain = 0, unique = 0, bsec = 0, sreq = 0,
				swave = 0, mma = 0, mma8 = 0, philox = 0; };

/* One OS thread's share of a launch: the current block's accesses per thread, its totals. */
struct Worker {
	std::vector<std::vector<uint64_t>> thread;	/* (sector << 2 | spans two << 1 | write) per access */
	std::vector<std::vector<uint64_t>> shared;	/* (word << 4 | further words << 1 | write) per access */
	std::vector<size_t> touched;				/* footprint words this thread set first */
	Block	   *block;							/* blk of this thread */
	std::vector<uint64_t> bseen, bstamp;		/* the block's distinct sectors: a hash set */
	uint64_t	bgen = 0;
	Totals t;
};
inline thread_local Worker *worker;
/* One lane's Philox block (common.cuh device_philox). */
inline void count_philox() { if (worker) worker->t.philox++; }
inline std::vector<uint64_t> footprint;			/* a bit per sector of the arena's used part */
inline Totals launch_totals;
inline std::vector<size_t> launch_touched;		/* footprint words set in this launch */

/* An access of n bytes at p outside device memory: counted when it is to the block's dynamic shared memory. */
inline void
shared_access(const void *p, size_t n, bool write)
{
	Worker	   *w = worker;
	const unsigned char *c = (const unsigned char *) p;

	if (!w || !w->block->dyn || c < w->block->dyn || c >= w->block->dyn + w->block->dyn_bytes) return;
	uint64_t	off = (uint64_t) (c - w->block->dyn), first = off >> 2, last = (off + (n ? n : 1) - 1) >> 2;
	w->shared[w->block->cur].push_back(first << 4 | std::min<uint64_t>(last - first, 7) << 1 | (uint64_t) write);
}

/* A kernel's access of n bytes at p (the hooks of census_hooks.cc). */
inline void
access(const void *p, size_t n, bool write)
{
	if (!in_arena(p)) {			/* first: most accesses are not to device memory */
		shared_access(p, n, write);
		return;
	}
	Worker	   *w = worker;
	if (!w) return;
	uint64_t	off = (uint64_t) ((const char *) p - mem.base), s0 = off >> 5, s1 = (off + (n ? n : 1) - 1) >> 5;
	w->thread[w->block->cur].push_back(s0 << 2 | (uint64_t) (s1 != s0) << 1 | (uint64_t) write);
	for (uint64_t s = s0; s <= s1; s++)
		if (s / 64 < footprint.size()) {
			uint64_t	bit = (uint64_t) 1 << (s % 64),
						old = __atomic_fetch_or(&footprint[s / 64], bit, __ATOMIC_RELAXED);
			if (old == 0) w->touched.push_back(s / 64);
		}
}

/* Before a launch's blocks run (one thread): the footprint covers every allocation. */
inline void
launch_open()
{
	if (!out()) return;
	footprint.resize((mem.used / 32 + 63) / 64 + 1);
	launch_totals = {};
}

/* An OS thread starts running blocks of threads threads each. */
inline void
worker_open(Worker &w, int threads)
{
	if (!out()) return;
	w.thread.assign(threads, {});
	w.shared.assign(threads, {});
	w.block = blk;
	worker = &w;
}

/* The block that just ran: its warps' shared-memory instructions into wavefronts. */
inline void
shared_end(Worker &w)
{
	uint64_t	seen[256], stamp[256] = {0}, gen = 0;	/* distinct words of one instruction */

	for (size_t base = 0; base < w.shared.size(); base += 32) {
		size_t		len = 0, end = std::min(base + 32, w.shared.size());
		for (size_t l = base; l < end; l++) len = std::max(len, w.shared[l].size());
		for (size_t k = 0; k < len; k++)
			for (uint64_t kind = 0; kind < 2; kind++) {	/* reads, then writes */
				uint64_t	per_bank[32] = {0}, most = 0;
				gen++;
				for (size_t l = base; l < end; l++) {
					if (k >= w.shared[l].size() || (w.shared[l][k] & 1) != kind) continue;
					uint64_t	e = w.shared[l][k];
					for (uint64_t word = e >> 4; word <= (e >> 4) + (e >> 1 & 7); word++) {
						size_t		h = (size_t) (word * 0x9e3779b97f4a7c15ull >> 56);
						while (stamp[h] == gen && seen[h] != word) h = (h + 1) & 255;
						if (stamp[h] != gen) stamp[h] = gen, seen[h] = word, most = std::max(most, ++per_bank[word % 32]);
					}
				}
				if (most) w.t.sreq++, w.t.swave += most;
			}
	}
	for (auto &t : w.shared) t.clear();
}

/* The block that just ran: its warps' instructions into sectors. */
inline void
block_end()
{
	if (!worker) return;
	Worker	   &w = *worker;
	uint64_t	seen[128], stamp[128] = {0}, gen = 0;	/* distinct sectors of one instruction: a small hash set */

	for (size_t base = 0; base < w.thread.size(); base += 32) {
		size_t		len = 0, end = std::min(base + 32, w.thread.size());
		for (size_t l = base; l < end; l++) len = std::max(len, w.thread[l].size());
		w.t.chain = std::max<uint64_t>(w.t.chain, len);
		for (size_t k = 0; k < len; k++)
			for (uint64_t kind = 0; kind < 2; kind++) {	/* reads, then writes */
				uint64_t	distinct = 0;
				gen++;
				for (size_t l = base; l < end; l++) {
					if (k >= w.thread[l].size() || (w.thread[l][k] & 1) != kind) continue;
					uint64_t	e = w.thread[l][k];
					w.t.lanes++;
					for (uint64_t s = e >> 2; s <= (e >> 2) + (e >> 1 & 1); s++) {
						size_t		h = (size_t) (s * 0x9e3779b97f4a7c15ull >> 57);
						while (stamp[h] == gen && seen[h] != s) h = (h + 1) & 127;
						if (stamp[h] != gen) stamp[h] = gen, seen[h] = s, distinct++;
					}
				}
				if (distinct) (kind ? w.t.wreq : w.t.rreq)++, (kind ? w.t.wsec : w.t.rsec) += distinct;
			}
	}
	/* the block's own footprint: what it fetches past its SM's L1 when that holds the block's data */
	size_t		entries = 0;
	for (auto &t : w.thread) entries += t.size();
	size_t		cap = 64;
	while (cap < 4 * entries) cap *= 2;
	if (w.bseen.size() < cap) w.bseen.assign(cap, 0), w.bstamp.assign(cap, 0);
	cap = w.bseen.size(), w.bgen++;
	for (auto &t : w.thread)
		for (uint64_t e : t)
			for (uint64_t s = e >> 2; s <= (e >> 2) + (e >> 1 & 1); s++) {
				size_t		h = (size_t) (s * 0x9e3779b97f4a7c15ull) & (cap - 1);
				while (w.bstamp[h] == w.bgen && w.bseen[h] != s) h = (h + 1) & (cap - 1);
				if (w.bstamp[h] != w.bgen) w.bstamp[h] = w.bgen, w.bseen[h] = s, w.t.bsec++;
			}
	for (auto &t : w.thread) t.clear();
	shared_end(w);
}

/* The OS thread ran its last block of the launch. */
inline void
worker_close(Worker &w)
{
	if (worker != &w) return;
	std::lock_guard<std::mutex> l(mu);
	Totals	   &t = launch_totals;
	t.rreq += w.t.rreq, t.rsec += w.t.rsec, t.wreq += w.t.wreq, t.wsec += w.t.wsec, t.lanes += w.t.lanes;
	t.chain = std::max(t.chain, w.t.chain);
	t.bsec += w.t.bsec;
	t.sreq += w.t.sreq, t.swave += w.t.swave, t.mma += w.t.mma, t.mma8 += w.t.mma8, t.philox += w.t.philox;
	launch_touched.insert(launch_touched.end(), w.touched.begin(), w.touched.end());
	worker = nullptr;
}

/* After the launch (one thread): its record. */
inline void
launch_close(const char *name, dim3 g, dim3 b, size_t shmem)
{
	Totals	   &t = launch_totals;

	if (!out()) return;
	for (size_t i : launch_touched) t.unique += (uint64_t) __builtin_popcountll(footprint[i]), footprint[i] = 0;
	launch_touched.clear();
	record("launch name=%s grid=%ux%ux%u block=%ux%ux%u shmem=%zu rreq=%llu rsec=%llu wreq=%llu wsec=%llu "
		   "lanes=%llu unique=%llu chain=%llu bsec=%llu sreq=%llu swave=%llu mma=%llu mma8=%llu philox=%llu", name, g.x, g.y, g.z, b.x, b.y, b.z,
		   shmem, (unsigned long long) t.rreq, (unsigned long long) t.rsec, (unsigned long long) t.wreq,
		   (unsigned long long) t.wsec, (unsigned long long) t.lanes, (unsigned long long) t.unique,
		   (unsigned long long) t.chain, (unsigned long long) t.bsec, (unsigned long long) t.sreq,
		   (unsigned long long) t.swave, (unsigned long long) t.mma, (unsigned long long) t.mma8,
		   (unsigned long long) t.philox);
}

}	/* namespace census */
}	/* namespace cuemu */
#endif
