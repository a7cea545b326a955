/*
 * compat.h - the differences between the PostgreSQL majors the extension
 * builds on (15, 16, 17, 18), each with the change it follows. Every other
 * file of the glue is written against one API: PostgreSQL 18's names.
 */
#ifndef ATTENTION_COMPAT_H
#define ATTENTION_COMPAT_H

#include "postgres.h"

/*
 * 16 replaced the per-class ACL checks (pg_proc_aclcheck, ...) by
 * object_aclcheck(classid, ...), which 15 does not have.
 */
#if PG_VERSION_NUM < 160000
#include "catalog/pg_proc.h"
#include "utils/acl.h"

static inline AclResult
object_aclcheck(Oid classid, Oid objectid, Oid roleid, AclMode mode)
{
	Assert(classid == ProcedureRelationId); /* the only class the extension checks */
	return pg_proc_aclcheck(objectid, roleid, mode);
}
#endif

/*
 * 18 moved ExplainProperty*() and friends from commands/explain.h to
 * commands/explain_format.h.
 */
#if PG_VERSION_NUM >= 180000
#include "commands/explain_format.h"
#endif

/*
 * 18 removed pg_attribute_noreturn() (an attribute after the declarator) for
 * pg_noreturn (C11's _Noreturn, before the declaration).
 */
#ifndef pg_noreturn
#define pg_noreturn pg_attribute_noreturn()
#endif

/* 18's pg_b64_encode() reads uint8 bytes where earlier majors read char. */
#if PG_VERSION_NUM >= 180000
typedef uint8 pg_b64_byte;
#else
typedef char pg_b64_byte;
#endif

#endif							/* ATTENTION_COMPAT_H */
