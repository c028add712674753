-- Admission against the provider's quotas (tally_core::quota): each job
-- records the input tokens it was estimated to send when it was made, so
-- CreateJob can sum what every model has enqueued at the provider. Jobs
-- made before this migration count 0.
ALTER TABLE jobs ADD COLUMN est_tokens bigint NOT NULL DEFAULT 0;
-- The jobs admission reads: open ones (few; bounded by the provider's
-- limits), by model.
CREATE INDEX jobs_open_by_model ON jobs (model) WHERE end_time IS NULL;
-- How long a model's recent batches took (the RetryInfo of a refusal).
CREATE INDEX jobs_closed_by_model ON jobs (model, id) WHERE end_time IS NOT NULL AND batch IS NOT NULL;
