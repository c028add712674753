-- The process behind each worker name of a ledger (issue 50, item 3), as the
-- worker reads it: AdoptJobs records it, so that a worker restarted on the
-- same host (or a restart under the same name) can show that the old holder
-- is gone and take over its claims without waiting out their lease. One row
-- per (ledger, worker name): the last process that named itself so.
CREATE TABLE worker_processes (
    ledger_id   bigint      NOT NULL REFERENCES ledgers (id) ON DELETE CASCADE,
    worker      text        NOT NULL,
    host        text        NOT NULL,
    boot_id     text        NOT NULL,
    pid         bigint      NOT NULL,
    -- The process's start time in clock ticks since boot: a reused pid
    -- has another.
    start_ticks bigint      NOT NULL,
    -- When this process was first recorded under the name.
    record_time timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ledger_id, worker)
);
