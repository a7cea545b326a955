-----------------------------------------------------------------------------
-- attention 0.2.0 -> 0.3.0. Users' corpora, vocabularies, models, jobs and
-- checkpoints are kept as they are.
\echo Use "ALTER EXTENSION attention UPDATE TO '0.3.0'" to load this file. \quit

-- The design document the comments cite is docs/design.md in the repository.
COMMENT ON TABLE models IS 'Transformer models: a configuration (docs/design.md section 2) over a vocabulary.';
