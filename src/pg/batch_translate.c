/*
 * batch_translate.c - per-row translate() calls run in batches: a planner
 * hook and the "Attention Batch Translate" custom scan.
 *
 * After the standard planner, the hook looks at every plan node that
 * computes a target list. A call of attention.translate(text) or
 * attention.translate(text, model, beam_size, length_penalty,
 * max_length_offset) is served when it is evaluated for every row (at the
 * top of a target entry, or under function and operator calls and
 * casts, never under CASE, COALESCE, AND/OR and the like), when its model
 * and options are the same for every row (no Vars, no executor
 * parameters, no subplans, nothing volatile) and its source is not
 * volatile. The node that computed it (P) is given a new target list: its
 * columns without served calls, and each served call's source. Above it
 * goes the custom scan, whose scan tuple is P's row plus one translation
 * per call, and whose target list is P's old one with each call replaced
 * by its translation (the rest of the expression above a call is
 * evaluated there, the subtrees without calls below P). The custom scan
 * reads attention.batch_rows rows ahead (fewer when a LIMIT directly above
 * wants fewer), translates each call's sources in one engine call, and
 * returns the rows in P's order. Anything else stays a per-row call.
 *
 * The custom scan's child is its lefttree (as a ForeignScan's outer plan),
 * so EXPLAIN shows it and deparses the scan tuple's columns through it.
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/explain.h"
#include "executor/executor.h"
#include "executor/execdesc.h"
#include "miscadmin.h"
#include "nodes/extensible.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "optimizer/planmain.h"
#include "optimizer/planner.h"
#include "parser/parse_func.h"
#include "utils/acl.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "batch_translate.h"
#include "compat.h"
#include "settings.h"
#include "translation.h"

#define NODE_NAME "Attention Batch Translate"

/* ------------------------------------------------------------------------
 * The translate() functions, looked up once per backend and again after a
 * change to pg_proc (CREATE or DROP EXTENSION).
 * ------------------------------------------------------------------------ */

static Oid	translate_one_arg = InvalidOid; /* attention.translate(text) */
static Oid	translate_full = InvalidOid;	/* translate(text, text, int4, float8, int4, text, text) */
static int	translate_full_nargs = 0;	/* 7, or 5 under a 0.2.0 schema (no languages) */
static bool translate_oids_valid = false;
static bool translate_callback_registered = false;

static void
forget_translate_oids(Datum arg, int cacheid, uint32 hashvalue)
{
	translate_oids_valid = false;
}

/* True when the extension's translate() functions exist in this database. */
static bool
lookup_translate_oids(void)
{
	if (!translate_callback_registered)
	{
		CacheRegisterSyscacheCallback(PROCOID, forget_translate_oids, (Datum) 0);
		translate_callback_registered = true;
	}
	if (!translate_oids_valid)
	{
		List	   *name = list_make2(makeString("attention"), makeString("translate"));
		Oid			seven[7] = {TEXTOID, TEXTOID, INT4OID, FLOAT8OID, INT4OID, TEXTOID, TEXTOID};

		translate_one_arg = InvalidOid;
		translate_full = InvalidOid;
		if (OidIsValid(get_namespace_oid("attention", true)))
		{
			translate_one_arg = LookupFuncName(name, 1, seven, true);
			translate_full_nargs = 7;
			translate_full = LookupFuncName(name, 7, seven, true);
			if (!OidIsValid(translate_full))
			{
				translate_full_nargs = 5;
				translate_full = LookupFuncName(name, 5, seven, true);
			}
		}
		translate_oids_valid = true;
	}
	return OidIsValid(translate_one_arg) || OidIsValid(translate_full);
}

/* ------------------------------------------------------------------------
 * Plan time
 * ------------------------------------------------------------------------ */

