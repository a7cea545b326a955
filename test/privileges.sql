-- Privileges: every function runs as its caller, so the caller's table
-- privileges decide; loading files needs pg_read_server_files.
BEGIN;
SELECT plan(12);

CREATE ROLE attention_alice;
CREATE TABLE public.secret_pairs (source text, target text);
INSERT INTO public.secret_pairs VALUES ('secret', 'geheim');
CREATE TABLE public.open_pairs (source text, target text);
INSERT INTO public.open_pairs VALUES ('open', 'offen');
GRANT SELECT ON public.open_pairs TO attention_alice;
SELECT attention.create_corpus('privileges_test', 'en', 'de');
SELECT attention.import_corpus('privileges_test', 'SELECT * FROM public.open_pairs');
SELECT attention.train_vocabulary('privileges_vocab', 'privileges_test', 12, byte_fallback => false);

SET LOCAL ROLE attention_alice;
SELECT lives_ok($$SELECT count(*) FROM attention.corpora$$, 'anyone may list corpora');
SELECT throws_ok($$SELECT count(*) FROM attention.corpus_pairs$$, '42501', NULL,
                 'corpus text is not readable without a grant');
SELECT is(round(attention.bleu('a b c d', 'a b c d')), 100::float8, 'anyone may compute BLEU');
SELECT is(attention.decode(attention.encode('open', 'privileges_vocab'), 'privileges_vocab'), 'open',
          'anyone may use a vocabulary');
SELECT throws_ok($$SELECT attention.create_corpus('alice', 'en', 'de')$$, '42501', NULL,
                 'creating a corpus needs INSERT on attention.corpora');
SELECT throws_ok($$SELECT attention.train_vocabulary('alice_vocab', 'privileges_test', 12, byte_fallback => false)$$, '42501', NULL,
                 'training a vocabulary needs a grant on the corpus pairs');
SELECT throws_ok($$SELECT attention.load_corpus('privileges_test', '/etc/hostname', '/etc/hostname')$$,
                 '42501', 'permission denied to load corpus files', 'load_corpus needs pg_read_server_files');

RESET ROLE;
GRANT INSERT, SELECT ON attention.corpus_pairs TO attention_alice;
GRANT INSERT ON attention.corpora TO attention_alice;
GRANT USAGE ON SEQUENCE attention.corpus_pairs_pair_id_seq, attention.corpora_corpus_id_seq TO attention_alice;
SET LOCAL ROLE attention_alice;
SELECT attention.create_corpus('alice', 'en', 'de');
SELECT throws_ok($$SELECT attention.import_corpus('alice', 'SELECT * FROM public.secret_pairs')$$,
                 '42501', 'permission denied for table secret_pairs',
                 'import_corpus runs the query with the caller''s privileges');
SELECT is(attention.import_corpus('alice', 'SELECT * FROM public.open_pairs'), 1::bigint,
          'a readable query imports');
SELECT throws_ok($$SELECT attention.train_vocabulary('alice_vocab', 'privileges_test', 12, byte_fallback => false)$$, '42501', NULL,
                 'storing a vocabulary needs INSERT on attention.vocabularies');

RESET ROLE;
GRANT pg_read_server_files TO attention_alice;
SET LOCAL ROLE attention_alice;
SELECT throws_ok($$SELECT attention.load_corpus('alice', '/nonexistent.en', '/nonexistent.de')$$,
                 '58P01', NULL, 'with pg_read_server_files the file itself is the problem');
RESET ROLE;

SELECT is((SELECT count(*) FROM attention.corpus_pairs WHERE source = 'secret'), 0::bigint, 'no secret pair leaked');

SELECT * FROM finish();
ROLLBACK;
