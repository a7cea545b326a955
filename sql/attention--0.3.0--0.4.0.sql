-- attention 0.3.0 -> 0.4.0 (ALTER EXTENSION attention UPDATE): roles. A job runs only as a
-- role entitled to it, corpora and vocabularies are used under USAGE grants, a model's
-- tensors are its owners' (docs/security.md). The statements after the first are those
-- of sql/attention.sql's last section, word for word.
\echo Use "ALTER EXTENSION attention UPDATE TO '0.4.0'" to load this file. \quit

-- translation reads deployed tensors in C as the tables' owner (src/pg/common/rights.c)
DROP FUNCTION deployed_tensors(bigint);

-----------------------------------------------------------------------------
-- Roles (0.4.0; docs/security.md): a job runs only as a role entitled to
-- it, corpora and vocabularies are used under USAGE grants, and a model's
-- tensors are its owners' (translation reads deployed ones in C as the
-- tables' owner). attention--0.3.0--0.4.0.sql holds the same statements.
-----------------------------------------------------------------------------

-- Who may use a corpus or vocabulary besides its owner role's members: every
-- role (public_usage; a vocabulary's by default) or the roles listed (regrole,
-- whose oids pg_upgrade keeps; aclitem's format changed in PostgreSQL 16, and
-- pg_upgrade refuses user tables holding it).
ALTER TABLE corpora ADD COLUMN public_usage boolean NOT NULL DEFAULT false;
ALTER TABLE corpora ADD COLUMN usage_roles regrole[] NOT NULL DEFAULT '{}';
ALTER TABLE vocabularies ADD COLUMN public_usage boolean NOT NULL DEFAULT true;
ALTER TABLE vocabularies ADD COLUMN usage_roles regrole[] NOT NULL DEFAULT '{}';
COMMENT ON COLUMN corpora.public_usage IS
'Whether every role may use the corpus (attention.grant_usage to PUBLIC): its jobs, vocabularies and evaluations read it; false by default.';
COMMENT ON COLUMN corpora.usage_roles IS
'The roles granted USAGE of the corpus (attention.grant_usage) besides its owner role''s members; their members may use it.';
COMMENT ON COLUMN vocabularies.public_usage IS
'Whether every role may build models on the vocabulary (attention.grant_usage to PUBLIC); true by default.';
COMMENT ON COLUMN vocabularies.usage_roles IS
'The roles granted USAGE of the vocabulary (attention.grant_usage) besides its owner role''s members.';
GRANT UPDATE (public_usage, usage_roles) ON corpora, vocabularies TO PUBLIC;

CREATE FUNCTION may_use(owner regrole, public_usage boolean, usage_roles regrole[])
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    -- a role dropped since its grant is no one's
    SELECT pg_has_role(owner, 'MEMBER') OR coalesce(public_usage, false)
        OR EXISTS (SELECT 1 FROM unnest(usage_roles) g
                    WHERE CASE WHEN NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.oid = g) THEN false
                               ELSE pg_has_role(g, 'MEMBER') END)
$$;
COMMENT ON FUNCTION may_use(regrole, boolean, regrole[]) IS
'True when the current role may use a corpus or vocabulary with this owner and these grants: a member of the owner role or of a role granted USAGE, or every role with public_usage.';

