/*
 * translation.h - translation for the SQL functions and the service
 * (translation.c): text to subword ids and back, decoding options from SQL
 * arguments, and translation in engine batches; used by translate.c,
 * inspect.c, translate_column.c, evaluate.c, batch_translate.c and the
 * translation service's worker.
 */
#ifndef ATTENTION_TRANSLATION_H
#define ATTENTION_TRANSLATION_H

#include "postgres.h"

#include "fmgr.h"
#include "utils/array.h"

#include "model_cache.h"

/* Sentences per engine call of translate(text[]) and translate_column. */
#define BATCH_SENTENCES 32

/* A source (or target) as subword ids. */
typedef struct Encoded
{
	/*
	 * the language token (prefix 1), the text's ids, then EOS when add_eos;
	 * a source whose language goes last (source_language_last): the text's
	 * ids, EOS, then the language token where EOS would be
	 */
	int32_t    *ids;
	int			n;				/* ids but the last (EOS, or that language token) */
	int			prefix;			/* 1 when ids hold a language token, else 0 */
} Encoded;

/*
 * The languages a call names (NULL: the model's defaults) resolved for
 * model d. ERROR (22023) for a code the model lacks (listing a few of
 * its), a language for a model that is not multilingual, or none where the
 * model has no default.
 */
CallLanguages call_languages(const DeployedModel *d, text *source_language, text *target_language);

/*
 * Encodes text under the model's vocabulary after language token
 * `language` (-1: none); with add_eos an EOS follows (space is always
 * reserved). ERROR (54000) when it is longer than
 * attention.max_input_tokens or the model's positions; `what` names it.
 */
Encoded		encode_text(AttentionModel *am, text *t, bool add_eos, SpmSide side, int32 language);

/* Text of ids under the model's vocabulary (palloc'd text). */
text	   *decode_ids(AttentionModel *am, const int32_t *ids, int n);

/* The piece of id as text. */
text	   *piece_text(AttentionModel *am, int id);

/* The names of the decoding arguments of translate(): beam_size, length_penalty, max_length_offset. */
extern const char *const decode_option_names[3];

/* A beam_size argument that was NULL: the model's beam_size, else attention.beam_size (call_beam_size). */
#define BEAM_SIZE_OF_MODEL 0

/*
 * A beam_size argument: BEAM_SIZE_OF_MODEL where it is NULL, else its value,
 * ERROR (22023) where that is out of range (below 1 or above 64).
 */
int			beam_size_argument(bool isnull, int32 value);

/*
 * The beam of a call to model d: beam_size, or where it is
 * BEAM_SIZE_OF_MODEL the model's beam_size (set_decoding), else the setting
 * attention.beam_size.
 */
int			call_beam_size(const DeployedModel *d, int beam_size);

/* ERROR naming a decoding option out of range (beam_size, n, length_penalty, max_length_offset). */
void		check_decode_options(int beam_size, int nbest, double length_penalty, int max_length_offset);

/*
 * ERROR (invalid_parameter_value, naming the model) when beam_size does not
 * fit a vocabulary of vocab_size pieces: candidates are every id but pad.
 */
void		check_beam_fits(int beam_size, int vocab_size, const char *model);

/*
 * Decoding options from SQL arguments, forcing the token target_language
 * (-1: none) first, at most max_output_tokens tokens (0: no such limit; the
 * model's, DeployedModel); ERROR naming a bad one.
 */
TfDecodeOptions decode_options(AttentionModel *am, int beam_size, int nbest, double length_penalty,
							   int max_length_offset, int max_output_tokens, int32 target_language);

/*
 * Translates n encoded non-empty sources (one engine call) into out
 * [n, opt->nbest], whose tokens are then palloc'd. Services interrupts (an
 * ERROR for a cancel) and retries the batch after one that was not.
 */
void		translate_batch(AttentionModel *am, Encoded *src, int n, TfDecodeOptions *opt, TfHypothesis *out);

/*
 * Translates texts[0 .. n) (NULL entries stay NULL, empty ones become '')
 * in length-sorted engine calls of at most max_batch distinct sentences
 * (identical sources are translated once); results[i] receives the
 * translation of texts[i]. Returns the number of engine calls.
 */
int			translate_many(AttentionModel *am, text **texts, int n, TfDecodeOptions *opt, int32 source_language,
						   int max_batch, text **results);

/*
 * translate_many's work on encoded sources e[0 .. n) (ids NULL: a NULL
 * text, n = prefix: ''); adds the output tokens to *tokens when not NULL.
 */
int			translate_encoded(AttentionModel *am, const Encoded *e, int n, TfDecodeOptions *opt, int max_batch,
							  text **results, int64 *tokens);

/* Receives one hypothesis of nbest_hypotheses: its text, log-probability and pieces. */
typedef void (*NbestFn) (void *arg, text *translation, double score, ArrayType *pieces);

/*
 * The opt->nbest best translations of source, best first, each passed to
 * emit; an empty source gives one: '' with score 0 and no pieces.
 */
void		nbest_hypotheses(AttentionModel *am, text *source, int32 source_language, TfDecodeOptions *opt,
							 NbestFn emit, void *arg);

/*
 * log P(target tokens + EOS | source) in nats under am (attention.score);
 * for a multilingual model, given the target language's token.
 */
double		score_text(AttentionModel *am, text *source, text *target, CallLanguages lang);

/*
 * Translations of texts[0 .. n) with the deployed checkpoint of `model`
 * (NULL: the default model), beam_size resolved by call_beam_size (so
 * BEAM_SIZE_OF_MODEL for the model's), into results: through the model's translation
 * service when attention.use_service lets it (one request), else loaded in
 * this backend (engine calls of at most max_batch distinct sentences).
 * Returns the number of engine calls or service requests. ERROR as
 * translate() does.
 */
int			translate_texts(text *model, int beam_size, double length_penalty, int max_length_offset,
							text *target_language, text *source_language, text **texts, int n, int max_batch,
							text **results);

/*
 * What translate(source) (one_arg) or translate(source, model, beam_size,
 * length_penalty, max_length_offset, target_language, source_language)
 * returns for each of texts[0 .. n), computed in engine calls of at most
 * max_batch distinct sentences. options[6] are the model (NULL: the
 * default model), the decoding arguments and the languages of the second
 * form; unused with one_arg. results[i] is NULL
 * for a NULL text. ERRORs as the function does (a NULL option but beam_size, an unknown
 * model, a source over the token limit); with no non-NULL text it returns
 * 0 without loading a model. Returns the number of engine calls (1 when
 * the model's translation service translated them). A NULL beam_size (and
 * one_arg) means the model's (BEAM_SIZE_OF_MODEL).
 */
int			translate_rows(bool one_arg, const NullableDatum *options, text **texts, int n, int max_batch,
						   text **results);

/*
 * Runs one teacher-forced pass of source -> target ids (no EOS in
 * target->ids): afterwards, with keep_attention, the engine holds the
 * attention probabilities. Returns the log-probability of the target's
 * tokens and EOS, in nats.
 */
double		teacher_forced(AttentionModel *am, const Encoded *source, const Encoded *target,
						   bool keep_attention);

#endif
