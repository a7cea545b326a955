-- Vocabularies: training in memory, encode/tokenize/decode, pieces, import, errors.
SELECT attention.create_corpus('vocab_regress', 'en', 'de') > 0 AS created;
SELECT attention.import_corpus('vocab_regress', $$
  SELECT 'the package provides ' || w || ' files for ' || v, 'das Paket enthält ' || w || ' Dateien für ' || v
    FROM unnest(ARRAY['data', 'library', 'documentation', 'development', 'example']) AS w,
         unnest(ARRAY['python', 'perl', 'ruby', 'java', 'debian', 'gnome']) AS v$$);

SELECT attention.train_vocabulary('small', 'vocab_regress', vocab_size => 80, byte_fallback => false) > 0 AS trained;
SELECT name, model_type, vocab_size, pad_id, unk_id, bos_id, eos_id, character_coverage, byte_fallback,
       training_sentences, training_seconds >= 0 AS timed, length(model) > 0 AS has_model
  FROM attention.vocabularies;
SELECT * FROM attention.vocabulary_pieces('small') WHERE id < 5;
SELECT count(*) FROM attention.vocabulary_pieces('small');

SELECT attention.tokenize('the package provides data files', 'small');
SELECT attention.encode('the package provides data files', 'small') = attention.encode('the package provides data files', 'small') AS deterministic;
SELECT attention.decode(attention.encode('das Paket enthält Dateien für python', 'small'), 'small');
SELECT attention.decode(attention.encode(s, 'small'), 'small') = s AS round_trip
  FROM (VALUES ('the package provides data files'), ('Dateien für gnome'), ('')) AS t(s);
SELECT attention.decode(ARRAY[2, 3, 0]::int[], 'small') = '' AS control_ids_vanish;
SELECT attention.decode('{}'::int[], 'small') = '' AS empty;
SELECT attention.encode(NULL, 'small') IS NULL AS null_text, attention.decode(NULL, 'small') IS NULL AS null_ids;

-- errors
SELECT attention.encode('x', 'missing');
SELECT attention.tokenize('x', 'missing');
SELECT attention.decode('{1}', 'missing');
SELECT * FROM attention.vocabulary_pieces('missing');
SELECT attention.decode(ARRAY[5, 80], 'small');
SELECT attention.decode(ARRAY[-1], 'small');
SELECT attention.decode(ARRAY[5, NULL], 'small');
SELECT attention.train_vocabulary('small', 'vocab_regress', 80);
SELECT attention.train_vocabulary('v2', 'missing_corpus');
SELECT attention.train_vocabulary('v2', 'vocab_regress', 4);
SELECT attention.train_vocabulary('v2', 'vocab_regress', 100, 'wordpiece');
SELECT attention.train_vocabulary('v2', 'vocab_regress', 100, 'bpe', 0);
SELECT attention.train_vocabulary('v2', 'vocab_regress', 100, 'bpe', 1.5);
SELECT attention.train_vocabulary('v2', 'vocab_regress', max_pairs => -1);
SELECT attention.create_corpus('empty_corpus', 'en', 'de') > 0 AS created;
SELECT attention.train_vocabulary('v2', 'empty_corpus');
SELECT attention.train_vocabulary('v2', 'vocab_regress', 50000, byte_fallback => false);

-- import: the bytes of a .model; corrupt bytes are refused
SELECT attention.import_vocabulary('imported', model) > 0 AS imported FROM attention.vocabularies WHERE name = 'small';
SELECT name, model_type, vocab_size, pad_id, unk_id, bos_id, eos_id FROM attention.vocabularies WHERE name = 'imported';
SELECT attention.tokenize('the package', 'imported') = attention.tokenize('the package', 'small') AS same_pieces;
SELECT attention.import_vocabulary('bad', '\x00010203'::bytea);
SELECT attention.import_vocabulary('bad', 'not a sentencepiece model'::bytea);
SELECT attention.import_vocabulary('bad', substr(model, 1, length(model) / 2)) FROM attention.vocabularies WHERE name = 'small';
SELECT attention.import_vocabulary('imported', model) FROM attention.vocabularies WHERE name = 'small';
-- a row corrupted in place is detected when it is used
UPDATE attention.vocabularies SET model = '\xdeadbeef' WHERE name = 'imported';
SELECT attention.encode('x', 'imported');
SELECT count(*) AS vocabularies FROM attention.vocabularies;

-- statement_timeout (and so pg_cancel_backend) stops a long training at once:
-- the training thread is abandoned and nothing is stored.
SELECT attention.create_corpus('big_corpus', 'en', 'de') > 0 AS created;
SELECT attention.import_corpus('big_corpus', $$SELECT md5(g::text) || ' ' || md5((g * 7)::text), md5((g * 3)::text) FROM generate_series(1, 20000) g$$);
\set VERBOSITY terse
SET statement_timeout = '300ms';
SELECT attention.train_vocabulary('never_stored', 'big_corpus', 4000, byte_fallback => false);
RESET statement_timeout;
\set VERBOSITY default
SELECT count(*) AS never_stored FROM attention.vocabularies WHERE name = 'never_stored';
