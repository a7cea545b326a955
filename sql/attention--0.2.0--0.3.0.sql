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
-- Every node of a job across machines runs the step loop (bgworker/worker.c)
-----------------------------------------------------------------------------

ALTER TABLE job_ranks DROP CONSTRAINT job_ranks_state_check;
ALTER TABLE job_ranks ADD CONSTRAINT job_ranks_state_check
    CHECK (state IN ('waiting', 'claimed', 'joined', 'training', 'finished', 'failed'));
ALTER TABLE job_ranks ADD COLUMN step bigint;
ALTER TABLE job_ranks ADD COLUMN heartbeat_at timestamptz;
COMMENT ON COLUMN job_ranks.state IS 'waiting (published), claimed (a worker has it), joined (its ranks are joining the communicator), training (its ranks run the steps every node runs), finished (it stopped after the step all nodes agreed on), failed (error says why).';
COMMENT ON COLUMN job_ranks.step IS 'The last step the node''s ranks finished (written with each heartbeat and at the end).';
COMMENT ON COLUMN job_ranks.heartbeat_at IS 'When the node''s worker last wrote its row while training (about every second).';
COMMENT ON TABLE job_ranks IS
'The nodes of a training job that spans machines ("nodes" > 1): each node''s rank range and the NCCL communicator id the coordinator made; a node''s worker claims a waiting row, joins, trains (step, heartbeat) and finishes, or fails saying why.';
COMMENT ON FUNCTION join_training(bigint) IS
'Starts a worker on this server that claims the next waiting node of a job that spans machines (attention.job_ranks), joins its communicator and runs every step with the other nodes until they all agree to stop; returns the worker''s pid.';
CREATE FUNCTION join_training(coordinator text, job bigint)
RETURNS integer
AS 'MODULE_PATHNAME', 'attention_join_training_remote'
LANGUAGE C VOLATILE STRICT;
REVOKE EXECUTE ON FUNCTION join_training(text, bigint) FROM PUBLIC;
COMMENT ON FUNCTION join_training(text, bigint) IS
'Joins a job that spans machines from another server: connects to the coordinator''s server with the libpq connection string coordinator (no password in it: this server''s .pgpass or service file supplies one), checks the job and that both databases have the same attention version, then starts a worker here that claims a node there and reads the job, vocabulary, corpus and checkpoint from there; returns the worker''s pid. The worker runs as this server''s operating-system user, so EXECUTE is granted to superusers only: GRANT it to the roles you trust with that password file.';

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

-----------------------------------------------------------------------------
-- Multilingual models: M2M-100 and NLLB-200 (import_huggingface_m2m100;
-- languages per call in the translation functions)
-----------------------------------------------------------------------------

ALTER TABLE vocabularies ADD COLUMN languages text[];
ALTER TABLE vocabularies ADD COLUMN language_ids integer[];
ALTER TABLE vocabularies ADD CONSTRAINT vocabularies_languages_check
    CHECK ((languages IS NULL) = (language_ids IS NULL)
        AND (languages IS NULL OR (array_ndims(languages) = 1 AND array_ndims(language_ids) = 1
                                   AND cardinality(languages) = cardinality(language_ids))));
COMMENT ON COLUMN vocabularies.languages IS 'Language codes of a multilingual vocabulary (M2M-100: en, de, ...; NLLB-200: eng_Latn, ...), NULL for others.';
COMMENT ON COLUMN vocabularies.language_ids IS 'The id of each language''s token, in the order of languages: the source''s first id and the decoder''s forced first token.';
ALTER TABLE models ADD COLUMN source_language text;
ALTER TABLE models ADD COLUMN target_language text;
COMMENT ON COLUMN models.source_language IS 'Source language a multilingual model reads when a call names none (set_languages).';
COMMENT ON COLUMN models.target_language IS 'Target language a multilingual model writes when a call names none (set_languages).';

-- the owners of a model (and only they: row-level security) change its default languages
GRANT UPDATE (source_language, target_language) ON models TO PUBLIC;
CREATE POLICY models_languages ON models FOR UPDATE USING (pg_has_role(owner, 'MEMBER'));

