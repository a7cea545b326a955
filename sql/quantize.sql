-- int8 checkpoints: quantize, what they hold, every translation path on one,
-- and what they refuse. (A random model's outputs depend on floating-point
-- details and on the CPU's int8 products, so int8 and fp32 are compared
-- with each other within stated margins rather than printed.)
-- ids of this test's own (other tests run before it in one database)
SELECT setval('attention.checkpoints_checkpoint_id_seq', 7000, false) AS first_checkpoint \gset
SELECT attention.create_corpus('q_regress', 'en', 'de') > 0 AS created;
SELECT attention.import_corpus('q_regress', $$
  SELECT 'the package provides ' || w || ' files for ' || v, 'das Paket enthält ' || w || ' Dateien für ' || v
    FROM unnest(ARRAY['data', 'library', 'documentation', 'development', 'example']) AS w,
         unnest(ARRAY['python', 'perl', 'ruby', 'java', 'debian', 'gnome']) AS v$$);
SELECT attention.train_vocabulary('q_vocab', 'q_regress', vocab_size => 80, byte_fallback => false) > 0 AS trained;
SELECT attention.create_model('qm', 'q_vocab', '{"num_encoder_layers": 2, "num_decoder_layers": 2, "d_model": 32,
  "num_heads": 2, "d_ff": 64, "max_positions": 128}') > 0 AS created;
SELECT attention.initialize_checkpoint('qm', 11) AS fp \gset

-- quantize: a new checkpoint of kind quantized, format 2, from the source, its step
SELECT attention.quantize(:fp) AS q \gset
SELECT kind, format, quantized_from = :fp AS from_source, step, deployed, job_id IS NULL AS no_job
  FROM attention.checkpoints WHERE checkpoint_id = :q;
-- the embedding, 6 matrices per encoder layer and 10 per decoder layer as int8 with a scale per row
SELECT dtype, count(*) AS tensors, sum(length(bytes)) AS bytes
  FROM attention.checkpoint_tensors WHERE checkpoint_id = :q GROUP BY dtype ORDER BY dtype;
SELECT count(*) AS scales_match
  FROM attention.checkpoint_tensors w JOIN attention.checkpoint_tensors s
    ON s.checkpoint_id = w.checkpoint_id AND s.name = w.name || '_scale'
 WHERE w.checkpoint_id = :q AND w.dtype = 'int8' AND s.dtype = 'float32' AND s.shape[1] = w.shape[1];
-- biases and LayerNorms are copied bit for bit
SELECT count(*) AS float_tensors_copied
  FROM attention.checkpoint_tensors a JOIN attention.checkpoint_tensors b USING (name)
 WHERE a.checkpoint_id = :fp AND b.checkpoint_id = :q AND b.dtype = 'float32' AND a.bytes = b.bytes;
-- a quarter of the parameters' bytes, and a bit (the scales and the float32 tensors: many in so small a model)
SELECT round((SELECT sum(length(bytes)) FROM attention.checkpoint_tensors WHERE checkpoint_id = :q)::numeric
           / (SELECT sum(length(bytes)) FROM attention.checkpoint_tensors WHERE checkpoint_id = :fp
                 AND name LIKE 'model.%'), 2) AS ratio;

-- bad input
SELECT attention.quantize(:q);
SELECT attention.quantize(:fp, 'int4');
SELECT attention.quantize(999999);
SELECT attention.quantize(:fp, NULL) IS NULL AS strict;
SELECT length(attention.export_checkpoint(:q));
SELECT count(*) FROM attention.export_huggingface(:q);
SELECT attention.train('qm', 'q_regress', jsonb_build_object('max_steps', 1, 'init_checkpoint', :q));
-- averages never include int8 checkpoints
SELECT attention.average_checkpoints('qm', 5) AS avg \gset
SELECT averaged_from = ARRAY[:fp]::bigint[] AS average_skips_int8 FROM attention.checkpoints WHERE checkpoint_id = :avg;

-- fp32 translations, scores and n-best lists, then the same on the int8 checkpoint
SET search_path = public, attention;
CREATE TABLE q_src AS SELECT source AS en FROM attention.corpus_pairs p JOIN attention.corpora c USING (corpus_id)
 WHERE c.name = 'q_regress';