/* True for an expression that may differ between rows or calls. */
static bool
row_dependent_walker(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (IsA(node, Var) || IsA(node, Aggref) || IsA(node, WindowFunc) || IsA(node, GroupingFunc) ||
		IsA(node, SubPlan) || IsA(node, AlternativeSubPlan) || IsA(node, SubLink) ||
		IsA(node, PlaceHolderVar))
		return true;
	if (IsA(node, Param) && ((Param *) node)->paramkind != PARAM_EXTERN)
		return true;
	return expression_tree_walker(node, row_dependent_walker, context);
}

/* True for an expression with one value per statement: constants, external parameters, stable calls. */
static bool
per_statement(Node *expr)
{
	return !row_dependent_walker(expr, NULL) && !contain_volatile_functions(expr) &&
		!expression_returns_set(expr);
}

/* True for a translate() call this node can serve. */
static bool
served_call(Node *node)
{
	FuncExpr   *f;
	ListCell   *lc;

	if (node == NULL || !IsA(node, FuncExpr))
		return false;
	f = (FuncExpr *) node;
	if (f->funcretset ||
		!((f->funcid == translate_one_arg && list_length(f->args) == 1) ||
		  (f->funcid == translate_full && list_length(f->args) == translate_full_nargs)))
		return false;
	if (contain_volatile_functions(linitial(f->args)) || expression_returns_set(linitial(f->args)))
		return false;
	for_each_from(lc, f->args, 1)
		if (!per_statement(lfirst(lc)))
			return false;
	return true;
}

/* Expressions whose arguments are all evaluated whenever they are (a served call may sit below them). */
static bool
spine_node(Node *node)
{
	return (IsA(node, FuncExpr) && !((FuncExpr *) node)->funcretset) ||
		(IsA(node, OpExpr) && !((OpExpr *) node)->opretset) ||
		IsA(node, RelabelType) || IsA(node, CoerceViaIO);
}

/* True when expr holds a served call reachable through spine nodes. */
static bool
has_served_call(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (served_call(node))
		return true;
	if (!spine_node(node))
		return false;
	return expression_tree_walker(node, has_served_call, NULL);
}

/* What the rewrite of one plan node collects. */
typedef struct Rewrite
{
	List	   *child_tlist;	/* the node's new target list */
	List	   *calls;			/* served FuncExprs, source replaced by an OUTER_VAR Var */
	List	   *call_vars;		/* INDEX_VAR Vars of the translations, numbered from 1 */
} Rewrite;

/* The child column computing expr (an equal non-volatile one is reused); 1-based. */
static AttrNumber
child_column(Rewrite *rw, Expr *expr, const char *name)
{
	ListCell   *lc;

	if (!contain_volatile_functions((Node *) expr))
		foreach(lc, rw->child_tlist)
	{
		TargetEntry *tle = lfirst(lc);

		if (equal(tle->expr, expr))
			return tle->resno;
	}
	rw->child_tlist = lappend(rw->child_tlist,
							  makeTargetEntry(expr, list_length(rw->child_tlist) + 1,
											  name ? pstrdup(name) : NULL, false));
	return list_length(rw->child_tlist);
}

/*
 * The expression the custom scan evaluates for node: served calls become
 * their translations, subtrees without them columns of the child.
 */
