/*
 * device.c - where training computes: the "device" option checked when a
 * job is submitted (so that a job that cannot run is never queued), and
 * the CUDA library the engine loads.
 */
#include "postgres.h"

#include "miscadmin.h"

#include "attention.h"

void
attention_use_cuda_library(void)
{
	const char *lib = attention_cuda_library;

	if (strncmp(lib, "$libdir/", 8) == 0)
		tf_backend_set_cuda_library(psprintf("%s/%s", pkglib_path, lib + 8));
	else
		tf_backend_set_cuda_library(lib);
}

void
attention_check_device(const char *device)
{
	char		kind[8];
	int			index;
	int			count;
	char		err[TF_ERRLEN];

	if (tf_device_parse(device, kind, &index, err, sizeof(err)) != TF_OK)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("training option \"device\": %s", err),
						errhint("Use \"cpu\", \"cuda\" (device 0) or \"cuda:N\".")));
	if (strcmp(kind, "cpu") == 0)
		return;
	attention_use_cuda_library();
	count = tf_cuda_device_count(err, sizeof(err));
	if (count < 0)
		ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						errmsg("training option \"device\" is \"%s\", but no CUDA device can be used here", device),
						errdetail("%s", err),
						errhint("Train with \"device\": \"cpu\", or run the server where an NVIDIA driver "
								"and GPU are present (attention.cuda_library names the CUDA backend).")));
	if (index >= count)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("training option \"device\" is \"%s\", but this server has %d CUDA device%s",
							   device, count, count == 1 ? "" : "s"),
						errhint("CUDA devices are numbered from 0.")));
}