CREATE FUNCTION change_usage(object_type text, object_name text, grantee text, allow boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tbl text;
    gid oid;
    owner_role regrole;
BEGIN
    IF object_type NOT IN ('corpus', 'vocabulary') THEN
        RAISE EXCEPTION 'object_type must be corpus or vocabulary, not "%"', object_type
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    tbl := CASE object_type WHEN 'corpus' THEN 'corpora' ELSE 'vocabularies' END;
    IF lower(grantee) = 'public' THEN
        gid := 0;
    ELSE
        SELECT r.oid INTO gid FROM pg_roles r WHERE r.rolname = grantee;
        IF gid IS NULL THEN
            RAISE EXCEPTION 'role "%" does not exist', grantee USING ERRCODE = 'undefined_object';
        END IF;
    END IF;
    EXECUTE format('SELECT t.owner FROM attention.%I t WHERE t.name = $1', tbl) INTO owner_role USING object_name;
    IF owner_role IS NULL THEN
        RAISE EXCEPTION '% "%" does not exist', object_type, object_name USING ERRCODE = 'undefined_object';
    END IF;
    IF NOT pg_has_role(owner_role, 'MEMBER') THEN
        RAISE EXCEPTION 'permission denied to % usage of % "%"', CASE WHEN allow THEN 'grant' ELSE 'revoke' END,
                        object_type, object_name
            USING ERRCODE = 'insufficient_privilege',
                  HINT = format('Only members of its owner role %s may.', owner_role);
    END IF;
    IF gid = 0 THEN
        EXECUTE format('UPDATE attention.%I t SET public_usage = $2 WHERE t.name = $1', tbl)
            USING object_name, allow;
    ELSE
        EXECUTE format('UPDATE attention.%I t SET usage_roles = array_remove(t.usage_roles, $2::regrole) '
                       '|| CASE WHEN $3 THEN ARRAY[$2::regrole] ELSE ''{}'' END WHERE t.name = $1', tbl)
            USING object_name, gid, allow;
    END IF;
END
$$;
COMMENT ON FUNCTION change_usage(text, text, text, boolean) IS
'What grant_usage (allow) and revoke_usage do; its owner role''s members only.';

CREATE FUNCTION grant_usage(object_type text, object_name text, grantee text)
RETURNS void
LANGUAGE sql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT attention.change_usage(object_type, object_name, grantee, true);
END;
COMMENT ON FUNCTION grant_usage(text, text, text) IS
'Lets a role (grantee, or PUBLIC: every role) use a corpus (object_type corpus: train, train a vocabulary and evaluate on it) or a vocabulary (build models on it), as GRANT USAGE does; its owner role''s members only.';

CREATE FUNCTION revoke_usage(object_type text, object_name text, grantee text)
RETURNS void
LANGUAGE sql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT attention.change_usage(object_type, object_name, grantee, false);
END;
COMMENT ON FUNCTION revoke_usage(text, text, text) IS
'Takes back what grant_usage gave a role (or PUBLIC); jobs already queued are held interrupted at their next start; its owner role''s members only.';

-- A model is built on a vocabulary its creator may use.
DROP POLICY models_create ON models;
CREATE POLICY models_create ON models FOR INSERT WITH CHECK (pg_has_role(owner, 'MEMBER')
    AND (SELECT attention.may_use(v.owner, v.public_usage, v.usage_roles) FROM attention.vocabularies v
          WHERE v.vocabulary_id = models.vocabulary_id));

-- A job's worker runs as its submitted_by role: only that role, or a
-- superuser, writes a row naming it (checked again in C at every start:
-- rights.c, job_entitlement), and only on a corpus that role may use. Of
-- another member's job a teammate may only ask for a cancel or mark it
-- cancelled (cancel_training), or take it over (resume_training: the job
-- becomes theirs).
CREATE FUNCTION check_job_submitter()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    corpus record;
BEGIN
    IF (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = current_user) THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.submitted_by = OLD.submitted_by AND NEW.submitted_by <> current_user
       AND to_jsonb(NEW) - '{cancel_requested,status,finished_at,error,updated_at}'::text[]
           = to_jsonb(OLD) - '{cancel_requested,status,finished_at,error,updated_at}'::text[]
       AND NEW.cancel_requested >= OLD.cancel_requested AND NEW.status IN (OLD.status, 'cancelled') THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.submitted_by = OLD.submitted_by AND NEW.submitted_by = current_user
       AND NEW.model_id = OLD.model_id AND NEW.corpus_id = OLD.corpus_id AND NEW.options = OLD.options
       AND (NEW.status = OLD.status OR NEW.status NOT IN ('queued', 'running')) THEN
        RETURN NEW;
    END IF;
    IF NEW.submitted_by <> current_user THEN
        RAISE EXCEPTION 'permission denied to write a training job of role "%"', NEW.submitted_by
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'A job''s worker runs as its submitted_by role: queue jobs as yourself (attention.train, attention.resume_training); of another role''s job, only cancel_training.';
    END IF;
    SELECT c.name, c.owner, attention.may_use(c.owner, c.public_usage, c.usage_roles) AS usable INTO corpus
      FROM attention.corpora c WHERE c.corpus_id = NEW.corpus_id;
    IF NOT corpus.usable THEN
        RAISE EXCEPTION 'permission denied to train on corpus "%"', corpus.name
            USING ERRCODE = 'insufficient_privilege',
                  HINT = format('Its owner role %s may grant you USAGE: attention.grant_usage(''corpus'', %L, role).',
                                corpus.owner, corpus.name);
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION check_job_submitter() IS
'Trigger of jobs: ERROR unless a row a role other than a superuser writes names that role as submitted_by and a corpus it may use; of another role''s job only a cancel request or the status cancelled may change.';
CREATE TRIGGER jobs_submitter BEFORE INSERT OR UPDATE ON jobs
    FOR EACH ROW EXECUTE FUNCTION check_job_submitter();

-- A role sees the jobs it submitted and those of the models it owns, as
-- pg_cron shows each user only their own jobs; the history likewise.
DROP POLICY jobs_read ON jobs;
CREATE POLICY jobs_read ON jobs FOR SELECT USING (attention.owns_model(model_id) OR submitted_by = current_user);
ALTER VIEW training_jobs SET (security_invoker = true);
DROP POLICY training_history_read ON training_history;
CREATE POLICY training_history_read ON training_history FOR SELECT
    USING (attention.owns_model((SELECT j.model_id FROM attention.jobs j WHERE j.job_id = training_history.job_id)));
COMMENT ON TABLE training_history IS 'Every progress update and validation of a training job, one row per step (the worker writes them; a resumed job''s later rows replace those of the steps it repeats); at most the job''s keep_history rows, thinned evenly beyond that; deleted with the job; readable by the members of the model''s owner role, as its jobs are.';
COMMENT ON COLUMN training_jobs.submitted_by IS 'Role the worker connects as: a member of the model''s owner role that may use the corpus (checked at every start); the job reads only what it can read.';

-- A checkpoint names only a job of its own model that its writer submitted
-- (a resumed job continues from its job's newest checkpoint).
DROP POLICY checkpoints_write ON checkpoints;
CREATE POLICY checkpoints_write ON checkpoints FOR INSERT WITH CHECK (attention.owns_model(model_id)
    AND (job_id IS NULL OR EXISTS (SELECT 1 FROM attention.jobs j
                                    WHERE j.job_id = checkpoints.job_id AND j.model_id = checkpoints.model_id
                                      AND j.submitted_by = current_user)));
-- and only deploy changes in a row once written (deploy)
REVOKE UPDATE ON checkpoints FROM PUBLIC;
GRANT UPDATE (deployed) ON checkpoints TO PUBLIC;

-- Dropping removes every role's dependents (as DROP ... CASCADE), which the
-- caller may not see: in C, as the tables' owner (rights.h).
CREATE OR REPLACE FUNCTION drop_corpus(name text, "cascade" boolean DEFAULT false)
RETURNS void
AS 'MODULE_PATHNAME', 'attention_drop_corpus'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION drop_corpus(text, boolean) IS
'Drops a corpus and its pairs (its owners only); refuses while training jobs of any role used it, unless cascade, which also deletes those jobs (their checkpoints stay; vocabularies trained on it stay, corpus_id NULL); refuses while one of them is queued or running.';
CREATE OR REPLACE FUNCTION drop_vocabulary(name text, "cascade" boolean DEFAULT false)
RETURNS void
AS 'MODULE_PATHNAME', 'attention_drop_vocabulary'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION drop_vocabulary(text, boolean) IS
'Drops a vocabulary (its owners only); refuses while models of any role use it, unless cascade, which drops those models with their checkpoints and jobs; refuses while one of them has a job queued or running.';

-----------------------------------------------------------------------------
-- Sharded Hugging Face weights (0.4.0): model.safetensors.index.json's
-- shards, which save_pretrained writes above its 5 GB shard size
-- (NLLB-200 3.3B), one large object each.
-----------------------------------------------------------------------------

CREATE FUNCTION import_huggingface_m2m100(model text, config jsonb, safetensors oid[], sentencepiece bytea,
                                          vocab jsonb, tokenizer_config jsonb,
                                          source_language text DEFAULT NULL, target_language text DEFAULT NULL,
                                          replace boolean DEFAULT false)
RETURNS bigint
AS 'MODULE_PATHNAME', 'attention_import_huggingface_m2m100_shards'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION import_huggingface_m2m100(text, jsonb, oid[], bytea, jsonb, jsonb, text, text, boolean) IS
'Imports a Hugging Face M2M-100 or NLLB-200 model whose weights are sharded (model.safetensors.index.json): safetensors lists the shards'' large objects (at most 1,024, each once), in any order; every parameter must come from exactly one shard (the tied embedding''s copies excepted). Otherwise as import_huggingface_m2m100 with one model.safetensors. scripts/import-hf reads the index.';

-----------------------------------------------------------------------------
-- Language tokens as text (0.4.0): an M2M100Tokenizer saved by transformers
-- without listing its language tokens reads "__fr__" in text as characters
-- and decodes their ids as text.
-----------------------------------------------------------------------------

ALTER TABLE vocabularies ADD COLUMN language_tokens_special boolean NOT NULL DEFAULT true;
COMMENT ON COLUMN vocabularies.language_tokens_special IS 'Whether a multilingual vocabulary''s language tokens are special tokens of its tokenizer (listed in additional_special_tokens): cut out of text before SentencePiece and skipped by decode; false: ordinary text in both, as transformers reads an M2M100Tokenizer saved without the list. Translation forces the target language''s id either way and leaves it out of the text.';
ALTER TABLE vocabularies ADD COLUMN source_language_last boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN vocabularies.source_language_last IS 'Whether a multilingual source ends with its language token (text, </s>, language: NllbTokenizer''s legacy_behaviour) rather than beginning with it (language, text, </s>: M2M-100 and NLLB-200 as published).';

-----------------------------------------------------------------------------
-- Progress of long statements (0.4.0): what a DBA watches from another
-- session (docs/operations.md).
-----------------------------------------------------------------------------

CREATE FUNCTION progress_status()
RETURNS TABLE (pid integer, database text, role text, operation text, object text, done bigint, total bigint,
               unit text, started_at timestamptz, rate double precision, seconds_left double precision)
AS 'MODULE_PATHNAME', 'attention_progress_status'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION progress_status() IS
'The running long operations of the server, as the view attention.progress shows them.';

CREATE VIEW progress AS SELECT * FROM progress_status();
COMMENT ON VIEW progress IS
'One row per running long operation of the server (translate_column, evaluate, import_corpus, load_corpus, the Hugging Face imports, average_checkpoints, quantize, and each training job with its phase): pid, database, role, operation, object (the relation, model or checkpoint), done and total units (rows, sentences, tensors; total NULL where not known), started_at, rate (units per second since the start) and seconds_left at that rate. A row goes when its operation ends, fails or is cancelled. Another role''s row shows pid, database, role and operation only (unless the caller has pg_read_all_stats).';
GRANT SELECT ON progress TO PUBLIC;

CREATE FUNCTION memory_status()
RETURNS TABLE (pid integer, database text, model text, device text, weight_bytes bigint, engine_bytes bigint)
AS 'MODULE_PATHNAME', 'attention_memory_status'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION memory_status() IS
'The models every process of the server holds, as the view attention.memory shows them (model NULL for another database''s, unless the caller has pg_read_all_stats).';

CREATE VIEW memory AS
WITH m AS (SELECT * FROM memory_status())
SELECT m.pid, a.backend_type, m.database, m.model, m.device, m.weight_bytes, m.engine_bytes FROM m
  LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = m.pid
UNION ALL
SELECT NULL, 'all processes', NULL, NULL, NULL, coalesce(sum(m.weight_bytes), 0)::bigint,
       coalesce(sum(m.engine_bytes), 0)::bigint FROM m;
COMMENT ON VIEW memory IS
'The memory of the models each process holds (sessions, translation services, training workers; at most 4 per process): pid, backend_type, database, model, device (cpu, cuda), weight_bytes (parameters) and engine_bytes (all the engine''s allocator holds for it: parameters, activations, caches, a training job''s gradients and Adam moments; on a GPU, device memory), as of the process''s last call (model NULL for another database''s, unless the caller has pg_read_all_stats); then one row, backend_type ''all processes'', with the server-wide sums. Shown where the library is preloaded (without it, only while the process reports an operation).';
GRANT SELECT ON memory TO PUBLIC;

-----------------------------------------------------------------------------
-- Per-model statistics that last (0.4.0): counted where the engine runs,
-- saved by the postmaster at a clean shutdown (docs/operations.md).
-----------------------------------------------------------------------------

CREATE FUNCTION statistics_status()
RETURNS TABLE (database oid, model_id integer, calls bigint, sentences bigint, tokens_in bigint, tokens_out bigint,
               engine_seconds double precision, errors bigint)
AS 'MODULE_PATHNAME', 'attention_statistics_status'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION statistics_status() IS
'Every model''s translation counters in every database of the server, as the view attention.statistics shows them.';

CREATE FUNCTION reset_statistics(model text)
RETURNS void
AS 'MODULE_PATHNAME', 'attention_reset_statistics'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION reset_statistics(text) IS
'Zeroes a model''s counters in attention.statistics; its owners only.';

CREATE VIEW statistics AS
SELECT d.datname AS database, s.model_id, m.name AS model, s.calls, s.sentences, s.tokens_in, s.tokens_out,
       s.engine_seconds, s.errors
  FROM statistics_status() s
  JOIN pg_catalog.pg_database d ON d.oid = s.database
  LEFT JOIN models m ON m.model_id = s.model_id AND d.datname = pg_catalog.current_database()
 WHERE d.datname <> pg_catalog.current_database() OR m.model_id IS NOT NULL;
COMMENT ON VIEW statistics IS
'Per model and database: translation calls (a statement''s or a service request''s), sentences, source and translated tokens, seconds in the engine and calls that ended in an ERROR, counted where the engine runs (a session translating itself, a translation service) since the last reset_statistics; saved at a clean shutdown and read back at the next start when the library is preloaded, and written every minute for a crash restart to read (a crash loses the last minute at most). model is NULL for models of other databases; dropped databases and this database''s dropped models are not shown.';
GRANT SELECT ON statistics TO PUBLIC;

-----------------------------------------------------------------------------
-- Decoding defaults per model (0.4.0): a Hugging Face model's own choices
-- (generation_config.json's num_beams and max_length, which
-- scripts/import-hf sets), used where a call leaves beam_size NULL.
-----------------------------------------------------------------------------

ALTER TABLE models ADD COLUMN beam_size integer CHECK (beam_size BETWEEN 1 AND 64);
ALTER TABLE models ADD COLUMN max_output_tokens integer CHECK (max_output_tokens >= 1);
COMMENT ON COLUMN models.beam_size IS 'The beam a call that names none uses (set_decoding; a Hugging Face import takes generation_config.json''s num_beams); NULL: the setting attention.beam_size.';
COMMENT ON COLUMN models.max_output_tokens IS 'Most tokens of a translation, EOS and a forced language token not counted, besides the limit of source tokens + max_length_offset (set_decoding; a Hugging Face import takes generation_config.json''s max_length or max_new_tokens); NULL: no such limit.';
GRANT UPDATE (beam_size, max_output_tokens) ON models TO PUBLIC;

CREATE FUNCTION set_decoding(model text, beam_size integer, max_output_tokens integer)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    mid integer;
BEGIN
    IF model IS NULL THEN
        RAISE EXCEPTION 'model must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF beam_size IS NOT NULL AND (beam_size < 1 OR beam_size > 64) THEN
        RAISE EXCEPTION 'beam_size % is out of range', beam_size
            USING ERRCODE = 'invalid_parameter_value', HINT = 'beam_size must be between 1 (greedy) and 64, or NULL.';
    END IF;
    IF max_output_tokens IS NOT NULL AND max_output_tokens < 1 THEN
        RAISE EXCEPTION 'max_output_tokens % is out of range', max_output_tokens
            USING ERRCODE = 'invalid_parameter_value', HINT = 'max_output_tokens must be 1 or more, or NULL (no limit).';
    END IF;
    mid := attention.require_model_owner(set_decoding.model, 'set the decoding defaults of');
    UPDATE attention.models m SET beam_size = set_decoding.beam_size,
                                  max_output_tokens = set_decoding.max_output_tokens
     WHERE m.model_id = mid;
END
$$;
COMMENT ON FUNCTION set_decoding(text, integer, integer) IS
'Sets the beam a call that names none uses (NULL: the setting attention.beam_size) and the most tokens of a translation (NULL: only source tokens + max_length_offset limit it). Needs the model''s owner.';

-- beam_size NULL, the default now: the model's beam_size, else attention.beam_size
CREATE OR REPLACE FUNCTION evaluate(model text, corpus text, split text DEFAULT 'test', checkpoint bigint DEFAULT NULL,
                                    beam_size integer DEFAULT NULL,
                                    target_language text DEFAULT NULL, source_language text DEFAULT NULL)
RETURNS TABLE (bleu double precision, loss double precision, sentences integer, seconds double precision)
AS 'MODULE_PATHNAME', 'attention_evaluate'
LANGUAGE C VOLATILE COST 1000000 ROWS 1;
CREATE OR REPLACE FUNCTION translate(source text, model text, beam_size integer DEFAULT NULL,
                                     length_penalty double precision DEFAULT 0.6,
                                     max_length_offset integer DEFAULT 50,
                                     target_language text DEFAULT NULL, source_language text DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'attention_translate'
LANGUAGE C STABLE PARALLEL SAFE COST 100000;
CREATE OR REPLACE FUNCTION translate(sources text[], model text DEFAULT NULL, beam_size integer DEFAULT NULL,
                                     length_penalty double precision DEFAULT 0.6,
                                     max_length_offset integer DEFAULT 50,
                                     target_language text DEFAULT NULL, source_language text DEFAULT NULL)
RETURNS text[]
AS 'MODULE_PATHNAME', 'attention_translate_array'
LANGUAGE C STABLE PARALLEL SAFE COST 1000000;
CREATE OR REPLACE FUNCTION translate_nbest(source text, model text DEFAULT NULL, n integer DEFAULT NULL,
                                           beam_size integer DEFAULT NULL,
                                           length_penalty double precision DEFAULT 0.6,
                                           max_length_offset integer DEFAULT 50,
                                           target_language text DEFAULT NULL, source_language text DEFAULT NULL)
RETURNS TABLE (rank integer, translation text, score double precision, tokens text[])
AS 'MODULE_PATHNAME', 'attention_translate_nbest'
LANGUAGE C STABLE PARALLEL SAFE COST 100000 ROWS 4;
COMMENT ON FUNCTION translate(text) IS
'Translates a text with the default model (attention.default_model, or the only deployed one) and its beam_size (set_decoding), else the beam attention.beam_size.';
COMMENT ON FUNCTION translate_nbest(text, text, integer, integer, double precision, integer, text, text) IS
'The n best translations by beam search (n NULL: the whole beam), best first; score is the log-probability of the tokens and EOS (as attention.score).';
COMMENT ON FUNCTION translate(text, text, integer, double precision, integer, text, text) IS
'Translates a text by beam search (beam_size 1 = greedy; NULL: the model''s beam_size, else attention.beam_size; length penalty ((5+len)/6)^alpha; at most source tokens + max_length_offset tokens, and the model''s max_output_tokens); a NULL model means the default model; the languages (multilingual models only) default to the model''s.';
COMMENT ON FUNCTION evaluate(text, text, text, bigint, integer, text, text) IS
'Corpus BLEU of beam-search translations of a split (beam_size NULL: the model''s, else attention.beam_size) and its cross-entropy per target token, for a checkpoint (NULL: the deployed one, else the newest); the corpus is read with the caller''s privileges.';