SELECT deploy('qm', :fp) = :fp AS fp32_deployed;
CREATE TABLE q_fp32 AS SELECT en, translate(en, 'qm') AS t, translate(en, 'qm', 1) AS greedy FROM q_src;
ALTER TABLE q_fp32 ADD COLUMN fp32_score double precision, ADD COLUMN int8_score double precision;
UPDATE q_fp32 SET fp32_score = score(en, t, 'qm');
SELECT deploy('qm', :q) = :q AS int8_deployed;
UPDATE q_fp32 SET int8_score = score(en, t, 'qm');
-- teacher-forced log-probabilities of the fp32 translations agree within 0.1 nats per token
SELECT count(*) AS sentences,
       bool_and(abs(int8_score - fp32_score) <= 0.1 * (cardinality(tokenize(t, 'q_vocab')) + 1)) AS scores_close
  FROM q_fp32;
-- int8 translations: mostly the same as fp32's (random models are full of near ties)
SELECT count(*) FILTER (WHERE translate(en, 'qm') = t) >= 0.8 * count(*) AS beam_mostly_equal,
       count(*) FILTER (WHERE translate(en, 'qm', 1) = greedy) >= 0.8 * count(*) AS greedy_mostly_equal
  FROM q_fp32;
-- on the int8 checkpoint the functions agree with each other as on fp32: the beam's score and
-- the teacher-forced one within 2e-4 nats an output token (decoding step by step sums in
-- another order than the whole-sentence forward, and where that moves an activation across
-- an int8 rounding boundary the product moves by a whole step: 5e-5 a token seen without
-- VNNI, 7-bit weights, on 67-token outputs; an absolute 1e-3 failed there)
SELECT bool_and((SELECT translation FROM translate_nbest(en, 'qm', 4) WHERE rank = 1) = translate(en, 'qm'))
         AS nbest_first_is_translation,
       bool_and(abs((SELECT score FROM translate_nbest(en, 'qm', 4) WHERE rank = 1)
                    - score(en, translate(en, 'qm'), 'qm'))
                < 2e-4 * (cardinality(tokenize(translate(en, 'qm'), 'q_vocab')) + 1)) AS nbest_score_is_score
  FROM q_src WHERE tokenize(translate(en, 'qm'), 'q_vocab') =
                   (SELECT tokens FROM translate_nbest(en, 'qm', 4) WHERE rank = 1);
SELECT count(*) > 0 AS attention_rows, bool_and(weight BETWEEN 0 AND 1) AS probabilities
  FROM attention_weights('the package provides data files', 'das Paket', 'qm');
SELECT translate(ARRAY(SELECT en FROM q_src ORDER BY en), 'qm')
     = ARRAY(SELECT translate(en, 'qm') FROM q_src ORDER BY en) AS batch_equals_single;
-- the batched-rows node and translate_column
SET attention.batch_rows = 16;
CREATE TABLE q_rows AS SELECT en, translate(en, 'qm') AS t FROM q_src;
SELECT bool_and(t = translate(en, 'qm')) AS batched_rows_equal FROM q_rows;
SET client_min_messages = warning;
CREATE TABLE q_docs AS SELECT row_number() OVER (ORDER BY en) AS id, en, NULL::text AS de FROM q_src;
ALTER TABLE q_docs ADD PRIMARY KEY (id);
CALL translate_column('q_docs', 'en', 'de', 'qm', batch_size => 8);
RESET client_min_messages;
SELECT count(*) AS rows, bool_and(de = translate(en, 'qm')) AS column_equal FROM q_docs;
-- deploying back to fp32 gives fp32's results again
SELECT deploy('qm', :fp) = :fp AS fp32_again;
SELECT bool_and(translate(en, 'qm') = t) AS fp32_results_back FROM q_fp32;

DROP TABLE q_src, q_fp32, q_rows, q_docs;
SELECT attention.drop_model('qm');
SELECT attention.drop_vocabulary('q_vocab');
SELECT attention.drop_corpus('q_regress');
RESET search_path;
