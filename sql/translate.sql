-- Translation in SQL over a tiny randomly initialised model: declarations,
-- consistency between the functions, errors, translate_column, parallel plans.
-- (Outputs of a random model depend on floating-point details, so results are
-- compared with each other rather than printed.)
SELECT attention.create_corpus('tr_regress', 'en', 'de') > 0 AS created;
SELECT attention.import_corpus('tr_regress', $$
  SELECT 'the package provides ' || w || ' files for ' || v, 'das Paket enthält ' || w || ' Dateien für ' || v
    FROM unnest(ARRAY['data', 'library', 'documentation', 'development', 'example']) AS w,
         unnest(ARRAY['python', 'perl', 'ruby', 'java', 'debian', 'gnome']) AS v$$);
SELECT attention.train_vocabulary('tr_vocab', 'tr_regress', vocab_size => 80, byte_fallback => false) > 0 AS trained;

-- models
SELECT attention.create_model('tiny', 'tr_vocab', '{"num_encoder_layers": 1, "num_decoder_layers": 2, "d_model": 16,
  "num_heads": 2, "d_ff": 32, "max_positions": 128}') > 0 AS created;
SELECT config FROM attention.models WHERE name = 'tiny';
SELECT attention.create_model('small', 'tr_vocab', '{"preset": "small", "num_encoder_layers": 1}') > 0 AS created;
SELECT config->>'d_model' AS d_model, config->>'num_encoder_layers' AS encoder_layers,
       config->>'num_decoder_layers' AS decoder_layers FROM attention.models WHERE name = 'small';
SELECT attention.create_model('tiny', 'tr_vocab');
SELECT attention.create_model('bad', 'missing_vocab');
SELECT attention.create_model('bad', 'tr_vocab', '{"d_modle": 16}');
SELECT attention.create_model('bad', 'tr_vocab', '{"activation": "tanh"}');
SELECT attention.create_model('bad', 'tr_vocab', '{"logits_bias": 1}');
SELECT attention.create_model('bad', 'tr_vocab', '{"normalize_before": "yes"}');
SELECT attention.create_model('bad', 'tr_vocab', '{"positions": "learned"}');
SELECT attention.create_model('bad', 'tr_vocab', '{"scale_embedding": 0}');
SELECT attention.create_model('bad', 'tr_vocab', '{"d_model": "16"}');
SELECT attention.create_model('bad', 'tr_vocab', '{"d_model": 16.5}');
SELECT attention.create_model('bad', 'tr_vocab', '{"d_model": 30, "num_heads": 4}');
SELECT attention.create_model('bad', 'tr_vocab', '{"vocab_size": 100}');
SELECT attention.create_model('bad', 'tr_vocab', '{"preset": "huge"}');
SELECT attention.create_model('bad', 'tr_vocab', '[1, 2]');

-- no checkpoint yet
SELECT attention.translate('the package', 'tiny');
SELECT attention.deploy('tiny');
SELECT attention.initialize_checkpoint('tiny', 7) AS checkpoint \gset
SELECT count(*) AS tensors, count(*) FILTER (WHERE name LIKE 'model.%') AS parameters
  FROM attention.checkpoint_tensors WHERE checkpoint_id = :checkpoint;
SELECT attention.deploy('tiny') = :checkpoint AS deployed;
SELECT attention.deploy('tiny', 999999);
SELECT attention.deploy('nope');

-- translate: one text, the default model, arrays, n-best, score
SET search_path = public, attention;
SELECT translate('the package provides data files') = attention.translate('the package provides data files', 'tiny') AS default_model;
SELECT translate('') = '' AS empty, translate(NULL::text) IS NULL AS null_in,
       attention.translate(NULL::text, 'tiny') IS NULL AS null_in_explicit;
SELECT translate('12345', '143', 'ax') AS builtin_translate_still_works;
SELECT length(attention.translate('the package', 'tiny', 1)) > 0 AS greedy;
SELECT attention.translate(ARRAY['data files for python', NULL, '', 'the package provides example files for gnome'], 'tiny')
     = ARRAY[attention.translate('data files for python', 'tiny'), NULL, '',
             attention.translate('the package provides example files for gnome', 'tiny')] AS batch_equals_single;
