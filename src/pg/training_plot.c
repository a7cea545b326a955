/*
 * training_plot.c - attention.plot_training: training curves as an SVG
 * (svg.c draws) from attention.training_history, which the training
 * worker fills: training loss, validation loss and validation BLEU (on a
 * second axis) against steps, for one job or several on one plot.
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "svg.h"

PG_FUNCTION_INFO_V1(attention_plot_training);
PG_FUNCTION_INFO_V1(attention_plot_training_array);

/* Jobs on one plot: each has a colour of the palette. */
#define PLOT_MAX_JOBS 10

/* A job's curves: training loss, validation loss, validation BLEU. */
typedef struct JobCurves
{
	int64		job_id;
	char	   *model;
	int			n[3];
	double	   *x[3];
	double	   *y[3];
} JobCurves;

/* Reads job `job_id`'s model and history into *jc (in the caller's context); ERROR when the job does not exist. */
static void
read_job(int64 job_id, JobCurves *jc, MemoryContext ctx)
{
	Datum		arg = Int64GetDatum(job_id);
	uint64		r;
	int			s;
	bool		isnull;

	if (SPI_execute_with_args("SELECT m.name FROM attention.jobs j JOIN attention.models m USING (model_id) "
							  "WHERE j.job_id = $1", 1, (Oid[]) {INT8OID}, &arg, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read training job " INT64_FORMAT, job_id);
	if (SPI_processed == 0)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
						errmsg("training job " INT64_FORMAT " does not exist", job_id)));
	jc->job_id = job_id;
	jc->model = MemoryContextStrdup(ctx, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1));
	if (SPI_execute_with_args("SELECT step::float8, train_loss, valid_loss, valid_bleu FROM attention.training_history "
							  "WHERE job_id = $1 ORDER BY step", 1, (Oid[]) {INT8OID}, &arg, NULL, true, 0) !=
		SPI_OK_SELECT)
		elog(ERROR, "could not read the training history of job " INT64_FORMAT, job_id);
	for (s = 0; s < 3; s++)
	{
		jc->n[s] = 0;
		jc->x[s] = MemoryContextAlloc(ctx, Max(SPI_processed, 1) * sizeof(double));
		jc->y[s] = MemoryContextAlloc(ctx, Max(SPI_processed, 1) * sizeof(double));
	}
	for (r = 0; r < SPI_processed; r++)
	{
		HeapTuple	tup = SPI_tuptable->vals[r];
		double		step = DatumGetFloat8(SPI_getbinval(tup, SPI_tuptable->tupdesc, 1, &isnull));

		for (s = 0; s < 3; s++)
		{
			Datum		v = SPI_getbinval(tup, SPI_tuptable->tupdesc, s + 2, &isnull);

			if (isnull || !isfinite(DatumGetFloat8(v)))
				continue;
			jc->x[s][jc->n[s]] = step;
			jc->y[s][jc->n[s]++] = DatumGetFloat8(v);
		}
	}
}

/* ERROR (22023) naming the size when the picture would be too small or too large. */
static void
check_size(int width, int height)
{
	if (width < SVG_MIN_WIDTH || width > SVG_MAX_SIZE || height < SVG_MIN_HEIGHT || height > SVG_MAX_SIZE)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("a picture of %d x %d pixels is out of range", width, height),
						errhint("Widths go from %d to %d pixels, heights from %d to %d.", SVG_MIN_WIDTH, SVG_MAX_SIZE,
								SVG_MIN_HEIGHT, SVG_MAX_SIZE)));
}

