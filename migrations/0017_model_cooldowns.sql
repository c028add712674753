-- Shared provider cool-downs: a batch create the provider refused for quota
-- (429) puts its model here until the time its RetryInfo named; CreateJob
-- for that model answers RESOURCE_EXHAUSTED with RetryInfo until then, so
-- every worker waits instead of each retrying the provider.
CREATE TABLE model_cooldowns (
    model       text        PRIMARY KEY,
    until       timestamptz NOT NULL,
    update_time timestamptz NOT NULL DEFAULT now()
);
