/*
 * remote.c - queries on this server (SPI) or the coordinator's (libpq) that
 * return rows alike (remote.h). libpq is driven asynchronously and every
 * wait is on this process's latch and the socket together, so a cancel,
 * SIGTERM or the postmaster's death ends it, as PostgreSQL 16's
 * libpq-be-fe-helpers.h does (15 has no such helpers).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/transam.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "libpq-fe.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/wait_event.h"

#include "remote.h"
#include "wait_events.h"

/* connect_timeout when the connection string sets none (seconds) */
#define CONNECT_SECONDS "10"
/* the longest silence of the other server while a query runs (seconds) */
#define ANSWER_SECONDS 60

struct Remote
{
	PGconn	   *conn;
};

void
remote_check_conninfo(const char *conninfo)
{
	char	   *message = NULL;
	PQconninfoOption *options = PQconninfoParse(conninfo, &message),
			   *o;
	bool		password = false;

	if (options == NULL)
	{
		char	   *why = message != NULL ? pstrdup(message) : pstrdup("out of memory");

		PQfreemem(message);
		ereport(ERROR, (errcode(ERRCODE_SYNTAX_ERROR),
						errmsg("invalid connection string for the coordinator: %s", why),
						errhint("Give libpq's keywords, e.g. 'host=coordinator port=5432 dbname=mt user=trainer'.")));
	}
	for (o = options; o->keyword != NULL; o++)
		if ((strcmp(o->keyword, "password") == 0 || strcmp(o->keyword, "sslpassword") == 0) && o->val != NULL &&
			o->val[0] != '\0')
			password = true;
	PQconninfoFree(options);
	if (password)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PASSWORD),
						errmsg("the connection string for the coordinator holds a password"),
						errdetail("A connection string is shown in pg_stat_activity and may be logged."),
						errhint("Put the password in the .pgpass file (or a service file) of the operating-system user "
								"this server runs as, and leave password= out.")));
}

