-- Per-row translate() calls batched by the planner: the Attention Batch Translate node
-- (the test cluster preloads the library). Uses a tiny model of its own; results
-- are compared with per-row calls (attention.batch_rows = 0), never printed.
-- Its own corpus and vocabulary (the pairs of translate.sql's), so the file runs alone.
-- Its jobs and checkpoints are numbered from 5000, so messages naming them read the same alone.
SELECT setval('attention.jobs_job_id_seq', 5000, false) AS first_job,
       setval('attention.checkpoints_checkpoint_id_seq', 5000, false) AS first_checkpoint \gset
SELECT attention.create_corpus('bt_corpus', 'en', 'de') > 0 AS created;
SELECT attention.import_corpus('bt_corpus', $$
  SELECT 'the package provides ' || w || ' files for ' || v, 'das Paket enthält ' || w || ' Dateien für ' || v
    FROM unnest(ARRAY['data', 'library', 'documentation', 'development', 'example']) AS w,
         unnest(ARRAY['python', 'perl', 'ruby', 'java', 'debian', 'gnome']) AS v$$);
SELECT attention.train_vocabulary('bt_vocab', 'bt_corpus', vocab_size => 80, byte_fallback => false) > 0 AS trained;
SELECT attention.create_model('bt_tiny', 'bt_vocab', '{"num_encoder_layers": 1, "num_decoder_layers": 2, "d_model": 16,
  "num_heads": 2, "d_ff": 32, "max_positions": 128}') > 0 AS created;
SELECT attention.initialize_checkpoint('bt_tiny', 7) AS seed7 \gset
SELECT attention.initialize_checkpoint('bt_tiny', 8) > 0 AS initialized;
SELECT attention.deploy('bt_tiny', :seed7) = :seed7 AS deployed;
SET search_path = public, attention;
SET attention.default_model = 'bt_tiny';
CREATE TABLE bt (id integer PRIMARY KEY, en text, de text, model text);
INSERT INTO bt
  SELECT i, CASE WHEN i % 17 = 0 THEN NULL WHEN i % 19 = 0 THEN ''
                 ELSE 'the package provides ' || (SELECT string_agg((ARRAY['data', 'library', 'documentation',
                        'development', 'example'])[1 + (i % 120 / 5 ^ k)::int % 5], ' files for ')
                        FROM generate_series(0, 2 + i % 3) AS k) END,
         NULL, 'bt_tiny'
    FROM generate_series(1, 150) AS i;  -- rows 121 to 150 repeat sources of rows 1 to 30
ANALYZE bt;

-- the reference: one call per row
SET attention.batch_rows = 0;
EXPLAIN (COSTS OFF) SELECT id, translate(en) FROM bt;
CREATE TABLE bt_ref AS
  SELECT id, translate(en) AS t1, attention.translate(en, 'bt_tiny', 1) AS greedy,
         attention.translate(en, 'bt_tiny', 2, 1.0, 10) AS beam2
    FROM bt;
SELECT count(DISTINCT t1) >= 30 AS varied_translations FROM bt_ref;  -- so the comparisons below can fail
RESET attention.batch_rows;
SHOW attention.batch_rows;
SET attention.batch_rows = 16;

-- SELECT (through CREATE TABLE AS), several call sites, an expression above a call
EXPLAIN (COSTS OFF, VERBOSE)
  SELECT id, translate(en) AS t1, attention.translate(en, 'bt_tiny', 1) AS greedy,
         upper(attention.translate(en, 'bt_tiny', 2, 1.0, 10)) || '!' AS beam2
    FROM bt;
CREATE TABLE bt_sel AS
  SELECT id, translate(en) AS t1, attention.translate(en, 'bt_tiny', 1) AS greedy,
         upper(attention.translate(en, 'bt_tiny', 2, 1.0, 10)) || '!' AS beam2
    FROM bt;
SELECT count(*) AS rows,
       count(*) FILTER (WHERE s.t1 IS NOT DISTINCT FROM r.t1 AND s.greedy IS NOT DISTINCT FROM r.greedy
                          AND s.beam2 IS NOT DISTINCT FROM upper(r.beam2) || '!') AS equal,
       count(*) FILTER (WHERE s.t1 IS NULL) AS null_out, count(*) FILTER (WHERE s.t1 = '') AS empty_out,
       count(*) FILTER (WHERE b.en = '') AS empty_in
  FROM bt_sel s JOIN bt_ref r USING (id) JOIN bt b USING (id);

-- the model's decoding defaults (set_decoding: beam 2, at most 3 tokens) in batches, as per-row calls apply them
SELECT attention.set_decoding('bt_tiny', 2, 3);
SET attention.batch_rows = 0;
CREATE TABLE bt_decoding_ref AS SELECT id, translate(en) AS t1, attention.translate(en, 'bt_tiny', NULL) AS t2 FROM bt;
SET attention.batch_rows = 16;
CREATE TABLE bt_decoding AS SELECT id, translate(en) AS t1, attention.translate(en, 'bt_tiny', NULL) AS t2 FROM bt;
SELECT count(*) FILTER (WHERE s.t1 IS NOT DISTINCT FROM r.t1 AND s.t2 IS NOT DISTINCT FROM r.t2) AS decoding_equal,
       count(*) FILTER (WHERE r.t1 IS DISTINCT FROM o.t1) > 0 AS defaults_changed_translations
  FROM bt_decoding s JOIN bt_decoding_ref r USING (id) JOIN bt_ref o USING (id);
SELECT attention.set_decoding('bt_tiny', NULL, NULL);

-- WHERE, a join below, ORDER BY above (OFFSET 0 keeps the subquery's target list)
EXPLAIN (COSTS OFF)
  SELECT s.id, attention.translate(s.en, 'bt_tiny', 1) AS t FROM bt s JOIN bt_ref r USING (id)
   WHERE s.id % 3 = 0 ORDER BY t, s.id;
SELECT string_agg(id || ':' || coalesce(md5(t), '-'), ',') AS batched
  FROM (SELECT s.id, attention.translate(s.en, 'bt_tiny', 1) AS t FROM bt s JOIN bt_ref r USING (id)
         WHERE s.id % 3 = 0 ORDER BY t, s.id OFFSET 0) AS o \gset
SET attention.batch_rows = 0;
SELECT string_agg(id || ':' || coalesce(md5(t), '-'), ',') = :'batched' AS same_rows_same_order
  FROM (SELECT s.id, attention.translate(s.en, 'bt_tiny', 1) AS t FROM bt s JOIN bt_ref r USING (id)
         WHERE s.id % 3 = 0 ORDER BY t, s.id OFFSET 0) AS o;
SET attention.batch_rows = 16;

-- UPDATE and INSERT ... SELECT
EXPLAIN (COSTS OFF) UPDATE bt SET de = attention.translate(en, 'bt_tiny', 1) WHERE id > 10;
UPDATE bt SET de = attention.translate(en, 'bt_tiny', 1) WHERE id > 10;
SELECT count(*) FILTER (WHERE id > 10 AND de IS NOT DISTINCT FROM greedy) AS updated_equal,
       count(*) FILTER (WHERE id <= 10 AND de IS NULL) AS untouched
  FROM bt JOIN bt_ref USING (id);
CREATE TABLE bt_ins (id integer, de text);
EXPLAIN (COSTS OFF) INSERT INTO bt_ins SELECT id, translate(en) FROM bt WHERE en <> '';
INSERT INTO bt_ins SELECT id, translate(en) FROM bt WHERE en <> '';
SELECT count(*) AS inserted, bool_and(de = t1) AS equal FROM bt_ins JOIN bt_ref USING (id);

-- translate(translate(x)): two nodes; a rescanned inner side (LATERAL) batches each scan
EXPLAIN (COSTS OFF) SELECT id, attention.translate(attention.translate(en, 'bt_tiny', 1), 'bt_tiny', 1) FROM bt;
SELECT bool_and(x.tt IS NOT DISTINCT FROM (attention.translate(ARRAY[r.greedy], 'bt_tiny', 1))[1]) AS nested_equal
  FROM (SELECT id, attention.translate(attention.translate(en, 'bt_tiny', 1), 'bt_tiny', 1) AS tt FROM bt OFFSET 0) AS x
  JOIN bt_ref r USING (id);
SELECT count(*) AS rows, bool_and(l.t IS NOT DISTINCT FROM r.greedy) AS lateral_equal
  FROM bt b CROSS JOIN LATERAL (SELECT attention.translate(b.en, 'bt_tiny', 1) AS t OFFSET 0) AS l
  JOIN bt_ref r ON r.id = b.id
 WHERE b.id <= 20;

-- a LIMIT directly above caps the batch by the rows it wants
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF, BUFFERS OFF)
  SELECT id, attention.translate(en, 'bt_tiny', 1) FROM bt WHERE en <> '' LIMIT 5;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF, BUFFERS OFF)
  SELECT id, attention.translate(en, 'bt_tiny', 1) FROM bt WHERE en <> '' LIMIT 20 OFFSET 2;
