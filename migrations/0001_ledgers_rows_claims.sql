-- Ledgers, rows, dependencies, the runnable queue, claims, attempts, prompts.
--
-- Layout choices (DESIGN.md sections 9 and 10):
-- * Status codes are smallints equal to the tally.v1 enum numbers
--   (1 pending, 2 running, 3 retryable, 4 succeeded, 5 permanent, 6 blocked).
-- * `rows` has only two indexes (id, and ledger+key), and neither covers a
--   column that changes when a row moves; with fillfactor 70 status changes
--   stay heap-only (HOT) and add no index entries.
-- * The runnable set lives in its own narrow table, `runnable`: a claim
--   deletes a few hundred narrow entries instead of scanning a partial index
--   of wide rows that fills with dead entries.
-- * No foreign keys on hot tables: each insert would take a KEY SHARE lock on
--   the parent ledger row, and concurrent enrollers would queue on it. Ledgers
--   are never deleted; the store is the only writer.

CREATE TABLE ledgers (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text        NOT NULL UNIQUE,
    policy      jsonb       NOT NULL,
    etag        bigint      NOT NULL DEFAULT 1,
    create_time timestamptz NOT NULL DEFAULT now(),
    update_time timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE rows (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ledger_id         bigint      NOT NULL,
    key               text        NOT NULL,
    payload           text        NOT NULL,
    content_hash      bytea       NOT NULL,
    depends_on        text[]      NOT NULL DEFAULT '{}',
    prompt_name       text        NOT NULL DEFAULT '',
    prompt_version    text        NOT NULL DEFAULT '',
    model             text        NOT NULL,
    status            smallint    NOT NULL,
    provider_failures integer     NOT NULL DEFAULT 0,
    content_failures  integer     NOT NULL DEFAULT 0,
    infra_failures    integer     NOT NULL DEFAULT 0,
    attempts          integer     NOT NULL DEFAULT 0,
    unmet_deps        integer     NOT NULL DEFAULT 0,
    rule              text        NOT NULL DEFAULT '',
    last_error        text        NOT NULL DEFAULT '',
    result            text,
    input_tokens      bigint      NOT NULL DEFAULT 0,
    output_tokens     bigint      NOT NULL DEFAULT 0,
    thinking_tokens   bigint      NOT NULL DEFAULT 0,
    cached_tokens     bigint      NOT NULL DEFAULT 0,
    -- The claim holding the row (RUNNING rows only).
    claim_id          uuid,
    -- The claim that made the latest attempt: a repeat report from it is a
    -- DUPLICATE, a report from any other claim is STALE.
    last_claim_id     uuid,
    job_id            bigint,
    next_attempt_time timestamptz,
    create_time       timestamptz NOT NULL DEFAULT now(),
    update_time       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (ledger_id, key)
) WITH (fillfactor = 70);

-- Edges of the dependency DAG: `row_id` waits for `dep_id`.
CREATE TABLE row_deps (
    dep_id    bigint NOT NULL,
    row_id    bigint NOT NULL,
    ledger_id bigint NOT NULL,
    PRIMARY KEY (dep_id, row_id)
);

-- Rows that a claim may take once `ready_time` has passed: PENDING or
-- RETRYABLE with every dependency SUCCEEDED. Entries are inserted when a row
-- becomes claimable and deleted by the claim that takes it.
CREATE TABLE runnable (
    ledger_id  bigint      NOT NULL,
    model      text        NOT NULL,
    ready_time timestamptz NOT NULL,
    row_id     bigint      NOT NULL
) WITH (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0.02
);
CREATE INDEX runnable_order ON runnable (ledger_id, model, ready_time, row_id);

-- Models a ledger's rows use, so a claim without a model can pick one with an
-- index probe per model instead of sorting the queue.
CREATE TABLE ledger_models (
    ledger_id bigint NOT NULL,
    model     text   NOT NULL,
    PRIMARY KEY (ledger_id, model)
);

-- 1 active, 2 done (every row reported or released), 3 expired. The token
-- is the claim's public id and its fencing token.
CREATE TABLE claims (
    token       uuid        PRIMARY KEY,
    ledger_id   bigint      NOT NULL,
    worker      text        NOT NULL DEFAULT '',
    model       text        NOT NULL,
    request_id  text,
    row_ids     bigint[]    NOT NULL,
    row_count   integer     NOT NULL,
    held        integer     NOT NULL,
    state       smallint    NOT NULL DEFAULT 1,
    job_id      bigint,
    create_time timestamptz NOT NULL DEFAULT now(),
    expire_time timestamptz NOT NULL,
    UNIQUE (ledger_id, request_id)
);
CREATE INDEX claims_active_expiry ON claims (expire_time) WHERE state = 1;

-- Every attempt of every row, with its provenance.
CREATE TABLE attempts (
    ledger_id       bigint      NOT NULL,
    row_id          bigint      NOT NULL,
    number          integer     NOT NULL,
    claim_id        uuid,
    job_id          bigint,
    model           text        NOT NULL,
    prompt_name     text        NOT NULL DEFAULT '',
    prompt_version  text        NOT NULL DEFAULT '',
    outcome         smallint    NOT NULL,
    rule            text        NOT NULL,
    budget          smallint,
    input_tokens    bigint      NOT NULL DEFAULT 0,
    output_tokens   bigint      NOT NULL DEFAULT 0,
    thinking_tokens bigint      NOT NULL DEFAULT 0,
    cached_tokens   bigint      NOT NULL DEFAULT 0,
    error           text        NOT NULL DEFAULT '',
    actor           text        NOT NULL DEFAULT '',
    time            timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ledger_id, row_id, number)
);

CREATE TABLE prompts (
    prompt_id          text        NOT NULL,
    version            text        NOT NULL,
    template           text        NOT NULL,
    response_schema    text        NOT NULL DEFAULT '',
    system_instruction text        NOT NULL DEFAULT '',
    sha256             text        NOT NULL,
    create_time        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (prompt_id, version)
);

-- Operator redrives, kept for the record.
CREATE TABLE redrives (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ledger_id   bigint      NOT NULL,
    actor       text        NOT NULL DEFAULT '',
    reason      text        NOT NULL DEFAULT '',
    target      jsonb       NOT NULL,
    redriven    bigint      NOT NULL,
    unblocked   bigint      NOT NULL,
    create_time timestamptz NOT NULL DEFAULT now()
);
