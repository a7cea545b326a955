/*
 * catalog.h - the extension's tables as the SQL functions and the training
 * worker read and write them (catalog.c): a leaf of the SQL glue.
 */
#ifndef ATTENTION_CATALOG_H
#define ATTENTION_CATALOG_H

#include "postgres.h"

#include "access/htup.h"
#include "access/tupdesc.h"
#include "utils/jsonb.h"

#include "remote.h"
#include "spm.h"
#include "transformer.h"

/* Vocabulary facts a model needs. */
typedef struct VocabInfo
{
	int32		vocabulary_id;
	int			vocab_size;
	int			pad_id,
				bos_id,
				eos_id;
} VocabInfo;

/*
 * Reads the vocabulary of row 0 of SPI_tuptable from columns first ..
 * first + 4 (id, size, pad, bos, eos). ERROR (invalid_parameter_value)
 * naming `vocabulary` when it has no pad, BOS or EOS id. Inside SPI.
 */
VocabInfo	catalog_vocab_info(int first, const char *vocabulary);

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

/* The full configuration as jsonb (what models.config stores; 7 significant digits, so 0.1 reads 0.1). */
Datum		attention_config_to_jsonb(const TfConfig *c);

/*
 * Reads model `name` into SPI_tuptable (one row: model_id, config, then
 * the vocabulary's id, vocab_size, pad_id, bos_id, eos_id); ERROR when it
 * does not exist. Inside SPI.
 */
void		read_model_row(const char *name);

/*
 * The select list of attention.vocabularies (alias v) that vocabulary_load
 * reads: model, target_model, pieces, pad_id, unk_id, bos_id, eos_id,
 * language_ids, language_tokens_special, source_language_last (NULL
 * target_model and pieces where the schema is still at 0.1.0, NULL
 * language_ids before 0.3.0, true and false before 0.4.0, which have no such
 * columns). Runs
 * a catalogue query: call it before the caller's own.
 * Inside SPI.
 */
const char *vocabulary_columns(void);

/*
 * Whether attention.vocabularies has `column` here (a library newer than
 * the schema until ALTER EXTENSION UPDATE). Inside SPI.
 */
bool		vocabulary_has_column(const char *column);

/*
 * The attention extension's version in this database, or with `remote` in
 * the one it reaches (palloc'd; NULL when it is not installed). Inside SPI.
 */
char	   *attention_extension_version(Remote *remote);

/*
 * The vocabulary in columns first .. first + 8 of an SPI row
 * (vocabulary_columns()): a SentencePiece model, or with target_model and
 * pieces a vocabulary pair (spm_load_pair; with language_ids, every id
 * from the lowest of them on is skipped by spm_decode: the added tokens of
 * M2M-100's and NLLB's tokenizers, but the language tokens themselves where
 * language_tokens_special is false, which are text); free with spm_free. ERROR
 * (sqlerrcode, naming `what`) when it does not load.
 */
SpmModel   *vocabulary_load(HeapTuple tup, TupleDesc desc, int first, const char *what, int sqlerrcode);

/*
 * Whether the vocabulary in columns first .. first + 9 of an SPI row
 * (vocabulary_columns()) puts a multilingual source's language token after
 * its EOS (source_language_last: NllbTokenizer's legacy_behaviour) rather
 * than before its text.
 */
bool		vocabulary_source_language_last(HeapTuple tup, TupleDesc desc, int first);

/*
 * Id of model `name` when the current role is a member of its owner role;
 * ERROR (undefined_object, insufficient_privilege naming `action`)
 * otherwise. Inside SPI.
 */
/*
 * ERROR (wrong_object_type, naming the checkpoint and the float32 one it
 * came from) when checkpoint_id is an int8 checkpoint (kind quantized),
 * which translates but cannot be `action` ("trained from", "exported").
 * Inside SPI.
 */
void		require_float_checkpoint(int64 checkpoint_id, const char *action);

int32		require_model_owner(const char *name, const char *action);

/*
 * ERROR (invalid_parameter_value) unless checkpoint `checkpoint_id` is one of
 * model `model_id`'s (named `model` in the message). Inside SPI.
 */
void		require_model_checkpoint(int64 checkpoint_id, int32 model_id, const char *model);

/*
 * Writes tensors [count] (host memory) as rows of checkpoint
 * `checkpoint_id`, each chunked below the 1 GB bytea limit; each tensor
 * counts as done in this process's reported operation (progress_add).
 * Inside SPI.
 */
void		write_tensors(int64 checkpoint_id, const TfTensor *tensors, int count);

/*
 * The formats of checkpoints (checkpoints.format, and "attention.format" in
 * exported files): tensor names and meanings, the data.* counters. 1:
 * float32 parameters (and int64 counters); 2: an int8 checkpoint
 * (quantize): every matrix product's weight int8 with "<name>_scale"
 * float32 per row. This library writes 1, and 2 for int8 checkpoints; it
 * reads both.
 */
#define CHECKPOINT_FORMAT 1
#define CHECKPOINT_FORMAT_INT8 2

/* Which tensors of a checkpoint read_tensors reads. */
typedef enum TensorSet
{
	TENSORS_DEPLOYED,			/* parameters of a deployed checkpoint (any role: read as the tables' owner; here only) */
	TENSORS_PARAMETERS,			/* parameters (the model's owner) */
	TENSORS_ALL					/* parameters and training state (the model's owner) */
} TensorSet;

/*
 * Reads tensors of a checkpoint, on this server or with `remote` on another
 * (a node of a job across machines reads the coordinator's), into host
 * memory (palloc'd), chunks joined, sorted by name; *count receives their
 * number (0 when the checkpoint has none or, for TENSORS_DEPLOYED, is not
 * deployed). ERROR naming a corrupt tensor, or for a checkpoint of a format
 * this library does not know (newer than CHECKPOINT_FORMAT_INT8).
 * Inside SPI.
 */
TfTensor   *read_tensors_from(Remote *remote, int64 checkpoint_id, TensorSet set, int *count);

/* read_tensors_from this server. */
static inline TfTensor *
read_tensors(int64 checkpoint_id, TensorSet set, int *count)
{
	return read_tensors_from(NULL, checkpoint_id, set, count);
}

#endif