/* Waits for `events` on r's socket or the latch, at most `ms` (-1: no limit); false on timeout. */
static bool
wait_socket(PGconn *conn, int events, long ms)
{
	int			rc = WaitLatchOrSocket(MyLatch, WL_LATCH_SET | WL_EXIT_ON_PM_DEATH | events | (ms >= 0 ? WL_TIMEOUT : 0),
									   PQsocket(conn), ms,
									   attention_wait_event(ATTENTION_WAIT_COORDINATOR));

	if (rc & WL_LATCH_SET)
	{
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	return rc != WL_TIMEOUT;
}

/* libpq's message without its final newline, in the current memory context. */
static char *
conn_message(PGconn *conn)
{
	char	   *m = pstrdup(PQerrorMessage(conn));
	size_t		n = strlen(m);

	while (n > 0 && (m[n - 1] == '\n' || m[n - 1] == ' '))
		m[--n] = '\0';
	return m;
}

/* Polls a connection PQconnectStartParams began until it is made or fails, each wait at most limit s (0: none). */
static void
connect_poll(PGconn *conn, long limit)
{
	PostgresPollingStatusType status = PGRES_POLLING_WRITING;

	/* libpq applies connect_timeout only in its blocking calls: PQconnectPoll's caller times each wait */
	while (PQstatus(conn) != CONNECTION_BAD && status != PGRES_POLLING_OK && status != PGRES_POLLING_FAILED)
	{
		if ((status == PGRES_POLLING_READING || status == PGRES_POLLING_WRITING) &&
			!wait_socket(conn, status == PGRES_POLLING_READING ? WL_SOCKET_READABLE : WL_SOCKET_WRITEABLE,
						 limit > 0 ? limit * 1000 : -1))
			ereport(ERROR, (errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
							errmsg("could not connect to the coordinator at %s port %s: no answer within %ld s",
								   PQhost(conn), PQport(conn), limit),
							errhint("Check the host and port in the connection string, and that the coordinator's "
									"server listens there (listen_addresses) and is reachable.")));
		status = PQconnectPoll(conn);
	}
	if (PQstatus(conn) != CONNECTION_OK)
		ereport(ERROR, (errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
						errmsg("could not connect to the coordinator: %s", conn_message(conn)),
						errhint("Check the connection string, the coordinator's pg_hba.conf, and the .pgpass file of "
								"the operating-system user this server runs as.")));
	/* as dblink: a role that is not a superuser may not borrow this server's own trust or peer login */
	if (!superuser() && !PQconnectionUsedPassword(conn))
		ereport(ERROR, (errcode(ERRCODE_S_R_E_PROHIBITED_SQL_STATEMENT_ATTEMPTED),
						errmsg("the coordinator's server did not ask for a password"),
						errdetail("A role that is not a superuser may connect only with a password (from this server's "
								  ".pgpass or service file)."),
						errhint("Make the coordinator's pg_hba.conf ask this role's connections for a password.")));
}

Remote *
remote_connect(const char *conninfo, const char *name)
{
	PQconninfoOption *options,
			   *o;
	const char **keywords;
	const char **values;
	int			n = 0;
	volatile long limit = atol(CONNECT_SECONDS);
	bool		timeout_set = false;
	char	   *settings = psprintf("-c search_path=pg_catalog -c bytea_output=hex -c DateStyle=ISO "
									"-c extra_float_digits=3");
	PGconn	   *volatile conn;
	Remote	   *r;

	remote_check_conninfo(conninfo);
	options = PQconninfoParse(conninfo, NULL);
	for (o = options; o->keyword != NULL; o++)
		n++;
	keywords = palloc0((n + 4) * sizeof(char *));
	values = palloc0((n + 4) * sizeof(char *));
	n = 0;
	for (o = options; o->keyword != NULL; o++)
		if (o->val != NULL && o->val[0] != '\0')
		{
			if (strcmp(o->keyword, "connect_timeout") == 0)
				timeout_set = true, limit = atol(o->val);
			if (strcmp(o->keyword, "options") == 0)
				settings = psprintf("%s %s", o->val, settings);
			else if (strcmp(o->keyword, "client_encoding") != 0)
				keywords[n] = o->keyword, values[n++] = o->val;
		}
	/* text in this database's encoding, and the session settings the text results are read under */
	keywords[n] = "client_encoding", values[n++] = GetDatabaseEncodingName();
	keywords[n] = "options", values[n++] = settings;
	keywords[n] = "fallback_application_name", values[n++] = name;
	if (!timeout_set)
		keywords[n] = "connect_timeout", values[n++] = CONNECT_SECONDS;
	conn = PQconnectStartParams(keywords, values, false);
	PQconninfoFree(options);
	if (conn == NULL)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory connecting to the coordinator")));
	PG_TRY();
	{
		connect_poll(conn, limit);
	}
	PG_CATCH();
	{
		PQfinish(conn);
		PG_RE_THROW();
	}
	PG_END_TRY();
	r = palloc(sizeof(Remote));
	r->conn = conn;
	return r;
}

void
remote_close(Remote *r)
{
	if (r != NULL)
		PQfinish(r->conn);
}

/* An ERROR for a failed statement on r's server: its SQLSTATE (never class XX) and message. */
static void
remote_error(PGconn *conn, PGresult *res, const char *sql)
{
	const char *state = res != NULL ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	const char *primary = res != NULL ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	char	   *message = pstrdup(primary != NULL ? primary : "");
	int			code = ERRCODE_CONNECTION_FAILURE;

	if (primary == NULL)
		message = conn_message(conn);
	if (state != NULL && strlen(state) == 5 && strncmp(state, "XX", 2) != 0)
		code = MAKE_SQLSTATE(state[0], state[1], state[2], state[3], state[4]);
	PQclear(res);
	ereport(ERROR, (errcode(code), errmsg("the coordinator's server: %s", message),
					errcontext("statement sent to the coordinator: %s", sql)));
}

/* ERROR: the other server sent nothing for ANSWER_SECONDS while `sql` ran. */
static void
silent(const char *sql)
{
	ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE),
					errmsg("the coordinator's server sent nothing for %d s", ANSWER_SECONDS),
					errcontext("statement sent to the coordinator: %s", sql)));
}

/* The next result of the statement in flight (NULL: none left), waiting on the socket and the latch. */
static PGresult *
next_result(PGconn *conn, const char *sql)
{
	while (PQisBusy(conn))
	{
		if (!wait_socket(conn, WL_SOCKET_READABLE, ANSWER_SECONDS * 1000L))
			silent(sql);
		if (!PQconsumeInput(conn))
			remote_error(conn, NULL, sql);
	}
	return PQgetResult(conn);
}

/*
 * Makes r ready for a statement: one an ERROR left in flight (a cancel or
 * timeout in the waits above) is cancelled on the other server and its
 * results drained, so the session stays usable.
 */
static void
settle(Remote *r)
{
	PGresult   *res;
	PGcancel   *cancel;
	char		why[256];

	if (PQtransactionStatus(r->conn) != PQTRANS_ACTIVE)
		return;
	if ((cancel = PQgetCancel(r->conn)) != NULL)
	{
		(void) PQcancel(cancel, why, sizeof(why));	/* if it fails, the drain below waits the statement out */
		PQfreeCancel(cancel);
	}
	while ((res = next_result(r->conn, "(the cancelled statement)")) != NULL)
		PQclear(res);
}

