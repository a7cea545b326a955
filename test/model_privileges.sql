-- Privileges of models, training and checkpoints, proved with two roles:
-- anyone may create a model and train it; training, checkpointing,
-- deploying, deleting, exporting and dropping a model need membership in its
-- owner role; every role may translate with a deployed model.
-- The roles are committed (a training worker connects as its submitter) and
-- dropped at the end; everything else rolls back.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'attention_owner') THEN
    CREATE ROLE attention_owner LOGIN;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'attention_other') THEN
    CREATE ROLE attention_other LOGIN;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'attention_member') THEN
    CREATE ROLE attention_member NOLOGIN IN ROLE attention_owner;
  END IF;
END
$$;

BEGIN;
SELECT plan(36);

SELECT attention.create_corpus('model_privileges', 'en', 'de');
SELECT attention.import_corpus('model_privileges', $$SELECT 'the package', 'das Paket'$$);
SELECT attention.train_vocabulary('model_privileges', 'model_privileges', 20, byte_fallback => false);
SELECT attention.grant_usage('corpus', 'model_privileges', 'attention_owner');
\set tiny '{"num_encoder_layers": 1, "num_decoder_layers": 1, "d_model": 8, "num_heads": 2, "d_ff": 8, "max_positions": 16}'

SET LOCAL ROLE attention_owner;
SELECT lives_ok(format($$SELECT attention.create_model('owned', 'model_privileges', %L)$$, :'tiny'),
                'an ordinary role may create a model');
SELECT is((SELECT owner::text FROM attention.models WHERE name = 'owned'), 'attention_owner', 'and owns it');
SELECT lives_ok($$SELECT attention.initialize_checkpoint('owned', 1)$$, 'the owner may write checkpoints');
SELECT lives_ok($$SELECT attention.deploy('owned')$$, 'the owner may deploy');
SELECT ok(attention.train('owned', 'model_privileges', '{"max_steps": 1}') > 0, 'the owner may train');
SELECT max(job_id) AS mp_job FROM attention.jobs \gset
SELECT throws_ok(format($$INSERT INTO attention.models (name, vocabulary_id, config, owner)
                          SELECT 'stolen', vocabulary_id, %L, 'attention_other' FROM attention.vocabularies
                           WHERE name = 'model_privileges'$$, :'tiny'),
                 '42501', NULL, 'nobody creates a model owned by a role they are not a member of');

SET LOCAL ROLE attention_other;
SELECT throws_ok($$SELECT attention.train('owned', 'model_privileges')$$, '42501',
                 'permission denied to train model "owned"', 'another role may not train it');
SELECT throws_ok($$SELECT attention.initialize_checkpoint('owned', 2)$$, '42501', NULL, '... nor write a checkpoint');
SELECT throws_ok($$SELECT attention.average_checkpoints('owned', 1)$$, '42501', NULL, '... nor average');
SELECT throws_ok($$SELECT attention.quantize(checkpoint_id) FROM attention.checkpoints c JOIN attention.models m
                    USING (model_id) WHERE m.name = 'owned'$$, '42501', NULL, '... nor quantize');
SELECT throws_ok($$SELECT attention.set_languages('owned', NULL, NULL)$$, '42501', NULL,
                 '... nor set its languages');
SELECT lives_ok($$UPDATE attention.models SET target_language = 'de' WHERE name = 'owned'$$,
                '... an UPDATE of its languages is no error,');
SELECT is((SELECT target_language FROM attention.models WHERE name = 'owned'), NULL,
          '... but changes nothing (row-level security: its owners only)');
SELECT throws_ok($$SELECT attention.set_decoding('owned', 1, 1)$$, '42501', NULL,
                 '... nor set its decoding defaults');
SELECT lives_ok($$UPDATE attention.models SET beam_size = 1, max_output_tokens = 1 WHERE name = 'owned'$$,
                '... an UPDATE of them is no error,');
SELECT is((SELECT row(beam_size, max_output_tokens)::text FROM attention.models WHERE name = 'owned'), '(,)',
          '... but changes nothing');
