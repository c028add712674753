-- Delivery (issue 52): result versions, each ledger's results log in commit
-- order, and named consumers that read it with cursors, leases and dead
-- letters (tally_core::delivery has the rules; services/store, results and
-- consumers, the statements).
--
-- Codes: consumers.kind 1 pull, 2 webhook (tally_core::delivery::Kind);
-- row statuses as `rows.status`.


-- The version of the row's latest final result (SUCCEEDED or PERMANENT), or
-- of its first while it has none. A redrive of a final row moves it on, so
-- every final result a row ever has carries its own version: (ledger, key,
-- version) is what a sink deduplicates on. A constant default: adding the
-- column rewrites nothing, and every row already final is at version 1.
ALTER TABLE rows ADD COLUMN result_version integer NOT NULL DEFAULT 1;

-- Each ledger's finished results in commit order: one entry per settling
-- transaction and ledger (at most 10,000 results; more take several), the
-- rows and the versions they finished at, in the order of `row_ids`.
--
-- Entries are numbered in commit order per ledger the way `job_events` is
-- (services/store, event_log): the writer takes the ledger's
-- transaction-scoped advisory lock as the last statements of its
-- transaction, and holds it until its commit is visible, so a reader that
-- has seen entry N never later sees a smaller one of the same ledger. One
-- entry per settlement, not per row, keeps the settle path's added cost to
-- one narrow insert.
--
-- A result's position is `seq << 20 | ordinal` (its 1-based place in
-- `row_ids`). `n` is the entry's size, readable without its (TOASTed)
-- arrays; `upto` counts the ledger's results up to and including the entry
-- (the previous entry's `upto` is read under the lock), so a consumer's lag
-- in rows is two index probes. No foreign key (a hot table): the purge
-- deletes a deleted ledger's entries.
CREATE TABLE result_log (
    ledger_id bigint      NOT NULL,
    seq       bigint GENERATED ALWAYS AS IDENTITY,
    row_ids   bigint[]    NOT NULL,
    versions  integer[]   NOT NULL,
    n         integer     NOT NULL,
    upto      bigint      NOT NULL,
    time      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ledger_id, seq),
    CONSTRAINT result_log_shape CHECK (
        n BETWEEN 1 AND 10000 AND cardinality(row_ids) = n AND cardinality(versions) = n)
);

-- Results that were final before this migration, logged once at version 1,
-- in row id order, 10,000 to an entry.
INSERT INTO result_log (ledger_id, row_ids, versions, n, upto, time)
SELECT ledger_id, ids, versions, cardinality(ids),
       sum(cardinality(ids)) OVER (PARTITION BY ledger_id ORDER BY chunk),
       last_time
FROM (
    SELECT ledger_id, chunk, array_agg(id ORDER BY id) AS ids,
           array_agg(1 ORDER BY id) AS versions, max(update_time) AS last_time
    FROM (
        SELECT ledger_id, id, update_time,
               (row_number() OVER (PARTITION BY ledger_id ORDER BY id) - 1) / 10000 AS chunk
        FROM rows WHERE status IN (4, 5)
    ) finished
    GROUP BY ledger_id, chunk
) entries
ORDER BY ledger_id, chunk;

-- A ledger's named consumers. `read_position` is the cursor: every result
-- at or below it was handed out (leased), acknowledged or passed over
-- (superseded); what is leased and not acknowledged is in
-- `consumer_leases`. A cold table: it goes with its ledger.
CREATE TABLE consumers (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ledger_id       bigint      NOT NULL REFERENCES ledgers (id) ON DELETE CASCADE,
    -- The public id (`ledgers/{ledger}/consumers/{name}`).
    name            text        NOT NULL,
    kind            smallint    NOT NULL CHECK (kind IN (1, 2)),
    visibility_ms   bigint      NOT NULL CHECK (visibility_ms > 0),
    -- Handed out this many times without an ack: dead-lettered (0: never).
    max_deliveries  integer     NOT NULL,
    read_position   bigint      NOT NULL DEFAULT 0,
    -- Webhook consumers: where, signed with what (a `whsec_` secret), how
    -- many results a POST, and the back-off after failures: consecutive
    -- failures and when the next POST may go.
    webhook_url     text,
    webhook_secret  text,
    webhook_batch   integer,
    failures        integer     NOT NULL DEFAULT 0,
    next_post_time  timestamptz,
    actor           text        NOT NULL DEFAULT '',
    create_time     timestamptz NOT NULL DEFAULT now(),
    update_time     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (ledger_id, name),
    CONSTRAINT consumers_webhook CHECK ((kind = 2) = (webhook_url IS NOT NULL))
);
-- The webhook sender finds due webhook consumers.
CREATE INDEX consumers_webhooks ON consumers (next_post_time) WHERE kind = 2;

-- Results handed out and not acknowledged: visible again (handed out to
-- any instance) from `visible_time`. An ack deletes the lease; a dead
-- letter moves it to `consumer_dead_letters`.
CREATE TABLE consumer_leases (
    consumer_id  bigint      NOT NULL REFERENCES consumers (id) ON DELETE CASCADE,
    position     bigint      NOT NULL,
    row_id       bigint      NOT NULL,
    version      integer     NOT NULL,
    deliveries   integer     NOT NULL DEFAULT 1,
    visible_time timestamptz NOT NULL,
    -- A nack's reason, or a webhook's failure.
    last_error   text        NOT NULL DEFAULT '',
    PRIMARY KEY (consumer_id, position)
);
CREATE INDEX consumer_leases_visible ON consumer_leases (consumer_id, visible_time, position);

-- Results a consumer's sink refused for good, or that were handed out
-- `max_deliveries` times without an ack.
CREATE TABLE consumer_dead_letters (
    consumer_id bigint      NOT NULL REFERENCES consumers (id) ON DELETE CASCADE,
    position    bigint      NOT NULL,
    row_id      bigint      NOT NULL,
    version     integer     NOT NULL,
    deliveries  integer     NOT NULL,
    reason      text        NOT NULL,
    time        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_id, position)
);

-- Each POST of a webhook consumer (the newest 200 per consumer are kept):
-- its webhook-id, the results it carried, what came back.
CREATE TABLE webhook_deliveries (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer_id    bigint      NOT NULL REFERENCES consumers (id) ON DELETE CASCADE,
    message_id     text        NOT NULL,
    rows           integer     NOT NULL,
    first_position bigint      NOT NULL,
    last_position  bigint      NOT NULL,
    -- The HTTP status (NULL: no answer), and the failure if it was one.
    http_status    integer,
    error          text        NOT NULL DEFAULT '',
    duration_ms    bigint      NOT NULL,
    time           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_deliveries_by_consumer ON webhook_deliveries (consumer_id, id DESC);
