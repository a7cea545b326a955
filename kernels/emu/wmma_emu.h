/*
 * wmma_emu.h - the subset of CUDA's warp matrix functions (nvcuda::wmma,
 * <mma.h>) the kernels use, for the emulation (cuda_emu.h): the 16x16x16
 * shape, bf16 matrix_a/matrix_b fragments and fp32 accumulators;
 * load_matrix_sync (of matrix_a and matrix_b), store_matrix_sync (of
 * accumulators), fill_fragment, mma_sync.
 *
 * What CUDA leaves unspecified is made to fail here:
 * - The element mapping (which matrix element x[i] of which lane holds) is a
 *   permutation of its own for each kind of fragment that scatters a lane's
 *   elements over rows and columns: code that reads or masks x[i] by an
 *   assumed position, or that takes an accumulator's x[i] for a matrix_a's,
 *   gets wrong results. Only element-independent operations on x[] (a scale,
 *   a conversion) are portable, as NVIDIA's guide says.
 * - Every call is warp-collective: all 32 lanes must arrive (a lane that
 *   does not, or a divergent call, is the emulator's fatal inconsistent warp
 *   op). Loads and stores read and write before the lanes meet, so data one
 *   lane wrote for another needs its own __syncwarp first, as on a GPU.
 * - Pointers must be 256-bit (32-byte) aligned and ldm a multiple of 16
 *   bytes (8 bf16, 4 floats): fatal otherwise.
 * - mma_sync's summation order is unspecified: here each element sums its 16
 *   products in fp32 in an order that depends on its position, then adds C;
 *   compare such results with a tolerance.
 * The census build counts each warp's mma_sync (census.h: mma=) and prices a
 * load or store as the 16-byte row pieces ldmatrix moves (16 lanes x 2 per
 * 16 x 16 bf16 tile), not as the emulation's scattered element accesses,
 * which the census does not see.
 */
#ifndef CUEMU_WMMA_EMU_H
#define CUEMU_WMMA_EMU_H

#include <type_traits>

#include <cuda_bf16.h>

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use> constexpr int perm_mul() { return std::is_same<Use, matrix_a>::value ? 37 : std::is_same<Use, matrix_b>::value ? 101 : 173; }
template <class Use> constexpr int perm_add() { return std::is_same<Use, matrix_a>::value ? 11 : std::is_same<Use, matrix_b>::value ? 54 : 7; }

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
	static_assert(M == 16 && N == 16 && K == 16, "cuda_emu: wmma emulates the 16x16x16 shape only");
	enum { num_elements = 8 };
	T x[8];
	/* the position (row * 16 + column, in the fragment's 16 x 16 matrix) of lane's x[i] */
	static int pos(int lane, int i) { return ((lane * 8 + i) * perm_mul<Use>() + perm_add<Use>()) & 255; }
};

}	/* namespace wmma */
}	/* namespace nvcuda */

namespace cuemu {
namespace wmma_emu {
inline int lane() { return (int) ((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32); }
inline int warp() { return (int) ((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) / 32); }
inline void check(const void *p, unsigned ldm, size_t elem) {
	if ((uintptr_t) p % 32) fail("wmma: pointer not 256-bit aligned");
	if ((ldm * elem) % 16) fail("wmma: ldm not a multiple of 16 bytes");
}
/* The census's price of one lane's share of a tile load or store: ldmatrix's 16-byte row pieces. */
#ifdef CUEMU_CENSUS
__attribute__((no_sanitize_thread)) inline void census_tile(const char *p, unsigned ldm, size_t elem, bool write) {
	int per = 16 * (int) elem / 16;	/* 16-byte pieces of one of the 16 lines (rows, or columns) in memory */
	for (int piece = lane(); piece < 16 * per; piece += 32)
		census::shared_access(p + (size_t) (piece / per) * ldm * elem + (size_t) (piece % per) * 16, 16, write);
}
/* One warp's mma_sync, counted by its lane 0. */
inline void census_mma() { if (lane() == 0 && census::worker) census::worker->t.mma++; }
#define CUEMU_WMMA_QUIET __attribute__((no_sanitize_thread))
#else
inline void census_tile(const char *, unsigned, size_t, bool) {}
inline void census_mma() {}
#define CUEMU_WMMA_QUIET
#endif
/* A warp's operands of an mma_sync in flight, as 16 x 16 matrices, in its warp scratch (cuda_emu.h). */
struct Mma { float a[256], b[256], c[256]; };
static_assert(sizeof(Mma) <= WARP_SCRATCH, "wmma_emu: a warp's scratch holds one product");
}	/* namespace wmma_emu */
}	/* namespace cuemu */

namespace nvcuda {
namespace wmma {
/* matrix_a (16 x 16, M x K) or matrix_b (K x N) from memory: element (r, c) at p[r * ldm + c] (row_major) or p[c * ldm + r]. */
template <class Use, class Layout>
CUEMU_WMMA_QUIET inline void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, Layout> &f, const __nv_bfloat16 *p, unsigned ldm) {
	using namespace cuemu::wmma_emu;
	constexpr bool row = std::is_same<Layout, row_major>::value;
	check(p, ldm, 2);
	census_tile((const char *) p, ldm, 2, false);
	for (int i = 0; i < 8; i++) {
		int e = f.pos(lane(), i), r = e / 16, c = e % 16;
		f.x[i] = row ? p[(size_t) r * ldm + c] : p[(size_t) c * ldm + r];
	}
	__syncwarp();
}
CUEMU_WMMA_QUIET inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ldm, layout_t l) {
	using namespace cuemu::wmma_emu;
	check(p, ldm, 4);
	census_tile((const char *) p, ldm, 4, true);
	for (int i = 0; i < 8; i++) {
		int e = f.pos(lane(), i), r = e / 16, c = e % 16;
		(l == mem_row_major ? p[(size_t) r * ldm + c] : p[(size_t) c * ldm + r]) = f.x[i];
	}
	__syncwarp();
}
template <class Use, class T, class Layout>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout> &f, T v) {
	for (int i = 0; i < 8; i++) f.x[i] = v;
}
/* d = a b + c for the warp's 16 x 16 x 16 tile; d may be c. */
template <class LA, class LB>
CUEMU_WMMA_QUIET inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d, const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
									 const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b, const fragment<accumulator, 16, 16, 16, float> &c) {
	using namespace cuemu::wmma_emu;
	Mma &m = *(Mma *) (cuemu::warp_scratch + (size_t) warp() * WARP_SCRATCH);
	int l = lane();
	float out[8];
	for (int i = 0; i < 8; i++) {
		m.a[a.pos(l, i)] = __bfloat162float(a.x[i]);
		m.b[b.pos(l, i)] = __bfloat162float(b.x[i]);
		m.c[c.pos(l, i)] = c.x[i];
	}
	__syncwarp();
	census_mma();
	for (int i = 0; i < 8; i++) {
		int e = d.pos(l, i), r = e / 16, col = e % 16;
		float s = 0.0f;
		for (int j = 0; j < 16; j++) {
			int k = (j + e) % 16;	/* an order of its own per element */
			s += m.a[r * 16 + k] * m.b[k * 16 + col];
		}
		out[i] = s + m.c[e];
	}
	__syncwarp();	/* every lane has read the scratch before the next mma_sync writes it */
	for (int i = 0; i < 8; i++) d.x[i] = out[i];
}
}	/* namespace wmma */
}	/* namespace nvcuda */
#endif