SELECT attention.translate('{}'::text[]) = '{}' AS empty_array;
SELECT (SELECT translation FROM attention.translate_nbest('the package provides data files', 'tiny') WHERE rank = 1)
     = attention.translate('the package provides data files', 'tiny') AS nbest_first_is_translation;
SELECT count(*) AS hypotheses, bool_and(cardinality(tokens) > 0) AS have_tokens
  FROM attention.translate_nbest('the package provides data files', n => 3);
-- the n-best score is the log-probability attention.score computes (when the text re-encodes to the same tokens)
SELECT bool_and(abs(score - attention.score('the package provides data files', translation)) < 1e-4) AS scores_agree,
       count(*) > 0 AS compared
  FROM attention.translate_nbest('the package provides data files', 'tiny', 4)
 WHERE attention.tokenize(translation, 'tr_vocab') = tokens;
SELECT attention.score('the package', 'das Paket') < 0 AS log_probability,
       attention.score('the package', 'das Paket') = attention.score('the package', 'das Paket', 'tiny') AS same_model;
SELECT attention.score(NULL, 'x') IS NULL AS null_source;

-- attention inspection
SELECT kind, count(DISTINCT layer) AS layers, count(DISTINCT head) AS heads,
       bool_and(abs(total - 1) < 1e-5) AS rows_sum_to_one
  FROM (SELECT kind, layer, head, query_pos, sum(weight) AS total
          FROM attention.attention_weights('the package provides data files', 'das Paket')
         GROUP BY 1, 2, 3, 4) AS q
 GROUP BY kind ORDER BY kind;
SELECT DISTINCT query_pos, query_token FROM attention.attention_weights('the package', 'das Paket')
 WHERE kind = 'cross' ORDER BY 1;
SELECT bool_and(weight = 0) AS causal FROM attention.attention_weights('the package', 'das Paket')
 WHERE kind = 'decoder_self' AND key_pos > query_pos;
SELECT count(DISTINCT query_pos) - 1 = (SELECT cardinality(tokens) FROM attention.translate_nbest('the package', 'tiny', 1))
       AS inspects_translation
  FROM attention.attention_weights('the package') WHERE kind = 'cross';
SELECT target_pos, target_token, string_agg(source_token, ' ' ORDER BY source_pos) AS sources,
       abs(sum(weight) - 1) < 1e-5 AS sums_to_one
  FROM attention.align('the package', 'das Paket') GROUP BY 1, 2 ORDER BY 1;

-- bad input
SELECT attention.translate('x', 'nope');
SELECT attention.translate('x', 'tiny', 0);
SELECT attention.translate('x', 'tiny', 65);
SELECT attention.translate('x', 'tiny', 4, -1);
SELECT attention.translate('x', 'tiny', 4, 0.6, -1);
SELECT * FROM attention.translate_nbest('x', 'tiny', n => 5);
SELECT attention.translate(ARRAY[ARRAY['a'], ARRAY['b']], 'tiny');
SET attention.max_input_tokens = 3;
SELECT attention.translate('the package provides data files', 'tiny');
RESET attention.max_input_tokens;
SET attention.beam_size = 0;
SET attention.default_model = 'nope';
SELECT translate('x');
RESET attention.default_model;
SELECT attention.initialize_checkpoint('small', 1) > 0 AS small_checkpoint;
SELECT attention.deploy('small') > 0 AS small_deployed;
SELECT translate('x');
SET attention.default_model = 'tiny';
SELECT translate('the package') = attention.translate('the package', 'tiny') AS default_model_guc;

-- a model's decoding defaults (set_decoding; a Hugging Face import sets them from generation_config.json)
SELECT attention.translate('the package provides data files', 'tiny', NULL)
     = attention.translate('the package provides data files', 'tiny', 4) AS null_beam_is_the_setting;
SELECT count(*) AS whole_beam FROM attention.translate_nbest('the package provides data files', 'tiny');
SELECT max(cardinality(tokens)) > 2 AS longer_than_two
  FROM attention.translate_nbest('the package provides data files for python', 'tiny', beam_size => 2);
