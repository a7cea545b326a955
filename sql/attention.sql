-- attention: the install script of the current version (the Makefile copies it to
-- sql/attention--$(EXTVERSION).sql, as pgvector does). Released versions keep their own
-- install scripts unchanged (attention--0.1.0.sql) and reach this one through the upgrade
-- scripts attention--A--B.sql; scripts/test checks that an upgraded schema equals a fresh one.
\echo Use "CREATE EXTENSION attention" to load this file. \quit


-- Schema `attention` is created by CREATE EXTENSION (attention.control).
-- Every table holds user data, so every table and its sequence is registered
-- with pg_extension_config_dump: pg_dump keeps the rows.

-----------------------------------------------------------------------------
-- Corpora
-----------------------------------------------------------------------------

CREATE TABLE corpora (
    corpus_id   serial PRIMARY KEY,
    name        text NOT NULL UNIQUE CHECK (name <> ''),
    source_lang text NOT NULL CHECK (source_lang <> ''),
    target_lang text NOT NULL CHECK (target_lang <> ''),
    created_at  timestamptz NOT NULL DEFAULT now(),
    owner       regrole NOT NULL DEFAULT quote_ident(current_user)::regrole
);
COMMENT ON TABLE corpora IS 'Parallel corpora: one row per named source->target corpus.';
COMMENT ON COLUMN corpora.source_lang IS 'Language code of the source side (e.g. en).';
COMMENT ON COLUMN corpora.target_lang IS 'Language code of the target side (e.g. de).';
COMMENT ON COLUMN corpora.owner IS 'Role that owns the corpus: its members may add pairs to it and drop it.';

CREATE TABLE corpus_pairs (
    pair_id   bigserial PRIMARY KEY,
    corpus_id integer NOT NULL REFERENCES corpora ON DELETE CASCADE,
    split     text NOT NULL DEFAULT 'train' CHECK (split IN ('train', 'valid', 'test')),
    source    text NOT NULL,
    target    text NOT NULL
);
CREATE INDEX corpus_pairs_corpus_split_idx ON corpus_pairs (corpus_id, split);
COMMENT ON TABLE corpus_pairs IS 'Sentence pairs of a corpus; INSERT or COPY into it directly, or use import_corpus/load_corpus.';
COMMENT ON COLUMN corpus_pairs.split IS 'train, valid or test.';
COMMENT ON COLUMN corpus_pairs.source IS 'Source-language sentence.';
COMMENT ON COLUMN corpus_pairs.target IS 'Target-language sentence (reference translation).';

-----------------------------------------------------------------------------
-- Vocabularies (SentencePiece models)
-----------------------------------------------------------------------------

CREATE TABLE vocabularies (
    vocabulary_id      serial PRIMARY KEY,
    name               text NOT NULL UNIQUE CHECK (name <> ''),
    corpus_id          integer REFERENCES corpora ON DELETE SET NULL,
    model_type         text CHECK (model_type IN ('bpe', 'unigram', 'char', 'word')),
    vocab_size         integer NOT NULL CHECK (vocab_size > 0),
    pad_id             integer,
    unk_id             integer NOT NULL,
    bos_id             integer,
    eos_id             integer,
    character_coverage double precision,
    byte_fallback      boolean,
    training_sentences bigint,
    training_seconds   double precision,
    model              bytea NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    target_model       bytea,
    pieces             text[],
    owner              regrole NOT NULL DEFAULT quote_ident(current_user)::regrole,
    CONSTRAINT vocabularies_pair_check CHECK ((target_model IS NULL) = (pieces IS NULL)
        AND (pieces IS NULL OR (array_ndims(pieces) = 1 AND cardinality(pieces) = vocab_size)))
);
COMMENT ON TABLE vocabularies IS 'Subword vocabularies: a SentencePiece model shared by source and target, or (imported Marian models) a pair of them with one table of pieces.';
COMMENT ON COLUMN vocabularies.owner IS 'Role that owns the vocabulary: its members may drop it.';
COMMENT ON COLUMN vocabularies.corpus_id IS 'Corpus the vocabulary was trained on (NULL when imported).';
COMMENT ON COLUMN vocabularies.model_type IS 'SentencePiece model type (NULL when imported).';
COMMENT ON COLUMN vocabularies.pad_id IS 'Padding id (0 for vocabularies trained here; NULL when the model has none).';
COMMENT ON COLUMN vocabularies.unk_id IS 'Unknown-piece id (1 for vocabularies trained here).';
COMMENT ON COLUMN vocabularies.bos_id IS 'Begin-of-sentence id (2 for vocabularies trained here).';
COMMENT ON COLUMN vocabularies.eos_id IS 'End-of-sentence id (3 for vocabularies trained here).';
COMMENT ON COLUMN vocabularies.training_sentences IS 'Sentences (source and target) the model was trained on.';
COMMENT ON COLUMN vocabularies.training_seconds IS 'Wall-clock seconds SentencePiece training took.';
COMMENT ON COLUMN vocabularies.model IS 'Serialized SentencePiece ModelProto, as in a .model file (of the source side when target_model is set).';
COMMENT ON COLUMN vocabularies.target_model IS 'SentencePiece model of the target side (Marian''s target.spm); NULL when model serves both.';
COMMENT ON COLUMN vocabularies.pieces IS 'The piece of every id (Marian''s vocab.json), with target_model; NULL: the SentencePiece model''s own ids.';

