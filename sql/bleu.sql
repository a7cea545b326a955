-- BLEU: sentence and corpus level (sacreBLEU defaults); the pgTAP suite
-- checks hundreds of cases against sacreBLEU itself.
SELECT round(attention.bleu('The cat sat on the mat.', 'The cat sat on the mat.')::numeric, 4) AS identical;
SELECT round(attention.bleu('the cat', 'the cat sat')::numeric, 4) AS short;
SELECT attention.bleu('', 'reference') AS empty_hypothesis, attention.bleu('hypothesis', '') AS empty_reference;
SELECT attention.bleu(NULL, 'x') IS NULL AS null_in_null_out;
SELECT round(attention.corpus_bleu(h, r)::numeric, 4) AS corpus
  FROM (VALUES ('the cat sat on the mat', 'the cat sat on a mat'),
               ('a dog barks', 'the dog barks'),
               (NULL, 'ignored row')) AS t(h, r);
SELECT attention.corpus_bleu(h, r) AS no_rows FROM (SELECT 'a'::text h, 'b'::text r WHERE false) t;
SELECT attention.bleu_final('{1,2,3}');