SET attention.beam_size = 2;
SELECT count(DISTINCT query_pos) - 1 > 2 AS inspection_longer_than_two
  FROM attention.attention_weights('the package provides data files for python', model => 'tiny') WHERE kind = 'cross';
SELECT attention.set_decoding('tiny', 2, 2);
SELECT beam_size, max_output_tokens FROM attention.models WHERE name = 'tiny';
SET attention.beam_size = 1;
SELECT count(*) AS model_beam_over_the_setting, max(cardinality(tokens)) <= 2 AS capped
  FROM attention.translate_nbest('the package provides data files for python', 'tiny');
SELECT count(*) AS explicit_beam_over_the_model
  FROM attention.translate_nbest('the package provides data files for python', 'tiny', beam_size => 3);
SELECT translate('the package provides data files') = attention.translate('the package provides data files', 'tiny', 2)
       AS one_argument_form_too;
SELECT attention.translate(ARRAY['the package provides data files for python'], 'tiny')
     = ARRAY[(SELECT translation FROM attention.translate_nbest('the package provides data files for python', 'tiny')
               WHERE rank = 1)] AS array_form_alike;
SELECT count(DISTINCT query_pos) - 1 <= 2 AS inspection_capped
  FROM attention.attention_weights('the package provides data files for python', model => 'tiny') WHERE kind = 'cross';
RESET attention.beam_size;
SELECT * FROM attention.translate_nbest('x', 'tiny', n => 3);
SELECT attention.set_decoding('tiny', 0, NULL);
SELECT attention.set_decoding('tiny', 65, NULL);
SELECT attention.set_decoding('tiny', NULL, 0);
SELECT attention.set_decoding('nope', NULL, NULL);
SELECT attention.set_decoding(NULL, NULL, NULL);
SELECT attention.set_decoding('tiny', NULL, NULL);
SELECT beam_size, max_output_tokens FROM attention.models WHERE name = 'tiny';

-- a changed deployment is picked up by the per-backend cache
SELECT attention.score('the package', 'das Paket', 'tiny') AS score_before \gset
SELECT attention.initialize_checkpoint('tiny', 8) AS checkpoint8 \gset
SELECT attention.deploy('tiny', :checkpoint8) = :checkpoint8 AS redeployed;
SELECT attention.score('the package', 'das Paket', 'tiny') <> :score_before AS new_checkpoint_used;
SELECT attention.deploy('tiny', :checkpoint) = :checkpoint AS deployed_back;
SELECT attention.score('the package', 'das Paket', 'tiny') = :score_before AS old_checkpoint_used;

-- translate_column (its progress notices carry timings)
SET client_min_messages = warning;
CREATE TABLE docs (id integer PRIMARY KEY, body_en text, body_de text, n integer);
INSERT INTO docs SELECT i, CASE WHEN i % 10 = 0 THEN NULL ELSE 'the package provides data files for ' || i END, NULL, i
  FROM generate_series(1, 100) AS i;
UPDATE docs SET body_de = 'kept' WHERE id = 1;
CALL attention.translate_column('docs', 'body_en', 'body_de', 'tiny', batch_size => 16);
SELECT count(*) FILTER (WHERE body_de IS NOT NULL) AS translated, count(*) FILTER (WHERE body_de = 'kept') AS kept,
       count(*) FILTER (WHERE body_en IS NULL AND body_de IS NULL) AS null_sources_left
  FROM docs;
SELECT bool_and(body_de = attention.translate(body_en, 'tiny')) AS same_as_translate FROM docs WHERE id BETWEEN 2 AND 5;
CALL attention.translate_column('docs', 'body_en', 'body_de', 'tiny');
CALL attention.translate_column('docs', 'body_xx', 'body_de', 'tiny');
CALL attention.translate_column('docs', 'body_en', 'n', 'tiny');
CALL attention.translate_column('docs', 'body_en', 'body_en', 'tiny');
CALL attention.translate_column('docs', 'body_en', 'body_de', 'tiny', 0);
CREATE TABLE nokey (body_en text, body_de text);
CALL attention.translate_column('nokey', 'body_en', 'body_de', 'tiny');
CALL attention.translate_column('no_such_table', 'body_en', 'body_de', 'tiny');

