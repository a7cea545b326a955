-- The schema of attention 0.4.0 (0.1.0 and its upgrade scripts): tables, keys,
-- constraints, comments, function labels, and registration for pg_dump.
BEGIN;
SELECT plan(32);

SELECT has_schema('attention');
SELECT tables_are('attention', ARRAY['corpora', 'corpus_pairs', 'vocabularies', 'models', 'jobs',
                                     'checkpoints', 'checkpoint_tensors', 'job_ranks', 'training_history']);
SELECT views_are('attention', ARRAY['training_jobs', 'services', 'cpu_budget', 'progress', 'memory', 'statistics']);
SELECT col_is_pk('attention', 'corpora', 'corpus_id', 'corpora keyed by corpus_id');
SELECT col_is_pk('attention', 'checkpoint_tensors', ARRAY['checkpoint_id', 'name', 'chunk'],
                 'checkpoint tensors keyed by (checkpoint_id, name, chunk)');
SELECT fk_ok('attention', 'corpus_pairs', 'corpus_id', 'attention', 'corpora', 'corpus_id');
SELECT fk_ok('attention', 'vocabularies', 'corpus_id', 'attention', 'corpora', 'corpus_id');
SELECT fk_ok('attention', 'models', 'vocabulary_id', 'attention', 'vocabularies', 'vocabulary_id');
SELECT fk_ok('attention', 'checkpoints', 'model_id', 'attention', 'models', 'model_id');
SELECT fk_ok('attention', 'checkpoint_tensors', 'checkpoint_id', 'attention', 'checkpoints', 'checkpoint_id');
SELECT fk_ok('attention', 'jobs', 'model_id', 'attention', 'models', 'model_id');
SELECT fk_ok('attention', 'checkpoints', 'job_id', 'attention', 'jobs', 'job_id');
SELECT fk_ok('attention', 'job_ranks', 'job_id', 'attention', 'jobs', 'job_id');
SELECT fk_ok('attention', 'training_history', 'job_id', 'attention', 'jobs', 'job_id');
SELECT col_is_unique('attention', 'corpora', 'name', 'corpus names are unique');
SELECT col_is_unique('attention', 'vocabularies', 'name', 'vocabulary names are unique');

SELECT attention.create_corpus('schema_test', 'en', 'de');
SELECT throws_ok($$INSERT INTO attention.corpus_pairs (corpus_id, split, source, target)
                   SELECT corpus_id, 'dev', 'a', 'b' FROM attention.corpora WHERE name = 'schema_test'$$,
                 '23514', NULL, 'split must be train, valid or test');
SELECT throws_ok($$INSERT INTO attention.jobs (model_id, corpus_id, status) VALUES (1, 1, 'paused')$$,
                 '23514', NULL, 'job status is one of the six states');
SELECT throws_ok($$INSERT INTO attention.checkpoint_tensors VALUES (1, 'w', 0, 'float64', '{2}', '\x00')$$,
                 '23514', NULL, 'tensor dtype is checked');
SELECT throws_ok($$INSERT INTO attention.job_ranks (job_id, node, first_rank, ranks, world_ranks, unique_id)
                   VALUES (1, 0, 0, 2, 4, '\x00')$$,
                 '23514', NULL, 'a communicator id is 128 bytes');

SELECT is_empty($$SELECT c.relname FROM pg_class c
                   WHERE c.relnamespace = 'attention'::regnamespace AND c.relkind IN ('r', 'v')
                     AND obj_description(c.oid, 'pg_class') IS NULL$$, 'every table and view has a comment');
SELECT is_empty($$SELECT c.relname FROM pg_class c
                   WHERE c.relnamespace = 'attention'::regnamespace AND c.relkind = 'r' AND NOT c.relrowsecurity
                     AND c.relname IN ('models', 'jobs', 'checkpoints', 'checkpoint_tensors', 'job_ranks',
                                       'training_history')$$,
                'models, jobs, checkpoints, job ranks and the training history are guarded by row-level security');
