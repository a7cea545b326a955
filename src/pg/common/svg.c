/*
 * svg.c - SVG pictures from C (svg.h): a line chart with two axes and
 * heatmaps in a grid. Plain text building on StringInfo; sizes in pixels,
 * text widths estimated at 0.6 of the font size per character (DejaVu
 * Sans averages 0.55-0.6), which is all the layout needs.
 */
#include "postgres.h"

#include <math.h>

#include "mb/pg_wchar.h"
#include "miscadmin.h"

#include "svg.h"

#define FONT "font-family=\"DejaVu Sans, Verdana, Arial, sans-serif\""
#define CHAR_WIDTH 0.6			/* of the font size */
#define LABEL_CHARS 24			/* longer labels are cut, with an ellipsis */

/* Ten distinct colours (the common "category10" hues). */
static const char *const palette[] = {
	"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
	"#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
};

/* The code point at p (UTF-8, len bytes), or -1 where the bytes are not a legal character. */
static int32
utf8_char(const unsigned char *p, int len)
{
	int			k;

	for (k = 1; k < len; k++)
		if (p[k] == '\0')
			return -1;
	if (!pg_utf8_islegal(p, len))
		return -1;
	return (int32) utf8_to_unicode(p);
}

/* svg_append_text, cut after max_chars characters (0: no limit) with an ellipsis. */
static void
append_text_cut(StringInfo buf, const char *s, int max_chars)
{
	char	   *u = pg_server_to_any(s, strlen(s), PG_UTF8);
	const unsigned char *p = (const unsigned char *) u;
	int			chars = 0;

	while (*p != '\0')
	{
		int			len = *p < 0x80 ? 1 : pg_utf_mblen(p);
		int32		c = *p < 0x80 ? *p : utf8_char(p, len);

		if (c < 0)
			len = 1;
		if (max_chars > 0 && ++chars > max_chars)
		{
			appendStringInfoString(buf, "&#x2026;");
			break;
		}
		if (c == '&')
			appendStringInfoString(buf, "&amp;");
		else if (c == '<')
			appendStringInfoString(buf, "&lt;");
		else if (c == '>')
			appendStringInfoString(buf, "&gt;");
		else if (c == '"')
			appendStringInfoString(buf, "&quot;");
		else if (c == '\'')
			appendStringInfoString(buf, "&#39;");
		else if (c == '\t' || c == '\n' || c == '\r')
			appendStringInfoChar(buf, ' ');
		else if (c < 0 || c < 0x20 || (c >= 0x7f && c <= 0x9f) || c == 0xfffe || c == 0xffff)
			appendStringInfoString(buf, "&#xFFFD;");
		else if (c < 0x80)
			appendStringInfoChar(buf, (char) c);
		else
			appendStringInfo(buf, "&#x%X;", (unsigned int) c);
		p += len;
	}
	if (u != s)
		pfree(u);
}

void
svg_append_text(StringInfo buf, const char *s)
{
	append_text_cut(buf, s, 0);
}

/* Estimated width in pixels of s (at most max_chars characters) at font size `size`. */
static double
text_width(const char *s, int max_chars, double size)
{
	int			chars = pg_mbstrlen(s);

	if (max_chars > 0 && chars > max_chars)
		chars = max_chars + 1;
	return chars * CHAR_WIDTH * size;
}

/* A text element: anchor start, middle or end; rotate in degrees (0: none). */
static void
text_at(StringInfo buf, double x, double y, const char *anchor, double size, double rotate, const char *extra,
		const char *s, int max_chars)
{
	if (rotate != 0)
		appendStringInfo(buf, "<text transform=\"translate(%.1f,%.1f) rotate(%.0f)\"", x, y, rotate);
	else
		appendStringInfo(buf, "<text x=\"%.1f\" y=\"%.1f\"", x, y);
	appendStringInfo(buf, " text-anchor=\"%s\" font-size=\"%.1f\"%s%s>", anchor, size, extra ? " " : "",
					 extra ? extra : "");
	append_text_cut(buf, s, max_chars);
	appendStringInfoString(buf, "</text>\n");
}

