/*
 * train_options.h - the options of a training job (train_options.c): a
 * leaf of the SQL glue.
 */
#ifndef ATTENTION_TRAIN_OPTIONS_H
#define ATTENTION_TRAIN_OPTIONS_H

#include "postgres.h"

#include "utils/jsonb.h"

/* Options of a training job (attention.train's options jsonb). */
typedef struct TrainOptions
{
	int64		max_steps;		/* 0: no limit */
	int32		max_epochs;		/* 0: no limit */
	double		max_minutes;	/* training time, across resumes; 0: no limit */
	int32		batch_tokens;	/* per side, padding included */
	int32		warmup_steps;
	double		learning_rate_scale;
	double		label_smoothing;	/* < 0: the model's */
	double		dropout;		/* < 0: the model's */
	int32		accumulate_batches; /* per rank, when the job is submitted */
	int32		batches_per_step;	/* over all ranks: ranks x accumulate_batches unless given */
	int64		checkpoint_every_steps; /* 0: never by steps */
	double		checkpoint_every_minutes;	/* 0: never by time */
	int32		keep_checkpoints;	/* trained checkpoints kept per job; 0: all */
	int32		keep_history;	/* rows of attention.training_history kept per job; 0: all */
	int64		validate_every_steps;	/* 0: at checkpoints only */
	int32		validation_bleu_sentences;	/* 0: no BLEU */
	int64		seed;
	int64		init_checkpoint;	/* a checkpoint of the model whose parameters start the job
									 * (fine-tuning; fresh optimizer state); 0: initialise from seed */
	char		device[256];	/* "cpu", "cuda", "cuda:N", "cuda:N,M,..." or "cuda:all" */
	char		precision[8];	/* "fp32", "bf16" or "auto" ("" too) until train_options_check resolves it */
	int32		threads;		/* 0: attention.num_threads */
	int32		nodes;			/* machines, each with the devices `device` names */
	int32		ranks;			/* not an option: the devices `device` names here */
} TrainOptions;

/*
 * Parses and validates options (a jsonb object) over the defaults; ERROR
 * (invalid_parameter_value) naming an unknown key, a wrong type or a value
 * out of range. When `only_resumable`, keys that would change the
 * training's math (batch_tokens, seed, batches_per_step, ...) are refused;
 * the device may change (a step keeps its batches_per_step batches, spread
 * over the new ranks). The devices are checked by train_options_check.
 */
void		train_options_parse(Jsonb *options, bool only_resumable, TrainOptions *o);

/*
 * Checks the options against this server: the precision is resolved
 * (train_options_precision), the devices exist (o->ranks is
 * set), "nodes" > 1 runs on CUDA, batches_per_step (derived when not given:
 * nodes x ranks x accumulate_batches) is at least the ranks of all nodes.
 * ERROR naming the option otherwise.
 */
void		train_options_check(TrainOptions *o);

/* The options as a jsonb object with every key (what jobs.options stores). */
Jsonb	   *train_options_to_jsonb(const TrainOptions *o);

/*
 * The precision a job computes in: its "precision" option, or for "auto"
 * (the default) bf16 on CUDA devices and on CPUs whose bf16 products
 * were timed at least TF_CPU_BF16_MIN_SPEEDUP times as fast as fp32 ones
 * (tf_cpu_bf16_speedup, measured once per process: 0.1-0.5 s), fp32 on
 * other CPUs; train_options_check
 * stores the result: a job keeps its precision across resumes unless one
 * names another, or moves the job between the CPU and CUDA without naming
 * one (then the new device's "auto"). ERROR naming a value that is none of these.
 */
TfPrecision train_options_precision(const TrainOptions *o);

/*
 * The ranks (devices) of `device`; ERROR unless it names devices training
 * can use: "cpu", or "cuda", "cuda:N", "cuda:N,M,...", "cuda:all" with the
 * CUDA library loadable and every device present. Loads the library to
 * count devices but creates no CUDA context.
 */
int			attention_check_device(const char *device);

#endif
