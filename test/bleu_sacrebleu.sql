-- attention.bleu and attention.corpus_bleu against sacreBLEU 2.x itself:
-- test/fixtures/bleu_cases.tsv was scored by sacrebleu.sentence_bleu and
-- sacrebleu.corpus_bleu (test/fixtures/make_bleu_fixture.py).
BEGIN;
SELECT plan(6);

CREATE TABLE bleu_cases (name text, hypothesis text, reference text, tokenized text, expected float8);
\copy bleu_cases FROM 'test/fixtures/bleu_cases.tsv'
CREATE TEMP VIEW segments AS
SELECT split_part(name, ':', 1) AS grp, * FROM bleu_cases WHERE name NOT LIKE 'corpus:%';

SELECT cmp_ok((SELECT count(*) FROM segments), '>=', 300::bigint, 'the fixture has at least 300 segments');
SELECT is_empty($$SELECT name, attention.bleu(hypothesis, reference), expected FROM segments
                   WHERE abs(attention.bleu(hypothesis, reference) - expected) >= 0.01$$,
                'sentence BLEU equals sacrebleu.sentence_bleu to 0.01 on every case');
SELECT is((SELECT max(abs(attention.bleu(hypothesis, reference) - expected)) < 1e-9 FROM segments), true,
          'and in fact to 1e-9');
SELECT is_empty($$SELECT c.name, attention.corpus_bleu(s.hypothesis, s.reference), c.expected
                    FROM bleu_cases c JOIN segments s ON s.grp = split_part(c.name, ':', 2)
                   WHERE c.name LIKE 'corpus:%'
                   GROUP BY c.name, c.expected
                  HAVING abs(attention.corpus_bleu(s.hypothesis, s.reference) - c.expected) >= 0.01$$,
                'corpus BLEU equals sacrebleu.corpus_bleu to 0.01 for every group');

-- The aggregate is parallel safe: partial states combine to the same score.
CREATE TABLE parallel_bleu AS SELECT s.hypothesis, s.reference FROM segments s, generate_series(1, 20);
ANALYZE parallel_bleu;
SET LOCAL max_parallel_workers_per_gather = 0;
CREATE TEMP TABLE serial_score AS SELECT attention.corpus_bleu(hypothesis, reference) AS score FROM parallel_bleu;
SET LOCAL parallel_setup_cost = 0;
SET LOCAL parallel_tuple_cost = 0;
SET LOCAL min_parallel_table_scan_size = 0;
SET LOCAL max_parallel_workers_per_gather = 2;
CREATE FUNCTION pg_temp.explain_lines() RETURNS SETOF text LANGUAGE plpgsql AS $f$
BEGIN
    RETURN QUERY EXECUTE 'EXPLAIN SELECT attention.corpus_bleu(hypothesis, reference) FROM parallel_bleu';
END
$f$;
SELECT ok((SELECT string_agg(line, E'\n') LIKE '%Partial Aggregate%' FROM pg_temp.explain_lines() AS line),
          'corpus_bleu is planned as a partial (parallel) aggregate');
SELECT is((SELECT round(attention.corpus_bleu(hypothesis, reference)::numeric, 9) FROM parallel_bleu),
          (SELECT round(score::numeric, 9) FROM serial_score),
          'parallel corpus BLEU equals the serial one');

SELECT * FROM finish();
ROLLBACK;
