-- Golden rows (tally_core::golden): a ledger's requests with known answers,
-- sent along with some of its batches to catch the model behind an alias
-- changing. Kept apart from `rows`: never claimed, counted, attempted or
-- priced as rows.
--
-- `golden_sets`: the set (rows as JSON: key, payload, prompt, expected,
-- fields) and how it is used; `alerted_version` is the model version the
-- last drift alert named (one alert per version, not one per result).
CREATE TABLE golden_sets (
    ledger_id             bigint           PRIMARY KEY REFERENCES ledgers (id) ON DELETE CASCADE,
    rows                  jsonb            NOT NULL,
    every_nth_job         integer          NOT NULL,
    window_size           integer          NOT NULL,
    max_mismatch_fraction double precision NOT NULL,
    pause_on_drift        boolean          NOT NULL,
    alerted_version       text,
    -- Jobs made since the set was last set (the first one and every Nth
    -- carry the rows).
    jobs_seen             bigint           NOT NULL DEFAULT 0,
    update_time           timestamptz      NOT NULL DEFAULT now()
);

-- One result per (job, golden key): a repeated report adds nothing.
CREATE TABLE golden_results (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ledger_id     bigint      NOT NULL REFERENCES ledgers (id) ON DELETE CASCADE,
    job_id        bigint      NOT NULL,
    key           text        NOT NULL,
    model         text        NOT NULL,
    model_version text        NOT NULL,
    -- JSON pointers that mismatched ('' for a whole answer); empty: matched.
    mismatched    text[]      NOT NULL,
    answer        text        NOT NULL,
    create_time   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (job_id, key)
);
CREATE INDEX golden_results_latest ON golden_results (ledger_id, id DESC);

-- Jobs made to carry the golden rows.
ALTER TABLE jobs ADD COLUMN golden boolean NOT NULL DEFAULT false;
