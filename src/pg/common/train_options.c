/*
 * train_options.c - the options of a training job (attention.train's
 * options jsonb, stored in attention.jobs.options): defaults, validation,
 * the device check, and back to jsonb. A leaf of the SQL glue, shared by
 * the SQL functions that submit jobs and the worker that runs them.
 */
#include "postgres.h"

#include <math.h>

#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

#include "parallel.h"
#include "settings.h"
#include "train_options.h"

typedef enum OptionType
{
	OPT_INT32,
	OPT_INT64,
	OPT_FLOAT,
	OPT_TEXT
} OptionType;

/* One option: name, type, range (a text's: its field's size), and whether resume_training may change it. */
typedef struct OptionSpec
{
	const char *name;
	OptionType	type;
	size_t		offset;
	double		min;
	double		max;
	bool		resumable;
} OptionSpec;

static const OptionSpec option_specs[] = {
	{"max_steps", OPT_INT64, offsetof(TrainOptions, max_steps), 0, 1e15, true},
	{"max_epochs", OPT_INT32, offsetof(TrainOptions, max_epochs), 0, 1e6, true},
	{"max_minutes", OPT_FLOAT, offsetof(TrainOptions, max_minutes), 0, 1e7, true},
	{"batch_tokens", OPT_INT32, offsetof(TrainOptions, batch_tokens), 1, 1 << 24, false},
	{"warmup_steps", OPT_INT32, offsetof(TrainOptions, warmup_steps), 1, 1e8, false},
	{"learning_rate_scale", OPT_FLOAT, offsetof(TrainOptions, learning_rate_scale), 1e-6, 1e3, false},
	{"label_smoothing", OPT_FLOAT, offsetof(TrainOptions, label_smoothing), 0, 0.999, false},
	{"dropout", OPT_FLOAT, offsetof(TrainOptions, dropout), 0, 0.999, false},
	{"accumulate_batches", OPT_INT32, offsetof(TrainOptions, accumulate_batches), 1, 1024, false},
	{"batches_per_step", OPT_INT32, offsetof(TrainOptions, batches_per_step), 1, TF_MAX_STEP_BATCHES, false},
	{"checkpoint_every_steps", OPT_INT64, offsetof(TrainOptions, checkpoint_every_steps), 0, 1e15, true},
	{"checkpoint_every_minutes", OPT_FLOAT, offsetof(TrainOptions, checkpoint_every_minutes), 0, 1e7, true},
	{"keep_checkpoints", OPT_INT32, offsetof(TrainOptions, keep_checkpoints), 0, 1e6, true},
	{"keep_history", OPT_INT32, offsetof(TrainOptions, keep_history), 0, 1e8, true},
	{"validate_every_steps", OPT_INT64, offsetof(TrainOptions, validate_every_steps), 0, 1e15, true},
	{"validation_bleu_sentences", OPT_INT32, offsetof(TrainOptions, validation_bleu_sentences), 0, 1e6, true},
	{"seed", OPT_INT64, offsetof(TrainOptions, seed), 0, 9.0e18, false},
	{"init_checkpoint", OPT_INT64, offsetof(TrainOptions, init_checkpoint), 0, 9.0e18, false},
	{"device", OPT_TEXT, offsetof(TrainOptions, device), 0, sizeof(((TrainOptions *) 0)->device), true},
	{"precision", OPT_TEXT, offsetof(TrainOptions, precision), 0, sizeof(((TrainOptions *) 0)->precision), true},
	{"threads", OPT_INT32, offsetof(TrainOptions, threads), 0, 1024, true},
	{"nodes", OPT_INT32, offsetof(TrainOptions, nodes), 1, 1024, true},
};

/* The defaults: the paper's schedule, a checkpoint every 10 minutes, 5 kept. */
static void
train_options_default(TrainOptions *o)
{
	memset(o, 0, sizeof(*o));
	o->batch_tokens = 4096;
	o->warmup_steps = 4000;
	o->learning_rate_scale = 1.0;
	o->label_smoothing = -1;
	o->dropout = -1;
	o->accumulate_batches = 1;
	o->checkpoint_every_steps = 1000;
	o->checkpoint_every_minutes = 10;
	o->keep_checkpoints = 5;
	o->keep_history = 10000;
	o->seed = 1;
	strlcpy(o->device, "cpu", sizeof(o->device));
	o->nodes = 1;
	o->ranks = 1;
}

