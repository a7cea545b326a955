/*
 * attention.h - declarations shared by the SQL glue (src/pg/).
 */
#ifndef ATTENTION_PG_H
#define ATTENTION_PG_H

#include "postgres.h"

#include "utils/jsonb.h"

#include "spm.h"
#include "transformer.h"

/* GUCs (attention.c). */
extern int	attention_num_threads;	/* attention.num_threads: 0 = one per CPU */
extern char *attention_default_model;	/* attention.default_model */
extern int	attention_beam_size;	/* attention.beam_size */
extern int	attention_max_input_tokens; /* attention.max_input_tokens */
extern char *attention_cuda_library;	/* attention.cuda_library */

/*
 * Hands attention.cuda_library to the engine ("$libdir/" expanded to the
 * server's package library directory) for the CUDA models created after it.
 */
void		attention_use_cuda_library(void);

/*
 * ERROR unless `device` names a device training can use: "cpu", or "cuda" /
 * "cuda:N" with the CUDA library loadable and device N present. Loads the
 * library to count devices but creates no CUDA context (device.c).
 */
void		attention_check_device(const char *device);

/*
 * Number of threads the engine may use in this backend (>= 1): one inside
 * a parallel query, whose processes already share the CPUs.
 */
int			attention_thread_count(void);

/*
 * Id of the corpus named `name`; ERROR (undefined_object) when there is none.
 * Must be called between SPI_connect and SPI_finish.
 */
int32		attention_corpus_id(const char *name);

/*
 * Parses a model configuration (jsonb object: an optional "preset" of
 * base/big/small, then any TfConfig field by name) over a vocabulary of
 * vocab_size pieces with padding id pad_id; unset fields are the base
 * model's. ERROR naming an unknown key, a wrong type or an invalid value.
 */
void		attention_config_from_jsonb(Jsonb *config, int vocab_size, int pad_id, TfConfig *c);

/*
 * Reads model `name` into SPI_tuptable (one row: model_id, config, then
 * the vocabulary's id, vocab_size, pad_id, bos_id, eos_id); ERROR when it
 * does not exist. Inside SPI.
 */
void		read_model_row(const char *name);

/*
 * The SentencePiece model in `bytes` (a vocabularies.model value) of model
 * `model`, loaded (free with spm_free); ERROR (data_corrupted) naming the
 * model when it does not load.
 */
SpmModel   *vocabulary_load(bytea *bytes, const char *model);

/*
 * Id of model `name` when the current role is a member of its owner role;
 * ERROR (undefined_object, insufficient_privilege naming `action`)
 * otherwise. Inside SPI.
 */
int32		require_model_owner(const char *name, const char *action);

/*
 * Writes tensors [count] (host memory) as rows of checkpoint
 * `checkpoint_id`, each chunked below the 1 GB bytea limit. Inside SPI.
 */
void		write_tensors(int64 checkpoint_id, const TfTensor *tensors, int count);

/* Which tensors of a checkpoint read_tensors reads. */
typedef enum TensorSet
{
	TENSORS_DEPLOYED,			/* parameters of a deployed checkpoint (any role) */
	TENSORS_PARAMETERS,			/* parameters (the model's owner) */
	TENSORS_ALL					/* parameters and training state (the model's owner) */
} TensorSet;

/*
 * Reads tensors of a checkpoint into host memory (palloc'd), chunks joined,
 * sorted by name; *count receives their number (0 when the checkpoint has
 * none or, for TENSORS_DEPLOYED, is not deployed). ERROR naming a corrupt
 * tensor. Inside SPI.
 */
TfTensor   *read_tensors(int64 checkpoint_id, TensorSet set, int *count);

/* A deployed model loaded in this backend (model.c); owned by the cache. */
typedef struct AttentionModel
{
	struct AttentionModel *next;
	char		name[NAMEDATALEN * 2];
	int32		model_id;
	int64		checkpoint_id;
	TransactionId xmin;			/* of the checkpoint row when loaded */
	TfModel    *engine;			/* inference-only engine model */
	SpmModel   *vocabulary;
	int			bos_id,
				eos_id,
				pad_id;
	int			max_positions;
	size_t		bytes;			/* parameter memory */
} AttentionModel;

/*
 * The deployed checkpoint of model `model` (NULL: attention.default_model,
 * or the only deployed model), loaded once per backend and reloaded when
 * the deployment or the checkpoint row changed; sets the engine's threads
 * to attention_thread_count().
 * ERROR when the model does not exist, has no deployed checkpoint, or its
 * checkpoint does not load. Connects to SPI itself.
 */
AttentionModel *attention_model_get(text *model);

#endif