static void
document_begin(StringInfo buf, int width, int height, const char *title)
{
	appendStringInfo(buf, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
					 "viewBox=\"0 0 %d %d\" " FONT ">\n<title>", width, height, width, height);
	svg_append_text(buf, title);
	appendStringInfo(buf, "</title>\n<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n",
					 width, height);
	text_at(buf, width / 2.0, 26, "middle", 16, 0, "font-weight=\"bold\"", title, 0);
}

/* A tick spacing of 1, 2 or 5 times a power of ten giving about `target` intervals over range. */
static double
nice_step(double range, int target)
{
	double		raw = range / target;
	double		magnitude = pow(10, floor(log10(raw)));
	double		f = raw / magnitude;

	return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * magnitude;
}

/* An axis over [lo, hi] widened to whole ticks. */
typedef struct Axis
{
	double		lo;
	double		hi;
	double		step;
	int			decimals;		/* of the tick labels */
} Axis;

static Axis
axis_over(double lo, double hi, int target)
{
	Axis		a;

	if (!(hi > lo))
	{
		double		d = fabs(lo) > 0 ? fabs(lo) * 0.1 : 1;

		lo -= d;
		hi += d;
	}
	a.step = nice_step(hi - lo, target);
	a.lo = floor(lo / a.step + 1e-9) * a.step;
	a.hi = ceil(hi / a.step - 1e-9) * a.step;
	a.decimals = a.step >= 1 ? 0 : Min(12, (int) ceil(-log10(a.step) - 1e-9));
	return a;
}

/* The number of ticks of axis a (at most 1000: far beyond what double precision resolves, none lost). */
static int
tick_count(const Axis *a)
{
	double		n = floor((a->hi - a->lo) / a->step + 0.5) + 1;

	return isfinite(n) && n >= 1 ? (int) Min(n, 1000) : 1;
}

/* Tick t of axis a (0 prints as 0, not -0). */
static double
tick(const Axis *a, int t)
{
	double		v = a->lo + t * a->step;

	return fabs(v) < a->step * 1e-6 ? 0.0 : v;
}

/* Pixel position of v on axis a mapped onto [from, to]. */
static double
scale(const Axis *a, double v, double from, double to)
{
	return from + (v - a->lo) / (a->hi - a->lo) * (to - from);
}

static const char *
dash_of(int style)
{
	return style == SVG_DASHED ? " stroke-dasharray=\"7 4\"" : style == SVG_DOTTED ? " stroke-dasharray=\"2 3\"" : "";
}

/* A legend entry's width: the line sample, a gap, the text, a gap. */
static double
legend_width(const SvgSeries *s)
{
	return 30 + text_width(s->label, 0, 12) + 18;
}