static Node *
rewrite_expr(Node *node, Rewrite *rw, const char *name)
{
	if (served_call(node))
	{
		FuncExpr   *call = copyObject((FuncExpr *) node);
		Expr	   *source = linitial(call->args);
		AttrNumber	col = child_column(rw, source, NULL);
		Var		   *v;

		linitial(call->args) = makeVar(OUTER_VAR, col, exprType((Node *) source), exprTypmod((Node *) source),
									   exprCollation((Node *) source), 0);
		rw->calls = lappend(rw->calls, call);
		v = makeVar(INDEX_VAR, list_length(rw->calls), TEXTOID, -1, call->funccollid, 0);
		rw->call_vars = lappend(rw->call_vars, v);
		return (Node *) v;
	}
	if (has_served_call(node, NULL))
	{
		Node	   *copy = copyObject(node);
		List	  **args;
		ListCell   *lc;

		switch (nodeTag(copy))
		{
			case T_FuncExpr:
				args = &((FuncExpr *) copy)->args;
				break;
			case T_OpExpr:
				args = &((OpExpr *) copy)->args;
				break;
			case T_RelabelType:
				((RelabelType *) copy)->arg = (Expr *) rewrite_expr((Node *) ((RelabelType *) node)->arg, rw, NULL);
				return copy;
			case T_CoerceViaIO:
				((CoerceViaIO *) copy)->arg = (Expr *) rewrite_expr((Node *) ((CoerceViaIO *) node)->arg, rw, NULL);
				return copy;
			default:
				elog(ERROR, "unexpected node type %d under a batched translate() call", (int) nodeTag(copy));
		}
		foreach(lc, *args)
			lfirst(lc) = rewrite_expr(lfirst(lc), rw, NULL);
		return copy;
	}
	return (Node *) makeVar(INDEX_VAR, child_column(rw, (Expr *) node, name), exprType(node), exprTypmod(node),
							exprCollation(node), 0);
}

/* Plan nodes that compute their own target list (projection), so may hold calls. */
static bool
hosts_projection(Plan *plan)
{
	switch (nodeTag(plan))
	{
		case T_SeqScan:
		case T_SampleScan:
		case T_IndexScan:
		case T_IndexOnlyScan:
		case T_BitmapHeapScan:
		case T_TidScan:
		case T_TidRangeScan:
		case T_SubqueryScan:
		case T_FunctionScan:
		case T_ValuesScan:
		case T_TableFuncScan:
		case T_CteScan:
		case T_NamedTuplestoreScan:
		case T_WorkTableScan:
		case T_ForeignScan:
		case T_NestLoop:
		case T_MergeJoin:
		case T_HashJoin:
		case T_Result:
		case T_Agg:
		case T_WindowAgg:
		case T_Group:
		case T_Gather:
			return true;
		default:
			return false;
	}
}

/* A LIMIT directly above (through Result and SubqueryScan): its count and offset, or NULL. */
typedef struct LimitAbove
{
	Node	   *count;
	Node	   *offset;
} LimitAbove;

static CustomScanMethods batch_scan_methods;

/* State of one planner-hook pass. */
typedef struct Pass
{
	int			max_plan_node_id;
	List	   *new_plans;		/* nodes made here, to number */
} Pass;

/*
 * Puts a custom scan above plan when its target list holds served calls
 * (then again above plan, whose new target list may hold calls that were
 * inside a source); returns what replaces plan.
 */
static Plan *
serve(Plan *plan, const LimitAbove *limit, Pass *pass)
{
	Rewrite		rw = {0};
	List	   *tlist = NIL,
			   *scan_tlist = NIL;
	ListCell   *lc;
	CustomScan *cscan;
	int			ncols;
	bool		found = false;

	foreach(lc, plan->targetlist)
		found |= has_served_call((Node *) ((TargetEntry *) lfirst(lc))->expr, NULL);
	if (!found)
		return plan;

	foreach(lc, plan->targetlist)
	{
		TargetEntry *tle = lfirst(lc);
		TargetEntry *copy = flatCopyTargetEntry(tle);

		copy->expr = (Expr *) rewrite_expr((Node *) tle->expr, &rw, tle->resname);
		tlist = lappend(tlist, copy);
	}
	ncols = list_length(rw.child_tlist);
	foreach(lc, rw.call_vars)
		((Var *) lfirst(lc))->varattno += ncols;
	foreach(lc, rw.child_tlist)
	{
		TargetEntry *tle = lfirst(lc);
		Node	   *e = (Node *) tle->expr;

		scan_tlist = lappend(scan_tlist,
							 makeTargetEntry((Expr *) makeVar(OUTER_VAR, tle->resno, exprType(e), exprTypmod(e),
															  exprCollation(e), 0),
											 tle->resno, tle->resname, false));
	}
	foreach(lc, rw.calls)
		scan_tlist = lappend(scan_tlist, makeTargetEntry(lfirst(lc), list_length(scan_tlist) + 1,
														 pstrdup("translate"), false));

	cscan = makeNode(CustomScan);
	cscan->scan.plan.startup_cost = plan->startup_cost;
	cscan->scan.plan.total_cost = plan->total_cost;
	cscan->scan.plan.plan_rows = plan->plan_rows;
	cscan->scan.plan.plan_width = plan->plan_width;
	cscan->scan.plan.parallel_safe = plan->parallel_safe;
	cscan->scan.plan.targetlist = tlist;
	cscan->scan.plan.extParam = bms_copy(plan->extParam);
	cscan->scan.plan.allParam = bms_copy(plan->allParam);
	cscan->scan.scanrelid = 0;
	cscan->custom_scan_tlist = scan_tlist;
	if (limit != NULL)
		cscan->custom_exprs = list_make2(copyObject(limit->count), copyObject(limit->offset));
	cscan->methods = &batch_scan_methods;
	plan->targetlist = rw.child_tlist;
	cscan->scan.plan.lefttree = serve(plan, NULL, pass);
	pass->new_plans = lappend(pass->new_plans, cscan);
	return &cscan->scan.plan;
}

