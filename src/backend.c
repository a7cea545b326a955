/*
 * backend.c - the backend factory: the CPU backend, or the CUDA backend
 * from its own shared object, loaded with dlopen on first use so that the
 * engine (and attention.so) never links CUDA and runs where there is none.
 */
#define _POSIX_C_SOURCE 200809L
#include "backend.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"
#include "signals.h"
#include "transformer.h"

#define DEFAULT_CUDA_LIBRARY "attention_cuda.so"

static pthread_mutex_t cuda_lock = PTHREAD_MUTEX_INITIALIZER;
static char *cuda_library;		/* NULL: DEFAULT_CUDA_LIBRARY */

/* A CUDA library loaded in this process, and its entry points. */
typedef struct CudaLibrary
{
	struct CudaLibrary *next;
	char	   *path;
	TfCudaCreate create;
	TfCudaDeviceCount count;
	TfCudaUniqueId unique_id;
} CudaLibrary;

static CudaLibrary *cuda_loaded;

void
tf_backend_set_cuda_library(const char *path)
{
	pthread_mutex_lock(&cuda_lock);
	free(cuda_library);
	cuda_library = path != NULL ? strdup(path) : NULL;
	pthread_mutex_unlock(&cuda_lock);
}

/*
 * The current CUDA library, loading it on first use. A library once loaded
 * stays (CUDA libraries are not safe to unload; backends created from it
 * keep its code); another path loads beside it (RTLD_LOCAL keeps their
 * symbols apart). NULL with a message when it cannot be loaded.
 */
static CudaLibrary *
load_cuda(char *err, size_t errlen)
{
	const char *path;
	CudaLibrary *lib;
	void	   *handle;

	/* the emulated library links OpenBLAS: loaded first here, its kernels are the engine's (blas.h) */
	if (tf_blas(err, errlen) == NULL)
		return NULL;
	pthread_mutex_lock(&cuda_lock);
	path = cuda_library != NULL ? cuda_library : DEFAULT_CUDA_LIBRARY;
	for (lib = cuda_loaded; lib != NULL && strcmp(lib->path, path) != 0; lib = lib->next)
		;
	if (lib == NULL && (handle = dlopen(path, RTLD_NOW | RTLD_LOCAL)) == NULL)
		snprintf(err, errlen, "cannot load the CUDA backend \"%s\": %s", path, dlerror());
	else if (lib == NULL)
	{
		TfCudaCreate create;
		TfCudaDeviceCount count;
		TfCudaUniqueId unique_id;

		*(void **) &create = dlsym(handle, TF_CUDA_CREATE_SYMBOL);
		*(void **) &count = dlsym(handle, TF_CUDA_COUNT_SYMBOL);
		*(void **) &unique_id = dlsym(handle, TF_CUDA_UNIQUE_ID_SYMBOL);
		if (create == NULL || count == NULL || unique_id == NULL)
		{
			snprintf(err, errlen, "\"%s\" is not a CUDA backend of this engine (no %s)", path,
					 create == NULL ? TF_CUDA_CREATE_SYMBOL : count == NULL ? TF_CUDA_COUNT_SYMBOL :
					 TF_CUDA_UNIQUE_ID_SYMBOL);
			dlclose(handle);
		}
		else if ((lib = calloc(1, sizeof(CudaLibrary))) == NULL || (lib->path = strdup(path)) == NULL)
		{
			free(lib);
			lib = NULL;
			snprintf(err, errlen, "out of memory");
		}
		else
		{
			lib->create = create;
			lib->count = count;
			lib->unique_id = unique_id;
			lib->next = cuda_loaded;
			cuda_loaded = lib;
		}
	}
	pthread_mutex_unlock(&cuda_lock);
	return lib;
}

int
tf_cuda_device_count(char *err, size_t errlen)
{
	CudaLibrary *lib = load_cuda(err, errlen);

	return lib != NULL ? lib->count(err, errlen) : -1;
}

int
tf_cuda_unique_id(void *id, char *err, size_t errlen)
{
	CudaLibrary *lib = load_cuda(err, errlen);
	sigset_t	old;
	int			rc;

	if (lib == NULL)
		return TF_ERROR;
	/* NCCL starts its bootstrap thread here: it must not take the caller's signals */
	tf_block_signals(&old);
	rc = lib->unique_id(id, err, errlen);
	tf_restore_signals(&old);
	return rc;
}

TfBackend *
tf_backend_create(const char *kind, int device, int threads, char *err, size_t errlen)
{
	TfBackend  *be;

	if (strcmp(kind, "cpu") == 0)
	{
		if (device != 0)
		{
			snprintf(err, errlen, "the CPU backend has no device %d", device);
			return NULL;
		}
		if (tf_blas(err, errlen) == NULL)
			return NULL;
		be = tf_backend_cpu_create(threads);
		if (be == NULL)
			snprintf(err, errlen, "out of memory creating the CPU backend");
		return be;
	}
	if (strcmp(kind, "cuda") == 0)
	{
		CudaLibrary *lib;

		if (device < 0)
		{
			snprintf(err, errlen, "invalid CUDA device number %d", device);
			return NULL;
		}
		lib = load_cuda(err, errlen);
		return lib != NULL ? lib->create(device, err, errlen) : NULL;
	}
	snprintf(err, errlen, "unknown backend \"%s\" (expected \"cpu\" or \"cuda\")", kind);
	return NULL;
}

/*
 * A counting sort of the rows by id: one pass counts each id's rows, one
 * over the vocabulary turns the counts into each id's first place, one
 * scatters the rows there in increasing order. Linear in n + vocab. It
 * replaced glibc's qsort (4.7-5.0 ms more host work a base training step,
 * 52,000 rows), then a radix sort of 11-bit digits (0.4-1.1 ms more):
 * bench/census_step --host, docs/gpus.md.
 */
int
tf_group_by_id(const int32_t *ids, int n, int vocab, int32_t *groups, int32_t *counts)
{
	int32_t    *start,
			   *id,
			   *rows;
	int			i,
				v,
				u = 0,
				place = 0;

	memset(counts, 0, (size_t) vocab * sizeof(int32_t));
	for (i = 0; i < n; i++)
		u += counts[ids[i]]++ == 0;
	start = groups, id = start + u + 1, rows = id + u;
	for (v = 0, u = 0; v < vocab; v++)
		if (counts[v] > 0)
		{
			int			c = counts[v];

			start[u] = place, id[u++] = v;
			counts[v] = place;		/* from here on: the id's next place in rows */
			place += c;
		}
	start[u] = n;
	for (i = 0; i < n; i++)
		rows[counts[ids[i]]++] = i;
	return u;
}
