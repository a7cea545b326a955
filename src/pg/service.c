/*
 * service.c - the SQL functions of the translation services and the CPU
 * budget: start_service, stop_service, service_status (the view
 * attention.services) over the registry of service_registry.c, and
 * cpu_budget_status (the view attention.cpu_budget).
 */
#include "postgres.h"

#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/wait_event.h"

#include "catalog.h"
#include "cpu_budget.h"
#include "service_registry.h"
#include "wait_events.h"

PG_FUNCTION_INFO_V1(attention_start_service);
PG_FUNCTION_INFO_V1(attention_stop_service);
PG_FUNCTION_INFO_V1(attention_service_status);
PG_FUNCTION_INFO_V1(attention_cpu_budget_status);

/* Model name and id of the model named by argument 0, which the caller must own. */
static int32
owned_model(FunctionCallInfo fcinfo, const char *action, char **name)
{
	int32		model_id;

	*name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	SPI_connect();
	model_id = require_model_owner(*name, action);
	SPI_finish();
	return model_id;
}

/* start_service(model text, device text) returns integer: the service's pid. */
Datum
attention_start_service(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *device = text_to_cstring(PG_GETARG_TEXT_PP(1));
	int32		model_id;
	uint64		generation;
	int			pid;

	service_require_registry();
	if (strcmp(device, "cpu") != 0 && strcmp(device, "cuda") != 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("device \"%s\" is not supported", device),
						errhint("Use 'cpu' or 'cuda'.")));
	model_id = owned_model(fcinfo, "start a translation service for", &name);
	service_start(model_id, name, device, &generation, &pid);
	PG_RETURN_INT32(pid);
}

/* stop_service(model text) returns boolean: false when none ran. */
Datum
attention_stop_service(PG_FUNCTION_ARGS)
{
	char	   *name;
	int32		model_id;
	uint64		generation,
				g;
	ServiceState state;
	ServiceSlot *s;
	PGPROC	   *proc = NULL;

	service_require_registry();
	model_id = owned_model(fcinfo, "stop the translation service of", &name);
	s = service_find(model_id, &generation, &state);
	if (s == NULL)
		PG_RETURN_BOOL(false);
	/* it answers what it has, then exits (one still starting is stopped once it runs) */
	for (;;)
	{
		SpinLockAcquire(&s->mutex);
		g = s->generation;
		proc = NULL;
		if (g == generation && s->state == SERVICE_RUNNING)
		{
			s->state = SERVICE_STOPPING;
			proc = s->proc;
		}
		SpinLockRelease(&s->mutex);
		if (g != generation)
			break;
		if (proc != NULL)
			SetLatch(&proc->procLatch);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 10,
						 attention_wait_event(ATTENTION_WAIT_SERVICE_STOP));
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	PG_RETURN_BOOL(true);
}

/*
 * service_status() returns table (database, model, checkpoint, device,
 * pid, state, queue_depth, requests, sentences, tokens, batches,
 * automatic): every service of the cluster (the view attention.services).
 */
Datum
attention_service_status(PG_FUNCTION_ARGS)
{
	static const char *const states[] = {"free", "starting", "running", "stopping"};
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	if (service_slots == NULL)
		return (Datum) 0;
	for (i = 0; i < SERVICE_SLOTS; i++)
	{
		ServiceSlot *s = &service_slots[i];
		ServiceSlot copy;
		Datum		values[12];
		bool		nulls[12] = {false};
		char	   *db;

		SpinLockAcquire(&s->mutex);
		memcpy(&copy, s, offsetof(ServiceSlot, queue));
		copy.in_progress = s->in_progress;
		copy.requests = s->requests;
		copy.sentences = s->sentences;
		copy.tokens = s->tokens;
		copy.batches = s->batches;
		SpinLockRelease(&s->mutex);
		if (copy.state == SERVICE_FREE)
			continue;
		db = get_database_name(copy.database);
		values[0] = db != NULL ? CStringGetTextDatum(db) : (Datum) 0;
		nulls[0] = db == NULL;
		values[1] = CStringGetTextDatum(copy.model);
		values[2] = Int64GetDatum(copy.checkpoint_id);
		nulls[2] = copy.checkpoint_id == 0;
		values[3] = CStringGetTextDatum(copy.device);
		values[4] = Int32GetDatum(copy.pid);
		nulls[4] = copy.pid == 0;
		values[5] = CStringGetTextDatum(states[copy.state]);
		values[6] = Int32GetDatum((int32) (copy.tail - copy.head) + copy.in_progress);
		values[7] = Int64GetDatum(copy.requests);
		values[8] = Int64GetDatum(copy.sentences);
		values[9] = Int64GetDatum(copy.tokens);
		values[10] = Int64GetDatum(copy.batches);
		values[11] = BoolGetDatum(copy.automatic);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * cpu_budget_status() returns table (max_threads, server_cores,
 * threads_in_use, engine_calls, calls_given_fewer, shared): the
 * server-wide CPU budget (the view attention.cpu_budget).
 */
Datum
attention_cpu_budget_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	CpuBudgetStatus b;
	Datum		values[6];
	bool		nulls[6] = {false};

	InitMaterializedSRF(fcinfo, 0);
	cpu_budget_status(&b);
	values[0] = Int32GetDatum(b.max_threads);
	values[1] = Int32GetDatum(b.server_cores);
	values[2] = Int32GetDatum(b.threads_in_use);
	values[3] = Int64GetDatum(b.engine_calls);
	values[4] = Int64GetDatum(b.calls_given_fewer);
	values[5] = BoolGetDatum(b.shared);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}
