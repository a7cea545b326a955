-----------------------------------------------------------------------------
-- attention 0.2.0 -> 0.3.0. Users' corpora, vocabularies, models, jobs and
-- checkpoints are kept as they are.
\echo Use "ALTER EXTENSION attention UPDATE TO '0.3.0'" to load this file. \quit

-- The design document the comments cite is docs/design.md in the repository.
COMMENT ON TABLE models IS 'Transformer models: a configuration (docs/design.md section 2) over a vocabulary.';

-- Owners for corpora and vocabularies: existing rows belong to the extension's owner.
ALTER TABLE corpora ADD COLUMN owner regrole;
ALTER TABLE vocabularies ADD COLUMN owner regrole;
UPDATE corpora SET owner = (SELECT e.extowner::regrole FROM pg_catalog.pg_extension e WHERE e.extname = 'attention');
UPDATE vocabularies SET owner = (SELECT e.extowner::regrole FROM pg_catalog.pg_extension e WHERE e.extname = 'attention');
ALTER TABLE corpora ALTER COLUMN owner SET DEFAULT quote_ident(current_user)::regrole, ALTER COLUMN owner SET NOT NULL;
ALTER TABLE vocabularies ALTER COLUMN owner SET DEFAULT quote_ident(current_user)::regrole, ALTER COLUMN owner SET NOT NULL;
-- a role whose name needs quotes ("Bob") owns what it creates (current_user::text::regrole read bob)
ALTER TABLE models ALTER COLUMN owner SET DEFAULT quote_ident(current_user)::regrole;
COMMENT ON COLUMN corpora.owner IS 'Role that owns the corpus: its members may add pairs to it and drop it.';
COMMENT ON COLUMN vocabularies.owner IS 'Role that owns the vocabulary: its members may drop it.';

-- Corpora and vocabularies have owners as models do (0.3.0): writing them still
-- takes the DBA's grants (INSERT on the tables), and row-level security keeps
-- each row to the members of its owner role: nobody creates a row owned by a
-- role they are not a member of, and only the owners change or drop them.
ALTER TABLE corpora ENABLE ROW LEVEL SECURITY;
CREATE POLICY corpora_read ON corpora FOR SELECT USING (true);
CREATE POLICY corpora_create ON corpora FOR INSERT WITH CHECK (pg_has_role(owner, 'MEMBER'));
CREATE POLICY corpora_update ON corpora FOR UPDATE USING (pg_has_role(owner, 'MEMBER'))
    WITH CHECK (pg_has_role(owner, 'MEMBER'));
CREATE POLICY corpora_drop ON corpora FOR DELETE USING (pg_has_role(owner, 'MEMBER'));
ALTER TABLE vocabularies ENABLE ROW LEVEL SECURITY;
CREATE POLICY vocabularies_read ON vocabularies FOR SELECT USING (true);
CREATE POLICY vocabularies_create ON vocabularies FOR INSERT WITH CHECK (pg_has_role(owner, 'MEMBER'));
CREATE POLICY vocabularies_update ON vocabularies FOR UPDATE USING (pg_has_role(owner, 'MEMBER'))
    WITH CHECK (pg_has_role(owner, 'MEMBER'));
CREATE POLICY vocabularies_drop ON vocabularies FOR DELETE USING (pg_has_role(owner, 'MEMBER'));
CREATE POLICY jobs_delete ON jobs FOR DELETE USING (attention.owns_model(model_id));
-- the owners drop what they own (drop_corpus, drop_vocabulary, their cascades)
GRANT DELETE ON corpora, vocabularies, jobs TO PUBLIC;

