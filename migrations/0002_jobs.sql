-- Jobs: the provider batch made from a claim. The job record exists apart
-- from the rows: rows say what is true of each row, jobs say what was sent,
-- when, under which batch name, and what became of it.
--
-- States: 1 preparing, 2 submitted, 3 running, 4 succeeded, 5 failed,
-- 6 cancelled, 7 expired, 8 reconciled (the tally.v1.JobState numbers).

CREATE TABLE jobs (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    public_id   text        NOT NULL UNIQUE,
    ledger_id   bigint      NOT NULL,
    -- The claim the job was made from (one job per claim).
    origin      uuid        NOT NULL UNIQUE,
    -- The claim fencing the job's reports now (changes on adoption).
    claim_token uuid        NOT NULL,
    state       smallint    NOT NULL DEFAULT 1,
    model       text        NOT NULL,
    owner       text        NOT NULL DEFAULT '',
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
CREATE INDEX jobs_active ON jobs (ledger_id) WHERE state < 8;
