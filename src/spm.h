/*
 * spm.h - C interface to SentencePiece (a thin C++ shim, src/spm.cc).
 *
 * No exception ever crosses this interface: every function catches them
 * and returns a status. Functions returning int give 0 on success and -1 on
 * failure, with a NUL-terminated message written to err (errlen bytes).
 * Buffers returned through pointer arguments are malloc'd; free them with
 * spm_free_buffer(). Text is UTF-8 with explicit byte lengths.
 */
#ifndef ATTENTION_SPM_H
#define ATTENTION_SPM_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C"
{
#endif

/* Special ids of every vocabulary this extension trains. */
#define SPM_PAD_ID 0
#define SPM_UNK_ID 1
#define SPM_BOS_ID 2
#define SPM_EOS_ID 3

typedef struct SpmModel SpmModel;

/* Which side's text: a vocabulary pair (spm_load_pair) has a model for each. */
typedef enum SpmSide
{
	SPM_SOURCE,
	SPM_TARGET
} SpmSide;

/* Options of spm_train (SentencePiece TrainerSpec fields of the same meaning). */
typedef struct SpmTrainOptions
{
	int			vocab_size;
	const char *model_type;		/* "bpe", "unigram", "char" or "word" */
	double		character_coverage; /* (0, 1] */
	bool		byte_fallback;	/* unknown characters become UTF-8 byte pieces */
	int			num_threads;
} SpmTrainOptions;

/*
 * Trains a model in memory on n sentences (sentences[i] of lengths[i]
 * bytes), with pad/unk/bos/eos = SPM_PAD_ID/SPM_UNK_ID/SPM_BOS_ID/SPM_EOS_ID.
 * The trainer's threads run with every signal blocked. On success *model /
 * *model_len hold the serialized ModelProto (the bytes of a .model file).
 * SentencePiece cannot be interrupted; callers that must stay cancellable
 * run this in a child process (src/pg/vocabulary.c).
 */
int			spm_train(const char *const *sentences, const size_t *lengths, size_t n,
					  const SpmTrainOptions *options, char **model, size_t *model_len,
					  char *err, size_t errlen);

/* Parses a serialized model (the bytes of a .model file) into *out. */
int			spm_load(const char *bytes, size_t len, SpmModel **out, char *err, size_t errlen);

/*
 * A vocabulary pair as Marian's models have one (Hugging Face's MarianMT,
 * OPUS-MT): source text is cut into pieces by the SentencePiece model
 * `source`, target text by `target`, and the pieces of both sides map to
 * ids through one table, pieces[id] (lengths[id] bytes; n of them; the
 * model's vocab.json), where a piece not in the table is the unknown id.
 * special = {pad, unk, bos, eos}: the model's ids (bos: its decoder start;
 * -1 for none but unk). A source text may begin with a language code
 * ">>xx<<" that is a piece of the table (multilingual models): it becomes
 * that id. Fails on a bad SentencePiece model, a duplicate piece, or a
 * special id out of range.
 */
int			spm_load_pair(const char *source, size_t source_len, const char *target, size_t target_len,
						  const char *const *pieces, const size_t *lengths, int n, const int special[4],
						  SpmModel **out, char *err, size_t errlen);

/*
 * Ids of a vocabulary pair that spm_decode skips as it skips the special
 * ids: a multilingual model's language tokens (M2M-100, NLLB-200; as
 * transformers' decode(skip_special_tokens=True)). Adds to an earlier
 * call's. Fails on an id out of range or a model that is not a pair.
 */
int			spm_set_skipped(SpmModel *model, const int *ids, int n, char *err, size_t errlen);

/*
 * A pair's added tokens, as transformers' tokenizers treat them (M2M-100's
 * and NLLB's: specials, language tokens, <mask>; MarianMT's: </s>, <unk>,
 * <pad>): the pieces of added[n_added] are cut out of text (after a leading
 * ">>xx<<" language code) before SentencePiece (the earliest occurrence
 * first, the longest of those starting there), become their ids,
 * and the text on each side of one is encoded alone; unknown_text[
 * n_unknown_text] (M2M-100's made-up words) decode as the unknown piece's
 * text ("<unk>") with the pieces on each side decoded alone
 * (M2M100Tokenizer.convert_tokens_to_string). Replaces an earlier added
 * list; unknown_text adds to an earlier call's. Fails
 * on an id out of range, a model that is not a pair, or one without an
 * unknown id.
 */
int			spm_set_added(SpmModel *model, const int *added, int n_added, const int *unknown_text,
						  int n_unknown_text, char *err, size_t errlen);

/* Frees a model from spm_load or spm_load_pair (NULL is allowed). */
void		spm_free(SpmModel *model);

/* Frees a buffer returned by this interface (NULL is allowed). */
void		spm_free_buffer(void *buffer);

/* Number of pieces (ids are 0 .. size-1). */
int			spm_size(const SpmModel *model);

/* Special ids of the model; -1 where it has none. */
int			spm_pad_id(const SpmModel *model);
int			spm_unk_id(const SpmModel *model);
int			spm_bos_id(const SpmModel *model);
int			spm_eos_id(const SpmModel *model);

/* Piece of id (0 <= id < spm_size) as a pointer into the model, its length in *len. */
const char *spm_piece(const SpmModel *model, int id, size_t *len);

/* SentencePiece score of id (0 <= id < spm_size); 0 in a vocabulary pair. */
float		spm_score(const SpmModel *model, int id);

/* Encodes text of a side into *ids (*n of them); no BOS/EOS added. */
int			spm_encode(const SpmModel *model, SpmSide side, const char *text, size_t len,
					   int **ids, size_t *n, char *err, size_t errlen);

/*
 * Encodes text into pieces: *pieces holds them back to back, *offsets has
 * *n + 1 entries (piece i is pieces[offsets[i] .. offsets[i+1])).
 */
int			spm_encode_pieces(const SpmModel *model, SpmSide side, const char *text, size_t len,
							  char **pieces, size_t **offsets, size_t *n,
							  char *err, size_t errlen);

/*
 * Decodes n ids into target text (*text, *len bytes, NUL-terminated). Every
 * id must be in [0, spm_size); control ids (pad, bos, eos) produce no text.
 * A vocabulary pair's text is transformers 4.40's MarianTokenizer.decode(ids,
 * skip_special_tokens=True) with its default clean-up: the special ids
 * (pad, unk, bos, eos) and those of spm_set_skipped skipped, the other pieces decoded by the target
 * model (pieces it lacks come out verbatim), every remaining U+2581 a space,
 * surrounding whitespace stripped, and clean_up_tokenization's rules
 * (" ." -> ".", " ?", " !", " ,", " ' " -> "'", " n't", " 'm", " 's", " 've",
 * " 're") applied in that order (docs/pretrained-models.md).
 */
int			spm_decode(const SpmModel *model, const int *ids, size_t n,
					   char **text, size_t *len, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
