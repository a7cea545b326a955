-- Corpora and vocabularies have owners; drop_corpus and drop_vocabulary
-- drop them for their owners, refuse while something depends on them, and
-- with cascade drop what depends on them, other roles' stopped jobs and
-- models too (as DROP ... CASCADE). Two roles (and a member of the first);
-- everything, the roles included, rolls back.
BEGIN;
SELECT plan(29);

CREATE ROLE attention_lc_owner;
CREATE ROLE attention_lc_other;
CREATE ROLE attention_lc_member IN ROLE attention_lc_owner;
-- the DBA's grants to create corpora and vocabularies (and read pairs directly)
GRANT INSERT, SELECT ON attention.corpora, attention.corpus_pairs, attention.vocabularies
   TO attention_lc_owner, attention_lc_other;
GRANT USAGE ON SEQUENCE attention.corpora_corpus_id_seq, attention.corpus_pairs_pair_id_seq,
                        attention.vocabularies_vocabulary_id_seq TO attention_lc_owner, attention_lc_other;
\set tiny '{"num_encoder_layers": 1, "num_decoder_layers": 1, "d_model": 8, "num_heads": 2, "d_ff": 8, "max_positions": 16}'

SET LOCAL ROLE attention_lc_owner;
SELECT attention.create_corpus('lc_corpus', 'en', 'de');
SELECT attention.import_corpus('lc_corpus', $$SELECT 'the package', 'das Paket'$$);
SELECT attention.train_vocabulary('lc_vocab', 'lc_corpus', 20, byte_fallback => false);
SELECT attention.create_model('lc_model', 'lc_vocab', :'tiny');
SELECT attention.grant_usage('corpus', 'lc_corpus', 'attention_lc_other');
INSERT INTO attention.jobs (model_id, corpus_id, status)
SELECT m.model_id, c.corpus_id, 'succeeded' FROM attention.models m, attention.corpora c
 WHERE m.name = 'lc_model' AND c.name = 'lc_corpus';
INSERT INTO attention.checkpoints (model_id, job_id, step)
SELECT model_id, job_id, 1 FROM attention.jobs WHERE corpus_id = (SELECT corpus_id FROM attention.corpora WHERE name = 'lc_corpus');
SELECT is((SELECT owner::text FROM attention.corpora WHERE name = 'lc_corpus'), 'attention_lc_owner',
          'a corpus is owned by the role that creates it');
SELECT is((SELECT owner::text FROM attention.vocabularies WHERE name = 'lc_vocab'), 'attention_lc_owner',
          'a vocabulary is owned by the role that trains it');
SELECT throws_ok($$INSERT INTO attention.corpora (name, source_lang, target_lang, owner)
                   VALUES ('lc_stolen', 'en', 'de', 'attention_lc_other')$$, '42501', NULL,
                 'nobody creates a corpus owned by a role they are not a member of');

SET LOCAL ROLE attention_lc_other;
SELECT throws_ok($$SELECT attention.drop_corpus('lc_corpus')$$, '42501',
                 'permission denied to drop corpus "lc_corpus"', 'another role may not drop the corpus');
SELECT throws_ok($$SELECT attention.drop_vocabulary('lc_vocab')$$, '42501',
                 'permission denied to drop vocabulary "lc_vocab"', '... nor the vocabulary');
SELECT throws_ok($$SELECT attention.import_corpus('lc_corpus', 'SELECT ''a'', ''b''')$$, '42501',
                 'permission denied to add pairs to corpus "lc_corpus"', '... nor add pairs with import_corpus');
SELECT throws_ok($$INSERT INTO attention.corpus_pairs (corpus_id, source, target)
                   SELECT corpus_id, 'a', 'b' FROM attention.corpora WHERE name = 'lc_corpus'$$, '42501', NULL,
                 '... nor insert pairs directly (row-level security)');
SELECT is_empty($$DELETE FROM attention.corpora WHERE name = 'lc_corpus' RETURNING 1$$,
                '... nor delete the corpus row directly');
SELECT is_empty($$DELETE FROM attention.vocabularies WHERE name = 'lc_vocab' RETURNING 1$$,
                '... nor the vocabulary row');
SELECT is((SELECT count(*)::int FROM attention.corpus_pairs p JOIN attention.corpora c USING (corpus_id)
            WHERE c.name = 'lc_corpus'), 1, 'but it may read the pairs it was granted');
-- a model of its own over the owner's vocabulary, trained on the owner's corpus
SELECT lives_ok(format($$SELECT attention.create_model('lc_theirs', 'lc_vocab', %L)$$, :'tiny'),
                'anyone may create a model over a vocabulary');
INSERT INTO attention.jobs (model_id, corpus_id, status)
SELECT m.model_id, c.corpus_id, 'failed' FROM attention.models m, attention.corpora c
 WHERE m.name = 'lc_theirs' AND c.name = 'lc_corpus';