-----------------------------------------------------------------------------
-- Models, training jobs, checkpoints
-----------------------------------------------------------------------------

CREATE TABLE models (
    model_id      serial PRIMARY KEY,
    name          text NOT NULL UNIQUE CHECK (name <> ''),
    vocabulary_id integer NOT NULL REFERENCES vocabularies ON DELETE RESTRICT,
    config        jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(config) = 'object'),
    owner         regrole NOT NULL DEFAULT quote_ident(current_user)::regrole,
    created_at    timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE models IS 'Transformer models: a configuration (docs/design.md section 2) over a vocabulary.';
COMMENT ON COLUMN models.config IS 'Model configuration (num_encoder_layers, d_model, num_heads, d_ff, ...).';
COMMENT ON COLUMN models.owner IS 'Role that owns the model: its members may train, deploy, delete checkpoints and drop it.';

CREATE TABLE jobs (
    job_id            bigserial PRIMARY KEY,
    model_id          integer NOT NULL REFERENCES models ON DELETE CASCADE,
    corpus_id         integer NOT NULL REFERENCES corpora ON DELETE RESTRICT,
    options           jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(options) = 'object'),
    submitted_by      name NOT NULL DEFAULT current_user,
    status            text NOT NULL DEFAULT 'queued'
                      CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled', 'interrupted')),
    step              bigint NOT NULL DEFAULT 0 CHECK (step >= 0),
    epoch             integer NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    tokens_seen       bigint NOT NULL DEFAULT 0 CHECK (tokens_seen >= 0),
    train_loss        double precision,
    valid_loss        double precision,
    valid_bleu        double precision,
    learning_rate     double precision,
    tokens_per_second double precision,
    worker_pid        integer,
    cancel_requested  boolean NOT NULL DEFAULT false,
    restarts          integer NOT NULL DEFAULT 0 CHECK (restarts >= 0),
    submitted_at      timestamptz NOT NULL DEFAULT now(),
    started_at        timestamptz,
    updated_at        timestamptz,
    finished_at       timestamptz,
    error             text,
    CHECK (finished_at IS NULL OR status IN ('succeeded', 'failed', 'cancelled', 'interrupted'))
);
CREATE INDEX jobs_model_idx ON jobs (model_id);
CREATE INDEX jobs_live_idx ON jobs (status) WHERE status IN ('queued', 'running', 'interrupted');
COMMENT ON TABLE jobs IS 'Training jobs as the worker writes them; read attention.training_jobs, which also shows jobs whose worker died as interrupted.';
COMMENT ON COLUMN jobs.cancel_requested IS 'Set by cancel_training; the worker reads it once a second and stops with a final checkpoint of its last step, not validated.';
COMMENT ON COLUMN jobs.restarts IS 'Times the launcher resumed the job after a crash or restart.';