-- Only a corpus's owners add, change or remove its pairs: statement-level
-- triggers that look at the statement's rows once (row-level security on
-- corpus_pairs would refuse COPY into the table for every role it applies to).
CREATE FUNCTION check_corpus_pairs_owner()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bad record;
BEGIN
    -- the transition tables of the statement's operation (old_pairs, new_pairs)
    IF TG_OP = 'INSERT' THEN
        SELECT c.name, c.owner INTO bad FROM attention.corpora c
         WHERE c.corpus_id IN (SELECT p.corpus_id FROM new_pairs p) AND NOT pg_has_role(c.owner, 'MEMBER') LIMIT 1;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT c.name, c.owner INTO bad FROM attention.corpora c
         WHERE c.corpus_id IN (SELECT p.corpus_id FROM old_pairs p) AND NOT pg_has_role(c.owner, 'MEMBER') LIMIT 1;
    ELSE
        SELECT c.name, c.owner INTO bad FROM attention.corpora c
         WHERE c.corpus_id IN (SELECT p.corpus_id FROM old_pairs p UNION SELECT p.corpus_id FROM new_pairs p)
           AND NOT pg_has_role(c.owner, 'MEMBER') LIMIT 1;
    END IF;
    IF bad.name IS NOT NULL THEN
        RAISE EXCEPTION 'permission denied to change the pairs of corpus "%"', bad.name
            USING ERRCODE = 'insufficient_privilege',
                  HINT = format('Only members of its owner role %s may.', bad.owner);
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION check_corpus_pairs_owner() IS
'Trigger of corpus_pairs: ERROR unless the current role owns the corpus of every pair a statement adds, changes or removes.';
CREATE TRIGGER corpus_pairs_added AFTER INSERT ON corpus_pairs REFERENCING NEW TABLE AS new_pairs
    FOR EACH STATEMENT EXECUTE FUNCTION check_corpus_pairs_owner();
CREATE TRIGGER corpus_pairs_changed AFTER UPDATE ON corpus_pairs REFERENCING OLD TABLE AS old_pairs NEW TABLE AS new_pairs
    FOR EACH STATEMENT EXECUTE FUNCTION check_corpus_pairs_owner();
CREATE TRIGGER corpus_pairs_removed AFTER DELETE ON corpus_pairs REFERENCING OLD TABLE AS old_pairs
    FOR EACH STATEMENT EXECUTE FUNCTION check_corpus_pairs_owner();

-----------------------------------------------------------------------------
-- Dropping corpora and vocabularies (0.3.0)
-----------------------------------------------------------------------------