PREPARE limited(bigint) AS SELECT id, attention.translate(en, 'bt_tiny', 1) FROM bt WHERE en <> '' LIMIT $1;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF, BUFFERS OFF) EXECUTE limited(3);
DEALLOCATE limited;
-- without a LIMIT: whole batches (144 non-empty sources, batches of 16, identical sources translated once)
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF, BUFFERS OFF) SELECT id, attention.translate(en, 'bt_tiny', 1) FROM bt;

-- a scrollable cursor reads backwards through a Material above the node
CREATE FUNCTION bt_scroll() RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  c refcursor;
  r record;
  ok boolean := true;
  i integer;
BEGIN
  OPEN c SCROLL FOR SELECT id, attention.translate(en, 'bt_tiny', 1) AS t FROM bt WHERE id <= 40;
  FOR i IN 1 .. 30 LOOP
    FETCH NEXT FROM c INTO r;
    ok := ok AND r.t IS NOT DISTINCT FROM (SELECT greedy FROM bt_ref WHERE id = r.id);
  END LOOP;
  FOR i IN 1 .. 10 LOOP
    FETCH PRIOR FROM c INTO r;
    ok := ok AND r.id = 30 - i AND r.t IS NOT DISTINCT FROM (SELECT greedy FROM bt_ref WHERE id = r.id);
  END LOOP;
  FETCH LAST FROM c INTO r;
  ok := ok AND r.id = 40;
  CLOSE c;
  RETURN ok;