static Plan *walk_plan(Plan *plan, const LimitAbove *limit, bool inner_of_merge, Pass *pass);

static void
walk_list(List *plans, Pass *pass)
{
	ListCell   *lc;

	foreach(lc, plans)
		lfirst(lc) = walk_plan(lfirst(lc), NULL, false, pass);
}

/*
 * Serves the calls in plan's subtree; limit is the LIMIT directly above
 * it, inner_of_merge whether it is a merge join's inner side (which must
 * support mark and restore: left alone). Returns what replaces plan.
 */
static Plan *
walk_plan(Plan *plan, const LimitAbove *limit, bool inner_of_merge, Pass *pass)
{
	LimitAbove	mine;

	if (plan == NULL)
		return NULL;
	pass->max_plan_node_id = Max(pass->max_plan_node_id, plan->plan_node_id);
	switch (nodeTag(plan))
	{
		case T_Limit:
			{
				Limit	   *l = (Limit *) plan;

				mine.count = l->limitCount;
				mine.offset = l->limitOffset;
				if (mine.count != NULL && per_statement(mine.count) &&
					(mine.offset == NULL || per_statement(mine.offset)))
					plan->lefttree = walk_plan(plan->lefttree, &mine, false, pass);
				else
					plan->lefttree = walk_plan(plan->lefttree, NULL, false, pass);
				return plan;
			}
		case T_Result:
			plan->lefttree = walk_plan(plan->lefttree, limit, false, pass);
			break;
		case T_SubqueryScan:
			((SubqueryScan *) plan)->subplan = walk_plan(((SubqueryScan *) plan)->subplan, limit, false, pass);
			break;
		case T_MergeJoin:
			plan->lefttree = walk_plan(plan->lefttree, NULL, false, pass);
			plan->righttree = walk_plan(plan->righttree, NULL, true, pass);
			break;
		case T_Append:
			walk_list(((Append *) plan)->appendplans, pass);
			break;
		case T_MergeAppend:
			walk_list(((MergeAppend *) plan)->mergeplans, pass);
			break;
		case T_BitmapAnd:
			walk_list(((BitmapAnd *) plan)->bitmapplans, pass);
			break;
		case T_BitmapOr:
			walk_list(((BitmapOr *) plan)->bitmapplans, pass);
			break;
		case T_CustomScan:
			walk_list(((CustomScan *) plan)->custom_plans, pass);
			plan->lefttree = walk_plan(plan->lefttree, NULL, false, pass);
			break;
		default:
			plan->lefttree = walk_plan(plan->lefttree, NULL, false, pass);
			plan->righttree = walk_plan(plan->righttree, NULL, false, pass);
			break;
	}
	if (inner_of_merge || !hosts_projection(plan))
		return plan;
	return serve(plan, limit, pass);
}