char *
svg_line_chart(const SvgChart *c)
{
	StringInfoData buf;
	double		xmin = INFINITY,
				xmax = -INFINITY,
				ymin[2] = {INFINITY, INFINITY},
				ymax[2] = {-INFINITY, -INFINITY};
	bool		right = false;
	int			points = 0;
	int			legend_rows = 1;
	double		row_x = 0;
	double		left,
				plot_right,
				top = 50,
				bottom;
	Axis		ax,
				ay[2];
	int			i,
				k,
				t;

	for (i = 0; i < c->num_series; i++)
	{
		const SvgSeries *s = &c->series[i];
		int			a = s->right_axis ? 1 : 0;

		right |= s->right_axis;
		for (k = 0; k < s->n; k++)
		{
			xmin = Min(xmin, s->x[k]);
			xmax = Max(xmax, s->x[k]);
			ymin[a] = Min(ymin[a], s->y[k]);
			ymax[a] = Max(ymax[a], s->y[k]);
			points++;
		}
		/* legend rows: entries wrap within the width */
		if (row_x > 0 && row_x + legend_width(s) > c->width - 40)
		{
			legend_rows++;
			row_x = 0;
		}
		row_x += legend_width(s);
	}
	left = 72;
	plot_right = c->width - (right ? 72 : 28);
	bottom = c->height - 48 - 18 * (c->num_series > 0 ? legend_rows : 0);
	if (bottom - top < 40)
		ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						errmsg("a chart of %d x %d pixels has no room for its %d legend rows", c->width, c->height,
							   legend_rows),
						errhint("Make the picture taller, or plot fewer jobs at once.")));
	if (points == 0)
	{
		xmin = 0;
		xmax = 1;
	}
	ax = axis_over(xmin, xmax, Max(2, (int) ((plot_right - left) / 90)));
	for (k = 0; k < 2; k++)
		ay[k] = axis_over(isfinite(ymin[k]) ? ymin[k] : 0, isfinite(ymax[k]) ? ymax[k] : 1,
						  Max(2, (int) ((bottom - top) / 60)));
	/* BLEU and the like: from 0 */
	if (right && ay[1].lo > 0)
		ay[1] = axis_over(0, ymax[1], Max(2, (int) ((bottom - top) / 60)));

	initStringInfo(&buf);
	document_begin(&buf, c->width, c->height, c->title);
	/* grid, ticks and their labels */
	appendStringInfoString(&buf, "<g stroke=\"#e3e3e3\" stroke-width=\"1\">\n");
	for (t = 0; t < tick_count(&ax); t++)
		appendStringInfo(&buf, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n",
						 scale(&ax, tick(&ax, t), left, plot_right), top, scale(&ax, tick(&ax, t), left, plot_right),
						 bottom);
	for (t = 0; t < tick_count(&ay[0]); t++)
		appendStringInfo(&buf, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n",
						 left, scale(&ay[0], tick(&ay[0], t), bottom, top), plot_right,
						 scale(&ay[0], tick(&ay[0], t), bottom, top));
	appendStringInfoString(&buf, "</g>\n");
	appendStringInfo(&buf, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
					 "stroke=\"#333333\" stroke-width=\"1\"/>\n", left, top, plot_right - left, bottom - top);
	for (t = 0; t < tick_count(&ax); t++)
	{
		char		label[64];

		snprintf(label, sizeof(label), "%.*f", ax.decimals, tick(&ax, t));
		text_at(&buf, scale(&ax, tick(&ax, t), left, plot_right), bottom + 16, "middle", 12, 0, NULL, label, 0);
	}
	for (k = 0; k < (right ? 2 : 1); k++)
		for (t = 0; t < tick_count(&ay[k]); t++)
		{
			char		label[64];

			snprintf(label, sizeof(label), "%.*f", ay[k].decimals, tick(&ay[k], t));
			text_at(&buf, k == 0 ? left - 6 : plot_right + 6, scale(&ay[k], tick(&ay[k], t), bottom, top) + 4,
					k == 0 ? "end" : "start", 12, 0, NULL, label, 0);
		}
	text_at(&buf, (left + plot_right) / 2, bottom + 34, "middle", 13, 0, NULL, c->x_label, 0);
	text_at(&buf, 18, (top + bottom) / 2, "middle", 13, -90, NULL, c->y_label, 0);
	if (right)
		text_at(&buf, c->width - 14, (top + bottom) / 2, "middle", 13, 90, NULL, c->y2_label, 0);
	if (points == 0 && c->empty_note != NULL)
		text_at(&buf, (left + plot_right) / 2, (top + bottom) / 2, "middle", 14, 0, "fill=\"#666666\"",
				c->empty_note, 0);

	/* the curves */
	for (i = 0; i < c->num_series; i++)
	{
		const SvgSeries *s = &c->series[i];
		const Axis *a = &ay[s->right_axis ? 1 : 0];
		const char *color = palette[s->color % lengthof(palette)];

		if (s->n == 0)
			continue;
		appendStringInfo(&buf, "<polyline class=\"series\" data-series=\"%d\" fill=\"none\" stroke=\"%s\" "
						 "stroke-width=\"2\" stroke-linejoin=\"round\"%s points=\"", i, color, dash_of(s->style));
		for (k = 0; k < s->n; k++)
			appendStringInfo(&buf, "%s%.1f,%.1f", k > 0 ? " " : "", scale(&ax, s->x[k], left, plot_right),
							 scale(a, s->y[k], bottom, top));
		appendStringInfoString(&buf, "\"/>\n");
		if (s->markers)
			for (k = 0; k < s->n; k++)
			{
				double		px = scale(&ax, s->x[k], left, plot_right),
							py = scale(a, s->y[k], bottom, top);

				if (s->style == SVG_DOTTED)
					appendStringInfo(&buf, "<rect x=\"%.1f\" y=\"%.1f\" width=\"7\" height=\"7\" fill=\"%s\"/>\n",
									 px - 3.5, py - 3.5, color);
				else
					appendStringInfo(&buf, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", px, py,
									 color);
			}
	}

	/* the legend, under the x axis's label */
	row_x = 0;
	k = 0;
	for (i = 0; i < c->num_series; i++)
	{
		const SvgSeries *s = &c->series[i];
		double		y = bottom + 56 + 18 * k;

		if (row_x > 0 && row_x + legend_width(s) > c->width - 40)
		{
			k++;
			row_x = 0;
			y += 18;
		}
		appendStringInfo(&buf, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>\n",
						 20 + row_x, y - 4, 44 + row_x, y - 4, palette[s->color % lengthof(palette)], dash_of(s->style));
		text_at(&buf, 50 + row_x, y, "start", 12, 0, NULL, s->label, 0);
		row_x += legend_width(s);
	}
	appendStringInfoString(&buf, "</svg>\n");
	return buf.data;
}

