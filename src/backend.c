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

#include "transformer.h"

#define DEFAULT_CUDA_LIBRARY "attention_cuda.so"

static pthread_mutex_t cuda_lock = PTHREAD_MUTEX_INITIALIZER;
static char *cuda_library;		/* NULL: DEFAULT_CUDA_LIBRARY */
static char *cuda_loaded;		/* the library cuda_create came from */
static TfCudaCreate cuda_create;

void
tf_backend_set_cuda_library(const char *path)
{
	pthread_mutex_lock(&cuda_lock);
	free(cuda_library);
	cuda_library = path != NULL ? strdup(path) : NULL;
	pthread_mutex_unlock(&cuda_lock);
}

/*
 * The CUDA library's entry point, loading the library on first use (a
 * library once loaded stays: CUDA libraries are not safe to unload).
 * NULL with a message when it cannot be loaded or is another library than
 * the one already loaded.
 */
static TfCudaCreate
load_cuda(char *err, size_t errlen)
{
	const char *path;
	TfCudaCreate create = NULL;
	void	   *lib;

	pthread_mutex_lock(&cuda_lock);
	path = cuda_library != NULL ? cuda_library : DEFAULT_CUDA_LIBRARY;
	if (cuda_create != NULL && strcmp(cuda_loaded, path) == 0)
		create = cuda_create;
	else if (cuda_create != NULL)
		snprintf(err, errlen, "CUDA library \"%s\" is loaded in this process; \"%s\" cannot replace it",
				 cuda_loaded, path);
	else if ((lib = dlopen(path, RTLD_NOW | RTLD_LOCAL)) == NULL)
		snprintf(err, errlen, "cannot load the CUDA backend \"%s\": %s", path, dlerror());
	else if ((*(void **) &create = dlsym(lib, TF_CUDA_CREATE_SYMBOL)) == NULL)
	{
		snprintf(err, errlen, "\"%s\" is not a CUDA backend of this engine (no %s)", path,
				 TF_CUDA_CREATE_SYMBOL);
		dlclose(lib);
	}
	else if ((cuda_loaded = strdup(path)) == NULL)
	{
		snprintf(err, errlen, "out of memory");
		create = NULL;
	}
	else
		cuda_create = create;
	pthread_mutex_unlock(&cuda_lock);
	return create;
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
		be = tf_backend_cpu_create(threads);
		if (be == NULL)
			snprintf(err, errlen, "out of memory creating the CPU backend");
		return be;
	}
	if (strcmp(kind, "cuda") == 0)
	{
		TfCudaCreate create = load_cuda(err, errlen);

		if (device < 0)
		{
			snprintf(err, errlen, "invalid CUDA device number %d", device);
			return NULL;
		}
		return create != NULL ? create(device, err, errlen) : NULL;
	}
	snprintf(err, errlen, "unknown backend \"%s\" (expected \"cpu\" or \"cuda\")", kind);
	return NULL;
}
