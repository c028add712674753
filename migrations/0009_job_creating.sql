-- A job whose batch create may have reached the provider is CREATING
-- (state 9, tally.v1.JOB_STATE_CREATING): its rows are never released until
-- the provider was searched for the batch. The time of the first attempt
-- bounds that search (the provider's list lag is measured from it).
ALTER TABLE jobs ADD COLUMN create_attempt_time timestamptz;