static planner_hook_type prev_planner_hook = NULL;

/* The planner hook: the standard plan, then the served calls batched. */
static PlannedStmt *
batch_planner(Query *parse, const char *query_string, int cursorOptions, ParamListInfo boundParams)
{
	PlannedStmt *stmt;
	Pass		pass = {0};
	ListCell   *lc;

	if (prev_planner_hook)
		stmt = prev_planner_hook(parse, query_string, cursorOptions, boundParams);
	else
		stmt = standard_planner(parse, query_string, cursorOptions, boundParams);
	if (attention_batch_rows <= 0 || !lookup_translate_oids())
		return stmt;

	stmt->planTree = walk_plan(stmt->planTree, NULL, false, &pass);
	foreach(lc, stmt->subplans)
		lfirst(lc) = walk_plan(lfirst(lc), NULL, false, &pass);
	if (pass.new_plans == NIL)
		return stmt;
	/* a scrollable cursor reads backwards: the custom scan cannot, a Material above can */
	if ((cursorOptions & CURSOR_OPT_SCROLL) && !ExecSupportsBackwardScan(stmt->planTree))
	{
		stmt->planTree = materialize_finished_plan(stmt->planTree);
		pass.new_plans = lappend(pass.new_plans, stmt->planTree);
	}
	foreach(lc, pass.new_plans)
		((Plan *) lfirst(lc))->plan_node_id = ++pass.max_plan_node_id;
	return stmt;
}

/* ------------------------------------------------------------------------
 * Execution
 * ------------------------------------------------------------------------ */

/* One served call. */
typedef struct BatchCall
{
	bool		one_arg;		/* translate(text) */
	AttrNumber	source;			/* the child's column holding the source */
	ExprState  *options[6];		/* model, beam_size, length_penalty, max_length_offset, target_language,
								 * source_language (NULL: a 0.2.0 call without them) */
	text	  **results;		/* [batch_rows]: the translations of the batch */
} BatchCall;

typedef struct BatchState
{
	CustomScanState css;
	int			ncalls;
	BatchCall  *calls;
	int			child_natts;
	int			batch_rows;		/* attention.batch_rows when the node started (0: 1) */
	ExprState  *limit_count;	/* the LIMIT above, or NULL */
	ExprState  *limit_offset;
	int64		wanted;			/* rows that LIMIT reads (count + offset); -1 unknown */
	bool		wanted_known;
	MemoryContext batch_cxt;	/* the rows and translations of the batch */
	TupleTableSlot *row_slot;	/* a row of the batch, deformed */
	MinimalTuple *rows;
	int			nrows;			/* rows in the batch */
	int			next;			/* next row to return */
	bool		child_done;
	int64		returned;		/* rows returned since the start or rescan */
	int64		engine_calls;	/* since the start (EXPLAIN ANALYZE) */
	int64		rows_translated;
} BatchState;

