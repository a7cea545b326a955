/*
 * huggingface.h - what the Hugging Face imports and exports share
 * (huggingface.c: MarianMT; huggingface_m2m100.c: M2M-100 and NLLB-200):
 * config.json readers, vocab.json, the vocabulary check, replacing a name,
 * and the rows of an export.
 */
#ifndef ATTENTION_HUGGINGFACE_H
#define ATTENTION_HUGGINGFACE_H

#include "postgres.h"

#include "funcapi.h"
#include "lib/stringinfo.h"
#include "utils/jsonb.h"

#include "spm.h"
#include "transformer.h"

/* ERROR (invalid_parameter_value) about config.json. */
#define config_error(...) \
	ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("config.json: " __VA_ARGS__)))

/* The value of config.json's key, or NULL (also for a JSON null). */
JsonbValue *config_value(Jsonb *config, const char *key);

/* An integer of config.json (dflt when absent); ERROR naming the key when it is not a non-negative integer. */
int			config_int(Jsonb *config, const char *key, int dflt);

/* A number of config.json (dflt when absent); ERROR naming the key when it is not a number. */
double		config_number(Jsonb *config, const char *key, double dflt);

/* A boolean of config.json that must equal `needed` (dflt when absent); ERROR naming the key otherwise. */
void		config_require(Jsonb *config, const char *key, bool dflt, bool needed);

/* A string of config.json (dflt when absent), palloc'd; ERROR naming the key when it is not a string. */
char	   *config_string(Jsonb *config, const char *key, const char *dflt);

/* config.json's vocab_size (dflt when absent); ERROR unless between 4 and 2^24. */
int			config_vocab_size(Jsonb *config, int dflt);

/*
 * config.json's pad_token_id, eos_token_id and decoder_start_token_id
 * (dflt[0..2] when absent) into *pad_id, *eos_id, *decoder_start_id;
 * ERROR unless each is below vocab_size.
 */
void		config_token_ids(Jsonb *config, int vocab_size, const int dflt[3], int *pad_id, int *eos_id,
							 int *decoder_start_id);

/*
 * The sizes and dropouts an encoder-decoder config.json (MarianConfig,
 * M2M100Config) gives, with their defaults for absent keys (attention
 * dropout: attention_dropout): d_model, encoder/decoder layers, heads and
 * ffn dims (ERROR unless equal in encoder and decoder), dropout,
 * attention_dropout, activation_dropout, max_position_embeddings.
 */
void		config_sizes(Jsonb *config, TfConfig *c, double attention_dropout);

/*
 * config.json's activation_function (dflt when absent) as this engine names
 * it: swish (silu), gelu (exact) or relu; ERROR for another.
 */
const char *config_activation(Jsonb *config, const char *dflt);

/*
 * vocab.json (an object piece -> id, ids 0 .. vocab_size - 1, each once) as
 * the piece of every id [vocab_size]; *unk_id receives the id of "<unk>".
 * ERROR naming the problem.
 */
Datum	   *read_vocab(Jsonb *vocab, int vocab_size, int *unk_id);

/*
 * ERROR (invalid_binary_representation) unless the SentencePiece models
 * source and target load as a vocabulary pair with pieces[n] and special
 * = {pad, unk, bos, eos} (spm_load_pair).
 */
void		check_vocabulary(bytea *source, bytea *target, Datum *pieces, int n, const int special[4]);

/*
 * ERROR unless no vocabulary and no model is named name; with replace, drops
 * them first (drop_model, then drop_vocabulary). Inside SPI.
 */
void		free_import_name(const char *name, bool replace);

/* Appends piece `id` of the vocabulary as a JSON string. */
void		append_piece(StringInfo s, const SpmModel *vocab, int id);

/* Adds one row (file, data) to an export's result. */
void		put_file(ReturnSetInfo *rsinfo, const char *name, const char *data, size_t len);

/* Adds a JSON file built in s (then reset). */
void		put_json(ReturnSetInfo *rsinfo, const char *name, StringInfo s);

/*
 * Appends generation_config.json's "max_length" and "num_beams" for
 * model (in SPI): its max_output_tokens + 1 (decoder start) + forced (1
 * for each token generate forces besides: a language token first,
 * MarianMT's EOS last), else max_positions; its beam_size, else 4 (what an
 * import reads back as set_decoding's).
 */
void		append_generation_defaults(StringInfo s, const char *model, int forced, int max_positions);

#endif
