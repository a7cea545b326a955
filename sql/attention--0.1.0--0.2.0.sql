-- attention 0.1.0 -> 0.2.0: training on several GPUs, the rank hand-over
-- between machines, translation services, Hugging Face MarianMT import and
-- export. Users' corpora, vocabularies, models, jobs and
-- checkpoints are kept as they are.
\echo Use "ALTER EXTENSION attention UPDATE TO '0.2.0'" to load this file. \quit

-----------------------------------------------------------------------------
-- Ranks of a training job across machines (bgworker/ranks.c)
-----------------------------------------------------------------------------

CREATE TABLE job_ranks (
    job_id      bigint NOT NULL REFERENCES jobs ON DELETE CASCADE,
    node        integer NOT NULL CHECK (node >= 0),
    first_rank  integer NOT NULL CHECK (first_rank >= 0),
    ranks       integer NOT NULL CHECK (ranks > 0),
    world_ranks integer NOT NULL CHECK (world_ranks >= first_rank + ranks),
    unique_id   bytea NOT NULL CHECK (length(unique_id) = 128),
    state       text NOT NULL DEFAULT 'waiting' CHECK (state IN ('waiting', 'claimed', 'joined', 'failed')),
    worker_pid  integer,
    claimed_at  timestamptz,
    error       text,
    PRIMARY KEY (job_id, node)
);
COMMENT ON TABLE job_ranks IS
'The nodes of a training job that spans machines ("nodes" > 1): each node''s rank range and the NCCL communicator id the coordinator made; a node''s worker claims a waiting row, joins, or fails.';
COMMENT ON COLUMN job_ranks.unique_id IS 'ncclUniqueId (128 bytes): whoever reads it can join the communicator, so only the model''s owners see it.';
COMMENT ON COLUMN job_ranks.state IS 'waiting (published), claimed (a worker has it), joined (its ranks are joining the communicator), failed (error says why).';

ALTER TABLE job_ranks ENABLE ROW LEVEL SECURITY;
CREATE POLICY job_ranks_owner ON job_ranks
    USING (attention.owns_model((SELECT j.model_id FROM attention.jobs j WHERE j.job_id = job_ranks.job_id)));
GRANT SELECT, INSERT, UPDATE, DELETE ON job_ranks TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('job_ranks', '');

-----------------------------------------------------------------------------
-- Training functions
-----------------------------------------------------------------------------

COMMENT ON FUNCTION train(text, text, jsonb) IS
'Submits a training job (options: max_steps, max_epochs, max_minutes, batch_tokens, warmup_steps, learning_rate_scale, label_smoothing, dropout, accumulate_batches, batches_per_step, checkpoint_every_steps, checkpoint_every_minutes, keep_checkpoints, validate_every_steps, validation_bleu_sentences, seed, init_checkpoint (a checkpoint of the model to start from: fine-tuning), device ("cpu", "cuda", "cuda:N", "cuda:N,M,..." or "cuda:all": one rank per GPU), precision ("fp32" or "bf16"; bf16 by default on CUDA devices), threads, nodes) and returns its id at once; a background worker connected as the caller trains.';
COMMENT ON FUNCTION resume_training(bigint, jsonb) IS
'Continues a stopped job from its newest checkpoint (in the data order an uninterrupted run would see); options may change its limits, checkpoint cadence, devices (a step keeps its batches_per_step batches) and precision; returns the job id.';

CREATE FUNCTION join_training(job bigint)
RETURNS integer
AS 'MODULE_PATHNAME', 'attention_join_training'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION join_training(bigint) IS
'Starts a worker on this server that claims the next waiting node of a job that spans machines (attention.job_ranks) and joins its communicator; returns the worker''s pid.';

