/*
 * tensor_file.h - safetensors files of parameter tensors, in and out of
 * bytea (tensor_file.c): what export_checkpoint, import_checkpoint
 * and the Hugging Face import and export (src/pg/huggingface.c) share.
 */
#ifndef ATTENTION_TENSOR_FILE_H
#define ATTENTION_TENSOR_FILE_H

#include "postgres.h"

#include "lib/stringinfo.h"

#include "transformer.h"

/* Appends "key":"value" (JSON-escaped, comma-separated) to a metadata object's members. */
void		tensor_file_meta(StringInfo s, const char *key, const char *value);

/*
 * A safetensors file of count float32 tensors (in the given order, dtype
 * F32), with metadata (the members of "__metadata__", as tensor_file_meta
 * writes them); allocated with SPI_palloc, so call it inside SPI. ERROR
 * naming `what` for a tensor that is not float32 or a file over 1 GB.
 */
bytea	   *tensor_file_write(const TfTensor *t, int count, const char *metadata, const char *what);

/* Bytes per element of a safetensors dtype the import reads: 4 (F32), 2 (F16, BF16), 0 for any other. */
int			tensor_file_dtype_width(const char *dtype);

/*
 * dst[elements] = the values src holds in dtype (F32, F16 or BF16, little
 * endian, unaligned allowed), widened exactly to float32 (every F16 and BF16
 * value is one; F16 subnormals, infinities and NaNs included).
 */
void		tensor_file_widen(const char *dtype, const char *src, int64 elements, float *dst);

/*
 * The tensors of a safetensors file (sorted by name) as float32: F32 data
 * points into file, F16 and BF16 are widened into palloc'd copies; *count
 * receives their number, values[i] the metadata value of keys[i] (palloc'd,
 * NULL when absent). ERROR (invalid_parameter_value) naming the problem: a
 * pickled PyTorch file (with a hint to convert it), a malformed header,
 * another dtype, more than TF_MAX_DIMS dimensions, byte ranges that do not
 * fit the shape.
 */
TfTensor   *tensor_file_read(bytea *file, int *count, const char *const *keys, char **values, int nkeys);

/*
 * ERROR (invalid_parameter_value: "what: the engine's reason") unless the
 * tensors are exactly the parameters of a model of configuration c (names,
 * shapes, float32); out_of_memory when no such model can be made.
 */
void		tensor_file_check(const TfConfig *c, const TfTensor *t, int count, const char *what);

#endif
