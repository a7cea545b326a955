-- Data-parallel training on several emulated GPUs: one worker, a rank per device on
-- engine threads, gradients summed by the emulated NCCL. 1, 2 and 4 ranks follow one
-- trajectory (fp32, dropout on); a run stopped at step 5 resumes on fewer ranks; a rank
-- that fails ends the job with its message and its last checkpoint resumes elsewhere;
-- cancel_training and SIGTERM stop every rank.
-- The test cluster emulates 8 devices, and device 6 faults after a number of host
-- synchronisations (CUEMU_DEVICES, CUEMU_FAULT_DEVICE, CUEMU_FAULT_AFTER in scripts/test).
-- Its own corpus and vocabulary (the pairs of translate.sql's), so the file runs alone.
-- Its jobs and checkpoints are numbered from 4000, so messages naming them read the same alone.
SELECT setval('attention.jobs_job_id_seq', 4000, false) AS first_job,
       setval('attention.checkpoints_checkpoint_id_seq', 4000, false) AS first_checkpoint \gset
SELECT attention.create_corpus('dp_corpus', 'en', 'de') > 0 AS created;
SELECT attention.import_corpus('dp_corpus', $$
  SELECT 'the package provides ' || w || ' files for ' || v, 'das Paket enthält ' || w || ' Dateien für ' || v
    FROM unnest(ARRAY['data', 'library', 'documentation', 'development', 'example']) AS w,
         unnest(ARRAY['python', 'perl', 'ruby', 'java', 'debian', 'gnome']) AS v$$);
SELECT attention.import_corpus('dp_corpus', $$
  SELECT 'the package provides ' || w || ' files for python', 'das Paket enthält ' || w || ' Dateien für python'
    FROM unnest(ARRAY['data', 'example']) AS w$$, split) AS pairs
  FROM unnest(ARRAY['valid', 'test']) AS split;
SELECT attention.train_vocabulary('dp_vocab', 'dp_corpus', vocab_size => 80, byte_fallback => false) > 0 AS trained;
SELECT current_database() AS db \gset
ALTER DATABASE :"db" SET attention.cuda_library = '$libdir/attention_cuda_emu.so';
SET attention.cuda_library = '$libdir/attention_cuda_emu.so';
SELECT attention.create_model('dp_job', 'dp_vocab', '{"num_encoder_layers": 1, "num_decoder_layers": 1, "d_model": 16,
  "num_heads": 2, "d_ff": 32, "max_positions": 64}') > 0 AS created;

-- device lists that cannot train
SELECT attention.train('dp_job', 'dp_corpus', '{"device": "cuda:0,0"}');
SELECT attention.train('dp_job', 'dp_corpus', '{"device": "cuda:0,9"}');
SELECT attention.train('dp_job', 'dp_corpus', '{"device": "cuda:0,"}');
SELECT attention.train('dp_job', 'dp_corpus', '{"device": "cuda:0,1,2", "batches_per_step": 2}');
SELECT attention.train('dp_job', 'dp_corpus', '{"device": "cuda:0,1", "batch_tokens": 120, "batches_per_step": 4}')
  AS job \gset
SELECT attention.cancel_training(:job);
SELECT attention.wait_training(:job);
SELECT attention.resume_training(:job, '{"device": "cuda:0,1,2,3,4"}');
SELECT attention.resume_training(:job, '{"batches_per_step": 8}');
-- the step's batches are spread over the ranks: "cuda:all" and "accumulate_batches" give batches_per_step
SELECT attention.train('dp_job', 'dp_corpus', '{"device": "cuda:all", "accumulate_batches": 2, "max_steps": 1}')
  AS job_all \gset
SELECT attention.cancel_training(:job_all) IS NOT NULL AS asked;
SELECT attention.wait_training(:job_all) IN ('cancelled', 'succeeded') AS stopped;
SELECT options->>'device' AS device, options->'batches_per_step' AS batches_per_step
  FROM attention.training_jobs WHERE job_id = :job_all;

-- the same 10 steps of 4 batches on 1, 2 and 4 ranks (checkpoints, with validation, every 5)
\set options '"batch_tokens": 120, "warmup_steps": 100, "batches_per_step": 4, "checkpoint_every_steps": 5, "keep_checkpoints": 0, "seed": 5, "dropout": 0.1, "threads": 1, "precision": "fp32"'
SELECT attention.train('dp_job', 'dp_corpus', format('{"max_steps": 10, "device": "cuda:0", %s}', :'options')::jsonb)
  AS one \gset
SELECT attention.wait_training(:one);
SELECT attention.train('dp_job', 'dp_corpus', format('{"max_steps": 10, "device": "cuda:0,1", %s}', :'options')::jsonb)
  AS two \gset
SELECT attention.wait_training(:two);
SELECT attention.train('dp_job', 'dp_corpus', format('{"max_steps": 10, "device": "cuda:0,1,2,3", %s}', :'options')::jsonb)
  AS four \gset
SELECT attention.wait_training(:four);
SELECT j.job_id = :one AS one_rank, j.status, j.step, j.error
  FROM attention.training_jobs j WHERE j.job_id IN (:one, :two, :four) ORDER BY j.job_id;
-- validation losses at steps 5 and 10 equal to 1e-5 (not bitwise: the sums' order differs)
SELECT c.step, bool_and(abs(o.valid_loss - c.valid_loss) / c.valid_loss < 1e-5) AS same_valid_loss, count(*) AS jobs
  FROM attention.checkpoints c JOIN attention.checkpoints o ON o.job_id = :one AND o.step = c.step
 WHERE c.job_id IN (:two, :four) GROUP BY c.step ORDER BY c.step;
-- (not train_loss: the mean over the steps since the last progress update, whose window is wall-clock time)

-- 4 ranks stopped at step 5, resumed on 3 ranks (each accumulating up to 2 of the 4 batches)
SELECT attention.train('dp_job', 'dp_corpus', format('{"max_steps": 5, "device": "cuda:0,1,2,3", %s}', :'options')::jsonb)
  AS fewer \gset
SELECT attention.wait_training(:fewer);
SELECT attention.resume_training(:fewer, '{"max_steps": 10, "device": "cuda:1,2,3"}') = :fewer AS resumed;
SELECT attention.wait_training(:fewer);
SELECT status, step, options->>'device' AS device, error FROM attention.training_jobs WHERE job_id = :fewer;
SELECT c.step, abs(o.valid_loss - c.valid_loss) / c.valid_loss < 1e-5 AS same_valid_loss
  FROM attention.checkpoints c JOIN attention.checkpoints o ON o.job_id = :one AND o.step = c.step
 WHERE c.job_id = :fewer ORDER BY c.step;

-- a rank that fails: rank 2 runs on device 6, which faults in step 7
SELECT attention.train('dp_job', 'dp_corpus', format('{"max_steps": 10, "device": "cuda:4,5,6,7", %s}', :'options')::jsonb)
  AS failing \gset
SELECT attention.wait_training(:failing);
SELECT status, error ~ '^training job \d+: step 7: rank 2 \(cuda:6\): CUDA device 6: ' AS rank_2_step_7,
       error ~ 'unspecified launch failure' AS device_error
  FROM attention.training_jobs WHERE job_id = :failing;
-- its last checkpoint is complete (every tensor of one written by a job that did not fail)
SELECT max(c.step) AS last_checkpoint,
       (SELECT count(*) FROM attention.checkpoint_tensors t WHERE t.checkpoint_id = max(c.checkpoint_id)) =
       (SELECT count(*) FROM attention.checkpoint_tensors t JOIN attention.checkpoints o USING (checkpoint_id)
         WHERE o.job_id = :one AND o.step = 5) AS complete
  FROM attention.checkpoints c WHERE c.job_id = :failing;
-- and resumes on two other devices to the same trajectory
SELECT attention.resume_training(:failing, '{"device": "cuda:4,5"}') = :failing AS resumed;
SELECT attention.wait_training(:failing);
SELECT status, step, error FROM attention.training_jobs WHERE job_id = :failing;
SELECT abs(o.valid_loss - c.valid_loss) / c.valid_loss < 1e-5 AS same_valid_loss_at_10
  FROM attention.checkpoints c JOIN attention.checkpoints o ON o.job_id = :one AND o.step = c.step
 WHERE c.job_id = :failing AND c.step = 10;

-- cancel_training and SIGTERM stop every rank
CREATE FUNCTION pg_temp.wait_for_step(job bigint, s int) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1 .. 6000 LOOP
    IF (SELECT step >= s FROM attention.jobs WHERE job_id = job) THEN RETURN true; END IF;
    PERFORM pg_sleep(0.1);
  END LOOP;
  RETURN false;
END
$$;
SELECT attention.train('dp_job', 'dp_corpus', format('{"max_steps": 100000, "device": "cuda:0,1,2,3", %s}',
  :'options')::jsonb) AS long_job \gset
SELECT pg_temp.wait_for_step(:long_job::bigint, 2) AS training;
SELECT attention.cancel_training(:long_job);
SELECT attention.wait_training(:long_job);
SELECT status, step < 100000 AS stopped_early FROM attention.training_jobs WHERE job_id = :long_job;
SELECT attention.resume_training(:long_job, '{}') = :long_job AS resumed;
SELECT pg_temp.wait_for_step(:long_job::bigint, (SELECT step::int + 1 FROM attention.jobs WHERE job_id = :long_job)) AS training;
SELECT pg_terminate_backend(worker_pid) FROM attention.jobs WHERE job_id = :long_job;
SELECT attention.wait_training(:long_job);
SELECT status FROM attention.training_jobs WHERE job_id = :long_job;

-- two machines, emulated on one: the coordinator publishes each node's ranks and the
-- communicator id in attention.job_ranks; a second worker process (join_training) claims
-- node 1 and joins with the id it read there. The emulated NCCL connects the two processes
-- over TCP (the id carries the coordinator's listener), so the 4 ranks form one
-- communicator. Both nodes run every step; the coordinator alone validates and writes
-- checkpoints; after each step the nodes vote on stopping, so both stop after the same one.
CREATE FUNCTION pg_temp.wait_for_node(job bigint, n int) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1 .. 1200 LOOP
    IF (SELECT state IN ('finished', 'failed') FROM attention.job_ranks WHERE job_id = job AND node = n) THEN
      RETURN (SELECT state FROM attention.job_ranks WHERE job_id = job AND node = n);
    END IF;
    PERFORM pg_sleep(0.1);
  END LOOP;
  RETURN 'still running';
END
$$;
SELECT attention.train('dp_job', 'dp_corpus', format('{"max_steps": 10, "device": "cuda:0,1", "nodes": 2, %s}',
  :'options')::jsonb) AS nodes_job \gset
SELECT attention.join_training(:nodes_job) > 0 AS node_started;
SELECT attention.wait_training(:nodes_job);
SELECT pg_temp.wait_for_node(:nodes_job, 1) AS node_1;
SELECT node, first_rank, ranks, world_ranks, state, step, length(unique_id) AS id_bytes, error
  FROM attention.job_ranks WHERE job_id = :nodes_job ORDER BY node;
SELECT n1.worker_pid <> n0.worker_pid AS two_processes, n0.worker_pid = j.worker_pid AS node_0_is_the_coordinator,
       j.status, j.step, j.error
  FROM attention.job_ranks n0, attention.job_ranks n1, attention.training_jobs j
 WHERE n0.job_id = :nodes_job AND n1.job_id = :nodes_job AND j.job_id = :nodes_job AND n0.node = 0 AND n1.node = 1;
-- 2 nodes x 2 ranks follow the 4 ranks of one machine bit for bit (the emulated NCCL sums in
-- rank order across processes too), and one rank to 1e-5
SELECT c.step, c.valid_loss = f.valid_loss AS same_as_four_ranks,
       abs(o.valid_loss - c.valid_loss) / c.valid_loss < 1e-5 AS same_as_one_rank
  FROM attention.checkpoints c JOIN attention.checkpoints f ON f.job_id = :four AND f.step = c.step
  JOIN attention.checkpoints o ON o.job_id = :one AND o.step = c.step
 WHERE c.job_id = :nodes_job ORDER BY c.step;

-- cancel_training on the coordinator stops both nodes after the same step
SELECT attention.train('dp_job', 'dp_corpus', format('{"max_steps": 100000, "device": "cuda:0,1", "nodes": 2, %s}',
  :'options')::jsonb) AS nodes_long \gset
SELECT attention.join_training(:nodes_long) > 0 AS node_started;
SELECT pg_temp.wait_for_step(:nodes_long::bigint, 2) AS training;
SELECT clock_timestamp() AS cancel_at \gset
SELECT attention.cancel_training(:nodes_long);
SELECT attention.wait_training(:nodes_long);
SELECT pg_temp.wait_for_node(:nodes_long, 1) AS node_1;
-- (the job reads cancel_requested once a second; a step here takes well under a second)
SELECT j.status, n0.step = j.step AND n1.step = j.step AS same_step, j.step < 100000 AS stopped_early,
       n1.heartbeat_at - :'cancel_at'::timestamptz < interval '5 s' AS node_1_stopped_within_5_s
  FROM attention.training_jobs j, attention.job_ranks n0, attention.job_ranks n1
 WHERE j.job_id = :nodes_long AND n0.job_id = j.job_id AND n0.node = 0 AND n1.job_id = j.job_id AND n1.node = 1;

-- node 1's worker terminated mid-run: it says why in its row and leaves through the vote,
-- the job checkpoints that step and fails naming it; the coordinator alone ("nodes": 1)
-- resumes it
SELECT attention.resume_training(:nodes_long, '{}') = :nodes_long AS resumed;
SELECT attention.join_training(:nodes_long) > 0 AS node_started;
SELECT pg_temp.wait_for_step(:nodes_long::bigint, (SELECT step::int + 2 FROM attention.jobs WHERE job_id = :nodes_long))
  AS training;
SELECT pg_terminate_backend(worker_pid) FROM attention.job_ranks WHERE job_id = :nodes_long AND node = 1;
SELECT attention.wait_training(:nodes_long);
SELECT pg_temp.wait_for_node(:nodes_long, 1) AS node_1;
SELECT j.status, j.error ~ '^training job \d+: node 1 left after step (\d+): its worker was stopped after step \1 '
                         '\(SIGTERM: pg_terminate_backend or a server shutdown\)$' AS names_node_1,
       n1.error ~ '^its worker was stopped' AS node_says_why
  FROM attention.training_jobs j, attention.job_ranks n1
 WHERE j.job_id = :nodes_long AND n1.job_id = j.job_id AND n1.node = 1;
SELECT (SELECT count(*) FROM attention.checkpoint_tensors t WHERE t.checkpoint_id = max(c.checkpoint_id)) =
       (SELECT count(*) FROM attention.checkpoint_tensors t JOIN attention.checkpoints o USING (checkpoint_id)
         WHERE o.job_id = :one AND o.step = 5) AS last_checkpoint_complete
  FROM attention.checkpoints c WHERE c.job_id = :nodes_long;
SELECT max(step) + 3 AS resume_to FROM attention.checkpoints WHERE job_id = :nodes_long \gset
SELECT attention.resume_training(:nodes_long, format('{"nodes": 1, "max_steps": %s}', :resume_to)::jsonb)
       = :nodes_long AS resumed_alone;
SELECT attention.wait_training(:nodes_long);
SELECT status, step = :resume_to AS finished_its_steps, options->'nodes' AS nodes
  FROM attention.training_jobs WHERE job_id = :nodes_long;

-- nodes need CUDA devices and a job across machines; only owners see the communicator id
SELECT attention.train('dp_job', 'dp_corpus', '{"nodes": 2}');
SELECT attention.join_training(:one);
CREATE ROLE ranks_reader;
SET ROLE ranks_reader;
SELECT count(*) AS visible_ranks FROM attention.job_ranks;
RESET ROLE;
DROP ROLE ranks_reader;

ALTER DATABASE :"db" RESET attention.cuda_library;
RESET attention.cuda_library;
SELECT attention.drop_model('dp_job');