-- wait_training: a job whose worker has just committed its final status and exited could
-- read as interrupted (the view's snapshot predates the commit, its liveness check follows
-- the exit); a second look, with a snapshot taken after the exit was seen, tells the two apart.
CREATE OR REPLACE FUNCTION wait_training(job bigint, timeout interval DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + timeout;
    shown text;
BEGIN
    IF job IS NULL THEN
        RAISE EXCEPTION 'job must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    LOOP
        SELECT v.status INTO shown FROM attention.training_jobs v WHERE v.job_id = job;
        IF shown IS NULL THEN
            RAISE EXCEPTION 'training job % does not exist', job USING ERRCODE = 'undefined_object';
        END IF;
        IF shown = 'interrupted' THEN
            SELECT v.status INTO shown FROM attention.training_jobs v WHERE v.job_id = job;
        END IF;
        EXIT WHEN shown NOT IN ('queued', 'running') OR clock_timestamp() >= deadline;
        PERFORM pg_sleep(0.1);
    END LOOP;
    RETURN shown;
END
$$;
COMMENT ON FUNCTION wait_training(bigint, interval) IS
'Waits until a job stops (or the timeout passes; NULL waits without limit) and returns its status.';

-----------------------------------------------------------------------------
-- Translation services (src/pg/service.c, service_worker.c)
-----------------------------------------------------------------------------

CREATE FUNCTION start_service(model text, device text DEFAULT 'cpu')
RETURNS integer
AS 'MODULE_PATHNAME', 'attention_start_service'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION start_service(text, text) IS
'Starts the translation service of a model in this database (one process that loads the deployed checkpoint once, on device cpu or cuda, and decodes the sentences of every session in one continuously batched beam search: sentences join it between steps and leave when done), or finds the running one; returns its pid. Needs shared_preload_libraries = ''attention''; only the model''s owners may.';

CREATE FUNCTION stop_service(model text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'attention_stop_service'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION stop_service(text) IS
'Stops the translation service of a model in this database after it answered the requests it has; false when none ran. Only the model''s owners may.';

CREATE FUNCTION service_status()
RETURNS TABLE (database text, model text, checkpoint bigint, device text, pid integer, state text,
               queue_depth integer, requests bigint, sentences bigint, tokens bigint, batches bigint)
AS 'MODULE_PATHNAME', 'attention_service_status'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION service_status() IS
'Every translation service of the server, as the view attention.services shows them.';

CREATE VIEW services AS SELECT * FROM service_status();
COMMENT ON VIEW services IS
'Translation services: database, model, the checkpoint loaded last, device, pid, state (starting, running, stopping), queue depth (requests waiting or being served), and requests, sentences, output tokens and batches served.';
GRANT SELECT ON services TO PUBLIC;

COMMENT ON FUNCTION cancel_training(bigint) IS
'Asks a job''s worker to stop: it reads the request once a second, writes a final checkpoint of its last step (not validated) and ends as cancelled; returns cancelling, or the status of a job that has already stopped.';
COMMENT ON COLUMN jobs.cancel_requested IS
'Set by cancel_training; the worker reads it once a second and stops with a final checkpoint of its last step, not validated.';

-- Checkpoints carry the format of their tensors; a library refuses a format it does not know.
ALTER TABLE checkpoints ADD COLUMN format integer NOT NULL DEFAULT 1 CHECK (format >= 1);
COMMENT ON COLUMN checkpoints.format IS
'Layout of the checkpoint''s tensors (names, meanings, the data.* counters): 1. A library refuses to load a format it does not know.';

-----------------------------------------------------------------------------
-- Hugging Face MarianMT models (src/pg/huggingface.c)
-----------------------------------------------------------------------------

ALTER TABLE vocabularies ADD COLUMN target_model bytea, ADD COLUMN pieces text[],
    ADD CONSTRAINT vocabularies_pair_check CHECK ((target_model IS NULL) = (pieces IS NULL)
        AND (pieces IS NULL OR (array_ndims(pieces) = 1 AND cardinality(pieces) = vocab_size)));
COMMENT ON TABLE vocabularies IS 'Subword vocabularies: a SentencePiece model shared by source and target, or (imported Marian models) a pair of them with one table of pieces.';
COMMENT ON COLUMN vocabularies.model IS 'Serialized SentencePiece ModelProto, as in a .model file (of the source side when target_model is set).';
COMMENT ON COLUMN vocabularies.target_model IS 'SentencePiece model of the target side (Marian''s target.spm); NULL when model serves both.';
COMMENT ON COLUMN vocabularies.pieces IS 'The piece of every id (Marian''s vocab.json), with target_model; NULL: the SentencePiece model''s own ids.';

CREATE FUNCTION import_huggingface(model text, config jsonb, safetensors bytea, vocab jsonb,
                                   source_spm bytea, target_spm bytea)
RETURNS bigint
AS 'MODULE_PATHNAME', 'attention_import_huggingface'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION import_huggingface(text, jsonb, bytea, jsonb, bytea, bytea) IS
'Imports a Hugging Face MarianMT model (OPUS-MT layout: config.json, model.safetensors, vocab.json, source.spm, target.spm) as a new model and vocabulary, both named model, with its parameters as a checkpoint of kind imported (not deployed); returns the checkpoint id. scripts/import-hf reads a directory.';

CREATE FUNCTION export_huggingface(checkpoint bigint)
RETURNS TABLE (file text, data bytea)
AS 'MODULE_PATHNAME', 'attention_export_huggingface'
LANGUAGE C STABLE STRICT ROWS 7;
COMMENT ON FUNCTION export_huggingface(bigint) IS
'A checkpoint as the files of a Hugging Face MarianMT model (config.json, model.safetensors, source.spm, target.spm, vocab.json, tokenizer_config.json, generation_config.json) that MarianMTModel and MarianTokenizer load; needs the model''s owner. scripts/export-hf writes them to a directory.';