/* Sets one option from a jsonb value; ERROR naming the key when it does not fit. */
static void
apply_option(TrainOptions *o, const OptionSpec *spec, const JsonbValue *v)
{
	char	   *field = (char *) o + spec->offset;
	double		x;

	if (spec->type == OPT_TEXT)
	{
		char	   *s;

		if (v->type != jbvString)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("training option \"%s\" must be a string", spec->name)));
		s = pnstrdup(v->val.string.val, v->val.string.len);
		if (strlen(s) >= (size_t) spec->max || strlen(s) == 0)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("training option \"%s\" is %s: \"%s\"", spec->name,
								   strlen(s) == 0 ? "empty" : "too long", s)));
		strlcpy(field, s, (size_t) spec->max);
		return;
	}
	if (v->type != jbvNumeric)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("training option \"%s\" must be a number", spec->name)));
	x = DatumGetFloat8(DirectFunctionCall1(numeric_float8, NumericGetDatum(v->val.numeric)));
	if (spec->type != OPT_FLOAT && x != floor(x))
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("training option \"%s\" must be an integer, not %g", spec->name, x)));
	if (!(x >= spec->min && x <= spec->max))
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("training option \"%s\" is %g, out of range [%g, %g]", spec->name, x,
							   spec->min, spec->max)));
	if (spec->type == OPT_INT32)
		*(int32 *) field = (int32) x;
	else if (spec->type == OPT_INT64)
		*(int64 *) field = (int64) x;
	else
		*(double *) field = x;
}

void
train_options_parse(Jsonb *options, bool only_resumable, TrainOptions *o)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	const OptionSpec *pending = NULL;
	bool		saw_device = false,
				saw_precision = false,
				was_cpu;

	if (!only_resumable)
		train_options_default(o);
	was_cpu = strcmp(o->device, "cpu") == 0;
	if (!JB_ROOT_IS_OBJECT(options))
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("training options must be a JSON object")));
	it = JsonbIteratorInit(&options->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
		{
			char	   *key = pnstrdup(v.val.string.val, v.val.string.len);
			int			i;

			pending = NULL;
			for (i = 0; i < (int) lengthof(option_specs); i++)
				if (strcmp(option_specs[i].name, key) == 0)
					pending = &option_specs[i];
			if (pending == NULL)
				ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
								errmsg("unknown training option \"%s\"", key),
								errhint("Options: max_steps, max_epochs, max_minutes, batch_tokens, warmup_steps, "
										"learning_rate_scale, label_smoothing, dropout, accumulate_batches, batches_per_step, "
										"checkpoint_every_steps, checkpoint_every_minutes, keep_checkpoints, keep_history, "
										"validate_every_steps, validation_bleu_sentences, seed, init_checkpoint, device, precision, "
										"threads, nodes.")));
			saw_device |= strcmp(key, "device") == 0;
			saw_precision |= strcmp(key, "precision") == 0;
			if (only_resumable && !pending->resumable)
				ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
								errmsg("training option \"%s\" cannot change when a job resumes", key),
								errhint("A resumed job keeps its data order and schedule; submit a new job to change them.")));
		}
		else if (tok == WJB_VALUE && pending != NULL)
			apply_option(o, pending, &v);
	}
	if (!only_resumable && o->max_steps == 0 && o->max_epochs == 0 && o->max_minutes == 0)
		o->max_epochs = 10;
	/* a job keeps its precision, except that a move between the CPU and CUDA without one takes the new default */
	if (only_resumable && saw_device && !saw_precision && was_cpu != (strcmp(o->device, "cpu") == 0))
		strlcpy(o->precision, "auto", sizeof(o->precision));

}

TfPrecision
train_options_precision(const TrainOptions *o)
{
	TfPrecision p;
	char		err[TF_ERRLEN];

	/* auto: bf16 on CUDA, and on a CPU whose bf16 products were timed enough faster than fp32's */
	if (o->precision[0] == '\0' || strcmp(o->precision, "auto") == 0)
	{
		double		speedup;

		if (strcmp(o->device, "cpu") != 0)
			return TF_BF16;
		speedup = tf_cpu_bf16_speedup();
		if (speedup == 0.0)
			elog(DEBUG1, "training precision \"auto\": this CPU has no native bf16 products: fp32");
		else if (speedup < 0.0)
			elog(LOG, "training precision \"auto\": timing this CPU's bf16 products failed "
				 "(out of memory?): fp32");
		else
			elog(DEBUG1, "training precision \"auto\": this CPU's bf16 products ran %.2f times as fast as "
				 "fp32's (bf16 from %.2f)", speedup, TF_CPU_BF16_MIN_SPEEDUP);
		return tf_cpu_bf16_preferred(speedup) ? TF_BF16 : TF_FP32;
	}
	if (tf_precision_parse(o->precision, &p, err, sizeof(err)) != TF_OK)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("training option \"precision\" is \"%s\": expected \"fp32\", \"bf16\" or \"auto\"",
							   o->precision),
						errhint("Leave it out for \"auto\": bf16 on CUDA and on CPUs where bf16 products are timed "
								"at least %.2f times as fast as fp32 ones, fp32 elsewhere.", TF_CPU_BF16_MIN_SPEEDUP)));
	return p;
}

