/*
 * rights.h - who may do what, where row-level security cannot say it
 * (rights.c; docs/security.md): whether a role may use a corpus or a
 * vocabulary (its owner role's members, and the roles granted USAGE),
 * whether a role may run a training job, and reading as the owner of the
 * extension's tables (translation's load of deployed weights, the drops that
 * remove other roles' dependent rows).
 */
#ifndef ATTENTION_RIGHTS_H
#define ATTENTION_RIGHTS_H

#include "postgres.h"

/* What as_table_owner() changed, for end_as_table_owner() to put back. */
typedef struct AsTableOwner
{
	Oid			user;
	int			sec_context;
	int			guc_level;
} AsTableOwner;

/*
 * Runs what follows as the owner of schema attention's tables (the role that
 * created the extension), as PostgreSQL runs index expressions as a table's
 * owner: a security-restricted operation with search_path pinned to
 * pg_catalog, pg_temp, so nothing of the caller's (its search_path, its
 * functions or operators) runs with the owner's rights. end_as_table_owner
 * restores the caller; an ERROR in between restores it too (transaction abort).
 * The queries in between must name their tables by schema.
 */
void		as_table_owner(AsTableOwner *saved);
void		end_as_table_owner(const AsTableOwner *saved);

/*
 * Whether role `role` may use corpus (`kind` "corpus") or vocabulary
 * ("vocabulary") `id`: a superuser, a member of its owner role or of a role
 * in its usage_roles, or any role with public_usage. Reads schemas of every
 * version: before 0.3.0 rows have no owner (any role may), before 0.4.0 no
 * grants (corpora their owners', vocabularies every role's, 0.4.0's defaults).
 * Sets *name to the object's name and *owner to its owner role's name
 * ("(none)" without one, or once dropped). Inside SPI; ERROR when the row
 * does not exist.
 */
bool		role_may_use(Oid role, const char *kind, int32 id, char **name, char **owner);

/*
 * ERROR (42501) unless the current role may use the corpus or vocabulary
 * (`kind` as above) named `name`, for `action` (e.g. "train on"); returns its
 * id. ERROR (42704) when none has that name. Inside SPI.
 */
int32		require_usable(const char *kind, const char *name, const char *action);

/*
 * Id of corpus (`kind` "corpus") or vocabulary ("vocabulary") `name` when the
 * current role is a member of its owner role; ERROR (42501) naming the object
 * and `action` (e.g. "drop") otherwise, or (42704) when none has that name.
 * Schemas before 0.3.0 have no owners: any role with the table grants may.
 * Inside SPI.
 */
int32		require_owner(const char *kind, const char *name, const char *action);

/*
 * NULL when role `role` may run training job `job_id` as its worker: the role
 * exists and may log in, is a member of the model's owner role other than
 * through being a superuser (a job runs as its submitter; a superuser's
 * membership of every role would let a row naming one run anyone's job), may
 * use the job's corpus and read attention.corpus_pairs. Otherwise what is
 * missing, as a sentence naming it (palloc'd). Reads the job as the caller
 * (the launcher, the worker or resume_training), with search_path pinned.
 * Inside SPI; ERROR when the job does not exist.
 */
char	   *job_entitlement(int64 job_id, Oid role);

#endif