-- other roles translate with deployed models, and translate_column runs with the caller's privileges
CREATE ROLE regress_tr_reader;
GRANT USAGE ON SCHEMA public TO regress_tr_reader;
GRANT SELECT ON docs TO regress_tr_reader;
SET ROLE regress_tr_reader;
SELECT attention.translate('the package', 'tiny') IS NOT NULL AS reader_translates;
SELECT count(*) AS readable_tensors FROM attention.checkpoint_tensors;  -- only owners see checkpoint rows
CALL attention.translate_column('docs', 'body_en', 'body_de', 'tiny');
RESET ROLE;
UPDATE docs SET body_de = NULL WHERE id = 2;
SET ROLE regress_tr_reader;
CALL attention.translate_column('docs', 'body_en', 'body_de', 'tiny');
RESET ROLE;
DROP OWNED BY regress_tr_reader;
DROP ROLE regress_tr_reader;

-- a cancel stops it between or inside batches; what was committed stays, and a new call resumes
CREATE TABLE many (id integer PRIMARY KEY, en text, de text);
-- (distinct sources in the vocabulary's words: numbers would all be <unk>, and identical sources are translated once)
INSERT INTO many
  SELECT i, 'the package provides ' || (SELECT string_agg((ARRAY['data', 'library', 'documentation', 'development',
                                                                 'example'])[1 + (i / 5 ^ k)::int % 5], ' files for ')
                                        FROM generate_series(0, 4) AS k), NULL
    FROM generate_series(1, 1500) AS i;
SELECT count(DISTINCT en) AS distinct_sources FROM many;
-- (a cancel while the second batch is written, however fast or busy the machine: a
-- statement_timeout cancels the same way)
CREATE SEQUENCE many_updates;
CREATE FUNCTION cancel_at_20th_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF nextval('many_updates') = 20 THEN
    PERFORM pg_cancel_backend(pg_backend_pid());
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER cancel_at_20th_row AFTER UPDATE ON many FOR EACH ROW EXECUTE FUNCTION cancel_at_20th_row();
\set VERBOSITY terse
CALL attention.translate_column('many', 'en', 'de', 'tiny', batch_size => 16);
\set VERBOSITY default
SELECT count(de) AS committed FROM many;
DROP TRIGGER cancel_at_20th_row ON many;
CALL attention.translate_column('many', 'en', 'de', 'tiny', batch_size => 64);
SELECT count(de) AS translated_after_resume FROM many;
-- inside one long engine call too (the engine polls between decoding steps)
\set VERBOSITY terse
SET statement_timeout = '200ms';
SELECT cardinality(attention.translate(array_agg(en), 'tiny')) FROM many;
RESET statement_timeout;
\set VERBOSITY default
RESET client_min_messages;

-- parallel query spreads translate() over workers, with the same results
CREATE TABLE par AS SELECT i AS id, 'data files for ' || i AS en FROM generate_series(1, 200) AS i;
ANALYZE par;
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;
EXPLAIN (COSTS OFF, VERBOSE) SELECT id, attention.translate(en, 'tiny', 1) FROM par;
CREATE TABLE par_out AS SELECT id, attention.translate(en, 'tiny', 1) AS de FROM par;
RESET max_parallel_workers_per_gather;
SELECT count(*) AS rows, bool_and(de = attention.translate(en, 'tiny', 1)) AS same_as_serial
  FROM par JOIN par_out USING (id);

-- declarations
SELECT p.oid::regprocedure AS function, p.provolatile AS volatility, p.proisstrict AS strict,
       p.proparallel AS parallel, p.procost >= 10000 AS high_cost
  FROM pg_proc p
 WHERE p.pronamespace = 'attention'::regnamespace
   AND p.proname IN ('translate', 'translate_nbest', 'score', 'attention_weights', 'align')
 ORDER BY 1::text;
SELECT name, setting FROM pg_settings WHERE name LIKE 'attention.%' ORDER BY name;
RESET search_path;
