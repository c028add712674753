-- Provider operations (the batches behind jobs) and every event about them.
--
-- Every path that changes an operation (webhooks, the poller, an operator)
-- goes through the reducer in tally-core; the store reads the operation,
-- asks the reducer, and writes back conditioned on the version it read
-- (compare-and-swap). See tally-store's `operations` module.
--
-- Codes are smallints equal to the tally.v1 enum numbers:
-- * state:   0 unknown, 1 pending, 2 running, 3 succeeded, 4 failed,
--            5 cancelled, 6 expired (OperationState);
-- * source:  1 webhook, 2 poller, 3 operator (EventSource);
-- * verdict: 1 applied, 2 dropped, 3 recorded (EventVerdict).
-- Provider update times are unix microseconds (`*_us`), exactly what the
-- reducer compares; 0 is the epoch, the time of an event that carried none.
--
-- The linked job is not copied here: it is the job whose `batch` is this
-- operation's name (jobs.batch is UNIQUE), so a job that records its batch
-- after the first event about it is still linked.

CREATE TABLE operations (
    -- Normalized: `batches/{id}`.
    name           text        PRIMARY KEY,
    state          smallint    NOT NULL,
    update_time_us bigint      NOT NULL,
    -- 1 on creation, +1 per applied event: the compare-and-swap fence, and
    -- the number of applied events.
    version        bigint      NOT NULL,
    output_file    text        NOT NULL DEFAULT '',
    error_code     text        NOT NULL DEFAULT '',
    error_message  text        NOT NULL DEFAULT '',
    create_time    timestamptz NOT NULL DEFAULT now(),
    -- Our clock: when the last applied event was written.
    change_time    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX operations_recent ON operations (create_time, name);
CREATE INDEX operations_by_state ON operations (state, create_time, name);

-- Every event, applied or not, append-only. `sequence` is global and is
-- assigned in commit order: the writer takes a transaction-scoped advisory
-- lock just before inserting the event and holds it to commit, so an event
-- with a higher sequence never becomes visible before one with a lower
-- sequence. A reader that has seen sequence N and resumes after N therefore
-- misses nothing (a plain sequence default would let a later number commit
-- first, and a watcher that saw it would skip the earlier one for good).
-- Numbers may have holes (a rolled-back insert), never late arrivals.
CREATE SEQUENCE operation_event_seq AS bigint;
CREATE TABLE operation_events (
    sequence       bigint      PRIMARY KEY,
    operation      text        NOT NULL,
    source         smallint    NOT NULL,
    -- The delivery id (webhook-id), when the source has one.
    event_id       text,
    -- The state as received, and as normalized.
    raw_state      text        NOT NULL,
    state          smallint    NOT NULL,
    -- Provider time as received; NULL when the event carried none.
    update_time_us bigint,
    receive_time   timestamptz NOT NULL DEFAULT now(),
    verdict        smallint    NOT NULL,
    -- Empty when applied; otherwise the drop reason.
    reason         text        NOT NULL DEFAULT '',
    -- Applied events: the state before (NULL on first sighting) and the
    -- version after.
    from_state     smallint,
    version        bigint,
    output_file    text        NOT NULL DEFAULT '',
    error_code     text        NOT NULL DEFAULT '',
    error_message  text        NOT NULL DEFAULT ''
);
CREATE INDEX operation_events_by_operation ON operation_events (operation, sequence);
-- WatchOperations streams applied transitions only.
CREATE INDEX operation_events_applied ON operation_events (sequence) WHERE verdict = 1;

-- Delivery ids seen, per operation: a second delivery of the same webhook
-- finds its id here and is dropped as `duplicate_event` (still logged in
-- operation_events). Inserted in the ingesting transaction, so two
-- concurrent deliveries of one id serialize on the primary key and exactly
-- one is judged as new.
CREATE TABLE operation_deliveries (
    operation    text        NOT NULL,
    event_id     text        NOT NULL,
    receive_time timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (operation, event_id)
);