SELECT is_empty($$SELECT p.oid::regprocedure FROM pg_proc p
                   WHERE p.pronamespace = 'attention'::regnamespace
                     AND obj_description(p.oid, 'pg_proc') IS NULL$$, 'every function has a comment');
SELECT is_empty($$SELECT c.relname FROM pg_class c
                   WHERE c.relnamespace = 'attention'::regnamespace AND c.relkind IN ('r', 'S')
                     AND c.oid <> ALL ((SELECT extconfig FROM pg_extension WHERE extname = 'attention')::oid[])$$,
                'every table and sequence is registered with pg_extension_config_dump');

SELECT is((SELECT extversion::text FROM pg_extension WHERE extname = 'attention'), '0.4.0', 'version 0.4.0');
SELECT is((SELECT extrelocatable FROM pg_extension WHERE extname = 'attention'), false, 'not relocatable');
SELECT is_empty($$SELECT p.oid::regprocedure FROM pg_proc p
                   WHERE p.pronamespace = 'attention'::regnamespace
                     AND p.proname IN ('encode', 'tokenize', 'decode', 'vocabulary_pieces')
                     AND NOT (p.provolatile = 's' AND p.proparallel = 's' AND p.proisstrict)$$,
                'encode/tokenize/decode/vocabulary_pieces are STABLE STRICT PARALLEL SAFE');
SELECT is_empty($$SELECT p.oid::regprocedure FROM pg_proc p
                   WHERE p.pronamespace = 'attention'::regnamespace
                     AND p.proname IN ('bleu', 'bleu_accum', 'bleu_combine', 'bleu_final', 'corpus_bleu')
                     AND NOT (p.provolatile = 'i' AND p.proparallel = 's')$$,
                'BLEU functions are IMMUTABLE PARALLEL SAFE');
SELECT is_empty($$SELECT p.oid::regprocedure FROM pg_proc p
                   WHERE p.pronamespace = 'attention'::regnamespace
                     AND p.proname IN ('create_corpus', 'import_corpus', 'load_corpus', 'train_vocabulary', 'import_vocabulary',
                                       'create_model', 'initialize_checkpoint', 'deploy', 'average_checkpoints', 'quantize',
                                       'delete_checkpoint', 'drop_model', 'train', 'resume_training',
                                       'cancel_training', 'wait_training', 'import_checkpoint', 'evaluate',
                                       'start_service', 'stop_service', 'import_huggingface_m2m100',
                                       'export_huggingface_m2m100', 'set_languages', 'set_decoding')
                     AND NOT (p.provolatile = 'v' AND p.proparallel = 'u' AND NOT p.prosecdef)$$,
                'functions that write are VOLATILE, PARALLEL UNSAFE and SECURITY INVOKER');

SELECT is_empty($$SELECT p.oid::regprocedure FROM pg_proc p
                   WHERE p.pronamespace = 'attention'::regnamespace
                     AND p.proname IN ('translate', 'translate_nbest', 'score', 'attention_weights', 'align',
                                       'plot_attention', 'plot_alignment')
                     AND NOT (p.provolatile = 's' AND p.proparallel = 's' AND p.procost >= 10000 AND NOT p.prosecdef)$$,
                'translation and attention-picture functions are STABLE PARALLEL SAFE, costly, SECURITY INVOKER');
SELECT is((SELECT count(*)::int FROM pg_proc p
            WHERE p.pronamespace = 'attention'::regnamespace AND p.proname = 'translate'), 3,
          'translate(text), translate(text, model, ...) and translate(text[], ...)');
SELECT is(ARRAY(SELECT p.proname::text FROM pg_proc p
                 WHERE p.pronamespace = 'attention'::regnamespace AND p.prosecdef
                   AND 'search_path=pg_catalog, pg_temp' = ANY (p.proconfig)),
          ARRAY(SELECT p.proname::text FROM pg_proc p
                 WHERE p.pronamespace = 'attention'::regnamespace AND p.prosecdef),
          'every SECURITY DEFINER function pins search_path');

SELECT * FROM finish();
ROLLBACK;
