-- Training jobs: options, the job lifecycle, cancel, resume equality (bit for
-- bit), averaging trained checkpoints, export/import and evaluate.
-- Its own corpus and vocabulary (the pairs of translate.sql's), so the file runs alone.
-- Its jobs and checkpoints are numbered from 2000, so messages naming them read the same alone.
SELECT setval('attention.jobs_job_id_seq', 2000, false) AS first_job,
       setval('attention.checkpoints_checkpoint_id_seq', 2000, false) AS first_checkpoint \gset
SELECT attention.create_corpus('tj_corpus', 'en', 'de') > 0 AS created;
SELECT attention.import_corpus('tj_corpus', $$
  SELECT 'the package provides ' || w || ' files for ' || v, 'das Paket enthält ' || w || ' Dateien für ' || v
    FROM unnest(ARRAY['data', 'library', 'documentation', 'development', 'example']) AS w,
         unnest(ARRAY['python', 'perl', 'ruby', 'java', 'debian', 'gnome']) AS v$$);
SELECT attention.import_corpus('tj_corpus', $$
  SELECT 'the package provides ' || w || ' files for python', 'das Paket enthält ' || w || ' Dateien für python'
    FROM unnest(ARRAY['data', 'example']) AS w$$, split) AS pairs
  FROM unnest(ARRAY['valid', 'test']) AS split;
SELECT attention.train_vocabulary('tj_vocab', 'tj_corpus', vocab_size => 80, byte_fallback => false) > 0 AS trained;
SELECT attention.create_model('job', 'tj_vocab', '{"num_encoder_layers": 1, "num_decoder_layers": 1, "d_model": 16,
  "num_heads": 2, "d_ff": 32, "max_positions": 64}') > 0 AS created;

-- bad options and arguments: an ERROR naming the key or value, and no job
SELECT attention.train('job', 'tj_corpus', '{"max_step": 5}');
SELECT attention.train('job', 'tj_corpus', '{"max_steps": -1}');
SELECT attention.train('job', 'tj_corpus', '{"max_steps": 1.5}');
SELECT attention.train('job', 'tj_corpus', '{"batch_tokens": "many"}');
SELECT attention.train('job', 'tj_corpus', '{"device": "tpu"}');
SELECT attention.train('job', 'tj_corpus', '[1]');
SELECT attention.train('nope', 'tj_corpus');
SELECT attention.train('job', 'nope');
SELECT count(*) AS jobs FROM attention.training_jobs;

-- lifecycle: a long job runs as a worker, reports progress, and stops on cancel with a final checkpoint
SELECT attention.train('job', 'tj_corpus', '{"max_steps": 1000000, "batch_tokens": 120, "warmup_steps": 20,
  "checkpoint_every_steps": 0, "checkpoint_every_minutes": 0}') AS long_job \gset
SELECT attention.train('job', 'tj_corpus');
DO $$
BEGIN
  FOR i IN 1..3000 LOOP
    EXIT WHEN (SELECT step > 0 FROM attention.training_jobs WHERE status = 'running');
    PERFORM pg_sleep(0.1);
  END LOOP;
END
$$;
SELECT status, step > 0 AS progressed, train_loss > 0 AS loss, learning_rate > 0 AS learning_rate,
       tokens_per_second > 0 AS speed, started_at IS NOT NULL AS started, finished_at IS NULL AS unfinished
  FROM attention.training_jobs WHERE job_id = :long_job;
SELECT a.backend_type, a.usename = current_user AS as_submitter, a.application_name
  FROM pg_stat_activity a JOIN attention.training_jobs j ON a.pid = j.worker_pid WHERE j.job_id = :long_job;
SELECT attention.cancel_training(:long_job);
SELECT attention.wait_training(:long_job, '600 s');
SELECT count(*) AS checkpoints, bool_and(c.step = j.step) AS at_the_last_step, bool_and(c.kind = 'trained') AS trained
  FROM attention.checkpoints c JOIN attention.training_jobs j USING (job_id) WHERE j.job_id = :long_job;
SELECT attention.cancel_training(:long_job);
SELECT attention.wait_training(999999);

-- an uninterrupted run of 24 steps (checkpoints every 8, 2 kept)...
\set options '"batch_tokens": 120, "warmup_steps": 8, "learning_rate_scale": 0.5, "checkpoint_every_steps": 8, "keep_checkpoints": 2, "seed": 3, "threads": 1, "validation_bleu_sentences": 2'
SELECT attention.train('job', 'tj_corpus', format('{"max_steps": 24, %s}', :'options')::jsonb) AS full_job \gset
SELECT attention.wait_training(:full_job);
SELECT status, step, epoch > 1 AS epochs, tokens_seen > 0 AS tokens, valid_loss > 0 AS valid_loss,
       valid_bleu >= 0 AS valid_bleu, error FROM attention.training_jobs WHERE job_id = :full_job;
SELECT array_agg(step ORDER BY step) AS kept_steps FROM attention.checkpoints WHERE job_id = :full_job;
SELECT checkpoint_id AS full_24 FROM attention.checkpoints WHERE job_id = :full_job AND step = 24 \gset
-- ... equals a run stopped at step 10 and resumed to 24, bit for bit: parameters,
-- Adam moments, step, dropout RNG and data position (all but the elapsed time)
SELECT attention.train('job', 'tj_corpus', format('{"max_steps": 10, %s}', :'options')::jsonb) AS part_job \gset
SELECT attention.wait_training(:part_job);
INSERT INTO attention.training_history (job_id, step, train_loss) VALUES (:part_job, 20, 99);
SELECT attention.resume_training(:part_job, '{"seed": 4}');
SELECT attention.resume_training(:part_job, '{"max_steps": 24}') = :part_job AS resumed;
SELECT attention.wait_training(:part_job);
SELECT status, step FROM attention.training_jobs WHERE job_id = :part_job;
SELECT checkpoint_id AS part_24 FROM attention.checkpoints WHERE job_id = :part_job AND step = 24 \gset
SELECT count(*) AS tensors, bool_and(a.bytes = b.bytes AND a.shape = b.shape) AS bitwise_equal
  FROM attention.checkpoint_tensors a JOIN attention.checkpoint_tensors b USING (name, chunk)
 WHERE a.checkpoint_id = :full_24 AND b.checkpoint_id = :part_24 AND name <> 'data.elapsed_ms';
SELECT (SELECT count(*) FROM attention.checkpoint_tensors WHERE checkpoint_id = :full_24) AS all_tensors;

-- the training history: a row per progress update and validation, one curve per job (a
-- resumed job's later rows replace the steps it repeats: the row a first run left past its
-- checkpoint goes), the resumed job's validations equal the uninterrupted job's
SELECT array_agg(step ORDER BY step) FILTER (WHERE valid_loss IS NOT NULL) AS validated_steps,
       bool_and(valid_bleu IS NOT NULL) FILTER (WHERE valid_loss IS NOT NULL) AS with_bleu,
       count(train_loss) >= 3 AS train_losses, bool_and(train_loss > 0) AS positive,
       bool_and(learning_rate > 0) AS learning_rates, max(step) AS last_step
  FROM attention.training_history WHERE job_id = :full_job;
SELECT array_agg(step ORDER BY step) FILTER (WHERE valid_loss IS NOT NULL) AS validated_steps,
       count(*) FILTER (WHERE train_loss = 99) AS stale_rows
  FROM attention.training_history WHERE job_id = :part_job;
SELECT bool_and(a.valid_loss = b.valid_loss AND a.valid_bleu = b.valid_bleu) AS same_validations, count(*)
  FROM attention.training_history a JOIN attention.training_history b USING (step)
 WHERE a.job_id = :full_job AND b.job_id = :part_job AND a.valid_loss IS NOT NULL AND b.valid_loss IS NOT NULL;

-- training lowered the validation loss below the initial model's (same seed, same initialisation)
SELECT attention.initialize_checkpoint('job', 3) AS initial \gset
SELECT (SELECT loss FROM attention.evaluate('job', 'tj_corpus', 'valid', :full_24, 1))
     < (SELECT loss FROM attention.evaluate('job', 'tj_corpus', 'valid', :initial, 1)) AS loss_fell;
-- evaluate (fp32) reports what the worker measured for the same checkpoint: the same loss where
-- the job ran in fp32, within 1% where "auto" chose bf16 (the worker validates as it trains)
SELECT abs(e.loss - c.valid_loss) < CASE j.options->>'precision' WHEN 'fp32' THEN 1e-5 ELSE 1e-2 * e.loss END
         AS same_loss,
       abs(e.bleu - c.valid_bleu) < 1e-6 AS same_bleu, e.sentences
  FROM attention.evaluate('job', 'tj_corpus', 'valid', :full_24, 1) e, attention.checkpoints c
  JOIN attention.training_jobs j USING (job_id)
 WHERE c.checkpoint_id = :full_24;

-- precision: "auto", the default, stores what it resolved to (bf16 where the CPU's bf16 products
-- are timed at least 1.25 times as fast as fp32's; fp32 elsewhere) and runs it: the default job's validation at
-- step 8 is that of the explicit job of the same precision; bf16 runs on any CPU (emulated where
-- not native), within 2% of fp32 and not equal to it; other names are refused before any job is queued
SELECT count(*) AS jobs_before FROM attention.training_jobs \gset
SELECT attention.train('job', 'tj_corpus', '{"precision": "fp16"}');
SELECT attention.train('job', 'tj_corpus', '{"precision": "BF16"}');
SELECT count(*) = :jobs_before AS no_job_queued FROM attention.training_jobs;
SELECT attention.train('job', 'tj_corpus', format('{"max_steps": 8, "precision": "fp32", %s}', :'options')::jsonb)
  AS fp32_job \gset
SELECT attention.wait_training(:fp32_job);
SELECT attention.train('job', 'tj_corpus', format('{"max_steps": 8, "precision": "bf16", %s}', :'options')::jsonb)
  AS bf16_job \gset
SELECT attention.wait_training(:bf16_job);
SELECT attention.train('job', 'tj_corpus', format('{"max_steps": 1, "precision": "auto", %s}', :'options')::jsonb)
  AS auto_job \gset
SELECT attention.wait_training(:auto_job);
SELECT f.options->>'precision' AS fp32, b.options->>'precision' AS bf16,
       a.options->>'precision' IN ('bf16', 'fp32') AS auto_resolved,
       a.options->>'precision' = d.options->>'precision' AS auto_is_the_default
  FROM attention.training_jobs f, attention.training_jobs b, attention.training_jobs a, attention.training_jobs d
 WHERE f.job_id = :fp32_job AND b.job_id = :bf16_job AND a.job_id = :auto_job AND d.job_id = :full_job;
SELECT d.valid_loss = CASE j.options->>'precision' WHEN 'bf16' THEN b.valid_loss ELSE f.valid_loss END
         AS ran_what_it_stored,
       abs(b.valid_loss - f.valid_loss) / f.valid_loss < 0.02 AS within_2_percent, b.valid_loss <> f.valid_loss AS differs
  FROM attention.training_history d JOIN attention.training_jobs j USING (job_id),
       attention.training_history b, attention.training_history f
 WHERE d.job_id = :full_job AND b.job_id = :bf16_job AND f.job_id = :fp32_job
   AND d.step = 8 AND b.step = 8 AND f.step = 8
   AND d.valid_loss IS NOT NULL AND b.valid_loss IS NOT NULL AND f.valid_loss IS NOT NULL;
SELECT bleu >= 0 AS bleu, loss > 0 AS loss, sentences, seconds > 0 AS timed
  FROM attention.evaluate('job', 'tj_corpus', 'test', :full_24);
SELECT * FROM attention.evaluate('job', 'tj_corpus', 'dev');
SELECT * FROM attention.evaluate('job', 'tj_corpus', 'test', 999999);

-- averaging trained checkpoints (the two newest: both step 24, identical), deploying the average, translating with it
SELECT attention.delete_checkpoint(checkpoint_id) FROM attention.checkpoints WHERE job_id = :long_job;
SELECT attention.average_checkpoints('job', 2) AS average \gset
SELECT kind, step, averaged_from = ARRAY[:part_24, :full_24]::bigint[] AS sources
  FROM attention.checkpoints WHERE checkpoint_id = :average;
SELECT count(*) AS parameters, bool_and(a.bytes = b.bytes) AS average_of_equals_is_equal
  FROM attention.checkpoint_tensors a JOIN attention.checkpoint_tensors b USING (name, chunk)
 WHERE a.checkpoint_id = :average AND b.checkpoint_id = :full_24;
SELECT attention.deploy('job') = :average AS deployed_average;
SELECT attention.translate('the package provides data files for python', 'job', 1) IS NOT NULL AS translates;
SELECT sentences FROM attention.evaluate('job', 'tj_corpus', 'test');

-- export to safetensors and import back: the same bytes
SELECT attention.export_checkpoint(:full_24) AS file \gset
SELECT get_byte(:'file', 0) + 256 * (get_byte(:'file', 1) + 256 * (get_byte(:'file', 2) + 256 * get_byte(:'file', 3)))
       AS header_bytes \gset
SELECT h->'__metadata__'->>'attention.model' AS model, h->'__metadata__'->>'attention.step' AS step,
       (h->'__metadata__'->>'attention.config')::jsonb->'d_model' AS d_model,
       h->'model.shared.weight' AS embedding, (SELECT count(*) FROM jsonb_object_keys(h)) - 1 AS tensors
  FROM (SELECT convert_from(substring(:'file'::bytea FROM 9 FOR :header_bytes), 'UTF8')::jsonb AS h) s;
SELECT attention.import_checkpoint('job', :'file') AS imported \gset
SELECT kind, step FROM attention.checkpoints WHERE checkpoint_id = :imported;
SELECT count(*) AS parameters, bool_and(a.bytes = b.bytes AND a.shape = b.shape) AS bitwise_equal
  FROM attention.checkpoint_tensors a JOIN attention.checkpoint_tensors b USING (name, chunk)
 WHERE a.checkpoint_id = :imported AND b.checkpoint_id = :full_24;
SELECT substring(attention.export_checkpoint(:imported) FROM 9 + :header_bytes)
     = substring(:'file'::bytea FROM 9 + :header_bytes) AS same_data;
SELECT attention.create_model('job_wide', 'tj_vocab', '{"num_encoder_layers": 1, "num_decoder_layers": 1,
  "d_model": 32, "num_heads": 2, "d_ff": 32, "max_positions": 64}') > 0 AS created;
SELECT attention.import_checkpoint('job_wide', :'file');
SELECT attention.import_checkpoint('job', substring(:'file'::bytea FROM 1 FOR 100));
SELECT attention.import_checkpoint('job', '\x0102'::bytea);
SELECT attention.import_checkpoint('job', '\x0300000000000000'::bytea || convert_to('{x}', 'UTF8'));
SELECT attention.import_checkpoint('job', '\x2900000000000000'::bytea
                                          || convert_to('{"__metadata__":{"attention.format":"2"}}', 'UTF8'));
SELECT attention.export_checkpoint(999999);

-- a pre-norm model (normalize_before: each stack ends in a LayerNorm) trains as the post-norm one does
SELECT attention.create_model('job_pre', 'tj_vocab', '{"num_encoder_layers": 1, "num_decoder_layers": 1,
  "d_model": 16, "num_heads": 2, "d_ff": 32, "max_positions": 64, "normalize_before": true}') > 0 AS created;
SELECT config -> 'normalize_before' AS normalize_before FROM attention.models WHERE name = 'job_pre';
SELECT attention.train('job_pre', 'tj_corpus', format('{"max_steps": 24, "validate_every_steps": 1, "keep_history": 4, %s}',
                                                    :'options')::jsonb) AS pre_job \gset
SELECT attention.wait_training(:pre_job);
SELECT status, step, valid_loss > 0 AS valid_loss, error FROM attention.training_jobs WHERE job_id = :pre_job;
-- a validation every step, at most keep_history rows: thinned evenly, the first and last kept
SELECT count(*) <= 4 AS bounded, min(step) AS first, max(step) AS last, bool_and(valid_loss IS NOT NULL) AS validated
  FROM attention.training_history WHERE job_id = :pre_job;
SELECT attention.train('job_pre', 'tj_corpus', '{"keep_history": -1}');
SELECT array_agg(t.name ORDER BY t.name) AS final_layer_norms
  FROM attention.checkpoint_tensors t JOIN attention.checkpoints c USING (checkpoint_id)
 WHERE c.job_id = :pre_job AND c.step = 24 AND t.name LIKE 'model.%coder.layer_norm.%';
SELECT attention.initialize_checkpoint('job_pre', 3) AS pre_initial \gset
SELECT (SELECT loss FROM attention.evaluate('job_pre', 'tj_corpus', 'valid',
          (SELECT checkpoint_id FROM attention.checkpoints WHERE job_id = :pre_job AND step = 24), 1))
     < (SELECT loss FROM attention.evaluate('job_pre', 'tj_corpus', 'valid', :pre_initial, 1)) AS loss_fell;
SELECT attention.drop_model('job_pre');

-- training curves as SVG: well-formed XML, a curve per measured series, one colour per job
SELECT xml_is_well_formed_document(svg) AS xml, svg LIKE '<svg xmlns="http://www.w3.org/2000/svg" width="800" height="500" %' AS sized,
       (length(svg) - length(replace(svg, '<polyline class="series"', ''))) / length('<polyline class="series"') AS curves,
       svg LIKE '%Training of job ' || :full_job || ' (model job)%' AS titled, svg ~ '<script|href=|url\(' AS external
  FROM attention.plot_training(:full_job) AS svg;
SELECT xml_is_well_formed_document(svg) AS xml, svg LIKE '%width="1200" height="700"%' AS sized,
       (length(svg) - length(replace(svg, '<polyline class="series"', ''))) / length('<polyline class="series"') AS curves,
       (length(svg) - length(replace(svg, 'stroke="#ff7f0e"', ''))) > 0 AS second_colour
  FROM attention.plot_training(ARRAY[:full_job, :part_job, :full_job], 1200, 700) AS svg;
SELECT attention.plot_training(999999);
SELECT attention.plot_training(:full_job, 100, 500);
SELECT attention.plot_training(:full_job, 800, 5000);
SELECT attention.plot_training('{}'::bigint[]);
SELECT attention.plot_training(ARRAY[:full_job, NULL]);
SELECT attention.plot_training(ARRAY(SELECT generate_series(1, 11)::bigint));
SELECT attention.plot_training(ARRAY[:long_job, :full_job, :part_job], 300, 200);
-- extreme values (the owner may write any): steps near 2^63 one float8 ulp apart, losses of
-- 1e300 and -1e-300: a picture, in finite time
INSERT INTO attention.jobs (model_id, corpus_id, status, finished_at)
SELECT model_id, corpus_id, 'failed', now() FROM attention.jobs WHERE job_id = :full_job RETURNING job_id AS odd_job \gset
INSERT INTO attention.training_history (job_id, step, train_loss, valid_loss)
VALUES (:odd_job, 9000000000000000000, 1e300, NULL), (:odd_job, 9000000000000001024, -1e-300, 'NaN');
SELECT xml_is_well_formed_document(attention.plot_training(:odd_job)) AS extreme_values_plot;
-- attention heatmaps: a cell per probability attention_weights returns, well-formed XML
SELECT xml_is_well_formed_document(svg) AS xml,
       (length(svg) - length(replace(svg, '<rect class="cell"', ''))) / length('<rect class="cell"')
       = (SELECT count(*) FROM attention.attention_weights('the package provides data files for python', NULL, 'job')
           WHERE kind = 'cross' AND layer = 0 AND head = 1) AS one_cell_per_weight
  FROM attention.plot_attention('the package provides data files for python', NULL, 'job', 'cross', 0, 1) AS svg;
SELECT kind, xml_is_well_formed_document(svg) AS xml,
       (length(svg) - length(replace(svg, '<rect class="cell"', ''))) / length('<rect class="cell"') AS cells,
       (length(svg) - length(replace(svg, '<g class="panel"', ''))) / length('<g class="panel"') AS panels
  FROM unnest(ARRAY['encoder', 'decoder', 'cross']) AS kind,
       attention.plot_attention('the package provides data files', 'das Paket enthält Dateien', 'job', kind, 0) AS svg;
SELECT xml_is_well_formed_document(svg) AS xml,
       (length(svg) - length(replace(svg, '<rect class="cell"', ''))) / length('<rect class="cell"')
       = (SELECT count(*) FROM attention.align('the package provides data files', 'das Paket enthält Dateien', 'job'))
       AS one_cell_per_weight
  FROM attention.plot_alignment('the package provides data files', 'das Paket enthält Dateien', 'job') AS svg;
SELECT attention.plot_attention(NULL, NULL, 'job', 'cross', 0) IS NULL AS null_source,
       attention.plot_alignment('the package', NULL, 'job') IS NULL AS null_target;
SELECT attention.plot_attention('the package', NULL, 'job', 'sideways', 0);
SELECT attention.plot_attention('the package', NULL, 'job', NULL, 0);
SELECT attention.plot_attention('the package', NULL, 'job', 'encoder', 1);
SELECT attention.plot_attention('the package', NULL, 'job', 'decoder', 0, 2);
SELECT attention.plot_attention(repeat('data ', 18), NULL, 'job', 'encoder', 0);
SELECT length(attention.plot_attention(repeat('data ', 18), NULL, 'job', 'encoder', 0, 0)) > 0 AS one_head_draws;
SELECT attention.plot_attention('the package', NULL, 'nope', 'encoder', 0);

-- a model cannot be dropped while it trains; afterwards it can
SELECT attention.drop_model('job_wide');
SELECT attention.drop_model('job');
SELECT count(*) AS jobs_left FROM attention.training_jobs;
SELECT count(*) AS history_left FROM attention.training_history;