SELECT throws_ok($$SELECT attention.deploy('owned')$$, '42501', NULL, '... nor deploy');
SELECT throws_ok($$SELECT attention.delete_checkpoint(checkpoint_id) FROM attention.checkpoints$$, '42501', NULL,
                 '... nor delete a checkpoint');
SELECT throws_ok($$SELECT attention.export_checkpoint(checkpoint_id) FROM attention.checkpoints$$, '42501', NULL,
                 '... nor export one');
SELECT throws_ok(format('SELECT attention.cancel_training(%s)', :mp_job), '42704',
                 format('training job %s does not exist', :mp_job), '... nor cancel its job, which it does not see');
SELECT throws_ok($$SELECT attention.drop_model('owned')$$, '42501', NULL, '... nor drop it');
SELECT is_empty($$SELECT 1 FROM attention.checkpoint_tensors$$, '... nor read its checkpoint tensors');
SELECT is_empty($$UPDATE attention.checkpoints SET deployed = false RETURNING 1$$,
                '... nor change its checkpoint rows directly (row-level security)');
SELECT throws_ok($$INSERT INTO attention.checkpoints (model_id, step) SELECT model_id, 9 FROM attention.models$$,
                 '42501', NULL, '... nor add any');
SELECT ok(attention.translate('the package', 'owned', 1) IS NOT NULL, 'but it may translate with the deployed model');
SELECT throws_ok($$SELECT * FROM attention.evaluate('owned', 'model_privileges', 'train', NULL, 1)$$, '42501',
                 'permission denied to evaluate on corpus "model_privileges"',
                 'evaluate needs USAGE of the corpus');
RESET ROLE;
SELECT attention.grant_usage('corpus', 'model_privileges', 'attention_other');
SET LOCAL ROLE attention_other;
SELECT is((SELECT sentences FROM attention.evaluate('owned', 'model_privileges', 'train', NULL, 1)), 1,
          'with it it evaluates the deployed checkpoint (no SELECT on corpus_pairs needed)');
SELECT is_empty($$SELECT 1 FROM attention.training_jobs$$, 'it does not see the model''s jobs');
RESET ROLE;
INSERT INTO attention.training_history (job_id, step, train_loss) SELECT job_id, 1, 5.0 FROM attention.jobs;
SET LOCAL ROLE attention_other;
SELECT is_empty($$SELECT 1 FROM attention.training_history$$, '... nor their training history,');
SELECT throws_ok(format('SELECT attention.plot_training(%s)', :mp_job), '42704', NULL, '... nor plots it,');
SELECT is_empty($$UPDATE attention.training_history SET train_loss = 0 RETURNING 1$$,
                '... nor changes it (row-level security),');
SELECT throws_ok(format('INSERT INTO attention.training_history (job_id, step) VALUES (%s, 2)', :mp_job),
                 '42501', NULL, '... nor adds to it');

SET LOCAL ROLE attention_member;
SELECT lives_ok($$SELECT attention.deploy('owned')$$, 'a member of the owner role may deploy');
SELECT throws_ok($$SELECT attention.train('owned', 'model_privileges')$$, '42501',
                 'role "attention_member" cannot log in, and a training job''s worker connects as the role that submits it',
                 'a role that cannot log in cannot run a job');

SET LOCAL ROLE attention_owner;
SELECT lives_ok($$SELECT attention.cancel_training(job_id) FROM attention.training_jobs$$, 'the owner may cancel');
RESET ROLE;
SELECT is((SELECT count(*)::int FROM pg_proc p WHERE p.pronamespace = 'attention'::regnamespace AND p.prosecdef
             AND NOT 'search_path=pg_catalog, pg_temp' = ANY (p.proconfig)), 0,
          'no SECURITY DEFINER function without a pinned search_path');

SELECT * FROM finish();
ROLLBACK;
DROP ROLE attention_member;
DROP ROLE attention_other;
DROP ROLE attention_owner;