/* The shade of weight w: white to dark blue, each channel falling with w. */
static void
append_shade(StringInfo buf, float w)
{
	double		t = isnan(w) ? 0 : w < 0 ? 0 : w > 1 ? 1 : w;

	appendStringInfo(buf, "#%02x%02x%02x", (int) lround(255 - t * (255 - 8)), (int) lround(255 - t * (255 - 48)),
					 (int) lround(255 - t * (255 - 107)));
}

char *
svg_heatmap(const SvgHeatmap *m)
{
	StringInfoData buf;
	int			grid_cols = (int) ceil(sqrt((double) m->panels));
	int			grid_rows = (m->panels + grid_cols - 1) / grid_cols;
	int			longest = Max(m->rows, m->cols);
	double		cell = Max(6, Min(m->panels > 1 ? 18 : 28, floor((m->panels > 1 ? 300.0 : 560.0) / longest)));
	double		font = Max(6, Min(12, cell - 2));
	double		row_labels = 0,
				col_labels = 0,
				panel_w,
				panel_h,
				title_h = m->panel_titles != NULL ? 18 : 0;
	double		x0 = 40,
				y0 = 64,
				grid_w;
	int			width,
				height,
				scale_x,
				p,
				i,
				j;

	for (i = 0; i < m->rows; i++)
		row_labels = Max(row_labels, text_width(m->row_labels[i], LABEL_CHARS, font));
	for (j = 0; j < m->cols; j++)
		col_labels = Max(col_labels, text_width(m->col_labels[j], LABEL_CHARS, font));
	panel_w = row_labels + 6 + m->cols * cell;
	panel_h = title_h + col_labels + 6 + m->rows * cell;
	grid_w = grid_cols * (panel_w + 24);
	width = (int) ceil(x0 + grid_w + 80);
	height = (int) ceil(y0 + grid_rows * (panel_h + 24) + 10);
	/* a title wider than the grid: the grid (and its captions) centred under it */
	if (text_width(m->title, 0, 16) + 40 > width)
	{
		x0 += (text_width(m->title, 0, 16) + 40 - width) / 2;
		width = (int) ceil(text_width(m->title, 0, 16) + 40);
	}
	scale_x = (int) (x0 + grid_w + 16);

	initStringInfo(&buf);
	document_begin(&buf, width, height, m->title);
	text_at(&buf, x0 + grid_w / 2, 48, "middle", 13, 0, NULL, m->col_axis, 0);
	text_at(&buf, x0 - 20, y0 + (height - y0) / 2, "middle", 13, -90, NULL, m->row_axis, 0);
	for (p = 0; p < m->panels; p++)
	{
		double		px = x0 + (p % grid_cols) * (panel_w + 24);
		double		py = y0 + (p / grid_cols) * (panel_h + 24);
		double		cx = px + row_labels + 6;
		double		cy = py + title_h + col_labels + 6;

		if (m->panel_titles != NULL)
			text_at(&buf, cx + m->cols * cell / 2, py + 13, "middle", 13, 0, "font-weight=\"bold\"",
					m->panel_titles[p], 0);
		for (j = 0; j < m->cols; j++)
			text_at(&buf, cx + (j + 0.5) * cell + font * 0.35, cy - 4, "start", font, -90, NULL, m->col_labels[j],
					LABEL_CHARS);
		for (i = 0; i < m->rows; i++)
			text_at(&buf, cx - 4, cy + (i + 0.5) * cell + font * 0.35, "end", font, 0, NULL, m->row_labels[i],
					LABEL_CHARS);
		appendStringInfo(&buf, "<g class=\"panel\" data-panel=\"%d\" shape-rendering=\"crispEdges\">\n", p);
		for (i = 0; i < m->rows; i++)
		{
			CHECK_FOR_INTERRUPTS();
			for (j = 0; j < m->cols; j++)
			{
				float		w = m->weights[((size_t) p * m->rows + i) * m->cols + j];

				appendStringInfo(&buf, "<rect class=\"cell\" data-row=\"%d\" data-col=\"%d\" x=\"%.1f\" y=\"%.1f\" "
								 "width=\"%.1f\" height=\"%.1f\" fill=\"", i, j, cx + j * cell, cy + i * cell, cell,
								 cell);
				append_shade(&buf, w);
				appendStringInfoString(&buf, "\"><title>");
				append_text_cut(&buf, m->row_labels[i], LABEL_CHARS);
				appendStringInfoString(&buf, " &#x2192; ");
				append_text_cut(&buf, m->col_labels[j], LABEL_CHARS);
				appendStringInfo(&buf, ": %.4f</title></rect>\n", (double) w);
			}
		}
		appendStringInfo(&buf, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
						 "stroke=\"#999999\"/>\n</g>\n", cx, cy, m->cols * cell, m->rows * cell);
	}
	/* the colour scale, right of the grid */
	appendStringInfoString(&buf, "<g shape-rendering=\"crispEdges\">\n");
	for (i = 0; i < 20; i++)
	{
		appendStringInfo(&buf, "<rect x=\"%d\" y=\"%.1f\" width=\"14\" height=\"8\" fill=\"", scale_x,
						 y0 + 152 - 8 * (i + 1));
		append_shade(&buf, (i + 0.5f) / 20);
		appendStringInfoString(&buf, "\"/>\n");
	}
	appendStringInfo(&buf, "<rect x=\"%d\" y=\"%.1f\" width=\"14\" height=\"160\" fill=\"none\" stroke=\"#999999\"/>\n</g>\n",
					 scale_x, y0 - 8);
	text_at(&buf, scale_x + 18, y0 + 156, "start", 11, 0, NULL, "0", 0);
	text_at(&buf, scale_x + 18, y0 + 76, "start", 11, 0, NULL, "0.5", 0);
	text_at(&buf, scale_x + 18, y0 - 4, "start", 11, 0, NULL, "1", 0);
	appendStringInfoString(&buf, "</svg>\n");
	return buf.data;
}