END $$;
SELECT bt_scroll() AS scroll_cursor_equal;

-- parallel query: each worker batches its own rows under Gather
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;
EXPLAIN (COSTS OFF) SELECT id, attention.translate(en, 'bt_tiny', 1) AS t FROM bt;
CREATE TABLE bt_par AS SELECT id, attention.translate(en, 'bt_tiny', 1) AS t FROM bt;
RESET max_parallel_workers_per_gather;
RESET min_parallel_table_scan_size;
RESET parallel_tuple_cost;
RESET parallel_setup_cost;
SELECT count(*) AS rows, bool_and(t IS NOT DISTINCT FROM greedy) AS parallel_equal FROM bt_par JOIN bt_ref USING (id);

-- these stay per-row calls: under CASE and COALESCE, a volatile argument, a model per row
EXPLAIN (COSTS OFF) SELECT CASE WHEN id > 3 THEN translate(en) END FROM bt;
EXPLAIN (COSTS OFF) SELECT coalesce(translate(en), '-') FROM bt;
EXPLAIN (COSTS OFF) SELECT translate(en || (random() * 0)::int::text) FROM bt;
EXPLAIN (COSTS OFF) SELECT attention.translate(en, 'bt_tiny', (random() + 1)::int) FROM bt;
EXPLAIN (COSTS OFF) SELECT attention.translate(en, model) FROM bt;
SELECT bool_and(coalesce(translate(en), '-') = coalesce(t1, '-')) AS fallback_equal FROM bt JOIN bt_ref USING (id);
-- and none at all when attention.batch_rows is 0
SET attention.batch_rows = 0;
EXPLAIN (COSTS OFF) SELECT id, translate(en) FROM bt;
SET attention.batch_rows = 16;

-- errors: the same as per-row calls
SET attention.max_input_tokens = 3;
SELECT id, translate(en) FROM bt;
RESET attention.max_input_tokens;
SELECT id, attention.translate(en, 'no_such_model') FROM bt;
SELECT id, attention.translate(en, 'bt_tiny', 2, NULL) FROM bt;
SELECT count(*) FILTER (WHERE t IS NOT DISTINCT FROM attention.translate(en, 'bt_tiny', 4)) AS null_beam_is_the_setting
  FROM (SELECT en, attention.translate(en, 'bt_tiny', NULL) AS t FROM bt WHERE id <= 20) AS s;
SELECT id, attention.translate(en, 'bt_tiny', 0) FROM bt;
-- NULL options are not looked at when every source is NULL (as per-row calls)
SELECT id, attention.translate(CASE WHEN id < 0 THEN en END, 'bt_tiny', 2, NULL) FROM bt WHERE id <= 2;

-- a timeout in the middle of the batches leaves no partial UPDATE
CREATE TABLE bt_many AS
  SELECT i AS id, 'the package provides ' || (SELECT string_agg((ARRAY['data', 'library', 'documentation', 'development',
                                                                 'example'])[1 + (i / 5 ^ k)::int % 5], ' files for ')
                                             FROM generate_series(0, 4) AS k) AS en, NULL::text AS de
    FROM generate_series(1, 1500) AS i;
SET attention.batch_rows = 64;
\set VERBOSITY terse
SET statement_timeout = '500ms';
UPDATE bt_many SET de = attention.translate(en, 'bt_tiny', 4);
RESET statement_timeout;
\set VERBOSITY default
SELECT count(de) AS partially_updated FROM bt_many;

-- privileges: the node checks the caller's right to call translate()
CREATE ROLE regress_bt_reader;
GRANT USAGE ON SCHEMA public TO regress_bt_reader;
GRANT SELECT ON bt, bt_ref TO regress_bt_reader;
REVOKE EXECUTE ON FUNCTION attention.translate(text, text, integer, double precision, integer, text, text) FROM PUBLIC;
SET ROLE regress_bt_reader;
SELECT id, attention.translate(en, 'bt_tiny', 1) FROM bt;
RESET ROLE;
GRANT EXECUTE ON FUNCTION attention.translate(text, text, integer, double precision, integer, text, text) TO PUBLIC;
SET ROLE regress_bt_reader;
SELECT count(*) AS rows, bool_and(t IS NOT DISTINCT FROM greedy) AS reader_equal
  FROM (SELECT id, attention.translate(en, 'bt_tiny', 1) AS t FROM bt OFFSET 0) AS x JOIN bt_ref USING (id);
RESET ROLE;
DROP OWNED BY regress_bt_reader;
DROP ROLE regress_bt_reader;

DROP FUNCTION bt_scroll();
RESET attention.default_model;
DROP TABLE bt, bt_ref, bt_sel, bt_ins, bt_par, bt_many;
RESET attention.batch_rows;
RESET search_path;