/* The rows of a successful libpq result as tuples of this server (see Rows). */
static void
result_rows(PGresult *res, Rows *rows)
{
	int			nf = PQnfields(res),
				i;
	uint64		r;
	AttInMetadata *meta;
	char	  **cells = palloc0(Max(nf, 1) * sizeof(char *));

	rows->desc = CreateTemplateTupleDesc(nf);
	for (i = 0; i < nf; i++)
	{
		if (PQftype(res, i) >= FirstNormalObjectId)
			ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
							errmsg("column \"%s\" of the coordinator's answer has a type of its own database (OID %u)",
								   PQfname(res, i), PQftype(res, i))));
		TupleDescInitEntry(rows->desc, i + 1, PQfname(res, i), PQftype(res, i), PQfmod(res, i), 0);
	}
	meta = TupleDescGetAttInMetadata(rows->desc);
	rows->n = PQntuples(res);
	rows->vals = palloc_extended(Max(rows->n, 1) * sizeof(HeapTuple), MCXT_ALLOC_HUGE);
	for (r = 0; r < rows->n; r++)
	{
		CHECK_FOR_INTERRUPTS();
		for (i = 0; i < nf; i++)
			cells[i] = PQgetisnull(res, r, i) ? NULL : PQgetvalue(res, r, i);
		rows->vals[r] = BuildTupleFromCStrings(meta, cells);
	}
	pfree(cells);
}

void
rows_query(Remote *r, Rows *rows, const char *sql, int nargs, const Oid *types, const Datum *values,
		   const char *nulls, bool read_only, long count)
{
	const char **params;
	PGresult   *res,
			   *volatile last = NULL;
	int			i,
				flushed;

	if (r == NULL)
	{
		int			rc = SPI_execute_with_args(sql, nargs, (Oid *) types, (Datum *) values, nulls, read_only, count);

		if (rc < 0)
			elog(ERROR, "SPI_execute_with_args failed (%s): %s", SPI_result_code_string(rc), sql);
		rows->desc = SPI_tuptable != NULL ? SPI_tuptable->tupdesc : NULL;
		rows->vals = SPI_tuptable != NULL ? SPI_tuptable->vals : NULL;
		rows->n = SPI_processed;
		return;
	}
	(void) read_only, (void) count;	/* SPI's: the statements carry their own LIMIT */
	settle(r);
	params = palloc0(Max(nargs, 1) * sizeof(char *));
	for (i = 0; i < nargs; i++)
		if (nulls == NULL || nulls[i] != 'n')
		{
			Oid			out;
			bool		varlena;

			getTypeOutputInfo(types[i], &out, &varlena);
			params[i] = OidOutputFunctionCall(out, values[i]);
		}
	if (!PQsendQueryParams(r->conn, sql, nargs, types, params, NULL, NULL, 0))
		remote_error(r->conn, NULL, sql);
	while ((flushed = PQflush(r->conn)) == 1)
		if (!wait_socket(r->conn, WL_SOCKET_WRITEABLE | WL_SOCKET_READABLE, ANSWER_SECONDS * 1000L))
			silent(sql);
	if (flushed < 0)
		remote_error(r->conn, NULL, sql);
	while ((res = next_result(r->conn, sql)) != NULL)
	{
		PQclear(last);
		last = res;
	}
	if (last == NULL || (PQresultStatus(last) != PGRES_TUPLES_OK && PQresultStatus(last) != PGRES_COMMAND_OK))
		remote_error(r->conn, last, sql);
	PG_TRY();
	{
		result_rows(last, rows);
	}
	PG_FINALLY();
	{
		PQclear(last);
	}
	PG_END_TRY();
}

void
rows_require(const Rows *rows, int natts, const Oid *types, const char *what)
{
	uint64		r;
	int			i;

	if (rows->desc->natts != natts)
		ereport(ERROR, (errcode(ERRCODE_PROTOCOL_VIOLATION),
						errmsg("%s: the answer has %d columns, not %d", what, rows->desc->natts, natts)));
	for (i = 0; i < natts; i++)
		if (TupleDescAttr(rows->desc, i)->atttypid != types[i])
			ereport(ERROR, (errcode(ERRCODE_PROTOCOL_VIOLATION),
							errmsg("%s: column %d of the answer has type %s, not %s", what, i + 1,
								   format_type_be(TupleDescAttr(rows->desc, i)->atttypid), format_type_be(types[i]))));
	for (r = 0; r < rows->n; r++)
		for (i = 0; i < natts; i++)
			if (heap_attisnull(rows->vals[r], i + 1, rows->desc))
				ereport(ERROR, (errcode(ERRCODE_PROTOCOL_VIOLATION),
								errmsg("%s: column %d of row %llu of the answer is NULL", what, i + 1,
									   (unsigned long long) r + 1)));
}
