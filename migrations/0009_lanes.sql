-- Synchronous lanes beside batch (issue 48).
--
-- 1. A claim is made for one lane (a tally.v1.Lane number: 1 batch, 2 flex,
--    3 standard, 4 priority); every attempt records the lane it ran in, the
--    provider's request id and the tier the provider says it granted.
ALTER TABLE claims ADD COLUMN lane smallint NOT NULL DEFAULT 1;
ALTER TABLE attempts ADD COLUMN lane smallint NOT NULL DEFAULT 1;
ALTER TABLE attempts ADD COLUMN request_id text NOT NULL DEFAULT '';
ALTER TABLE attempts ADD COLUMN tier text NOT NULL DEFAULT '';

-- 2. What tally granted of a provider account's requests and tokens per
--    minute to the synchronous lanes, one entry a second (AcquireCapacity
--    counts the entries of the last 65 seconds and adds its grant under a
--    transaction lock of the account and model).
CREATE TABLE sync_grants (
    account  text     NOT NULL,
    model    text     NOT NULL,
    -- Whole seconds since the epoch, on the database clock.
    second   bigint   NOT NULL,
    requests integer  NOT NULL,
    tokens   bigint   NOT NULL,
    PRIMARY KEY (account, model, second)
);

-- 3. Cool-downs per lane: a 429 at a batch create cools batch creates
--    (lane 1); a 429 of a synchronous call cools every synchronous lane of
--    the account and model (lane 0); a shed flex call cools flex (lane 2).
ALTER TABLE model_cooldowns ADD COLUMN lane smallint NOT NULL DEFAULT 1;
ALTER TABLE model_cooldowns DROP CONSTRAINT model_cooldowns_pkey;
ALTER TABLE model_cooldowns ADD PRIMARY KEY (account, model, lane);