SET LOCAL ROLE attention_lc_owner;
SELECT throws_ok($$SELECT attention.drop_vocabulary('lc_vocab')$$, '2BP01',
                 'vocabulary "lc_vocab" is used by model "lc_model"', 'a vocabulary in use is refused, naming a model');
SELECT throws_ok($$SELECT attention.drop_corpus('lc_corpus')$$, '2BP01',
                 format('corpus "lc_corpus" is used by training job %s of model "lc_model"',
                        (SELECT min(job_id) FROM attention.jobs WHERE corpus_id =
                                (SELECT corpus_id FROM attention.corpora WHERE name = 'lc_corpus'))),
                 'a corpus that trained a model is refused, naming the job');
SELECT is_empty($$SELECT 1 FROM attention.jobs j JOIN attention.models m USING (model_id) WHERE m.name = 'lc_theirs'$$,
                'the corpus''s owner does not see the other role''s job on it');

RESET ROLE;
-- a job whose worker runs (this session stands in for it)
INSERT INTO attention.jobs (model_id, corpus_id, status, worker_pid)
SELECT m.model_id, c.corpus_id, 'running', pg_backend_pid() FROM attention.models m, attention.corpora c
 WHERE m.name = 'lc_model' AND c.name = 'lc_corpus' RETURNING job_id AS lc_job \gset
SET LOCAL ROLE attention_lc_owner;
SELECT throws_ok($$SELECT attention.drop_corpus('lc_corpus', cascade => true)$$, '55006',
                 format('corpus "lc_corpus" is used by training job %s of model "lc_model", which is running', :lc_job),
                 'cascade refuses a job that is queued or running');
RESET ROLE;
SELECT attention.cancel_training(:lc_job);
UPDATE attention.jobs SET status = 'cancelled' WHERE job_id = :lc_job;

SET LOCAL ROLE attention_lc_member;
SELECT lives_ok($$SELECT attention.drop_corpus('lc_corpus', cascade => true)$$,
                'a member of the owner role drops the corpus with cascade');
SELECT is((SELECT count(*)::int FROM attention.corpora WHERE name = 'lc_corpus'), 0, 'the corpus is gone');
SELECT is((SELECT count(*)::int FROM attention.jobs j JOIN attention.models m USING (model_id) WHERE m.name = 'lc_model'),
          0, 'with its jobs');
SELECT is((SELECT count(*)::int FROM attention.checkpoints c JOIN attention.models m USING (model_id)
            WHERE m.name = 'lc_model' AND c.job_id IS NULL), 1, 'the jobs'' checkpoints stay');
SELECT is((SELECT corpus_id FROM attention.vocabularies WHERE name = 'lc_vocab'), NULL::integer,
          'the vocabulary trained on it stays, without its corpus');
RESET ROLE;
SELECT is((SELECT count(*)::int FROM attention.jobs j JOIN attention.models m USING (model_id) WHERE m.name = 'lc_theirs'),
          0, 'the other role''s stopped job on it went too (as DROP ... CASCADE)');
SET LOCAL ROLE attention_lc_member;
SELECT lives_ok($$SELECT attention.drop_vocabulary('lc_vocab', cascade => true)$$,
                'drop_vocabulary with cascade drops the vocabulary and its models');
SELECT is((SELECT count(*)::int FROM attention.vocabularies WHERE name = 'lc_vocab')
          + (SELECT count(*)::int FROM attention.models WHERE name IN ('lc_model', 'lc_theirs')), 0,
          'all are gone, the other role''s model too');
SELECT lives_ok($$SELECT attention.create_corpus('lc_corpus', 'en', 'de')$$, 'the names are free again');
SELECT throws_ok($$SELECT attention.drop_corpus('lc_missing')$$, '42704', 'corpus "lc_missing" does not exist',
                 'an unknown corpus is named');
SELECT throws_ok($$SELECT attention.drop_vocabulary('lc_missing')$$, '42704', 'vocabulary "lc_missing" does not exist',
                 'an unknown vocabulary is named');

SET LOCAL ROLE attention_lc_other;
SELECT attention.create_corpus('lc_theirs', 'en', 'de');
RESET ROLE;
CREATE ROLE "Attention LC.Quoted" IN ROLE attention_lc_owner;
GRANT INSERT ON attention.corpora TO "Attention LC.Quoted";
SET LOCAL ROLE "Attention LC.Quoted";
SELECT lives_ok($$SELECT attention.create_corpus('lc_quoted', 'en', 'de')$$,
                'a role whose name needs quotes creates a corpus');
SELECT is((SELECT owner::text FROM attention.corpora WHERE name = 'lc_quoted'), '"Attention LC.Quoted"', '... and owns it');
RESET ROLE;
SELECT lives_ok($$SELECT attention.drop_corpus('lc_theirs')$$, 'a superuser may drop any corpus');

SELECT * FROM finish();
ROLLBACK;
