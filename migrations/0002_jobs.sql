-- Jobs, their event log, run locks and ledger alerts (JobService).
--
-- Jobs: the provider batch made from a claim. The job record exists apart
-- from the rows: rows say what is true of each row, jobs say what was sent,
-- when, under which batch name, and what became of it.
--
-- States: 1 preparing, 2 submitted, 3 running, 4 succeeded, 5 failed,
-- 6 cancelled, 7 expired, 8 reconciled (the tally.v1.JobState numbers; the
-- transitions are tally_core::job::step). A job is open while `end_time` is
-- NULL; closing sets it (RECONCILED, or CANCELLED before submission) and a
-- closed job is never written again. Open jobs count against the ledger's
-- max_active_jobs.

CREATE TABLE jobs (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    public_id   text        NOT NULL UNIQUE,
    ledger_id   bigint      NOT NULL,
    -- The claim the job was made from (one job per claim).
    origin      uuid        NOT NULL UNIQUE,
    -- The claim fencing the job's reports now (changes on adoption); its
    -- expire_time is the owner's lease.
    claim_token uuid        NOT NULL,
    state       smallint    NOT NULL DEFAULT 1,
    -- The batch's final state as FinishJob reported it (4-7).
    final_state smallint,
    model       text        NOT NULL,
    owner       text        NOT NULL DEFAULT '',
    -- Normalized `batches/{id}`; a batch carries one job.
    batch       text        UNIQUE,
    input_file  text        NOT NULL DEFAULT '',
    output_file text        NOT NULL DEFAULT '',
    error       text        NOT NULL DEFAULT '',
    adoptions   integer     NOT NULL DEFAULT 0,
    row_count   integer     NOT NULL,
    succeeded   integer     NOT NULL DEFAULT 0,
    retryable   integer     NOT NULL DEFAULT 0,
    permanent   integer     NOT NULL DEFAULT 0,
    missing     integer     NOT NULL DEFAULT 0,
    summary     text        NOT NULL DEFAULT '',
    create_time timestamptz NOT NULL DEFAULT now(),
    submit_time timestamptz,
    end_time    timestamptz,
    update_time timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX jobs_by_ledger ON jobs (ledger_id, id DESC);
CREATE INDEX jobs_open ON jobs (ledger_id) WHERE end_time IS NULL;
CREATE INDEX claims_by_job ON claims (job_id) WHERE job_id IS NOT NULL;

-- Append-only log of job events, read by WatchJobs by sequence number.
--
-- Gap safety: a reader that has seen sequence N must never later see a
-- smaller one commit. Sequences are therefore assigned in commit order:
-- every writer takes one transaction-scoped advisory lock right before it
-- inserts its events (as the last statement before COMMIT) and holds it
-- until the commit is visible, so the next writer's numbers are drawn only
-- after this one's rows can be seen. Rolled-back numbers leave permanent
-- gaps, which readers skip harmlessly. `job` is the job as of the event.
CREATE TABLE job_events (
    seq       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ledger_id bigint      NOT NULL,
    job_id    bigint      NOT NULL,
    -- 1 created, 2 state changed, 3 progress, 4 adopted (tally.v1.JobEventType).
    type      smallint    NOT NULL,
    actor     text        NOT NULL DEFAULT '',
    job       jsonb       NOT NULL,
    time      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_events_by_ledger ON job_events (ledger_id, seq);

-- Named run locks. Expiry is on the database clock; an expired lock stays
-- until someone takes it over (new token) or its owner releases it.
CREATE TABLE locks (
    name         text        PRIMARY KEY,
    owner        text        NOT NULL DEFAULT '',
    token        uuid        NOT NULL,
    acquire_time timestamptz NOT NULL DEFAULT now(),
    expire_time  timestamptz NOT NULL
);

-- Per ledger: whether its PERMANENT count is at or above its review
-- threshold, and when an alert was last queued. Replicas race to move
-- `above` with guarded UPDATEs; the one that wins queues the alert, so a
-- crossing queues exactly one.
CREATE TABLE ledger_alerts (
    ledger_id       bigint      PRIMARY KEY,
    above           boolean     NOT NULL DEFAULT false,
    crossings       integer     NOT NULL DEFAULT 0,
    last_alert_time timestamptz,
    update_time     timestamptz NOT NULL DEFAULT now()
);

-- Alerts to deliver (at least once, same `msg_id` on every try so the
-- receiver can deduplicate). A sender leases a row, POSTs, and records the
-- result; a failure is retried with backoff until `max` tries.
CREATE TABLE alert_outbox (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ledger_id         bigint      NOT NULL,
    msg_id            text        NOT NULL UNIQUE,
    kind              text        NOT NULL,
    url               text        NOT NULL,
    body              text        NOT NULL,
    tries             integer     NOT NULL DEFAULT 0,
    next_attempt_time timestamptz NOT NULL DEFAULT now(),
    lease_until       timestamptz,
    sent_time         timestamptz,
    failed_time       timestamptz,
    last_error        text        NOT NULL DEFAULT '',
    create_time       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX alert_outbox_due ON alert_outbox (next_attempt_time)
    WHERE sent_time IS NULL AND failed_time IS NULL;
