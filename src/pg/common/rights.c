/*
 * rights.c - who may do what, where row-level security cannot say it (a leaf
 * of the SQL glue; rights.h, docs/security.md).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "rights.h"

/* The search_path every query here runs under (PostgreSQL's own for maintenance commands). */
#define SAFE_SEARCH_PATH "pg_catalog, pg_temp"

/* Sets search_path to SAFE_SEARCH_PATH until AtEOXact_GUC(true, level) with the level returned. */
static int
pin_search_path(void)
{
	int			level = NewGUCNestLevel();

	(void) set_config_option("search_path", SAFE_SEARCH_PATH, PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0,
							 false);
	return level;
}

/* The oid of table attention.`name`; ERROR when the schema lacks it. */
static Oid
attention_table(const char *name)
{
	Oid			relid = get_relname_relid(name, get_namespace_oid("attention", false));

	if (!OidIsValid(relid))
		elog(ERROR, "attention.%s does not exist", name);
	return relid;
}

void
as_table_owner(AsTableOwner *saved)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(attention_table("checkpoint_tensors")));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for attention.checkpoint_tensors");
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	GetUserIdAndSecContext(&saved->user, &saved->sec_context);
	SetUserIdAndSecContext(owner, saved->sec_context | SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
	saved->guc_level = pin_search_path();
}

void
end_as_table_owner(const AsTableOwner *saved)
{
	AtEOXact_GUC(true, saved->guc_level);
	SetUserIdAndSecContext(saved->user, saved->sec_context);
}

/* Whether `role` is a member of a role in `roles` (oid[]; NULL: none). */
static bool
member_of_any(Oid role, Datum roles, bool isnull)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n,
				i;

	if (isnull)
		return false;
	deconstruct_array(DatumGetArrayTypeP(roles), OIDOID, sizeof(Oid), true, TYPALIGN_INT, &elems, &nulls, &n);
	for (i = 0; i < n; i++)
		if (!nulls[i] && is_member_of_role(role, DatumGetObjectId(elems[i])))
			return true;
	return false;
}

/* ERROR: no corpus or vocabulary has that name. */
static void
not_found(const char *kind, const char *name)
{
	bool		corpus = strcmp(kind, "corpus") == 0;

	ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT), errmsg("%s \"%s\" does not exist", kind, name),
					corpus ? errhint("Create it with attention.create_corpus(name, source_lang, target_lang).") : 0));
}

/* The id column of the corpus or vocabulary table. */
static const char *
id_column(const char *kind)
{
	return strcmp(kind, "corpus") == 0 ? "corpus_id" : "vocabulary_id";
}

bool
role_may_use(Oid role, const char *kind, int32 id, char **name, char **owner)
{
	bool		corpus = strcmp(kind, "corpus") == 0;
	const char *table = corpus ? "corpora" : "vocabularies";
	Oid			relid = attention_table(table);
	bool		has_owner = get_attnum(relid, "owner") != InvalidAttrNumber,
				has_grants = get_attnum(relid, "usage_roles") != InvalidAttrNumber,
				isnull,
				public_null,
				roles_null;
	int			level = pin_search_path();
	Oid			owner_id;
	Datum		public_usage,
				roles;

	if (SPI_execute_with_args(psprintf("SELECT t.name, %s, %s FROM attention.%s t WHERE t.%s = $1",
									   has_owner ? "t.owner::oid" : "NULL::oid",
									   has_grants ? "t.public_usage, t.usage_roles::oid[]" : "NULL::boolean, NULL::oid[]",
									   table, id_column(kind)),
							  1, (Oid[]) {INT4OID}, (Datum[]) {Int32GetDatum(id)}, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read attention.%s", table);
	AtEOXact_GUC(true, level);
	if (SPI_processed != 1)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT), errmsg("%s %d does not exist", kind, id)));
	*name = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	owner_id = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	public_usage = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &public_null);
	roles = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &roles_null);
	*owner = isnull ? NULL : GetUserNameFromId(owner_id, true);
	if (*owner == NULL)
		*owner = pstrdup("(none)");
	if (isnull || superuser_arg(role) || is_member_of_role(role, owner_id))
		return true;
	if (!has_grants)
		return !corpus;			/* before 0.4.0: 0.4.0's defaults */
	return (!public_null && DatumGetBool(public_usage)) || member_of_any(role, roles, roles_null);
}

