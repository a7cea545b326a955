/*
 * model_cache.h - the deployed models a backend has loaded (model_cache.c):
 * looked up once per call, loaded once per backend, reloaded when the
 * deployment or the checkpoint row changes.
 */
#ifndef ATTENTION_MODEL_CACHE_H
#define ATTENTION_MODEL_CACHE_H

#include "postgres.h"

#include "utils/jsonb.h"

#include "spm.h"
#include "transformer.h"

/* A deployed model loaded in this backend; owned by the cache. */
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
	bool		source_language_last;	/* a multilingual source: text, EOS, language (catalog.h) */
	size_t		bytes;			/* parameter memory */
	char		device[16];		/* "cpu" or "cuda" */
} AttentionModel;

/* A model's deployed checkpoint as a statement sees it (not loaded). */
typedef struct DeployedModel
{
	char		name[NAMEDATALEN * 2];
	int32		model_id;
	int32		vocabulary_id;
	Jsonb	   *config;			/* palloc'd */
	int64		checkpoint_id;
	TransactionId xmin;			/* of the checkpoint row; invalid: any version */
	/* a multilingual model's languages (M2M-100, NLLB-200); n_languages 0 for others */
	int			n_languages;
	char	  **languages;		/* codes, palloc'd */
	int32	   *language_ids;	/* their tokens' ids */
	char	   *source_language,
			   *target_language;	/* the model's defaults, or NULL */
	/* the model's decoding defaults (set_decoding, 0.4.0), 0 where it has none */
	int			beam_size,
				max_output_tokens;
} DeployedModel;

/*
 * The languages of a call to a multilingual model (M2M-100, NLLB-200): the
 * ids of the source language's token (the source's first id) and the
 * target language's (the decoder's forced first token); -1 for a model
 * that is not multilingual.
 */
typedef struct CallLanguages
{
	int32		source_id;
	int32		target_id;
} CallLanguages;

/*
 * The deployed checkpoint of model `model` (NULL: attention.default_model,
 * or the only deployed model), loaded once per backend and reloaded when
 * the deployment or the checkpoint row changed. Its engine calls take
 * their threads from the CPU budget (cpu_budget.h).
 * ERROR when the model does not exist, has no deployed checkpoint, or its
 * checkpoint does not load. Connects to SPI itself.
 */
AttentionModel *attention_model_get(text *model);

/*
 * Looks up the deployed checkpoint of model `model` (NULL as for
 * attention_model_get) into *d without loading it; the same ERRORs.
 */
void		attention_model_lookup(text *model, DeployedModel *d);

/*
 * Only the name, the languages (schema 0.3.0 on) and the decoding defaults
 * (0.4.0 on; none before) of model `model` into *d (evaluate, the Hugging
 * Face exports; whatever its checkpoints). ERROR when it does not exist.
 * Connects to SPI itself.
 */
void		attention_model_languages(const char *model, DeployedModel *d);

/*
 * The checkpoint d describes, from the cache or loaded on `device` ("cpu"
 * or "cuda"): its parameters read as the tables' owner while it is
 * deployed (any role translates with it; TENSORS_DEPLOYED) or, with `owner`, from
 * checkpoint_tensors (the caller runs as the model's owner). ERROR when it
 * does not load. Connects to SPI itself.
 */
AttentionModel *attention_model_load(const DeployedModel *d, const char *device, bool owner);

#endif
