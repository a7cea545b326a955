/*
 * marian.h - the coordinate order of Marian's models (Hugging Face's
 * MarianMT, OPUS-MT).
 *
 * Marian lays its sinusoidal position encodings out in halves: column k <
 * d/2 holds sin(pos / 10000^(2k/d)) and column d/2 + k the cos of the same
 * angle, where the paper (section 3.5) and this engine interleave them
 * (2k sin, 2k + 1 cos). The two models are one fixed permutation of the
 * d_model coordinates of the residual stream apart, and the Transformer
 * commutes with it (LayerNorm, attention and the tied output projection
 * are invariant under a permutation of the residual coordinates), so a
 * Marian model becomes an equal model of this engine by permuting the
 * residual dimension of every parameter, and back.
 */
#ifndef ATTENTION_MARIAN_H
#define ATTENTION_MARIAN_H

#include <stdbool.h>

#include "transformer.h"

/*
 * Marian's coordinate of this engine's residual coordinate e (0 <= e <
 * d_model, d_model even): e / 2 for even e, d_model / 2 + e / 2 for odd e.
 */
int			tf_marian_coordinate(int e, int d_model);

/*
 * Marian's sinusoid at position pos and Marian column j of d_model
 * (computed in double as Hugging Face does, rounded to float).
 */
float		tf_marian_sinusoid(int pos, int j, int d_model);

/*
 * Permutes the residual dimension of parameter t (float32, a MarianMT name
 * as tf_model_tensors lists them) in place: from this engine's order into
 * Marian's (to_marian) or back. The embedding's columns, the LayerNorms,
 * the input columns of q/k/v_proj and fc1, and the output rows and biases
 * of out_proj and fc2 move; other tensors (q/k/v and fc1 biases,
 * final_logits_bias) do not. TF_ERROR with a message for a name it does not
 * know, a shape that does not fit d_model, or no memory.
 */
int			tf_marian_permute(TfTensor *t, int d_model, bool to_marian, char *err, size_t errlen);

#endif