static void
batch_begin(CustomScanState *node, EState *estate, int eflags)
{
	BatchState *bs = (BatchState *) node;
	CustomScan *cscan = (CustomScan *) node->ss.ps.plan;
	Plan	   *child = outerPlan(cscan);
	ListCell   *lc;
	int			i = 0;

	outerPlanState(bs) = ExecInitNode(child, estate, eflags);
	bs->child_natts = list_length(child->targetlist);
	bs->ncalls = list_length(cscan->custom_scan_tlist) - bs->child_natts;
	bs->calls = palloc0(Max(bs->ncalls, 1) * sizeof(BatchCall));
	bs->batch_rows = Max(attention_batch_rows, 1);
	for_each_from(lc, cscan->custom_scan_tlist, bs->child_natts)
	{
		FuncExpr   *f = (FuncExpr *) ((TargetEntry *) lfirst(lc))->expr;
		BatchCall  *call = &bs->calls[i++];
		AclResult	acl = object_aclcheck(ProcedureRelationId, f->funcid, GetUserId(), ACL_EXECUTE);
		int			a;

		/* the caller's right to call translate(), as a per-row call checks it */
		if (acl != ACLCHECK_OK)
			aclcheck_error(acl, OBJECT_FUNCTION, get_func_name(f->funcid));
		InvokeFunctionExecuteHook(f->funcid);
		call->one_arg = list_length(f->args) == 1;
		call->source = castNode(Var, linitial(f->args))->varattno;
		for (a = 1; a < list_length(f->args); a++)
			call->options[a - 1] = ExecInitExpr(list_nth(f->args, a), &node->ss.ps);
		call->results = palloc0(bs->batch_rows * sizeof(text *));
	}
	if (cscan->custom_exprs != NIL)
	{
		bs->limit_count = ExecInitExpr(linitial(cscan->custom_exprs), &node->ss.ps);
		bs->limit_offset = ExecInitExpr(lsecond(cscan->custom_exprs), &node->ss.ps);
	}
	bs->batch_cxt = AllocSetContextCreate(estate->es_query_cxt, "batch translate", ALLOCSET_DEFAULT_SIZES);
	bs->row_slot = ExecInitExtraTupleSlot(estate, ExecGetResultType(outerPlanState(bs)), &TTSOpsMinimalTuple);
	bs->rows = palloc0(bs->batch_rows * sizeof(MinimalTuple));
}

/* Evaluates a per-statement expression (NULL expression: SQL NULL). */
static NullableDatum
evaluate(ExprState *expr, ExprContext *econtext)
{
	NullableDatum d = {(Datum) 0, true};

	if (expr != NULL)
		d.value = ExecEvalExpr(expr, econtext, &d.isnull);
	return d;
}

/* Rows the LIMIT above still wants, at least 1; batch_rows without one. */
static int
rows_to_read(BatchState *bs)
{
	ExprContext *econtext = bs->css.ss.ps.ps_ExprContext;

	if (!bs->wanted_known)
	{
		bs->wanted = -1;
		if (bs->limit_count != NULL)
		{
			NullableDatum count = evaluate(bs->limit_count, econtext);
			NullableDatum offset = evaluate(bs->limit_offset, econtext);

			if (!count.isnull && DatumGetInt64(count.value) >= 0)
				bs->wanted = DatumGetInt64(count.value) +
					(offset.isnull ? 0 : Max(DatumGetInt64(offset.value), 0));
		}
		bs->wanted_known = true;
	}
	if (bs->wanted < 0)
		return bs->batch_rows;
	return (int) Max(Min(bs->wanted - bs->returned, bs->batch_rows), 1);
}

/* Reads the next batch from the child and translates it; false when the child has no more rows. */
static bool
read_batch(BatchState *bs)
{
	PlanState  *child = outerPlanState(bs);
	ExprContext *econtext = bs->css.ss.ps.ps_ExprContext;
	int			want = rows_to_read(bs);
	MemoryContext old;
	text	  **texts;
	int			c,
				i;

	MemoryContextReset(bs->batch_cxt);
	bs->nrows = 0;
	bs->next = 0;
	while (bs->nrows < want && !bs->child_done)
	{
		TupleTableSlot *slot = ExecProcNode(child);

		if (TupIsNull(slot))
			bs->child_done = true;
		else
		{
			old = MemoryContextSwitchTo(bs->batch_cxt);
			bs->rows[bs->nrows++] = ExecCopySlotMinimalTuple(slot);
			MemoryContextSwitchTo(old);
		}
	}
	if (bs->nrows == 0)
		return false;

	old = MemoryContextSwitchTo(bs->batch_cxt);
	texts = palloc(bs->nrows * sizeof(text *));
	for (c = 0; c < bs->ncalls; c++)
	{
		BatchCall  *call = &bs->calls[c];
		NullableDatum options[6];
		int			n = 0;

		for (i = 0; i < bs->nrows; i++)
		{
			bool		isnull;
			Datum		d;

			ExecStoreMinimalTuple(bs->rows[i], bs->row_slot, false);
			d = slot_getattr(bs->row_slot, call->source, &isnull);
			texts[i] = isnull ? NULL : DatumGetTextPP(d);
			n += !isnull;
		}
		ResetExprContext(econtext);
		for (i = 0; i < 6; i++)
			options[i] = call->options[i] != NULL ? evaluate(call->options[i], econtext)
				: (NullableDatum) {(Datum) 0, true};
		bs->engine_calls += translate_rows(call->one_arg, options, texts, bs->nrows, bs->batch_rows,
										   call->results);
		bs->rows_translated += n;
	}
	MemoryContextSwitchTo(old);
	return true;
}