CREATE TABLE checkpoints (
    checkpoint_id bigserial PRIMARY KEY,
    model_id      integer NOT NULL REFERENCES models ON DELETE CASCADE,
    job_id        bigint REFERENCES jobs ON DELETE SET NULL,
    kind          text NOT NULL DEFAULT 'trained' CHECK (kind IN ('initial', 'trained', 'average', 'imported')),
    step          bigint NOT NULL CHECK (step >= 0),
    valid_loss    double precision,
    valid_bleu    double precision,
    averaged_from bigint[] CHECK ((kind = 'average') = (averaged_from IS NOT NULL)),
    deployed      boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX checkpoints_model_step_idx ON checkpoints (model_id, step);
CREATE INDEX checkpoints_job_idx ON checkpoints (job_id, step);
CREATE UNIQUE INDEX checkpoints_one_deployed_idx ON checkpoints (model_id) WHERE deployed;
COMMENT ON TABLE checkpoints IS 'Checkpoints of a model: parameters, optimizer state and data position, one row per snapshot.';
COMMENT ON COLUMN checkpoints.kind IS 'initial (initialize_checkpoint), trained (a training job), average (average_checkpoints) or imported (import_checkpoint).';
COMMENT ON COLUMN checkpoints.averaged_from IS 'Checkpoints whose parameters this one averages (kind average only).';
COMMENT ON COLUMN checkpoints.deployed IS 'True for the checkpoint translate() uses; at most one per model.';

CREATE TABLE checkpoint_tensors (
    checkpoint_id bigint NOT NULL REFERENCES checkpoints ON DELETE CASCADE,
    name          text NOT NULL CHECK (name <> ''),
    chunk         integer NOT NULL DEFAULT 0 CHECK (chunk >= 0),
    dtype         text NOT NULL CHECK (dtype IN ('float32', 'bfloat16', 'float16', 'int64', 'int32', 'uint8')),
    shape         bigint[] NOT NULL CHECK (array_ndims(shape) IS NULL OR array_ndims(shape) = 1),
    bytes         bytea NOT NULL,
    PRIMARY KEY (checkpoint_id, name, chunk)
);
-- Float data does not compress: store it out of line without trying.
ALTER TABLE checkpoint_tensors ALTER COLUMN bytes SET STORAGE EXTERNAL;
COMMENT ON TABLE checkpoint_tensors IS 'One row per named tensor of a checkpoint (Hugging Face MarianMT names; optimizer.*, rng.* and data.* hold the training state); tensors over the bytea limit span several chunks.';
COMMENT ON COLUMN checkpoint_tensors.name IS 'Tensor name, e.g. model.encoder.layers.0.self_attn.q_proj.weight.';
COMMENT ON COLUMN checkpoint_tensors.chunk IS 'Chunk number (0-based) of a tensor stored in several rows.';
COMMENT ON COLUMN checkpoint_tensors.shape IS 'Tensor shape, row-major ({} for a scalar).';
COMMENT ON COLUMN checkpoint_tensors.bytes IS 'Raw little-endian tensor data (this chunk of it).';

-- Whether a training worker process with this pid is alive in this cluster
-- (it holds a slot in shared memory). Jobs whose worker is gone read as
-- interrupted, with or without the launcher.
CREATE FUNCTION worker_alive(pid integer)
RETURNS boolean
AS 'MODULE_PATHNAME', 'attention_worker_alive'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION worker_alive(integer) IS
'True while a server process with this pid runs in this cluster (used by the training_jobs view).';

CREATE VIEW training_jobs AS
SELECT j.job_id, j.model_id, j.corpus_id, j.options, j.submitted_by,
       CASE WHEN w.dead THEN 'interrupted' ELSE j.status END AS status,
       j.step, j.epoch, j.tokens_seen, j.train_loss, j.valid_loss, j.valid_bleu, j.learning_rate,
       j.tokens_per_second, j.worker_pid, j.cancel_requested, j.restarts, j.submitted_at, j.started_at,
       j.updated_at, j.finished_at,
       CASE WHEN w.dead THEN 'the training worker exited without finishing (server crash, restart or termination)'
            ELSE j.error END AS error
  FROM attention.jobs j,
       LATERAL (SELECT j.status IN ('queued', 'running')
                       AND (j.worker_pid IS NULL OR NOT attention.worker_alive(j.worker_pid)) AS dead) w;
COMMENT ON VIEW training_jobs IS 'Training jobs, kept current by the training worker (at most every few seconds); a job whose worker died shows as interrupted.';
COMMENT ON COLUMN training_jobs.status IS 'queued, running, succeeded, failed, cancelled or interrupted.';
COMMENT ON COLUMN training_jobs.submitted_by IS 'Role the worker connects as: the job reads only what it can read.';
COMMENT ON COLUMN training_jobs.tokens_seen IS 'Target tokens (labels) trained on so far.';
COMMENT ON COLUMN training_jobs.train_loss IS 'Label-smoothed training loss per target token (nats), mean since the previous update.';
COMMENT ON COLUMN training_jobs.valid_loss IS 'Validation cross-entropy per target token (nats), no label smoothing.';
COMMENT ON COLUMN training_jobs.valid_bleu IS 'BLEU of greedy translations of the first validation_bleu_sentences validation pairs.';
COMMENT ON COLUMN training_jobs.tokens_per_second IS 'Source plus target tokens (no padding) trained per wall-clock second: since the previous update while running, over the whole run (after corpus encoding) once finished.';

-- Privileges: anyone may create a model; the members of a model's owner role
-- may train it, checkpoint it, deploy it and drop it (row-level security; the
-- functions also check and raise a clear error).
CREATE FUNCTION owns_model(model_id integer)
RETURNS boolean
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (SELECT 1 FROM attention.models m
                    WHERE m.model_id = owns_model.model_id AND pg_has_role(m.owner, 'MEMBER'))
$$;
COMMENT ON FUNCTION owns_model(integer) IS
'True when the current role is a member of the model''s owner role.';

ALTER TABLE models ENABLE ROW LEVEL SECURITY;
CREATE POLICY models_read ON models FOR SELECT USING (true);
CREATE POLICY models_create ON models FOR INSERT WITH CHECK (pg_has_role(owner, 'MEMBER'));
CREATE POLICY models_drop ON models FOR DELETE USING (pg_has_role(owner, 'MEMBER'));
ALTER TABLE jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY jobs_read ON jobs FOR SELECT USING (true);
CREATE POLICY jobs_write ON jobs FOR INSERT WITH CHECK (attention.owns_model(model_id));
CREATE POLICY jobs_update ON jobs FOR UPDATE USING (attention.owns_model(model_id));
ALTER TABLE checkpoints ENABLE ROW LEVEL SECURITY;
CREATE POLICY checkpoints_read ON checkpoints FOR SELECT USING (true);
CREATE POLICY checkpoints_write ON checkpoints FOR INSERT WITH CHECK (attention.owns_model(model_id));
CREATE POLICY checkpoints_update ON checkpoints FOR UPDATE USING (attention.owns_model(model_id));
CREATE POLICY checkpoints_delete ON checkpoints FOR DELETE USING (attention.owns_model(model_id));
ALTER TABLE checkpoint_tensors ENABLE ROW LEVEL SECURITY;
CREATE POLICY checkpoint_tensors_owner ON checkpoint_tensors
    USING (attention.owns_model((SELECT c.model_id FROM attention.checkpoints c
                                  WHERE c.checkpoint_id = checkpoint_tensors.checkpoint_id)));

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

SELECT pg_catalog.pg_extension_config_dump('corpora', '');
SELECT pg_catalog.pg_extension_config_dump('corpora_corpus_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('corpus_pairs', '');
SELECT pg_catalog.pg_extension_config_dump('corpus_pairs_pair_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('vocabularies', '');
SELECT pg_catalog.pg_extension_config_dump('vocabularies_vocabulary_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('models', '');
SELECT pg_catalog.pg_extension_config_dump('models_model_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('jobs', '');
SELECT pg_catalog.pg_extension_config_dump('jobs_job_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('checkpoints', '');
SELECT pg_catalog.pg_extension_config_dump('checkpoints_checkpoint_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('checkpoint_tensors', '');

-- Everyone may look; corpora and vocabularies take explicit grants from the
-- DBA to create; models, jobs and checkpoints are written by their owners,
-- corpora and vocabularies changed and dropped by theirs (row-level security
-- above).
GRANT USAGE ON SCHEMA attention TO PUBLIC;
GRANT SELECT ON corpora, vocabularies, models, jobs, training_jobs, checkpoints TO PUBLIC;
GRANT INSERT, DELETE ON models TO PUBLIC;
GRANT INSERT, UPDATE ON jobs TO PUBLIC;
GRANT INSERT, UPDATE, DELETE ON checkpoints TO PUBLIC;
GRANT SELECT, INSERT ON checkpoint_tensors TO PUBLIC;
GRANT USAGE ON SEQUENCE models_model_id_seq, jobs_job_id_seq, checkpoints_checkpoint_id_seq TO PUBLIC;

-----------------------------------------------------------------------------
-- Corpus functions
-----------------------------------------------------------------------------

CREATE FUNCTION create_corpus(name text, source_lang text, target_lang text)
RETURNS integer
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_id integer;
BEGIN
    IF EXISTS (SELECT 1 FROM attention.corpora c WHERE c.name = create_corpus.name) THEN
        RAISE EXCEPTION 'corpus "%" already exists', create_corpus.name
            USING ERRCODE = 'duplicate_object',
                  HINT = 'Choose another name, or add pairs to the existing corpus.';
    END IF;
    INSERT INTO attention.corpora (name, source_lang, target_lang)
    VALUES (create_corpus.name, create_corpus.source_lang, create_corpus.target_lang)
    RETURNING corpus_id INTO new_id;
    RETURN new_id;
END
$$;
COMMENT ON FUNCTION create_corpus(text, text, text) IS
'Creates an empty parallel corpus and returns its id.';

CREATE FUNCTION import_corpus(corpus text, query text, split text DEFAULT 'train')
RETURNS bigint
AS 'MODULE_PATHNAME', 'attention_import_corpus'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION import_corpus(text, text, text) IS
'Appends the (source, target) rows of any query to a corpus split, with the caller''s privileges; returns the number of pairs.';

CREATE FUNCTION load_corpus(corpus text, source_path text, target_path text, split text DEFAULT 'train')
RETURNS bigint
AS 'MODULE_PATHNAME', 'attention_load_corpus'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION load_corpus(text, text, text, text) IS
'Appends line-aligned UTF-8 files on the server (Moses style) to a corpus split; requires pg_read_server_files; returns the number of pairs.';

-----------------------------------------------------------------------------
-- Vocabulary functions
-----------------------------------------------------------------------------

CREATE FUNCTION train_vocabulary(name text, corpus text, vocab_size integer DEFAULT 8000,
                                 model_type text DEFAULT 'bpe',
                                 character_coverage double precision DEFAULT 1.0,
                                 byte_fallback boolean DEFAULT true,
                                 max_pairs integer DEFAULT 0)
RETURNS integer
AS 'MODULE_PATHNAME', 'attention_train_vocabulary'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION train_vocabulary(text, text, integer, text, double precision, boolean, integer) IS
'Trains one joint source+target SentencePiece model in memory on the corpus''s train split and stores it; returns its id.';

CREATE FUNCTION import_vocabulary(name text, model bytea)
RETURNS integer
AS 'MODULE_PATHNAME', 'attention_import_vocabulary'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION import_vocabulary(text, bytea) IS
'Stores an existing SentencePiece .model (its bytes) as a vocabulary; returns its id.';

CREATE FUNCTION encode(source text, vocabulary text)
RETURNS integer[]
AS 'MODULE_PATHNAME', 'attention_encode'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION encode(text, text) IS
'Subword ids of a text under a vocabulary (no BOS/EOS added).';

CREATE FUNCTION tokenize(source text, vocabulary text)
RETURNS text[]
AS 'MODULE_PATHNAME', 'attention_tokenize'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION tokenize(text, text) IS
'Subword pieces of a text under a vocabulary.';

CREATE FUNCTION decode(ids integer[], vocabulary text)
RETURNS text
AS 'MODULE_PATHNAME', 'attention_decode'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION decode(integer[], text) IS
'Text of a sequence of subword ids under a vocabulary (control ids such as BOS/EOS/pad are dropped).';

CREATE FUNCTION vocabulary_pieces(vocabulary text)
RETURNS TABLE (id integer, piece text, score real)
AS 'MODULE_PATHNAME', 'attention_vocabulary_pieces'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION vocabulary_pieces(text) IS
'Every piece of a vocabulary with its id and SentencePiece score.';

-----------------------------------------------------------------------------
-- BLEU (sacreBLEU 2.x defaults: 13a tokenization, case-sensitive, exp smoothing)
-----------------------------------------------------------------------------

CREATE FUNCTION bleu(hypothesis text, reference text)
RETURNS double precision
AS 'MODULE_PATHNAME', 'attention_bleu'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION bleu(text, text) IS
'Sentence BLEU (0-100) as sacrebleu.sentence_bleu computes it by default.';

CREATE FUNCTION bleu_accum(double precision[], text, text)
RETURNS double precision[]
AS 'MODULE_PATHNAME', 'attention_bleu_accum'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION bleu_accum(double precision[], text, text) IS
'Transition function of corpus_bleu: adds one segment''s BLEU statistics.';

CREATE FUNCTION bleu_combine(double precision[], double precision[])
RETURNS double precision[]
AS 'MODULE_PATHNAME', 'attention_bleu_combine'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION bleu_combine(double precision[], double precision[]) IS
'Combine function of corpus_bleu: adds two partial BLEU statistics.';

CREATE FUNCTION bleu_final(double precision[])
RETURNS double precision
AS 'MODULE_PATHNAME', 'attention_bleu_final'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION bleu_final(double precision[]) IS
'Final function of corpus_bleu: BLEU (0-100) from summed statistics.';

CREATE AGGREGATE corpus_bleu(hypothesis text, reference text) (
    SFUNC = bleu_accum,
    STYPE = double precision[],
    FINALFUNC = bleu_final,
    COMBINEFUNC = bleu_combine,
    INITCOND = '{0,0,0,0,0,0,0,0,0,0}',
    PARALLEL = SAFE
);
COMMENT ON AGGREGATE corpus_bleu(text, text) IS
'Corpus BLEU (0-100) as sacrebleu.corpus_bleu computes it by default; rows with a NULL are skipped.';

-----------------------------------------------------------------------------
-- Models and checkpoints
-----------------------------------------------------------------------------

-- The id of model `model` when the current role may change it (is a member of
-- its owner role); ERROR otherwise. Every function that trains, checkpoints,
-- deploys or drops a model calls it first.
CREATE FUNCTION require_model_owner(model text, action text)
RETURNS integer
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    mid integer;
    owner_role regrole;
BEGIN
    SELECT m.model_id, m.owner INTO mid, owner_role FROM attention.models m WHERE m.name = model;
    IF mid IS NULL THEN
        RAISE EXCEPTION 'model "%" does not exist', model
            USING ERRCODE = 'undefined_object',
                  HINT = 'Create it with attention.create_model(name, vocabulary, config).';
    END IF;
    IF NOT pg_has_role(owner_role, 'MEMBER') THEN
        RAISE EXCEPTION 'permission denied to % model "%"', action, model
            USING ERRCODE = 'insufficient_privilege',
                  HINT = format('Only members of its owner role %s may.', owner_role);
    END IF;
    RETURN mid;
END
$$;
COMMENT ON FUNCTION require_model_owner(text, text) IS
'Id of a model the current role owns (is a member of its owner role); ERROR naming the model and the action otherwise.';

CREATE FUNCTION create_model(name text, vocabulary text, config jsonb DEFAULT '{}')
RETURNS integer
AS 'MODULE_PATHNAME', 'attention_create_model'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION create_model(text, text, jsonb) IS
'Creates a Transformer model over a vocabulary; config overrides the paper''s base model key by key (or names a preset: base, big, small) and is stored in full; returns the model id.';

CREATE FUNCTION initialize_checkpoint(model text, seed bigint DEFAULT 0)
RETURNS bigint
AS 'MODULE_PATHNAME', 'attention_initialize_checkpoint'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION initialize_checkpoint(text, bigint) IS
'Writes a step-0 checkpoint of a model with the paper''s initialisation drawn from seed (one row per tensor); returns its id.';

CREATE FUNCTION deploy(model text, checkpoint bigint DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    mid integer;
    chosen bigint;
BEGIN
    IF model IS NULL THEN
        RAISE EXCEPTION 'model must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    mid := attention.require_model_owner(deploy.model, 'deploy');
    IF checkpoint IS NULL THEN
        SELECT c.checkpoint_id INTO chosen FROM attention.checkpoints c
         WHERE c.model_id = mid
         ORDER BY c.kind = 'average' DESC, c.step DESC, c.checkpoint_id DESC LIMIT 1;
        IF chosen IS NULL THEN
            RAISE EXCEPTION 'model "%" has no checkpoints', deploy.model
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Train it with attention.train, or create one with attention.initialize_checkpoint.';
        END IF;
    ELSE
        SELECT c.checkpoint_id INTO chosen FROM attention.checkpoints c
         WHERE c.checkpoint_id = deploy.checkpoint AND c.model_id = mid;
        IF chosen IS NULL THEN
            RAISE EXCEPTION 'checkpoint % is not a checkpoint of model "%"', deploy.checkpoint, deploy.model
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    UPDATE attention.checkpoints SET deployed = false WHERE model_id = mid AND deployed AND checkpoint_id <> chosen;
    UPDATE attention.checkpoints SET deployed = true WHERE checkpoint_id = chosen AND NOT deployed;
    RETURN chosen;
END
$$;
COMMENT ON FUNCTION deploy(text, bigint) IS
'Makes a checkpoint the one translation uses for a model (NULL: the newest average, else the newest); returns its id.';

CREATE FUNCTION average_checkpoints(model text, last_n integer DEFAULT 5)
RETURNS bigint
AS 'MODULE_PATHNAME', 'attention_average_checkpoints'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION average_checkpoints(text, integer) IS
'Writes a checkpoint whose parameters are the element-wise mean of the model''s last_n newest trained checkpoints (averaged_from lists them); returns its id.';

CREATE FUNCTION delete_checkpoint(checkpoint bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    model_name text;
BEGIN
    SELECT m.name INTO model_name FROM attention.checkpoints c JOIN attention.models m USING (model_id)
     WHERE c.checkpoint_id = checkpoint;
    IF model_name IS NULL THEN
        RAISE EXCEPTION 'checkpoint % does not exist', checkpoint USING ERRCODE = 'undefined_object';
    END IF;
    PERFORM attention.require_model_owner(model_name, 'delete a checkpoint of');
    IF EXISTS (SELECT 1 FROM attention.checkpoints c WHERE c.checkpoint_id = checkpoint AND c.deployed) THEN
        RAISE EXCEPTION 'checkpoint % is deployed', checkpoint
            USING ERRCODE = 'object_in_use',
                  HINT = 'Deploy another checkpoint of the model first (attention.deploy).';
    END IF;
    DELETE FROM attention.checkpoints c WHERE c.checkpoint_id = checkpoint;
END
$$;
COMMENT ON FUNCTION delete_checkpoint(bigint) IS
'Deletes a checkpoint and its tensors; refuses the deployed one.';

CREATE FUNCTION drop_model(name text)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    mid integer;
BEGIN
    mid := attention.require_model_owner(drop_model.name, 'drop');
    IF EXISTS (SELECT 1 FROM attention.training_jobs j WHERE j.model_id = mid AND j.status IN ('queued', 'running')) THEN
        RAISE EXCEPTION 'model "%" has a training job queued or running', drop_model.name
            USING ERRCODE = 'object_in_use',
                  HINT = 'Cancel it first with attention.cancel_training(job).';
    END IF;
    DELETE FROM attention.models m WHERE m.model_id = mid;
END
$$;
COMMENT ON FUNCTION drop_model(text) IS
'Drops a model with its checkpoints and jobs; refuses while a job is queued or running.';

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

-----------------------------------------------------------------------------
-- Training jobs (bgworker/)
-----------------------------------------------------------------------------

CREATE FUNCTION train(model text, corpus text, options jsonb DEFAULT '{}')
RETURNS bigint
AS 'MODULE_PATHNAME', 'attention_train'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION train(text, text, jsonb) IS
'Submits a training job (options: max_steps, max_epochs, max_minutes, batch_tokens, warmup_steps, learning_rate_scale, label_smoothing, dropout, accumulate_batches, batches_per_step, checkpoint_every_steps, checkpoint_every_minutes, keep_checkpoints, keep_history, validate_every_steps, validation_bleu_sentences, seed, init_checkpoint (a checkpoint of the model to start from: fine-tuning), device ("cpu", "cuda", "cuda:N", "cuda:N,M,..." or "cuda:all": one rank per GPU), precision ("fp32" or "bf16"; bf16 by default on CUDA devices), threads, nodes) and returns its id at once; a background worker connected as the caller trains.';

CREATE FUNCTION resume_training(job bigint, options jsonb DEFAULT '{}')
RETURNS bigint
AS 'MODULE_PATHNAME', 'attention_resume_training'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION resume_training(bigint, jsonb) IS
'Continues a stopped job from its newest checkpoint (in the data order an uninterrupted run would see); options may change its limits, checkpoint cadence, devices (a step keeps its batches_per_step batches) and precision; returns the job id.';

CREATE FUNCTION cancel_training(job bigint)
RETURNS text
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    model_name text;
    shown text;
BEGIN
    SELECT m.name, v.status INTO model_name, shown
      FROM attention.training_jobs v JOIN attention.models m USING (model_id) WHERE v.job_id = job;
    IF model_name IS NULL THEN
        RAISE EXCEPTION 'training job % does not exist', job USING ERRCODE = 'undefined_object';
    END IF;
    PERFORM attention.require_model_owner(model_name, 'cancel training of');
    IF shown IN ('queued', 'running') THEN
        UPDATE attention.jobs SET cancel_requested = true WHERE job_id = job;
        RETURN 'cancelling';
    ELSIF shown = 'interrupted' THEN
        UPDATE attention.jobs SET status = 'cancelled', finished_at = coalesce(finished_at, now()), error = NULL
         WHERE job_id = job;
        RETURN 'cancelled';
    END IF;
    RETURN shown;
END
$$;
COMMENT ON FUNCTION cancel_training(bigint) IS
'Asks a job''s worker to stop: it reads the request once a second, writes a final checkpoint of its last step (not validated) and ends as cancelled; returns cancelling, or the status of a job that has already stopped.';

-- A job whose worker has just committed its final status and exited could
-- read as interrupted (the view's snapshot predates the commit, its liveness check follows
-- the exit); a second look, with a snapshot taken after the exit was seen, tells the two apart.
CREATE FUNCTION wait_training(job bigint, timeout interval DEFAULT NULL)
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

CREATE FUNCTION export_checkpoint(checkpoint bigint)
RETURNS bytea
AS 'MODULE_PATHNAME', 'attention_export_checkpoint'
LANGUAGE C STABLE STRICT;
COMMENT ON FUNCTION export_checkpoint(bigint) IS
'A checkpoint''s parameters as a safetensors file (Hugging Face MarianMT tensor names; the model configuration and the base64 SentencePiece vocabulary in its metadata); needs the model''s owner.';

CREATE FUNCTION import_checkpoint(model text, data bytea)
RETURNS bigint
AS 'MODULE_PATHNAME', 'attention_import_checkpoint'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION import_checkpoint(text, bytea) IS
'Stores a safetensors file holding exactly the model''s parameters (names, shapes, F32) as a new checkpoint of kind imported; returns its id.';

CREATE FUNCTION evaluate(model text, corpus text, split text DEFAULT 'test', checkpoint bigint DEFAULT NULL,
                         beam_size integer DEFAULT 4,
                         target_language text DEFAULT NULL, source_language text DEFAULT NULL)
RETURNS TABLE (bleu double precision, loss double precision, sentences integer, seconds double precision)
AS 'MODULE_PATHNAME', 'attention_evaluate'
LANGUAGE C VOLATILE COST 1000000 ROWS 1;
COMMENT ON FUNCTION evaluate(text, text, text, bigint, integer, text, text) IS
'Corpus BLEU of beam-search translations of a split and its cross-entropy per target token, for a checkpoint (NULL: the deployed one, else the newest); the corpus is read with the caller''s privileges.';

-----------------------------------------------------------------------------
-- Translation
-----------------------------------------------------------------------------

-- One argument: unqualified translate('...') resolves here (PostgreSQL's own
-- translate takes three text arguments and is unaffected).
CREATE FUNCTION translate(source text)
RETURNS text
AS 'MODULE_PATHNAME', 'attention_translate_default'
LANGUAGE C STABLE STRICT PARALLEL SAFE COST 100000;
COMMENT ON FUNCTION translate(text) IS
'Translates a text with the default model (attention.default_model, or the only deployed one) and beam attention.beam_size.';

CREATE FUNCTION translate(source text, model text, beam_size integer DEFAULT 4,
                          length_penalty double precision DEFAULT 0.6,
                          max_length_offset integer DEFAULT 50,
                          target_language text DEFAULT NULL, source_language text DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'attention_translate'
LANGUAGE C STABLE PARALLEL SAFE COST 100000;
COMMENT ON FUNCTION translate(text, text, integer, double precision, integer, text, text) IS
'Translates a text by beam search (beam_size 1 = greedy; length penalty ((5+len)/6)^alpha; at most source tokens + max_length_offset tokens); a NULL model means the default model; the languages (multilingual models only) default to the model''s.';

CREATE FUNCTION translate(sources text[], model text DEFAULT NULL, beam_size integer DEFAULT 4,
                          length_penalty double precision DEFAULT 0.6,
                          max_length_offset integer DEFAULT 50,
                          target_language text DEFAULT NULL, source_language text DEFAULT NULL)
RETURNS text[]
AS 'MODULE_PATHNAME', 'attention_translate_array'
LANGUAGE C STABLE PARALLEL SAFE COST 1000000;
COMMENT ON FUNCTION translate(text[], text, integer, double precision, integer, text, text) IS
'Translates many texts in length-sorted batches; results in input order (NULL stays NULL).';

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

CREATE FUNCTION score(source text, target text, model text DEFAULT NULL,
                      target_language text DEFAULT NULL, source_language text DEFAULT NULL)
RETURNS double precision
AS 'MODULE_PATHNAME', 'attention_score'
LANGUAGE C STABLE PARALLEL SAFE COST 10000;
COMMENT ON FUNCTION score(text, text, text, text, text) IS
'Natural-log probability of the target''s subword tokens plus EOS given the source (no dropout, no label smoothing); for a multilingual model given the target language''s token too, which decoding forces (it counts 0).';

CREATE FUNCTION attention_weights(source text, target text DEFAULT NULL, model text DEFAULT NULL,
                                  target_language text DEFAULT NULL, source_language text DEFAULT NULL)
RETURNS TABLE (kind text, layer integer, head integer, query_pos integer, query_token text,
               key_pos integer, key_token text, weight real)
AS 'MODULE_PATHNAME', 'attention_attention_weights'
LANGUAGE C STABLE PARALLEL SAFE COST 100000 ROWS 10000;
COMMENT ON FUNCTION attention_weights(text, text, text, text, text) IS
'Every attention probability (encoder_self, decoder_self, cross) of the model reading source and target (NULL: its own translation); positions from 0.';

CREATE FUNCTION align(source text, target text, model text DEFAULT NULL,
                      target_language text DEFAULT NULL, source_language text DEFAULT NULL)
RETURNS TABLE (target_pos integer, target_token text, source_pos integer, source_token text, weight real)
AS 'MODULE_PATHNAME', 'attention_align'
LANGUAGE C STABLE PARALLEL SAFE COST 10000 ROWS 1000;
COMMENT ON FUNCTION align(text, text, text, text, text) IS
'Word alignment from cross-attention: for each target token (and EOS), the last decoder layer''s attention over source tokens, averaged over heads.';

CREATE PROCEDURE translate_column(relation regclass, source_column name, target_column name,
                                  model text DEFAULT NULL, batch_size integer DEFAULT 64,
                                  target_language text DEFAULT NULL, source_language text DEFAULT NULL)
AS 'MODULE_PATHNAME', 'attention_translate_column'
LANGUAGE C;
COMMENT ON PROCEDURE translate_column(regclass, name, name, text, integer, text, text) IS
'Translates rows whose target is NULL and source is not, in length-sorted batches, committing after each batch (resumable); rows are addressed by the primary key.';

-----------------------------------------------------------------------------
-- Added in 0.2.0 (attention--0.1.0--0.2.0.sql adds the same to a 0.1.0 schema)
-----------------------------------------------------------------------------

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
    state       text NOT NULL DEFAULT 'waiting'
                CHECK (state IN ('waiting', 'claimed', 'joined', 'training', 'finished', 'failed')),
    worker_pid  integer,
    claimed_at  timestamptz,
    error       text,
    step        bigint,
    heartbeat_at timestamptz,
    PRIMARY KEY (job_id, node)
);
COMMENT ON TABLE job_ranks IS
'The nodes of a training job that spans machines ("nodes" > 1): each node''s rank range and the NCCL communicator id the coordinator made; a node''s worker claims a waiting row, joins, trains (step, heartbeat) and finishes, or fails saying why.';
COMMENT ON COLUMN job_ranks.unique_id IS 'ncclUniqueId (128 bytes): whoever reads it can join the communicator, so only the model''s owners see it.';
COMMENT ON COLUMN job_ranks.state IS 'waiting (published), claimed (a worker has it), joined (its ranks are joining the communicator), training (its ranks run the steps every node runs), finished (it stopped after the step all nodes agreed on), failed (error says why).';
COMMENT ON COLUMN job_ranks.step IS 'The last step the node''s ranks finished (written with each heartbeat and at the end).';
COMMENT ON COLUMN job_ranks.heartbeat_at IS 'When the node''s worker last wrote its row while training (about every second).';

ALTER TABLE job_ranks ENABLE ROW LEVEL SECURITY;
CREATE POLICY job_ranks_owner ON job_ranks
    USING (attention.owns_model((SELECT j.model_id FROM attention.jobs j WHERE j.job_id = job_ranks.job_id)));
GRANT SELECT, INSERT, UPDATE, DELETE ON job_ranks TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('job_ranks', '');

-----------------------------------------------------------------------------
-- Training functions
-----------------------------------------------------------------------------

CREATE FUNCTION join_training(job bigint)
RETURNS integer
AS 'MODULE_PATHNAME', 'attention_join_training'
LANGUAGE C VOLATILE STRICT;
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

-- Checkpoints carry the format of their tensors; a library refuses a format it does not know.
ALTER TABLE checkpoints ADD COLUMN format integer NOT NULL DEFAULT 1 CHECK (format >= 1);
COMMENT ON COLUMN checkpoints.format IS
'Layout of the checkpoint''s tensors (names, meanings, the data.* counters): 1. A library refuses to load a format it does not know.';

CREATE FUNCTION import_huggingface(model text, config jsonb, safetensors bytea, vocab jsonb,
                                   source_spm bytea, target_spm bytea, replace boolean DEFAULT false)
RETURNS bigint
AS 'MODULE_PATHNAME', 'attention_import_huggingface'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION import_huggingface(text, jsonb, bytea, jsonb, bytea, bytea, boolean) IS
'Imports a Hugging Face MarianMT model (OPUS-MT layout: config.json, model.safetensors, vocab.json, source.spm, target.spm) as a new model and vocabulary, both named model, with its parameters as a checkpoint of kind imported (not deployed); returns the checkpoint id. replace first drops a model and a vocabulary of that name (drop_model, drop_vocabulary: the caller''s own only, and a vocabulary no other model uses). scripts/import-hf reads a directory.';

CREATE FUNCTION export_huggingface(checkpoint bigint)
RETURNS TABLE (file text, data bytea)
AS 'MODULE_PATHNAME', 'attention_export_huggingface'
LANGUAGE C STABLE STRICT ROWS 7;
COMMENT ON FUNCTION export_huggingface(bigint) IS
'A checkpoint as the files of a Hugging Face MarianMT model (config.json, model.safetensors, source.spm, target.spm, vocab.json, tokenizer_config.json, generation_config.json) that MarianMTModel and MarianTokenizer load; needs the model''s owner. scripts/export-hf writes them to a directory.';

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
