/*
 * svg.h - pictures as SVG text (svg.c): a line chart with a left and a
 * right axis (training curves) and heatmaps of square matrices' cells
 * (attention). The SVG is self-contained (no scripts, no external
 * references, no style sheets) and pure ASCII: every user string is
 * escaped, its non-ASCII characters written as numeric character
 * references, and characters XML 1.0 forbids replaced, so the text is
 * the same picture in any client encoding and safe to embed.
 */
#ifndef ATTENTION_SVG_H
#define ATTENTION_SVG_H

#include "postgres.h"

#include "lib/stringinfo.h"

/* Pictures' size limits in pixels (plot_training's width and height). */
#define SVG_MIN_WIDTH 300
#define SVG_MIN_HEIGHT 200
#define SVG_MAX_SIZE 4000

/* One curve of a line chart: points (x[i], y[i]) in order of x. */
typedef struct SvgSeries
{
	const char *label;			/* the legend's text (server encoding) */
	const double *x;
	const double *y;
	int			n;
	bool		right_axis;		/* against the right axis (else the left) */
	int			color;			/* index into the palette */
	int			style;			/* SVG_SOLID, SVG_DASHED or SVG_DOTTED */
	bool		markers;		/* a mark at each point (sparse series: validations) */
} SvgSeries;

#define SVG_SOLID 0
#define SVG_DASHED 1
#define SVG_DOTTED 2

typedef struct SvgChart
{
	const char *title;
	const char *x_label;
	const char *y_label;		/* the left axis */
	const char *y2_label;		/* the right axis: drawn when a series uses it */
	const char *empty_note;		/* shown in the plot area when no series has a point */
	int			width;
	int			height;
	const SvgSeries *series;
	int			num_series;
} SvgChart;

/* The chart as an SVG document (palloc'd, NUL-terminated). */
char	   *svg_line_chart(const SvgChart *chart);

/*
 * Heatmaps: panels (e.g. one per head) of rows x cols weights in [0, 1],
 * each cell shaded from white (0) to dark blue (1), luminance strictly
 * falling with the weight; rows labelled left, columns above (rotated).
 * Each cell is <rect class="cell" data-row="i" data-col="j"> with a
 * <title> giving its labels and weight (a tooltip in browsers).
 */
typedef struct SvgHeatmap
{
	const char *title;
	const char *row_axis;		/* e.g. "queries: target pieces" */
	const char *col_axis;		/* e.g. "keys: source pieces" */
	int			rows;
	int			cols;
	const char *const *row_labels;	/* [rows] */
	const char *const *col_labels;	/* [cols] */
	int			panels;
	const char *const *panel_titles;	/* [panels], or NULL for one untitled panel */
	const float *weights;		/* [panels, rows, cols], row-major */
} SvgHeatmap;

/* The heatmaps as an SVG document, panels in a grid (palloc'd, NUL-terminated). */
char	   *svg_heatmap(const SvgHeatmap *map);

/*
 * Appends s (server encoding) as XML character data or attribute text:
 * & < > " ' escaped; characters outside ASCII as &#xH;; tab, newline and
 * carriage return as a space; other control characters (U+0000-U+001F,
 * U+007F-U+009F) and the non-characters U+FFFE, U+FFFF as U+FFFD.
 */
void		svg_append_text(StringInfo buf, const char *s);

#endif
