-- Training on a CUDA device: the "device" option, a clean ERROR where no
-- device can be used (before any job is queued), and a job on the emulated
-- CUDA library (the same kernel sources run on the CPU) that trains,
-- checkpoints and resumes with the losses of the same job on the CPU.
-- Its own corpus and vocabulary (the pairs of translate.sql's), so the file runs alone.
-- Its jobs and checkpoints are numbered from 3000, so messages naming them read the same alone.
SELECT setval('attention.jobs_job_id_seq', 3000, false) AS first_job,
       setval('attention.checkpoints_checkpoint_id_seq', 3000, false) AS first_checkpoint \gset
SELECT attention.create_corpus('gpu_corpus', 'en', 'de') > 0 AS created;
SELECT attention.import_corpus('gpu_corpus', $$
  SELECT 'the package provides ' || w || ' files for ' || v, 'das Paket enthält ' || w || ' Dateien für ' || v
    FROM unnest(ARRAY['data', 'library', 'documentation', 'development', 'example']) AS w,
         unnest(ARRAY['python', 'perl', 'ruby', 'java', 'debian', 'gnome']) AS v$$);
SELECT attention.import_corpus('gpu_corpus', $$
  SELECT 'the package provides ' || w || ' files for python', 'das Paket enthält ' || w || ' Dateien für python'
    FROM unnest(ARRAY['data', 'example']) AS w$$, split) AS pairs
  FROM unnest(ARRAY['valid', 'test']) AS split;
SELECT attention.train_vocabulary('gpu_vocab', 'gpu_corpus', vocab_size => 80, byte_fallback => false) > 0 AS trained;
SELECT attention.create_model('gpu_job', 'gpu_vocab', '{"num_encoder_layers": 1, "num_decoder_layers": 1, "d_model": 16,
  "num_heads": 2, "d_ff": 32, "max_positions": 64}') > 0 AS created;
SELECT count(*) AS jobs_before FROM attention.training_jobs \gset

-- names that are no device
SELECT attention.train('gpu_job', 'gpu_corpus', '{"device": "gpu"}');
SELECT attention.train('gpu_job', 'gpu_corpus', '{"device": "cuda:x"}');
SELECT attention.train('gpu_job', 'gpu_corpus', '{"device": 0}');

-- the real CUDA library without a usable GPU (here: no driver): the driver's reason in the detail
CREATE FUNCTION pg_temp.train_error(options jsonb)
RETURNS TABLE (error_state text, error_message text, error_hint text, detail_names_cause boolean) LANGUAGE plpgsql AS $$
DECLARE
  detail text;
BEGIN
  PERFORM attention.train('gpu_job', 'gpu_corpus', options);
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS error_state = RETURNED_SQLSTATE, error_message = MESSAGE_TEXT,
    detail = PG_EXCEPTION_DETAIL, error_hint = PG_EXCEPTION_HINT;
  detail_names_cause := detail ~ '(no usable CUDA device|cannot load the CUDA backend)';
  RETURN NEXT;
END
$$;
\x on
SELECT * FROM pg_temp.train_error('{"device": "cuda"}');
\x off
SELECT count(*) = :jobs_before AS no_job_queued FROM attention.training_jobs;

-- only a superuser chooses the library a worker loads
CREATE ROLE cuda_regress_user;
SET ROLE cuda_regress_user;
SET attention.cuda_library = '/tmp/anything.so';
RESET ROLE;
DROP ROLE cuda_regress_user;

-- the emulated library: 8 devices in the test cluster (scripts/test), so device 9 does not exist
SET attention.cuda_library = '$libdir/attention_cuda_emu.so';
SELECT attention.train('gpu_job', 'gpu_corpus', '{"device": "cuda:9"}');
-- workers read the setting at connection: give it to this database's new sessions
SELECT current_database() AS db \gset
ALTER DATABASE :"db" SET attention.cuda_library = '$libdir/attention_cuda_emu.so';

-- the same 16 steps on the CPU and on the emulated GPU (dropout on, checkpoints at 8 and 16) ...
\set options '"batch_tokens": 120, "warmup_steps": 8, "learning_rate_scale": 0.5, "checkpoint_every_steps": 8, "keep_checkpoints": 2, "seed": 5, "dropout": 0.1, "threads": 1, "validation_bleu_sentences": 2, "precision": "fp32"'
SELECT attention.train('gpu_job', 'gpu_corpus', format('{"max_steps": 16, "device": "cpu", %s}', :'options')::jsonb)
  AS cpu_job \gset
SELECT attention.wait_training(:cpu_job);
-- ... the GPU run stopped at step 8 and resumed to 16
SELECT attention.train('gpu_job', 'gpu_corpus', format('{"max_steps": 8, "device": "cuda", %s}', :'options')::jsonb)
  AS cuda_job \gset
SELECT attention.wait_training(:cuda_job);
SELECT status, step, options->>'device' AS device, error FROM attention.training_jobs WHERE job_id = :cuda_job;
SELECT attention.resume_training(:cuda_job, '{"max_steps": 16}') = :cuda_job AS resumed;
SELECT attention.wait_training(:cuda_job);
SELECT status, step, error FROM attention.training_jobs WHERE job_id = :cuda_job;
-- validation losses at both checkpoints agree to 1e-5; so do the trained parameters, evaluated on the CPU
SELECT c.step, abs(g.valid_loss - c.valid_loss) / c.valid_loss < 1e-5 AS same_valid_loss
  FROM attention.checkpoints c JOIN attention.checkpoints g USING (step)
 WHERE c.job_id = :cpu_job AND g.job_id = :cuda_job ORDER BY step;
SELECT abs(g.loss - c.loss) / c.loss < 1e-5 AS same_test_loss, g.sentences
  FROM attention.evaluate('gpu_job', 'gpu_corpus', 'test',
         (SELECT checkpoint_id FROM attention.checkpoints WHERE job_id = :cpu_job AND step = 16)) c,
       attention.evaluate('gpu_job', 'gpu_corpus', 'test',
         (SELECT checkpoint_id FROM attention.checkpoints WHERE job_id = :cuda_job AND step = 16)) g;

-- bf16 mixed precision: a bad name refused before any job is queued (the CPU's bf16: training.sql)
SELECT count(*) AS jobs_before FROM attention.training_jobs \gset
SELECT attention.train('gpu_job', 'gpu_corpus', '{"device": "cuda", "precision": "fp16"}');
SELECT count(*) = :jobs_before AS no_job_queued FROM attention.training_jobs;
-- the default on a CUDA device: the same 16 steps in bf16 (8, then resumed on the CPU in fp32 to 16)
\set options_bf16 '"batch_tokens": 120, "warmup_steps": 8, "learning_rate_scale": 0.5, "checkpoint_every_steps": 8, "keep_checkpoints": 2, "seed": 5, "dropout": 0.1, "threads": 1, "validation_bleu_sentences": 2'
SELECT attention.train('gpu_job', 'gpu_corpus', format('{"max_steps": 8, "device": "cuda", %s}', :'options_bf16')::jsonb)
  AS bf16_job \gset
SELECT attention.wait_training(:bf16_job);
SELECT status, step, options->>'precision' AS precision, error FROM attention.training_jobs WHERE job_id = :bf16_job;
SELECT attention.resume_training(:bf16_job, '{"max_steps": 16, "device": "cpu", "precision": "fp32"}') = :bf16_job
  AS resumed;
SELECT attention.wait_training(:bf16_job);
SELECT status, step, options->>'device' AS device, options->>'precision' AS precision, error
  FROM attention.training_jobs WHERE job_id = :bf16_job;
-- validation losses within 2% of the fp32 job's, yet not equal to them (bf16 did run at step 8)
SELECT c.step, abs(g.valid_loss - c.valid_loss) / c.valid_loss < 0.02 AS within_2_percent,
       g.valid_loss <> c.valid_loss AS differs
  FROM attention.checkpoints c JOIN attention.checkpoints g USING (step)
 WHERE c.job_id = :cpu_job AND g.job_id = :bf16_job ORDER BY step;
-- the translation service on a GPU: the same kernels on the emulated CUDA library, its greedy
-- translations and scores those of this backend on the CPU (service.sql tests the service;
-- this part runs only where the emulated library is built)
SELECT attention.create_model('gpu_sv', 'gpu_vocab', '{"num_encoder_layers": 1, "num_decoder_layers": 2, "d_model": 16,
  "num_heads": 2, "d_ff": 32, "max_positions": 128}') > 0 AS created;
SELECT attention.deploy('gpu_sv', attention.initialize_checkpoint('gpu_sv', 7)) > 0 AS deployed;
SET attention.use_service = off;
CREATE TEMP TABLE gpu_sv_ref AS
  SELECT i AS id, en, attention.translate(en, 'gpu_sv', 1) AS greedy,
         attention.score(en, 'das Paket enthält Dateien', 'gpu_sv') AS score
    FROM generate_series(1, 12) AS i,
         LATERAL (SELECT 'the package provides ' || (ARRAY['data', 'library', 'documentation', 'development',
                         'example'])[1 + i % 5] || ' files for ' || (ARRAY['python', 'perl', 'ruby'])[1 + i % 3] AS en) AS s;
SET attention.use_service = on;
SELECT attention.start_service('gpu_sv', 'cuda') > 0 AS started_on_cuda;
SELECT device FROM attention.services WHERE model = 'gpu_sv';
SELECT count(*) FILTER (WHERE attention.translate(en, 'gpu_sv', 1) IS NOT DISTINCT FROM greedy) AS cuda_greedy_equal
  FROM gpu_sv_ref WHERE id <= 8;  -- (one request)
SELECT max(abs(attention.score(en, 'das Paket enthält Dateien', 'gpu_sv') - score)) < 1e-4 AS cuda_scores_close
  FROM gpu_sv_ref;  -- (one request each)
SELECT attention.stop_service('gpu_sv');
RESET attention.use_service;
SELECT attention.drop_model('gpu_sv');
ALTER DATABASE :"db" RESET attention.cuda_library;
RESET attention.cuda_library;
SELECT attention.drop_model('gpu_job');
