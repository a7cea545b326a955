/*
 * remote.h - queries that run on this server (SPI) or on another one
 * (libpq), returning rows the same way: how a node of a training job across
 * machines reads the job, vocabulary, corpus and checkpoint from the
 * coordinator's server and writes its row of attention.job_ranks there
 * (remote.c). Waits honour this process's latch and interrupts
 * (PostgreSQL 16's libpq-be-fe-helpers.h does the same; 15 has none).
 */
#ifndef ATTENTION_REMOTE_H
#define ATTENTION_REMOTE_H

#include "postgres.h"

#include "access/htup.h"
#include "access/tupdesc.h"

/* A session with another server (a PGconn); NULL means this server, through SPI. */
typedef struct Remote Remote;

/*
 * Rows of a query: through SPI, SPI_tuptable's (valid until the next SPI
 * call); through libpq, tuples built in the current memory context from the
 * text results with this server's input functions (the column types are
 * built-in ones, whose OIDs every server shares).
 */
typedef struct Rows
{
	TupleDesc	desc;
	HeapTuple  *vals;
	uint64		n;
} Rows;

/*
 * ERROR unless `conninfo` is a libpq connection string (or URI) without a
 * password: 42601 when libpq cannot parse it, 28P01 when it holds
 * password= (passwords come from the server's .pgpass or service file;
 * a connection string is shown in pg_stat_activity and may be logged).
 */
void		remote_check_conninfo(const char *conninfo);

/*
 * Connects to `conninfo` (checked as above) as application_name `name`;
 * ERROR 08001 with libpq's message when the server cannot be reached or
 * refuses (10 s at most unless the string sets connect_timeout).
 */
Remote	   *remote_connect(const char *conninfo, const char *name);

/* Closes the session (NULL: nothing). */
void		remote_close(Remote *r);

/*
 * Runs `sql` with nargs parameters ($1.., of types `types`, NULL where
 * nulls[i] is 'n'; nulls NULL: none) on r's server, or through SPI when r
 * is NULL (inside SPI; read_only and count as SPI_execute_with_args takes
 * them), into *rows. ERROR when the statement fails: on r's server with
 * its SQLSTATE (class XX reported as 08006) and message; through SPI as
 * the caller's elog would.
 */
void		rows_query(Remote *r, Rows *rows, const char *sql, int nargs, const Oid *types, const Datum *values,
					   const char *nulls, bool read_only, long count);

/*
 * ERROR (08P01, naming `what`) unless *rows has exactly `natts` columns of
 * the given types and no NULL: what a caller checks of another server's
 * answer before reading its values in binary (a coordinator that answers
 * otherwise must not crash this server).
 */
void		rows_require(const Rows *rows, int natts, const Oid *types, const char *what);

#endif
