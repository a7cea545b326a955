-- The real corpus (scripts/fetch-corpus, loaded by scripts/test as
-- "debian-en-de"): its splits, an 8,000-piece BPE vocabulary trained on it in
-- the database, the round trip of every test sentence, and the BLEU of
-- copying the source.
BEGIN;
SELECT plan(13);

CREATE TEMP TABLE pairs AS
SELECT p.split, p.source, p.target
  FROM attention.corpus_pairs p JOIN attention.corpora c USING (corpus_id)
 WHERE c.name = 'debian-en-de';

SELECT is((SELECT count(*) FROM pairs WHERE split = 'test'), 2000::bigint, 'test split has 2,000 pairs');
SELECT is((SELECT count(*) FROM pairs WHERE split = 'valid'), 1000::bigint, 'valid split has 1,000 pairs');
SELECT cmp_ok((SELECT count(*) FROM pairs WHERE split = 'train'), '>', 20000::bigint, 'train split has over 20,000 pairs');
SELECT is_empty($$SELECT source FROM pairs GROUP BY source HAVING count(DISTINCT split) > 1$$,
                'no source sentence is in two splits');
SELECT is_empty($$SELECT 1 FROM pairs WHERE source = '' OR target = ''$$, 'no empty sentences');

CREATE TEMP TABLE timing AS SELECT clock_timestamp() AS started;
SELECT lives_ok($$SELECT attention.train_vocabulary('debian-bpe-8k', 'debian-en-de', 8000)$$,
                'train an 8,000-piece BPE vocabulary on the train split');
SELECT diag('train_vocabulary(8000, bpe) took ' ||
            round(extract(epoch FROM clock_timestamp() - started)::numeric, 1) || ' s; SentencePiece itself ' ||
            (SELECT round(training_seconds::numeric, 1) FROM attention.vocabularies WHERE name = 'debian-bpe-8k') || ' s')
  FROM timing;
SELECT results_eq($$SELECT model_type, vocab_size, pad_id, unk_id, bos_id, eos_id, training_sentences
                      FROM attention.vocabularies WHERE name = 'debian-bpe-8k'$$,
                  $$VALUES ('bpe'::text, 8000, 0, 1, 2, 3, (SELECT 2 * count(*) FROM pairs WHERE split = 'train'))$$,
                  'vocabulary row: bpe, 8000 pieces, pad/unk/bos/eos = 0/1/2/3, both sides of every train pair');
SELECT results_eq($$SELECT id, piece FROM attention.vocabulary_pieces('debian-bpe-8k') WHERE id < 4$$,
                  $$VALUES (0, '<pad>'), (1, '<unk>'), (2, '<s>'), (3, '</s>')$$,
                  'special pieces');
SELECT is((SELECT count(*) FROM attention.vocabulary_pieces('debian-bpe-8k')), 8000::bigint, '8,000 pieces');

CREATE TEMP TABLE sentences AS
SELECT s, attention.encode(s, 'debian-bpe-8k') AS ids
  FROM (SELECT source FROM pairs WHERE split = 'test' UNION ALL SELECT target FROM pairs WHERE split = 'test') t(s);
SELECT is_empty($$SELECT s FROM sentences
                   WHERE attention.decode(ids, 'debian-bpe-8k') <> regexp_replace(btrim(normalize(s, NFKC)), '\s+', ' ', 'g')$$,
                'decode(encode(x)) gives back all 4,000 test sentences (after NFKC and whitespace normalisation)');
SELECT is_empty($$SELECT s FROM sentences WHERE 1 = ANY (ids)$$, 'byte fallback: no test sentence needs <unk>');
SELECT cmp_ok((SELECT sum(cardinality(ids))::float8 / sum(array_length(regexp_split_to_array(s, '\s+'), 1)) FROM sentences),
              '<', 2.0::float8, 'fewer than 2 pieces per word on average');

SELECT cmp_ok((SELECT attention.corpus_bleu(source, target) FROM pairs WHERE split = 'test'), '>', 5.0::float8,
              'copy-the-source baseline scores some BLEU (names and terms carry over)');
SELECT diag('copy-the-source BLEU on the test split: ' ||
            round(attention.corpus_bleu(source, target)::numeric, 2)) FROM pairs WHERE split = 'test';

SELECT * FROM finish();
ROLLBACK;