static TupleTableSlot *
batch_exec(CustomScanState *node)
{
	BatchState *bs = (BatchState *) node;
	TupleTableSlot *scan = node->ss.ss_ScanTupleSlot;
	ExprContext *econtext = node->ss.ps.ps_ExprContext;
	int			c;

	CHECK_FOR_INTERRUPTS();
	if (bs->next >= bs->nrows && !read_batch(bs))
		return NULL;

	ExecClearTuple(scan);
	ExecStoreMinimalTuple(bs->rows[bs->next], bs->row_slot, false);
	slot_getallattrs(bs->row_slot);
	memcpy(scan->tts_values, bs->row_slot->tts_values, bs->child_natts * sizeof(Datum));
	memcpy(scan->tts_isnull, bs->row_slot->tts_isnull, bs->child_natts * sizeof(bool));
	for (c = 0; c < bs->ncalls; c++)
	{
		text	   *t = bs->calls[c].results[bs->next];

		scan->tts_values[bs->child_natts + c] = PointerGetDatum(t);
		scan->tts_isnull[bs->child_natts + c] = t == NULL;
	}
	ExecStoreVirtualTuple(scan);
	bs->next++;
	bs->returned++;

	ResetExprContext(econtext);
	econtext->ecxt_scantuple = scan;
	if (node->ss.ps.ps_ProjInfo == NULL)
		return scan;
	return ExecProject(node->ss.ps.ps_ProjInfo);
}

static void
batch_end(CustomScanState *node)
{
	ExecEndNode(outerPlanState(node));
}

static void
batch_rescan(CustomScanState *node)
{
	BatchState *bs = (BatchState *) node;

	bs->nrows = bs->next = 0;
	bs->child_done = false;
	bs->returned = 0;
	bs->wanted_known = false;
	MemoryContextReset(bs->batch_cxt);
	if (outerPlanState(bs)->chgParam == NULL)
		ExecReScan(outerPlanState(bs));
}

static void
batch_explain(CustomScanState *node, List *ancestors, ExplainState *es)
{
	BatchState *bs = (BatchState *) node;

	ExplainPropertyInteger("Batch Rows", NULL, bs->batch_rows, es);
	ExplainPropertyInteger("Calls Batched", NULL, bs->ncalls, es);
	if (es->analyze)
	{
		ExplainPropertyInteger("Engine Calls", NULL, bs->engine_calls, es);
		ExplainPropertyInteger("Rows Translated", NULL, bs->rows_translated, es);
	}
}

static CustomExecMethods batch_exec_methods = {
	.CustomName = NODE_NAME,
	.BeginCustomScan = batch_begin,
	.ExecCustomScan = batch_exec,
	.EndCustomScan = batch_end,
	.ReScanCustomScan = batch_rescan,
	.ExplainCustomScan = batch_explain,
};

static Node *
batch_create_state(CustomScan *cscan)
{
	BatchState *bs = (BatchState *) newNode(sizeof(BatchState), T_CustomScanState);

	bs->css.methods = &batch_exec_methods;
	return (Node *) bs;
}

static CustomScanMethods batch_scan_methods = {
	.CustomName = NODE_NAME,
	.CreateCustomScanState = batch_create_state,
};

void
batch_translate_init(void)
{
	RegisterCustomScanMethods(&batch_scan_methods);
	prev_planner_hook = planner_hook;
	planner_hook = batch_planner;
}
