-- The translation service (the test cluster preloads the library): one process per
-- (database, model) that decodes the requests of every session in shared batches. Uses
-- a tiny model of its own; every result through the service is compared with the
-- in-backend path, never printed.
-- Its own corpus and vocabulary (the pairs of translate.sql's), so the file runs alone.
-- Its jobs and checkpoints are numbered from 6000, so messages naming them read the same alone.
SELECT setval('attention.jobs_job_id_seq', 6000, false) AS first_job,
       setval('attention.checkpoints_checkpoint_id_seq', 6000, false) AS first_checkpoint \gset
SELECT attention.create_corpus('sv_corpus', 'en', 'de') > 0 AS created;
SELECT attention.import_corpus('sv_corpus', $$
  SELECT 'the package provides ' || w || ' files for ' || v, 'das Paket enthält ' || w || ' Dateien für ' || v
    FROM unnest(ARRAY['data', 'library', 'documentation', 'development', 'example']) AS w,
         unnest(ARRAY['python', 'perl', 'ruby', 'java', 'debian', 'gnome']) AS v$$);
SELECT attention.train_vocabulary('sv_vocab', 'sv_corpus', vocab_size => 80, byte_fallback => false) > 0 AS trained;
SELECT attention.create_model('sv_tiny', 'sv_vocab', '{"num_encoder_layers": 1, "num_decoder_layers": 2, "d_model": 16,
  "num_heads": 2, "d_ff": 32, "max_positions": 128}') > 0 AS created;
SELECT attention.initialize_checkpoint('sv_tiny', 7) AS seed7 \gset
SELECT attention.initialize_checkpoint('sv_tiny', 8) > 0 AS initialized;
SELECT attention.deploy('sv_tiny', :seed7) = :seed7 AS deployed;
SET search_path = public, attention;
SET attention.default_model = 'sv_tiny';
SET attention.use_service = off;
SELECT count(*) AS services FROM attention.services WHERE model LIKE 'sv%';
-- sources with NULLs, '' and duplicates (rows 121 to 150 repeat rows 1 to 30)
CREATE TABLE sv_bt (id integer PRIMARY KEY, en text);
INSERT INTO sv_bt
  SELECT i, CASE WHEN i % 17 = 0 THEN NULL WHEN i % 19 = 0 THEN ''
                 ELSE 'the package provides ' || (SELECT string_agg((ARRAY['data', 'library', 'documentation',
                        'development', 'example'])[1 + (i % 120 / 5 ^ k)::int % 5], ' files for ')
                        FROM generate_series(0, 2 + i % 3) AS k) END
    FROM generate_series(1, 150) AS i;
ANALYZE sv_bt;

-- references, translated in this backend
CREATE TABLE sv_ref AS
  SELECT id, translate(en) AS t1, attention.translate(en, 'sv_tiny', 1) AS greedy,
         attention.translate(en, 'sv_tiny', 2, 1.0, 10) AS beam2,
         attention.score(en, 'das Paket enthält Dateien', 'sv_tiny') AS score
    FROM sv_bt;
SELECT count(DISTINCT t1) >= 30 AS varied_translations, count(DISTINCT score) >= 30 AS varied_scores FROM sv_ref;
CREATE TABLE sv_nbest_ref AS
  SELECT id, n.* FROM sv_bt, attention.translate_nbest(en, 'sv_tiny', 3, 3, 0.6, 20) AS n WHERE id <= 40;
CREATE TABLE sv_array_ref AS
  SELECT attention.translate(array_agg(en ORDER BY id), 'sv_tiny', 3) AS t FROM sv_bt;

-- start (only the model's owners may), find the running one, list it
CREATE ROLE regress_sv_reader;
GRANT USAGE ON SCHEMA public TO regress_sv_reader;
GRANT SELECT ON sv_bt, sv_ref TO regress_sv_reader;
SET ROLE regress_sv_reader;
SELECT attention.start_service('sv_tiny');
RESET ROLE;
SELECT attention.start_service('sv_tiny', 'tpu');
SELECT attention.start_service('nope');
SELECT attention.create_model('sv_undeployed', 'sv_vocab', '{"num_encoder_layers": 1, "num_decoder_layers": 1,
  "d_model": 16, "num_heads": 2, "d_ff": 32}') > 0 AS created;
SELECT attention.start_service('sv_undeployed');  -- it loads the deployed checkpoint before it takes requests
SELECT attention.drop_model('sv_undeployed');
SELECT attention.start_service('sv_tiny') > 0 AS started;
SELECT attention.start_service('sv_tiny') = pid AS same_service FROM attention.services WHERE model LIKE 'sv%';
SELECT database = current_database() AS this_database, model,
       checkpoint = (SELECT checkpoint_id FROM attention.checkpoints c JOIN attention.models m USING (model_id)
                      WHERE m.name = 'sv_tiny' AND c.deployed) AS deployed_checkpoint_loaded,
       device, state, queue_depth, requests, automatic
  FROM attention.services WHERE model LIKE 'sv%';

-- through the service: per-row calls (each a request: 142 non-NULL sources, 4 calls each), batched rows, arrays, n-best lists, scores
SET attention.use_service = auto;
SET attention.batch_rows = 0;
CREATE TABLE sv_row AS
  SELECT id, translate(en) AS t1, attention.translate(en, 'sv_tiny', 1) AS greedy,
         attention.translate(en, 'sv_tiny', 2, 1.0, 10) AS beam2,
         attention.score(en, 'das Paket enthält Dateien', 'sv_tiny') AS score
    FROM sv_bt;
SELECT count(*) AS rows,
       count(*) FILTER (WHERE s.t1 IS NOT DISTINCT FROM r.t1 AND s.greedy IS NOT DISTINCT FROM r.greedy
                          AND s.beam2 IS NOT DISTINCT FROM r.beam2) AS equal_translations,
       count(*) FILTER (WHERE s.score IS NOT DISTINCT FROM r.score) AS equal_scores
  FROM sv_row s JOIN sv_ref r USING (id);
SELECT requests, sentences, tokens > 0 AS tokens, queue_depth
  FROM attention.services WHERE model LIKE 'sv%';
RESET attention.batch_rows;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF, BUFFERS OFF)
  SELECT id, translate(en) FROM sv_bt WHERE id <= 40;  -- 40 rows, one service request per batch of 64
CREATE TABLE sv_batch AS
  SELECT id, translate(en) AS t1, attention.translate(en, 'sv_tiny', 1) AS greedy,
         attention.translate(en, 'sv_tiny', 2, 1.0, 10) AS beam2
    FROM sv_bt;
SELECT count(*) FILTER (WHERE s.t1 IS NOT DISTINCT FROM r.t1 AND s.greedy IS NOT DISTINCT FROM r.greedy
                          AND s.beam2 IS NOT DISTINCT FROM r.beam2) AS batched_equal
  FROM sv_batch s JOIN sv_ref r USING (id);
SELECT attention.translate(array_agg(en ORDER BY id), 'sv_tiny', 3) = (SELECT t FROM sv_array_ref) AS array_equal FROM sv_bt;
SELECT count(*) AS nbest_rows,
       count(*) FILTER (WHERE n.translation = r.translation AND n.score = r.score AND n.tokens = r.tokens) AS nbest_equal
  FROM (SELECT id, n.* FROM sv_bt, attention.translate_nbest(en, 'sv_tiny', 3, 3, 0.6, 20) AS n WHERE id <= 40) AS n
  JOIN sv_nbest_ref r USING (id, rank);
SELECT * FROM attention.translate_nbest(NULL, 'sv_tiny');
SELECT rank, translation, score, tokens FROM attention.translate_nbest('', 'sv_tiny', 2);
SELECT attention.score(NULL, 'x', 'sv_tiny') IS NULL AS null_score, attention.translate(NULL, 'sv_tiny') IS NULL AS null_translation;

-- the model's decoding defaults (set_decoding) reach the service: equal to this backend's, which they change
SELECT attention.set_decoding('sv_tiny', 2, 3);
SET attention.use_service = off;
CREATE TABLE sv_decoding_ref AS
  SELECT id, translate(en) AS t, n.hypotheses, n.longest
    FROM sv_bt, LATERAL (SELECT count(*) AS hypotheses, max(cardinality(tokens)) AS longest
                           FROM attention.translate_nbest(en, 'sv_tiny')) AS n WHERE id <= 40;
SET attention.use_service = on;
SELECT count(*) FILTER (WHERE s.t IS NOT DISTINCT FROM r.t AND s.hypotheses = r.hypotheses
                          AND s.longest IS NOT DISTINCT FROM r.longest) AS decoding_equal,
       bool_and(r.hypotheses = 2 OR r.t = '') AS beam_of_the_model, max(r.longest) AS longest,
       count(*) FILTER (WHERE r.t IS DISTINCT FROM o.t1) > 0 AS defaults_changed_translations
  FROM (SELECT id, translate(en) AS t, n.hypotheses, n.longest
          FROM sv_bt, LATERAL (SELECT count(*) AS hypotheses, max(cardinality(tokens)) AS longest
                                 FROM attention.translate_nbest(en, 'sv_tiny')) AS n WHERE id <= 40) AS s
  JOIN sv_decoding_ref r USING (id) JOIN sv_ref o USING (id);
SELECT attention.set_decoding('sv_tiny', NULL, NULL);
SET attention.use_service = auto;

-- parallel workers send their rows too
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;
SET attention.batch_rows = 0;
SELECT count(*) FILTER (WHERE s.t IS NOT DISTINCT FROM r.t1) AS parallel_equal
  FROM (SELECT id, translate(en) AS t FROM sv_bt) s JOIN sv_ref r USING (id);
RESET attention.batch_rows;
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
RESET min_parallel_table_scan_size;
RESET max_parallel_workers_per_gather;

-- the same errors as in a backend: each request's own, the service lives on
SET attention.max_input_tokens = 3;
SELECT attention.translate('the package provides data files', 'sv_tiny');
SELECT attention.score('the package provides data files', 'x', 'sv_tiny');
SELECT * FROM attention.translate_nbest('the package provides data files', 'sv_tiny');
RESET attention.max_input_tokens;
SELECT attention.translate('x', 'sv_tiny', 0);
SELECT attention.translate('x', 'sv_tiny', 2, NULL);
SELECT state, queue_depth FROM attention.services WHERE model LIKE 'sv%';

-- a role that may not read the model's checkpoints translates the deployed one, as without a service
SET ROLE regress_sv_reader;
SELECT count(*) AS readable_tensors FROM attention.checkpoint_tensors;
SELECT count(*) FILTER (WHERE attention.translate(en, 'sv_tiny', 1) IS NOT DISTINCT FROM greedy) AS reader_equal
  FROM sv_bt JOIN sv_ref USING (id);
SELECT attention.stop_service('sv_tiny');
RESET ROLE;

-- a deployment this transaction made is invisible to the service: this backend translates it
BEGIN;
SELECT min(checkpoint_id) AS other_checkpoint FROM attention.checkpoints c JOIN attention.models m USING (model_id)
 WHERE m.name = 'sv_tiny' AND NOT c.deployed \gset
SELECT attention.deploy('sv_tiny', :other_checkpoint) = :other_checkpoint AS deployed;
SELECT attention.translate('the package provides data files', 'sv_tiny') IS NOT NULL AS translated_in_backend;
ROLLBACK;

-- stop: it answers what it has and exits; with auto the next call starts one anew (automatic: it exits when idle)
SELECT requests AS served_before_stop FROM attention.services WHERE model LIKE 'sv%' \gset
SELECT attention.stop_service('sv_tiny');
SELECT count(*) AS services FROM attention.services WHERE model LIKE 'sv%';
SELECT attention.stop_service('sv_tiny');
SELECT attention.translate(en, 'sv_tiny', 1) = greedy AS equal_after_stop
  FROM sv_bt JOIN sv_ref USING (id) WHERE id = 1;
SELECT model, state, requests, automatic FROM attention.services WHERE model LIKE 'sv%';
SELECT attention.start_service('sv_tiny') > 0 AS started;  -- start_service keeps it: no longer automatic
SELECT model, automatic FROM attention.services WHERE model LIKE 'sv%';
SELECT attention.stop_service('sv_tiny');
-- off: never a service
SET attention.use_service = off;
SELECT attention.translate(en, 'sv_tiny', 1) = greedy AS backend_equal FROM sv_bt JOIN sv_ref USING (id) WHERE id = 1;
SELECT count(*) AS services_with_off FROM attention.services WHERE model LIKE 'sv%';
-- on: the first call starts one
SET attention.use_service = on;
SELECT count(*) FILTER (WHERE attention.translate(en, 'sv_tiny', 1) IS NOT DISTINCT FROM greedy) AS started_on_use_equal
  FROM sv_bt JOIN sv_ref USING (id);
SELECT model, state, requests > 0 AS served, automatic FROM attention.services WHERE model LIKE 'sv%';


RESET attention.use_service;
DROP TABLE sv_bt, sv_ref, sv_nbest_ref, sv_array_ref, sv_row, sv_batch;
DROP OWNED BY regress_sv_reader;
DROP ROLE regress_sv_reader;
