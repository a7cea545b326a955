/*
 * census_hooks.cc - the access hooks of the census build (census.h): the
 * kernel sources are compiled with -fsanitize=thread and linked with these
 * definitions instead of ThreadSanitizer's runtime. Reads and writes go to
 * cuemu::census::access; atomics do what they say, counted as an access;
 * the rest (init, function entry and exit, vtable updates) do nothing.
 * Compiled without instrumentation.
 */
#define CUEMU_CENSUS 1
#include "cuda_emu.h"

using cuemu::census::access;

extern "C" {
#define CUEMU_RW(n) \
	__attribute__((visibility("default"))) void __tsan_read##n(void *p) { access(p, n, false); } \
	__attribute__((visibility("default"))) void __tsan_write##n(void *p) { access(p, n, true); } \
	__attribute__((visibility("default"))) void __tsan_unaligned_read##n(void *p) { access(p, n, false); } \
	__attribute__((visibility("default"))) void __tsan_unaligned_write##n(void *p) { access(p, n, true); }
CUEMU_RW(1) CUEMU_RW(2) CUEMU_RW(4) CUEMU_RW(8) CUEMU_RW(16)
__attribute__((visibility("default"))) void __tsan_read_range(void *p, unsigned long n) { access(p, n, false); }
__attribute__((visibility("default"))) void __tsan_write_range(void *p, unsigned long n) { access(p, n, true); }
__attribute__((visibility("default"))) void __tsan_init(void) {}
__attribute__((visibility("default"))) void __tsan_func_entry(void *) {}
__attribute__((visibility("default"))) void __tsan_func_exit(void) {}
__attribute__((visibility("default"))) void __tsan_vptr_update(void **, void *) {}
__attribute__((visibility("default"))) void __tsan_vptr_read(void **) {}
__attribute__((visibility("default"))) void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
__attribute__((visibility("default"))) void __tsan_atomic_signal_fence(int) {}

#define CUEMU_ATOMIC(bits, T) \
	__attribute__((visibility("default"))) T __tsan_atomic##bits##_load(const volatile T *a, int) \
	{ access((const void *) a, sizeof(T), false); return __atomic_load_n(a, __ATOMIC_SEQ_CST); } \
	__attribute__((visibility("default"))) void __tsan_atomic##bits##_store(volatile T *a, T v, int) \
	{ access((const void *) a, sizeof(T), true); __atomic_store_n(a, v, __ATOMIC_SEQ_CST); } \
	__attribute__((visibility("default"))) T __tsan_atomic##bits##_exchange(volatile T *a, T v, int) \
	{ access((const void *) a, sizeof(T), true); return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); } \
	__attribute__((visibility("default"))) T __tsan_atomic##bits##_fetch_add(volatile T *a, T v, int) \
	{ access((const void *) a, sizeof(T), true); return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); } \
	__attribute__((visibility("default"))) T __tsan_atomic##bits##_fetch_sub(volatile T *a, T v, int) \
	{ access((const void *) a, sizeof(T), true); return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); } \
	__attribute__((visibility("default"))) T __tsan_atomic##bits##_fetch_and(volatile T *a, T v, int) \
	{ access((const void *) a, sizeof(T), true); return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); } \
	__attribute__((visibility("default"))) T __tsan_atomic##bits##_fetch_or(volatile T *a, T v, int) \
	{ access((const void *) a, sizeof(T), true); return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); } \
	__attribute__((visibility("default"))) T __tsan_atomic##bits##_fetch_xor(volatile T *a, T v, int) \
	{ access((const void *) a, sizeof(T), true); return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); } \
	__attribute__((visibility("default"))) int __tsan_atomic##bits##_compare_exchange_strong(volatile T *a, T *c, T v, int, int) \
	{ access((const void *) a, sizeof(T), true); \
	  return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); } \
	__attribute__((visibility("default"))) int __tsan_atomic##bits##_compare_exchange_weak(volatile T *a, T *c, T v, int, int) \
	{ access((const void *) a, sizeof(T), true); \
	  return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); } \
	__attribute__((visibility("default"))) T __tsan_atomic##bits##_compare_exchange_val(volatile T *a, T c, T v, int, int) \
	{ access((const void *) a, sizeof(T), true); \
	  __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); return c; }
CUEMU_ATOMIC(8, uint8_t) CUEMU_ATOMIC(16, uint16_t) CUEMU_ATOMIC(32, uint32_t) CUEMU_ATOMIC(64, uint64_t)

/* A line "mark label=LABEL" in the census (bench/gpu_census: where a step begins and ends). */
__attribute__((visibility("default"))) void
cuemu_census_mark(const char *label)
{
	cuemu::census::record("mark label=%s", label);
}
}