CREATE FUNCTION set_languages(model text, source_language text, target_language text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    mid integer;
    codes text[];
    code text;
BEGIN
    IF model IS NULL THEN
        RAISE EXCEPTION 'model must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    mid := attention.require_model_owner(set_languages.model, 'set the languages of');
    SELECT v.languages INTO codes FROM attention.models m JOIN attention.vocabularies v USING (vocabulary_id)
     WHERE m.model_id = mid;
    FOREACH code IN ARRAY ARRAY[source_language, target_language] LOOP
        IF code IS NOT NULL AND codes IS NULL THEN
            RAISE EXCEPTION 'model "%" is not multilingual: it has no language "%"', set_languages.model, code
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF code IS NOT NULL AND NOT code = ANY (codes) THEN
            RAISE EXCEPTION 'model "%" has no language "%"', set_languages.model, code
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = format('Its %s languages include %s.', cardinality(codes),
                                    array_to_string(codes[1:8], ', ') || CASE WHEN cardinality(codes) > 8 THEN ', ...' ELSE '' END);
        END IF;
    END LOOP;
    UPDATE attention.models m SET source_language = set_languages.source_language,
                                  target_language = set_languages.target_language
     WHERE m.model_id = mid;
END
$$;
COMMENT ON FUNCTION set_languages(text, text, text) IS
'Sets the source and target language a multilingual model (M2M-100, NLLB-200) uses when a call names none (NULL: none, so calls must name it); each must be one of its vocabulary''s languages. Needs the model''s owner.';

CREATE FUNCTION import_huggingface_m2m100(model text, config jsonb, safetensors oid, sentencepiece bytea,
                                          vocab jsonb, tokenizer_config jsonb,
                                          source_language text DEFAULT NULL, target_language text DEFAULT NULL,
                                          replace boolean DEFAULT false)
RETURNS bigint
AS 'MODULE_PATHNAME', 'attention_import_huggingface_m2m100'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION import_huggingface_m2m100(text, jsonb, oid, bytea, jsonb, jsonb, text, text, boolean) IS
'Imports a Hugging Face M2M-100 or NLLB-200 model (model_type m2m_100: config.json; model.safetensors as a large object, read tensor by tensor, so files over 1 GB come in; sentencepiece.bpe.model; vocab.json for M2M100Tokenizer, NULL for NllbTokenizer; tokenizer_config.json, whose tokenizer_class picks the layout) as a new model and vocabulary, both named model, with the language codes of the tokenizer and default languages; its parameters become a checkpoint of kind imported (not deployed); returns the checkpoint id. The large object is left to the caller. scripts/import-hf reads a directory.';

CREATE FUNCTION export_huggingface_m2m100(checkpoint bigint)
RETURNS TABLE (file text, data bytea, large_object oid)
AS 'MODULE_PATHNAME', 'attention_export_huggingface_m2m100'
LANGUAGE C VOLATILE STRICT ROWS 6;
COMMENT ON FUNCTION export_huggingface_m2m100(bigint) IS
'A checkpoint of a multilingual model as the files of a Hugging Face M2M-100 or NLLB-200 model directory that M2M100ForConditionalGeneration and the model''s tokenizer load; model.safetensors is written tensor by tensor into a new large object (large_object; the caller unlinks it), the other files are data. Needs the model''s owner. scripts/export-hf writes them to a directory.';

DROP FUNCTION translate(text, text, integer, double precision, integer);
CREATE FUNCTION translate(source text, model text, beam_size integer DEFAULT 4,
                          length_penalty double precision DEFAULT 0.6,
                          max_length_offset integer DEFAULT 50,
                          target_language text DEFAULT NULL, source_language text DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'attention_translate'
LANGUAGE C STABLE PARALLEL SAFE COST 100000;
COMMENT ON FUNCTION translate(text, text, integer, double precision, integer, text, text) IS
'Translates a text by beam search (beam_size 1 = greedy; length penalty ((5+len)/6)^alpha; at most source tokens + max_length_offset tokens); a NULL model means the default model; the languages (multilingual models only) default to the model''s.';

DROP FUNCTION translate(text[], text, integer, double precision, integer);
CREATE FUNCTION translate(sources text[], model text DEFAULT NULL, beam_size integer DEFAULT 4,
                          length_penalty double precision DEFAULT 0.6,
                          max_length_offset integer DEFAULT 50,
                          target_language text DEFAULT NULL, source_language text DEFAULT NULL)
RETURNS text[]
AS 'MODULE_PATHNAME', 'attention_translate_array'
LANGUAGE C STABLE PARALLEL SAFE COST 1000000;
COMMENT ON FUNCTION translate(text[], text, integer, double precision, integer, text, text) IS
'Translates many texts in length-sorted batches; results in input order (NULL stays NULL).';

DROP FUNCTION translate_nbest(text, text, integer, integer, double precision, integer);
CREATE FUNCTION translate_nbest(source text, model text DEFAULT NULL, n integer DEFAULT 4,
                                beam_size integer DEFAULT 4,
                                length_penalty double precision DEFAULT 0.6,
                                max_length_offset integer DEFAULT 50,
                                target_language text DEFAULT NULL, source_language text DEFAULT NULL)
RETURNS TABLE (rank integer, translation text, score double precision, tokens text[])
AS 'MODULE_PATHNAME', 'attention_translate_nbest'
LANGUAGE C STABLE PARALLEL SAFE COST 100000 ROWS 4;
COMMENT ON FUNCTION translate_nbest(text, text, integer, integer, double precision, integer, text, text) IS
'The n best translations by beam search, best first; score is the log-probability of the tokens and EOS (as attention.score).';

DROP FUNCTION score(text, text, text);
CREATE FUNCTION score(source text, target text, model text DEFAULT NULL,
                      target_language text DEFAULT NULL, source_language text DEFAULT NULL)
RETURNS double precision
AS 'MODULE_PATHNAME', 'attention_score'
LANGUAGE C STABLE PARALLEL SAFE COST 10000;
COMMENT ON FUNCTION score(text, text, text, text, text) IS
'Natural-log probability of the target''s subword tokens plus EOS given the source (no dropout, no label smoothing); for a multilingual model given the target language''s token too, which decoding forces (it counts 0).';

DROP FUNCTION attention_weights(text, text, text);
CREATE FUNCTION attention_weights(source text, target text DEFAULT NULL, model text DEFAULT NULL,
                                  target_language text DEFAULT NULL, source_language text DEFAULT NULL)
RETURNS TABLE (kind text, layer integer, head integer, query_pos integer, query_token text,
               key_pos integer, key_token text, weight real)
AS 'MODULE_PATHNAME', 'attention_attention_weights'
LANGUAGE C STABLE PARALLEL SAFE COST 100000 ROWS 10000;
COMMENT ON FUNCTION attention_weights(text, text, text, text, text) IS
'Every attention probability (encoder_self, decoder_self, cross) of the model reading source and target (NULL: its own translation); positions from 0.';

DROP FUNCTION align(text, text, text);
CREATE FUNCTION align(source text, target text, model text DEFAULT NULL,
                      target_language text DEFAULT NULL, source_language text DEFAULT NULL)
RETURNS TABLE (target_pos integer, target_token text, source_pos integer, source_token text, weight real)
AS 'MODULE_PATHNAME', 'attention_align'
LANGUAGE C STABLE PARALLEL SAFE COST 10000 ROWS 1000;
COMMENT ON FUNCTION align(text, text, text, text, text) IS
'Word alignment from cross-attention: for each target token (and EOS), the last decoder layer''s attention over source tokens, averaged over heads.';

DROP PROCEDURE translate_column(regclass, name, name, text, integer);
CREATE PROCEDURE translate_column(relation regclass, source_column name, target_column name,
                                  model text DEFAULT NULL, batch_size integer DEFAULT 64,
                                  target_language text DEFAULT NULL, source_language text DEFAULT NULL)
AS 'MODULE_PATHNAME', 'attention_translate_column'
LANGUAGE C;
COMMENT ON PROCEDURE translate_column(regclass, name, name, text, integer, text, text) IS
'Translates rows whose target is NULL and source is not, in length-sorted batches, committing after each batch (resumable); rows are addressed by the primary key.';

DROP FUNCTION evaluate(text, text, text, bigint, integer);
CREATE FUNCTION evaluate(model text, corpus text, split text DEFAULT 'test', checkpoint bigint DEFAULT NULL,
                         beam_size integer DEFAULT 4,
                         target_language text DEFAULT NULL, source_language text DEFAULT NULL)
RETURNS TABLE (bleu double precision, loss double precision, sentences integer, seconds double precision)
AS 'MODULE_PATHNAME', 'attention_evaluate'
LANGUAGE C VOLATILE COST 1000000 ROWS 1;
COMMENT ON FUNCTION evaluate(text, text, text, bigint, integer, text, text) IS
'Corpus BLEU of beam-search translations of a split and its cross-entropy per target token, for a checkpoint (NULL: the deployed one, else the newest); the corpus is read with the caller''s privileges.';

-----------------------------------------------------------------------------
-- Pictures: the training history, training curves and attention heatmaps
-- as SVG (plot_training, plot_attention, plot_alignment)
-----------------------------------------------------------------------------

CREATE TABLE training_history (
    job_id            bigint NOT NULL REFERENCES jobs ON DELETE CASCADE,
    step              bigint NOT NULL CHECK (step >= 0),
    recorded_at       timestamptz NOT NULL DEFAULT now(),
    epoch             integer NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    tokens_seen       bigint NOT NULL DEFAULT 0 CHECK (tokens_seen >= 0),
    train_loss        double precision,
    learning_rate     double precision,
    tokens_per_second double precision,
    valid_loss        double precision,
    valid_bleu        double precision,
    PRIMARY KEY (job_id, step)
);
COMMENT ON TABLE training_history IS 'Every progress update and validation of a training job, one row per step (the worker writes them; a resumed job''s later rows replace those of the steps it repeats); at most the job''s keep_history rows, thinned evenly beyond that; deleted with the job; readable by every role, as jobs are.';
COMMENT ON COLUMN training_history.train_loss IS 'Label-smoothed training loss per target token (nats), mean since the previous row; NULL where no step ran since.';
COMMENT ON COLUMN training_history.tokens_per_second IS 'Source plus target tokens (no padding) trained per wall-clock second since the previous row.';
COMMENT ON COLUMN training_history.valid_loss IS 'Validation cross-entropy per target token (nats) measured at this step, else NULL.';
COMMENT ON COLUMN training_history.valid_bleu IS 'BLEU of greedy translations of the first validation_bleu_sentences validation pairs measured at this step, else NULL.';

ALTER TABLE training_history ENABLE ROW LEVEL SECURITY;
CREATE POLICY training_history_read ON training_history FOR SELECT USING (true);
CREATE POLICY training_history_write ON training_history FOR INSERT
    WITH CHECK (attention.owns_model((SELECT j.model_id FROM attention.jobs j WHERE j.job_id = training_history.job_id)));
CREATE POLICY training_history_update ON training_history FOR UPDATE
    USING (attention.owns_model((SELECT j.model_id FROM attention.jobs j WHERE j.job_id = training_history.job_id)));
CREATE POLICY training_history_delete ON training_history FOR DELETE
    USING (attention.owns_model((SELECT j.model_id FROM attention.jobs j WHERE j.job_id = training_history.job_id)));
GRANT SELECT, INSERT, UPDATE, DELETE ON training_history TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('training_history', '');

CREATE FUNCTION plot_training(job bigint, width integer DEFAULT 800, height integer DEFAULT 500)
RETURNS text
AS 'MODULE_PATHNAME', 'attention_plot_training'
LANGUAGE C STABLE STRICT;
COMMENT ON FUNCTION plot_training(bigint, integer, integer) IS
'An SVG picture of a training job''s curves from attention.training_history: training and validation loss against steps, validation BLEU on a second axis; self-contained (no scripts or external references). In psql, \a \t (the value alone), \o training.svg, then SELECT attention.plot_training(job) writes a file to open.';

CREATE FUNCTION plot_training(jobs bigint[], width integer DEFAULT 800, height integer DEFAULT 500)
RETURNS text
AS 'MODULE_PATHNAME', 'attention_plot_training_array'
LANGUAGE C STABLE STRICT;
COMMENT ON FUNCTION plot_training(bigint[], integer, integer) IS
'An SVG picture of several training jobs'' curves on one plot (at most 10), one colour per job.';

CREATE FUNCTION plot_attention(source text, target text, model text, kind text, layer integer,
                               head integer DEFAULT NULL,
                               target_language text DEFAULT NULL, source_language text DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'attention_plot_attention'
LANGUAGE C STABLE PARALLEL SAFE COST 100000;
COMMENT ON FUNCTION plot_attention(text, text, text, text, integer, integer, text, text) IS
'An SVG heatmap of one head''s attention probabilities (kind encoder, decoder or cross; layer and head from 0 as attention_weights numbers them; head NULL: every head of the layer in a grid), queries down and keys across with the pieces as labels, as the paper''s Figures 3-5 show them; target NULL: the model''s own translation; model NULL: the default model.';

CREATE FUNCTION plot_alignment(source text, target text, model text DEFAULT NULL,
                               target_language text DEFAULT NULL, source_language text DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'attention_plot_alignment'
LANGUAGE C STABLE PARALLEL SAFE COST 10000;
COMMENT ON FUNCTION plot_alignment(text, text, text, text, text) IS
'The word alignment of attention.align as an SVG heatmap: target pieces and EOS down, source pieces and EOS across.';

COMMENT ON FUNCTION train(text, text, jsonb) IS
'Submits a training job (options: max_steps, max_epochs, max_minutes, batch_tokens, warmup_steps, learning_rate_scale, label_smoothing, dropout, accumulate_batches, batches_per_step, checkpoint_every_steps, checkpoint_every_minutes, keep_checkpoints, keep_history, validate_every_steps, validation_bleu_sentences, seed, init_checkpoint (a checkpoint of the model to start from: fine-tuning), device ("cpu", "cuda", "cuda:N", "cuda:N,M,..." or "cuda:all": one rank per GPU), precision ("fp32" or "bf16"; bf16 by default on CUDA devices), threads, nodes) and returns its id at once; a background worker connected as the caller trains.';
