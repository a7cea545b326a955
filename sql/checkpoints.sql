-- Checkpoint lifecycle: averaging, deployment of the average, deletion, dropping a model.
-- Its own corpus and vocabulary (the pairs of translate.sql's), so the file runs alone.
-- Its jobs and checkpoints are numbered from 1000, so messages naming them read the same alone.
SELECT setval('attention.jobs_job_id_seq', 1000, false) AS first_job,
       setval('attention.checkpoints_checkpoint_id_seq', 1000, false) AS first_checkpoint \gset
SELECT attention.create_corpus('ck_corpus', 'en', 'de') > 0 AS created;
SELECT attention.import_corpus('ck_corpus', $$
  SELECT 'the package provides ' || w || ' files for ' || v, 'das Paket enthält ' || w || ' Dateien für ' || v
    FROM unnest(ARRAY['data', 'library', 'documentation', 'development', 'example']) AS w,
         unnest(ARRAY['python', 'perl', 'ruby', 'java', 'debian', 'gnome']) AS v$$);
SELECT attention.train_vocabulary('ck_vocab', 'ck_corpus', vocab_size => 80, byte_fallback => false) > 0 AS trained;
SELECT attention.create_model('avg', 'ck_vocab', '{"num_encoder_layers": 1, "num_decoder_layers": 1, "d_model": 8,
  "num_heads": 2, "d_ff": 16, "max_positions": 64}') > 0 AS created;
SELECT attention.average_checkpoints('avg');
SELECT attention.initialize_checkpoint('avg', 3) AS a \gset
SELECT attention.initialize_checkpoint('avg', 3) AS b \gset
-- the average of identical checkpoints equals each, bit for bit
SELECT attention.average_checkpoints('avg', 2) AS same \gset
SELECT c.averaged_from = ARRAY[:b, :a]::bigint[] AS records_sources, c.step
  FROM attention.checkpoints c WHERE c.checkpoint_id = :same;
SELECT count(*) AS tensors,
       bool_and(s.bytes = t.bytes AND s.shape = t.shape) AS bitwise_equal
  FROM attention.checkpoint_tensors s
  JOIN attention.checkpoint_tensors t ON t.name = s.name AND t.chunk = s.chunk AND t.checkpoint_id = :a
 WHERE s.checkpoint_id = :same;
SELECT count(*) AS optimizer_tensors FROM attention.checkpoint_tensors
 WHERE checkpoint_id = :same AND name NOT LIKE 'model.%';
-- a real mean: of seeds 3 and 4, element by element
SELECT attention.initialize_checkpoint('avg', 4) AS c \gset
SELECT attention.average_checkpoints('avg', 2) AS mixed \gset
SELECT c.averaged_from = ARRAY[:c, :b]::bigint[] AS newest_two FROM attention.checkpoints c WHERE c.checkpoint_id = :mixed;
-- (biases are 0 and LayerNorm weights 1 in both, so their mean is too; the embeddings differ)
SELECT bool_and(m.bytes = x.bytes) FILTER (WHERE m.name LIKE '%bias' OR m.name LIKE '%layer_norm.weight') AS constants_kept,
       bool_and(m.bytes <> x.bytes AND m.bytes <> y.bytes) FILTER (WHERE m.name = 'model.shared.weight') AS embedding_mixed
  FROM attention.checkpoint_tensors m
  JOIN attention.checkpoint_tensors x ON x.name = m.name AND x.checkpoint_id = :c
  JOIN attention.checkpoint_tensors y ON y.name = m.name AND y.checkpoint_id = :b
 WHERE m.checkpoint_id = :mixed;
-- deploy(NULL) takes the newest average, which translation then uses
SELECT attention.deploy('avg') = :mixed AS deploys_newest_average;
SELECT attention.score('the package', 'das Paket', 'avg') < 0 AS average_scores;
-- deletion
SELECT attention.delete_checkpoint(:mixed);
SELECT attention.delete_checkpoint(:same);
SELECT count(*) AS left_tensors FROM attention.checkpoint_tensors WHERE checkpoint_id = :same;
SELECT attention.delete_checkpoint(999999);
SELECT attention.average_checkpoints('avg', 0);
SELECT attention.average_checkpoints('nope');
-- checkpoints carry their format; a library refuses one it does not know
SELECT format FROM attention.checkpoints WHERE checkpoint_id = :a;
UPDATE attention.checkpoints SET format = 3 WHERE checkpoint_id = :a;
SELECT length(attention.export_checkpoint(:a)) > 0;
SELECT attention.deploy('avg', :a) = :a AS deployed;
SELECT attention.translate('the package', 'avg');
UPDATE attention.checkpoints SET format = 1 WHERE checkpoint_id = :a;
SELECT attention.translate('the package', 'avg') IS NOT NULL AS format_1_loads;
-- dropping
INSERT INTO attention.jobs (model_id, corpus_id, status, worker_pid)
SELECT m.model_id, c.corpus_id, 'running', pg_backend_pid() FROM attention.models m, attention.corpora c
 WHERE m.name = 'avg' AND c.name = 'ck_corpus';
SELECT attention.drop_model('avg');
UPDATE attention.jobs SET status = 'failed', finished_at = now()
 WHERE model_id = (SELECT model_id FROM attention.models WHERE name = 'avg');
SELECT attention.drop_model('avg');
SELECT count(*) AS checkpoints_left FROM attention.checkpoints c
 WHERE NOT EXISTS (SELECT 1 FROM attention.models m WHERE m.model_id = c.model_id);
SELECT attention.drop_model('avg');
