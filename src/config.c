/*
 * config.c - model configurations: the paper's presets and validation.
 */
#include <stdio.h>

#include "transformer.h"

/* Fields shared by every preset: paper section 5.4 and docs/design.md §2. */
static void
config_common(TfConfig *c, int vocab_size)
{
	c->attention_dropout = 0.0f;
	c->relu_dropout = 0.0f;
	c->label_smoothing = 0.1f;
	c->vocab_size = vocab_size;
	c->max_positions = 1024;
	c->layer_norm_eps = 1e-5f;
	c->pad_id = 0;
	c->activation = TF_RELU;
	c->logits_bias = false;
	c->normalize_before = false;
	c->scale_embedding = true;
	c->positions = TF_POSITIONS_PAPER;
}

void
tf_config_base(TfConfig *c, int vocab_size)
{
	config_common(c, vocab_size);
	c->num_encoder_layers = 6;
	c->num_decoder_layers = 6;
	c->d_model = 512;
	c->num_heads = 8;
	c->d_ff = 2048;
	c->dropout = 0.1f;
}

void
tf_config_big(TfConfig *c, int vocab_size)
{
	config_common(c, vocab_size);
	c->num_encoder_layers = 6;
	c->num_decoder_layers = 6;
	c->d_model = 1024;
	c->num_heads = 16;
	c->d_ff = 4096;
	c->dropout = 0.3f;
}

void
tf_config_small(TfConfig *c, int vocab_size)
{
	config_common(c, vocab_size);
	c->num_encoder_layers = 3;
	c->num_decoder_layers = 3;
	c->d_model = 256;
	c->num_heads = 4;
	c->d_ff = 1024;
	c->dropout = 0.1f;
}

/* Writes a message and returns TF_ERROR. */
static int
bad(char *err, size_t errlen, const char *field, const char *rule)
{
	snprintf(err, errlen, "invalid configuration: %s %s", field, rule);
	return TF_ERROR;
}

/*
 * Upper bounds keep every size computation inside int (GEMM dimensions) and
 * the dropout sites of the layers apart (model.c).
 */
#define MAX_LAYERS 64
#define MAX_WIDTH 65536
#define MAX_VOCAB (1 << 24)
#define MAX_POSITIONS 65536

int
tf_config_validate(const TfConfig *c, char *err, size_t errlen)
{
	if (c->num_encoder_layers < 1 || c->num_encoder_layers > MAX_LAYERS)
		return bad(err, errlen, "num_encoder_layers", "must be between 1 and 64");
	if (c->num_decoder_layers < 1 || c->num_decoder_layers > MAX_LAYERS)
		return bad(err, errlen, "num_decoder_layers", "must be between 1 and 64");
	if (c->d_model < 2 || c->d_model % 2 != 0 || c->d_model > MAX_WIDTH)
		return bad(err, errlen, "d_model", "must be an even number between 2 and 65536");
	if (c->num_heads < 1)
		return bad(err, errlen, "num_heads", "must be at least 1");
	if (c->d_model % c->num_heads != 0)
		return bad(err, errlen, "d_model", "must be divisible by num_heads");
	if (c->d_ff < 1 || c->d_ff > MAX_WIDTH)
		return bad(err, errlen, "d_ff", "must be between 1 and 65536");
	if (!(c->dropout >= 0.0f && c->dropout < 1.0f))
		return bad(err, errlen, "dropout", "must be in [0, 1)");
	if (!(c->attention_dropout >= 0.0f && c->attention_dropout < 1.0f))
		return bad(err, errlen, "attention_dropout", "must be in [0, 1)");
	if (!(c->relu_dropout >= 0.0f && c->relu_dropout < 1.0f))
		return bad(err, errlen, "relu_dropout", "must be in [0, 1)");
	if (c->activation != TF_RELU && c->activation != TF_SWISH && c->activation != TF_GELU)
		return bad(err, errlen, "activation", "must be relu, swish or gelu");
	if (!(c->label_smoothing >= 0.0f && c->label_smoothing < 1.0f))
		return bad(err, errlen, "label_smoothing", "must be in [0, 1)");
	if (c->vocab_size < 4 || c->vocab_size > MAX_VOCAB)
		return bad(err, errlen, "vocab_size", "must be between 4 and 16777216");
	if (c->max_positions < 1 || c->max_positions > MAX_POSITIONS)
		return bad(err, errlen, "max_positions", "must be between 1 and 65536");
	if (!(c->layer_norm_eps > 0.0f))
		return bad(err, errlen, "layer_norm_eps", "must be positive");
	if (c->pad_id < 0 || c->pad_id >= c->vocab_size)
		return bad(err, errlen, "pad_id", "must be a valid id");
	if (c->positions != TF_POSITIONS_PAPER && c->positions != TF_POSITIONS_FAIRSEQ)
		return bad(err, errlen, "positions", "must be paper or fairseq");
	if (c->positions == TF_POSITIONS_FAIRSEQ && c->d_model < 4)
		return bad(err, errlen, "d_model", "must be at least 4 with fairseq's positions");
	return TF_OK;
}