CREATE FUNCTION drop_corpus(name text, "cascade" boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cid integer;
    owner_role regrole;
    j record;
BEGIN
    SELECT c.corpus_id, c.owner INTO cid, owner_role FROM attention.corpora c WHERE c.name = drop_corpus.name;
    IF cid IS NULL THEN
        RAISE EXCEPTION 'corpus "%" does not exist', drop_corpus.name USING ERRCODE = 'undefined_object';
    END IF;
    IF NOT pg_has_role(owner_role, 'MEMBER') THEN
        RAISE EXCEPTION 'permission denied to drop corpus "%"', drop_corpus.name
            USING ERRCODE = 'insufficient_privilege',
                  HINT = format('Only members of its owner role %s may.', owner_role);
    END IF;
    -- the jobs stay as read until the drop commits (the launcher resumes none of them meanwhile)
    PERFORM 1 FROM attention.jobs t WHERE t.corpus_id = cid FOR UPDATE;
    FOR j IN SELECT t.job_id, t.status, m.name AS model, m.owner
               FROM attention.training_jobs t JOIN attention.models m USING (model_id)
              WHERE t.corpus_id = cid ORDER BY t.job_id LOOP
        IF NOT "cascade" THEN
            RAISE EXCEPTION 'corpus "%" is used by training job % of model "%"', drop_corpus.name, j.job_id, j.model
                USING ERRCODE = 'dependent_objects_still_exist',
                      HINT = 'attention.drop_corpus(name, cascade => true) drops the corpus with its jobs (their checkpoints stay).';
        END IF;
        IF NOT pg_has_role(j.owner, 'MEMBER') THEN
            RAISE EXCEPTION 'cannot drop corpus "%": its training job % belongs to model "%" of role %',
                            drop_corpus.name, j.job_id, j.model, j.owner
                USING ERRCODE = 'insufficient_privilege',
                      HINT = 'A cascade drops only what the caller owns; ask the model''s owner to drop the model or its job.';
        END IF;
        IF j.status IN ('queued', 'running') THEN
            RAISE EXCEPTION 'corpus "%" is used by training job %, which is %', drop_corpus.name, j.job_id, j.status
                USING ERRCODE = 'object_in_use',
                      HINT = 'Cancel it first with attention.cancel_training(job).';
        END IF;
    END LOOP;
    DELETE FROM attention.jobs t WHERE t.corpus_id = cid;
    DELETE FROM attention.corpora c WHERE c.corpus_id = cid;
END
$$;
COMMENT ON FUNCTION drop_corpus(text, boolean) IS
'Drops a corpus and its pairs (its owners only); refuses while training jobs used it, unless cascade, which also deletes those jobs when the caller owns their models (checkpoints stay; vocabularies trained on it stay, corpus_id NULL).';

CREATE FUNCTION drop_vocabulary(name text, "cascade" boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    vid integer;
    owner_role regrole;
    m record;
BEGIN
    SELECT v.vocabulary_id, v.owner INTO vid, owner_role FROM attention.vocabularies v
     WHERE v.name = drop_vocabulary.name;
    IF vid IS NULL THEN
        RAISE EXCEPTION 'vocabulary "%" does not exist', drop_vocabulary.name USING ERRCODE = 'undefined_object';
    END IF;
    IF NOT pg_has_role(owner_role, 'MEMBER') THEN
        RAISE EXCEPTION 'permission denied to drop vocabulary "%"', drop_vocabulary.name
            USING ERRCODE = 'insufficient_privilege',
                  HINT = format('Only members of its owner role %s may.', owner_role);
    END IF;
    FOR m IN SELECT mm.name, mm.owner FROM attention.models mm WHERE mm.vocabulary_id = vid ORDER BY mm.model_id LOOP
        IF NOT "cascade" THEN
            RAISE EXCEPTION 'vocabulary "%" is used by model "%"', drop_vocabulary.name, m.name
                USING ERRCODE = 'dependent_objects_still_exist',
                      HINT = 'attention.drop_vocabulary(name, cascade => true) drops the vocabulary with its models.';
        END IF;
        IF NOT pg_has_role(m.owner, 'MEMBER') THEN
            RAISE EXCEPTION 'cannot drop vocabulary "%": its model "%" belongs to role %', drop_vocabulary.name, m.name, m.owner
                USING ERRCODE = 'insufficient_privilege',
                      HINT = 'A cascade drops only what the caller owns; ask the model''s owner to drop it.';
        END IF;
    END LOOP;
    PERFORM attention.drop_model(mm.name) FROM attention.models mm WHERE mm.vocabulary_id = vid;
    DELETE FROM attention.vocabularies v WHERE v.vocabulary_id = vid;
END
$$;
COMMENT ON FUNCTION drop_vocabulary(text, boolean) IS
'Drops a vocabulary (its owners only); refuses while models use it, unless cascade, which drops those models (drop_model: their checkpoints and jobs) when the caller owns every one.';

-- import_huggingface gains replace
DROP FUNCTION import_huggingface(text, jsonb, bytea, jsonb, bytea, bytea);
CREATE FUNCTION import_huggingface(model text, config jsonb, safetensors bytea, vocab jsonb,
                                   source_spm bytea, target_spm bytea, replace boolean DEFAULT false)
RETURNS bigint
AS 'MODULE_PATHNAME', 'attention_import_huggingface'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION import_huggingface(text, jsonb, bytea, jsonb, bytea, bytea, boolean) IS
'Imports a Hugging Face MarianMT model (OPUS-MT layout: config.json, model.safetensors, vocab.json, source.spm, target.spm) as a new model and vocabulary, both named model, with its parameters as a checkpoint of kind imported (not deployed); returns the checkpoint id. replace first drops a model and a vocabulary of that name (drop_model, drop_vocabulary: the caller''s own only, and a vocabulary no other model uses). scripts/import-hf reads a directory.';

-- attention.services shows which services a translation started (they exit when idle)
DROP VIEW services;
DROP FUNCTION service_status();
CREATE FUNCTION service_status()
RETURNS TABLE (database text, model text, checkpoint bigint, device text, pid integer, state text,
               queue_depth integer, requests bigint, sentences bigint, tokens bigint, batches bigint,
               automatic boolean)
AS 'MODULE_PATHNAME', 'attention_service_status'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION service_status() IS
'Every translation service of the server, as the view attention.services shows them.';

CREATE VIEW services AS SELECT * FROM service_status();
COMMENT ON VIEW services IS
'Translation services: database, model, the checkpoint loaded last, device, pid, state (starting, running, stopping), queue depth (requests waiting or being served), requests, sentences, output tokens and batches served, and automatic (started by a translation: exits after attention.service_idle_timeout without requests; false: started by start_service, runs until stopped).';
GRANT SELECT ON services TO PUBLIC;

-----------------------------------------------------------------------------
-- The server-wide CPU budget (src/pg/common/cpu_budget.c)
-----------------------------------------------------------------------------

CREATE FUNCTION cpu_budget_status()
RETURNS TABLE (max_threads integer, server_cores integer, threads_in_use integer, engine_calls bigint,
               calls_given_fewer bigint, shared boolean)
AS 'MODULE_PATHNAME', 'attention_cpu_budget_status'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION cpu_budget_status() IS
'The server-wide CPU budget, as the view attention.cpu_budget shows it.';

CREATE VIEW cpu_budget AS SELECT * FROM cpu_budget_status();
COMMENT ON VIEW cpu_budget IS
'The engine threads of every session, translation service and training job of the server together: max_threads (attention.max_threads, 0 resolved to server_cores), server_cores (CPUs the server may use: its affinity, lowered to its cgroup''s CPU quota), threads_in_use now, engine calls that took threads and those given fewer than they asked for, and shared (false: no shared memory could be had and every engine call runs on one thread).';
GRANT SELECT ON cpu_budget TO PUBLIC;

-----------------------------------------------------------------------------
-- int8 checkpoints (quantize; src/quantize.c, src/cpu_matmul.c)
-----------------------------------------------------------------------------

ALTER TABLE checkpoints DROP CONSTRAINT checkpoints_kind_check;
ALTER TABLE checkpoints ADD CONSTRAINT checkpoints_kind_check
    CHECK (kind IN ('initial', 'trained', 'average', 'imported', 'quantized'));
ALTER TABLE checkpoints ADD COLUMN quantized_from bigint;
ALTER TABLE checkpoints ADD CONSTRAINT checkpoints_quantized_from_check
    CHECK ((kind = 'quantized') = (quantized_from IS NOT NULL));
COMMENT ON COLUMN checkpoints.kind IS 'initial (initialize_checkpoint), trained (a training job), average (average_checkpoints), imported (import_checkpoint, import_huggingface) or quantized (quantize: int8, for translation only).';
COMMENT ON COLUMN checkpoints.quantized_from IS 'The float32 checkpoint this int8 one was quantized from (kind quantized only).';
COMMENT ON COLUMN checkpoints.format IS
'Layout of the checkpoint''s tensors (names, meanings, the data.* counters): 1, float32 parameters; 2, an int8 checkpoint (quantize): the weight of every matrix product int8 with a float32 scale per output row (<name>_scale), biases and LayerNorms float32. A library refuses to load a format it does not know.';
ALTER TABLE checkpoint_tensors DROP CONSTRAINT checkpoint_tensors_dtype_check;
ALTER TABLE checkpoint_tensors ADD CONSTRAINT checkpoint_tensors_dtype_check
    CHECK (dtype IN ('float32', 'bfloat16', 'float16', 'int64', 'int32', 'uint8', 'int8'));

CREATE FUNCTION quantize(checkpoint bigint, dtype text DEFAULT 'int8')
RETURNS bigint
AS 'MODULE_PATHNAME', 'attention_quantize'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION quantize(bigint, text) IS
'Writes an int8 copy of a float32 checkpoint (kind quantized, format 2, quantized_from the source): the weights of every matrix product, the shared embedding and so the output projection included, as int8 with a float32 scale per output row; activations are quantized per row as each product runs (oneDNN, on the CPU). It deploys and translates like any checkpoint on the CPU, with about a quarter of the memory; it cannot be trained from, averaged or exported. Needs the model''s owner; returns the new checkpoint''s id.';