void
train_options_check(TrainOptions *o)
{
	strlcpy(o->precision, tf_precision_name(train_options_precision(o)), sizeof(o->precision));
	o->ranks = attention_check_device(o->device);
	if (o->nodes > 1 && strcmp(o->device, "cpu") == 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("training option \"nodes\" is %d, but \"device\" is \"cpu\"", o->nodes),
						errhint("Training across machines runs on CUDA devices (NCCL).")));
	/* a step's batches, spread over the ranks: fixed for the job's life, whatever its devices */
	if (o->batches_per_step == 0)
		o->batches_per_step = Min(o->nodes * o->ranks * o->accumulate_batches, TF_MAX_STEP_BATCHES);
	if (o->nodes * o->ranks > o->batches_per_step)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("training option \"device\" is \"%s\": %d ranks, but a step of this job has %d batch%s",
							   o->device, o->nodes * o->ranks, o->batches_per_step,
							   o->batches_per_step == 1 ? "" : "es"),
						errhint("Every rank needs a batch of each step: use at most %d devices, or submit a job with "
								"more batches_per_step.", o->batches_per_step)));
}

Jsonb *
train_options_to_jsonb(const TrainOptions *o)
{
	StringInfoData s;
	int			i;

	initStringInfo(&s);
	appendStringInfoChar(&s, '{');
	for (i = 0; i < (int) lengthof(option_specs); i++)
	{
		const OptionSpec *spec = &option_specs[i];
		const char *field = (const char *) o + spec->offset;

		if (spec->type == OPT_FLOAT && *(const double *) field < 0)
			continue;			/* the model's own value */
		if (spec->offset == offsetof(TrainOptions, init_checkpoint) && o->init_checkpoint == 0)
			continue;			/* none */
		appendStringInfo(&s, "%s\"%s\": ", i > 0 ? ", " : "", spec->name);
		if (spec->type == OPT_INT32)
			appendStringInfo(&s, "%d", *(const int32 *) field);
		else if (spec->type == OPT_INT64)
			appendStringInfo(&s, INT64_FORMAT, *(const int64 *) field);
		else if (spec->type == OPT_FLOAT)
			appendStringInfo(&s, "%.7g", *(const double *) field);
		else
			appendStringInfo(&s, "\"%s\"", field);
	}
	appendStringInfoChar(&s, '}');
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(s.data)));
}

int
attention_check_device(const char *device)
{
	char		kind[8] = "cuda";
	int			devices[TF_MAX_LOCAL_RANKS];
	int			ranks = 0;
	int			count;
	bool		all = strcmp(device, "cuda:all") == 0;
	char		err[TF_ERRLEN];

	if (!all && tf_device_list_parse(device, kind, devices, &ranks, err, sizeof(err)) != TF_OK)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("training option \"device\": %s", err),
						errhint("Use \"cpu\", \"cuda\" (device 0), \"cuda:N\", a list \"cuda:0,1,2,3\" (one rank per "
								"device) or \"cuda:all\".")));
	if (strcmp(kind, "cpu") == 0)
		return 1;
	attention_use_cuda_library();
	count = tf_cuda_device_count(err, sizeof(err));
	if (count < 0)
		ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						errmsg("training option \"device\" is \"%s\", but no CUDA device can be used here", device),
						errdetail("%s", err),
						errhint("Train with \"device\": \"cpu\", or run the server where an NVIDIA driver "
								"and GPU are present (attention.cuda_library names the CUDA backend).")));
	if (all && count == 0)
		ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						errmsg("training option \"device\" is \"cuda:all\", but this server has no CUDA device")));
	if (all)
		return Min(count, TF_MAX_LOCAL_RANKS);
	for (int i = 0; i < ranks; i++)
		if (devices[i] >= count)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("training option \"device\" is \"%s\", but this server has %d CUDA device%s",
								   device, count, count == 1 ? "" : "s"),
							errhint("CUDA devices are numbered from 0.")));
	return ranks;
}