int32
require_usable(const char *kind, const char *name, const char *action)
{
	bool		corpus = strcmp(kind, "corpus") == 0;
	bool		isnull;
	int32		id;
	char	   *found,
			   *owner;
	int			level = pin_search_path();

	if (SPI_execute_with_args(corpus ? "SELECT corpus_id FROM attention.corpora WHERE name = $1" :
							  "SELECT vocabulary_id FROM attention.vocabularies WHERE name = $1",
							  1, (Oid[]) {TEXTOID}, (Datum[]) {CStringGetTextDatum(name)}, NULL, true, 1) !=
		SPI_OK_SELECT)
		elog(ERROR, "could not look up %s \"%s\"", kind, name);
	AtEOXact_GUC(true, level);
	if (SPI_processed == 0)
		not_found(kind, name);
	id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (!role_may_use(GetUserId(), kind, id, &found, &owner))
		ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
						errmsg("permission denied to %s %s \"%s\"", action, kind, name),
						errhint("Its owner role %s may grant you USAGE: attention.grant_usage('%s', '%s', role).",
								owner, kind, name)));
	return id;
}

int32
require_owner(const char *kind, const char *name, const char *action)
{
	bool		isnull;
	Datum		member;
	int			level = pin_search_path();

	/* the owner through to_jsonb: a schema before 0.3.0 has no such column */
	if (SPI_execute_with_args(psprintf("SELECT t.%s, o, pg_has_role(o::regrole, 'MEMBER') FROM attention.%s t, "
									   "LATERAL (SELECT to_jsonb(t) ->> 'owner') r(o) WHERE t.name = $1",
									   id_column(kind), strcmp(kind, "corpus") == 0 ? "corpora" : "vocabularies"),
							  1, (Oid[]) {TEXTOID}, (Datum[]) {CStringGetTextDatum(name)}, NULL, true, 1) !=
		SPI_OK_SELECT)
		elog(ERROR, "could not read the owner of %s \"%s\"", kind, name);
	AtEOXact_GUC(true, level);
	if (SPI_processed == 0)
		not_found(kind, name);
	member = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull);
	if (!isnull && !DatumGetBool(member))
		ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
						errmsg("permission denied to %s %s \"%s\"", action, kind, name),
						errhint("Only members of its owner role %s may.",
								SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2))));
	return DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

char *
job_entitlement(int64 job_id, Oid role)
{
	HeapTuple	tup;
	char	   *role_name,
			   *model,
			   *model_owner_name,
			   *corpus,
			   *corpus_owner;
	bool		can_login,
				isnull;
	Oid			model_owner;
	int32		corpus_id;
	int			level = pin_search_path();

	if (SPI_execute_with_args("SELECT m.name, m.owner::oid, j.corpus_id FROM attention.jobs j "
							  "JOIN attention.models m ON m.model_id = j.model_id WHERE j.job_id = $1",
							  1, (Oid[]) {INT8OID}, (Datum[]) {Int64GetDatum(job_id)}, NULL, false, 1) !=
		SPI_OK_SELECT)
		elog(ERROR, "could not read training job %lld", (long long) job_id);
	AtEOXact_GUC(true, level);
	if (SPI_processed != 1)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
						errmsg("training job %lld does not exist", (long long) job_id)));
	model = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	model_owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	corpus_id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull));

	tup = SearchSysCache1(AUTHOID, ObjectIdGetDatum(role));
	if (!HeapTupleIsValid(tup))
		return pstrdup("the role that submitted the job no longer exists");
	role_name = pstrdup(NameStr(((Form_pg_authid) GETSTRUCT(tup))->rolname));
	can_login = ((Form_pg_authid) GETSTRUCT(tup))->rolcanlogin;
	ReleaseSysCache(tup);
	if (!can_login)
		return psprintf("role \"%s\" cannot log in, and the job's worker connects as it", role_name);
	if (!is_member_of_role_nosuper(role, model_owner))
	{
		model_owner_name = GetUserNameFromId(model_owner, true);
		return psprintf("role \"%s\" is not a member of role \"%s\", which owns model \"%s\"%s", role_name,
						model_owner_name ? model_owner_name : "(dropped)", model,
						superuser_arg(role) ? " (a superuser trains another role's model as a member of its owner role: "
						"SET ROLE)" : "");
	}
	if (!role_may_use(role, "corpus", corpus_id, &corpus, &corpus_owner))
		return psprintf("role \"%s\" may not use corpus \"%s\" of role %s (attention.grant_usage grants USAGE)",
						role_name, corpus, corpus_owner);
	return NULL;
}
