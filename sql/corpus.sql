-- Corpora: create_corpus, INSERT, import_corpus, load_corpus and their errors.
SELECT attention.create_corpus('regress', 'en', 'de') > 0 AS created;
SELECT attention.create_corpus('regress', 'en', 'fr');
SELECT name, source_lang, target_lang FROM attention.corpora ORDER BY name;

-- plain INSERT
INSERT INTO attention.corpus_pairs (corpus_id, split, source, target)
SELECT corpus_id, 'valid', 'Hello world', 'Hallo Welt' FROM attention.corpora WHERE name = 'regress';
INSERT INTO attention.corpus_pairs (corpus_id, split, source, target)
SELECT corpus_id, 'dev', 'x', 'y' FROM attention.corpora WHERE name = 'regress';

-- import_corpus: any query with two columns, any types
SELECT attention.import_corpus('regress', $$VALUES ('one', 'eins'), ('two', 'zwei'), ('three', 'drei')$$);
SELECT attention.import_corpus('regress', 'SELECT g, g * 2 FROM generate_series(1, 5) g', 'test');
SELECT attention.import_corpus('regress', 'SELECT 1, 2 WHERE false', 'test');
SELECT split, count(*) FROM attention.corpus_pairs GROUP BY split ORDER BY split;

-- import_corpus errors
SELECT attention.import_corpus('nope', 'SELECT 1, 2');
SELECT attention.import_corpus('regress', 'SELECT 1, 2', 'dev');
SELECT attention.import_corpus('regress', 'SELECT 1, 2, 3');
SELECT attention.import_corpus('regress', 'SELECT ''a''');
SELECT attention.import_corpus('regress', $$VALUES ('a', 'b'), (NULL, 'c')$$);
SELECT attention.import_corpus('regress', 'SELEC 1');
SELECT attention.import_corpus('regress', 'CREATE TABLE t (a int)');
SELECT attention.import_corpus('regress', NULL);
SELECT count(*) AS pairs_after_errors FROM attention.corpus_pairs;

-- load_corpus: line-aligned files on the server
COPY (VALUES ('The cat.'), ('A dog.'), ('')) TO '/tmp/attention_regress.en';
COPY (VALUES ('Die Katze.'), ('Ein Hund.'), ('Leer')) TO '/tmp/attention_regress.de';
COPY (VALUES ('Eins.'), ('Zwei.')) TO '/tmp/attention_regress_short.de';
COPY (SELECT 'Größe') TO '/tmp/attention_regress_latin1.de' WITH (ENCODING 'LATIN1');
SELECT attention.load_corpus('regress', '/tmp/attention_regress.en', '/tmp/attention_regress.de');
SELECT source, target FROM attention.corpus_pairs WHERE target IN ('Die Katze.', 'Ein Hund.', 'Leer') ORDER BY pair_id;
SELECT attention.load_corpus('regress', '/tmp/attention_regress.en', '/tmp/attention_regress_short.de');
SELECT attention.load_corpus('regress', '/tmp/attention_regress_short.de', '/tmp/attention_regress.en');
SELECT attention.load_corpus('regress', '/tmp/attention_regress.en', '/tmp/attention_regress_missing.de');
SELECT attention.load_corpus('regress', '/tmp/attention_regress_latin1.de', '/tmp/attention_regress_latin1.de');
SELECT attention.load_corpus('regress', '/tmp/attention_regress.en', '/tmp/attention_regress.de', 'holdout');
SELECT count(*) AS pairs_after_errors FROM attention.corpus_pairs;

-- deleting a corpus deletes its pairs
SELECT attention.create_corpus('to_drop', 'en', 'de') > 0 AS created;
SELECT attention.import_corpus('to_drop', $$VALUES ('a', 'b')$$);
DELETE FROM attention.corpora WHERE name = 'to_drop';
SELECT count(*) AS pairs FROM attention.corpus_pairs;