/* The SVG of jobs' curves (palloc'd text). */
static text *
plot_jobs(const int64 *job_ids, int n, int width, int height)
{
	static const char *const names[] = {"training loss", "validation loss", "validation BLEU"};
	static const int styles[] = {SVG_SOLID, SVG_DASHED, SVG_DOTTED};
	MemoryContext ctx = CurrentMemoryContext;
	JobCurves  *jobs = palloc0(n * sizeof(JobCurves));
	SvgSeries  *series = palloc0(3 * n * sizeof(SvgSeries));
	SvgChart	chart;
	StringInfoData title;
	int			i,
				s,
				count = 0;

	check_size(width, height);
	SPI_connect();
	for (i = 0; i < n; i++)
		read_job(job_ids[i], &jobs[i], ctx);
	SPI_finish();
	initStringInfo(&title);
	if (n == 1)
		appendStringInfo(&title, "Training of job " INT64_FORMAT " (model %s)", jobs[0].job_id, jobs[0].model);
	else
	{
		appendStringInfoString(&title, "Training of jobs ");
		for (i = 0; i < n; i++)
			appendStringInfo(&title, "%s" INT64_FORMAT, i > 0 ? ", " : "", jobs[i].job_id);
	}
	for (i = 0; i < n; i++)
		for (s = 0; s < 3; s++)
		{
			SvgSeries  *c = &series[count];

			if (jobs[i].n[s] == 0)
				continue;
			c->label = n == 1 ? names[s] : psprintf("job " INT64_FORMAT ": %s", jobs[i].job_id, names[s]);
			c->x = jobs[i].x[s];
			c->y = jobs[i].y[s];
			c->n = jobs[i].n[s];
			c->right_axis = s == 2;
			c->color = n == 1 ? s : i;	/* one job: a colour per curve; several: per job */
			c->style = styles[s];
			c->markers = s > 0;
			count++;
		}
	chart.title = title.data;
	chart.x_label = "step";
	chart.y_label = "loss (nats per target token)";
	chart.y2_label = "BLEU";
	chart.empty_note = "no training history yet: the worker records it as the job trains";
	chart.width = width;
	chart.height = height;
	chart.series = series;
	chart.num_series = count;
	return cstring_to_text(svg_line_chart(&chart));
}

/*
 * plot_training(job, width, height) returns text: an SVG of the job's
 * training loss, validation loss and validation BLEU (right axis) against
 * steps. ERROR (42704) for a job that does not exist; 22023 for a size
 * out of range.
 */
Datum
attention_plot_training(PG_FUNCTION_ARGS)
{
	int64		job = PG_GETARG_INT64(0);

	PG_RETURN_TEXT_P(plot_jobs(&job, 1, PG_GETARG_INT32(1), PG_GETARG_INT32(2)));
}

/*
 * plot_training(jobs bigint[], width, height): several jobs on one plot,
 * one colour each, in the array's order (a job named twice is drawn once).
 * ERROR (22004) for a NULL element, 22023 for an empty array, 54000 for
 * more than PLOT_MAX_JOBS jobs.
 */
Datum
attention_plot_training_array(PG_FUNCTION_ARGS)
{
	ArrayType  *a = PG_GETARG_ARRAYTYPE_P(0);
	Datum	   *elems;
	bool	   *nulls;
	int64	   *jobs;
	int			count,
				n = 0,
				i,
				k;

	deconstruct_array(a, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &elems, &nulls, &count);
	jobs = palloc(Max(count, 1) * sizeof(int64));
	for (i = 0; i < count; i++)
	{
		bool		seen = false;

		if (nulls[i])
			ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
							errmsg("jobs must not contain NULL")));
		for (k = 0; k < n; k++)
			seen |= jobs[k] == DatumGetInt64(elems[i]);
		if (!seen)
			jobs[n++] = DatumGetInt64(elems[i]);
	}
	if (n == 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("jobs is empty: there is nothing to plot")));
	if (n > PLOT_MAX_JOBS)
		ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						errmsg("%d jobs are too many for one plot: plot_training draws at most %d", n, PLOT_MAX_JOBS)));
	PG_RETURN_TEXT_P(plot_jobs(jobs, n, PG_GETARG_INT32(1), PG_GETARG_INT32(2)));
}
