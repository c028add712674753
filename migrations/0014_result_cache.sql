-- The result cache (issue 54): answers kept by the exact request that earned
-- them (tally_core::cache), served to later rows with the same request
-- instead of a provider call.

-- One answer per team and request. `hash` is the SHA-256 of `request`, the
-- canonical request; a lookup compares `request` whole. `shared`: the
-- answering ledger shares its answers with other teams that share theirs.
CREATE TABLE result_cache (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    team            text        NOT NULL,
    shared          boolean     NOT NULL,
    hash            bytea       NOT NULL,
    request         text        NOT NULL,
    -- The model as the row names it, and its provider (model_snapshots).
    provider        text        NOT NULL,
    model           text        NOT NULL,
    -- The version the provider said answered ('' when it did not say).
    model_version   text        NOT NULL,
    result          text        NOT NULL,
    response        text,
    input_tokens    bigint      NOT NULL,
    output_tokens   bigint      NOT NULL,
    thinking_tokens bigint      NOT NULL,
    cached_tokens   bigint      NOT NULL,
    -- What the answer cost at its ledger's price (what a hit saves).
    cost_usd        double precision NOT NULL,
    -- `ledgers/{ledger}/rows/{key}` and the attempt that answered.
    source_row      text        NOT NULL,
    source_attempt  integer     NOT NULL,
    answer_time     timestamptz NOT NULL DEFAULT now(),
    -- Request, result and response, for the size bound.
    bytes           bigint      NOT NULL,
    -- Lookups find answers by hash (whatever the team, for shared ones).
    UNIQUE (hash, team)
);
-- The purge's order; its size check reads this index alone.
CREATE INDEX result_cache_by_age ON result_cache (answer_time, id) INCLUDE (bytes);

-- A claimed row's request as its lookup missed: once the claim reports the
-- row SUCCEEDED (whichever worker reports for it), its answer is cached
-- under that request.
CREATE TABLE cache_requests (
    ledger_id  bigint      NOT NULL REFERENCES ledgers (id) ON DELETE CASCADE,
    row_id     bigint      NOT NULL,
    claim_id   uuid        NOT NULL,
    hash       bytea       NOT NULL,
    request    text        NOT NULL,
    provider   text        NOT NULL,
    model      text        NOT NULL,
    team       text        NOT NULL,
    shared     boolean     NOT NULL,
    time       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ledger_id, row_id)
);
CREATE INDEX cache_requests_by_claim ON cache_requests (claim_id);

-- Per provider and model alias: the version the provider last reported
-- (answers of another are misses) and when golden rows last saw the alias
-- drift (answers cached before are not served).
CREATE TABLE model_snapshots (
    provider     text        NOT NULL,
    model        text        NOT NULL,
    version      text        NOT NULL DEFAULT '',
    version_time timestamptz,
    drift_time   timestamptz,
    PRIMARY KEY (provider, model)
);

-- Lookups per ledger that found nothing (hits are counted from attempts).
CREATE TABLE cache_misses (
    ledger_id bigint PRIMARY KEY REFERENCES ledgers (id) ON DELETE CASCADE,
    misses    bigint NOT NULL DEFAULT 0
);

-- An attempt answered from the cache: where the answer came from
-- (`{"row", "attempt", "cost_usd", "answer_ms", "model_version", "model",
-- "provider"}`, tally_store::types::CachedFrom); NULL for every other
-- attempt.
ALTER TABLE attempts ADD COLUMN cached jsonb;
CREATE INDEX attempts_cached ON attempts (ledger_id) WHERE cached IS NOT NULL;
