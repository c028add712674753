-- tally's schema: every table, index, sequence, function and statistics
-- object the store (services/store) reads and writes.
--
-- This is the baseline. It is never edited; every change from here on is a
-- new, forward-only migration after it.
--
-- Sections, by aggregate:
--   ledgers (and their deletion); prompts; rows and the runnable queue;
--   claims and attempts; redrives; jobs, job events and run locks;
--   operations and their events; alerts; spend; pause; cool-downs;
--   golden rows; scopes.
--
-- Conventions:
-- * Coded columns are smallints equal to the tally.v1 enum numbers (the
--   Rust types in tally-core and tally-store convert with `code()` and
--   `from_code()`), so no translation table can drift. 0, the proto's
--   UNSPECIFIED, is never stored unless a column says so.
-- * Times are the database's clock (`now()`): replicas with skewed clocks
--   agree on leases, backoff and expiry.
-- * The hot tables (rows, row_deps, runnable, claims, attempts, jobs,
--   job_events) have no foreign keys: each insert would take a KEY SHARE
--   lock on the parent ledger row, and concurrent enrollers would queue on
--   it. The store is their only writer, and the purge (`ledger_purges`)
--   deletes what a deleted ledger leaves. The few cold tables that hang off
--   a ledger or a claim reference it ON DELETE CASCADE, so they go with it.
-- * Table comments say what a table holds; column comments the meaning of
--   codes and of anything the name does not say.


-- =========================================================================
-- Ledgers
-- =========================================================================

-- One ledger: a named set of rows and the policy they are run under.
CREATE TABLE ledgers (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The public ledger id (`ledgers/{name}` in the API).
    name          text        NOT NULL UNIQUE,
    -- The ledger's policy (tally_core::policy::Policy, as JSON).
    policy        jsonb       NOT NULL,
    -- Bumped by every change of the ledger (policy, pause): a call that
    -- names an etag (UpdateLedger, DeleteLedger, …) is refused once it moved.
    etag          bigint      NOT NULL DEFAULT 1,
    create_time   timestamptz NOT NULL DEFAULT now(),
    update_time   timestamptz NOT NULL DEFAULT now(),
    -- Set when the ledger is DELETING (see `ledger_purges`); NULL while it
    -- lives.
    delete_time   timestamptz,
    -- The pause (see "Pause" below), all NULL while the ledger is ACTIVE:
    -- why (`operator` for PauseLedger; `spend_cap`, `quota`, `billing`,
    -- `model_drift` when the server pauses it), the message shown, who, and
    -- since when.
    pause_reason  text CHECK (pause_reason IN
        ('operator', 'spend_cap', 'quota', 'billing', 'model_drift')),
    pause_message text,
    pause_actor   text,
    pause_time    timestamptz,
    CONSTRAINT ledgers_pause_whole CHECK ((pause_reason IS NULL) = (pause_time IS NULL))
);

-- Deleting ledgers (LedgerService.DeleteLedger): one row per ledger being
-- purged.
--
-- A delete is two steps, so that it never holds a long transaction and
-- survives a crash:
-- 1. One short transaction sets `ledgers.delete_time` (the ledger is
--    DELETING: every work RPC answers NOT_FOUND from then on, and its name
--    stays taken), closes its claims and jobs, and inserts its
--    `ledger_purges` row.
-- 2. Purgers (a background task in every server replica) delete everything
--    keyed by the ledger in bounded batches, one short transaction each,
--    and finally the ledger row and its `ledger_purges` row. A purger locks
--    the `ledger_purges` row for the length of one batch (FOR UPDATE SKIP
--    LOCKED), so replicas never work on one ledger at the same moment, and
--    a purge cut short by a crash resumes from what is committed.
CREATE TABLE ledger_purges (
    ledger_id      bigint      PRIMARY KEY,
    -- Deleted with force: live claims were expired and open jobs abandoned.
    forced         boolean     NOT NULL,
    actor          text        NOT NULL DEFAULT '',
    -- Rows the ledger had: NULL until the purge's first step has counted
    -- them (counting a big ledger takes seconds; the delete call does not
    -- wait for it). Live claims expired and open jobs abandoned by the mark
    -- (0 unless forced).
    rows_total     bigint,
    claims_expired integer     NOT NULL DEFAULT 0,
    jobs_abandoned integer     NOT NULL DEFAULT 0,
    rows_purged    bigint      NOT NULL DEFAULT 0,
    -- The last row key deleted: rows go in key order through the
    -- (ledger_id, key) index, so each batch starts where the last one ended
    -- instead of walking past the dead index entries of every batch before
    -- it. Collation "C", as `rows.key`.
    cursor         text COLLATE "C" NOT NULL DEFAULT '',
    batches        bigint      NOT NULL DEFAULT 0,
    update_time    timestamptz NOT NULL DEFAULT now()
);


-- =========================================================================
-- Prompts
-- =========================================================================

-- Registered prompt versions (Jinja templates, rendered by the worker). A
-- version is immutable once registered; `sha256` is of its content, so a
-- repeated registration of the same content is recognised.
CREATE TABLE prompts (
    prompt_id          text        NOT NULL,
    version            text        NOT NULL,
    template           text        NOT NULL,
    -- JSON Schema of the answer; empty: none.
    response_schema    text        NOT NULL DEFAULT '',
    system_instruction text        NOT NULL DEFAULT '',
    sha256             text        NOT NULL,
    create_time        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (prompt_id, version)
);


-- =========================================================================
-- Rows and the runnable queue
-- =========================================================================

-- One row of a ledger: a request to the model and, in the end, its answer.
--
-- `status` is 1 pending, 3 retryable, 4 succeeded, 5 permanent or
-- 6 blocked (tally.v1.RowStatus). 2 (running) is not stored: a claim
-- holds its rows without writing them (see `claims.row_ids`), so a held row
-- keeps the status it had when it was claimed (1 or 3) and readers show it
-- RUNNING under the ACTIVE claim whose `row_ids` holds it. A settlement
-- (report, release, rescue, the end of a job) is each attempt's only write
-- of a row.
--
-- Layout:
-- * Two indexes only (id, and ledger+key), and neither covers a column that
--   changes when a row moves, so status changes add no index entries.
-- * Fill factor 40: a claim takes consecutive ids, so a report rewrites
--   every row of a page at once, and for those updates to stay heap-only
--   (no new index entries, a WAL record of the changed bytes only) a page
--   needs room for a second version of all its rows, result included: at
--   40% a page of ~500-byte rows has it.
-- * ANALYZE after 1% of the rows changed (the default, 10%, would leave the
--   `rows_ledger_status` estimate a million rows behind at ten million).
CREATE TABLE rows (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ledger_id         bigint      NOT NULL,
    -- Keys compare byte by byte (collation "C"): keys are ASCII identifiers
    -- (tally_core::keys), enrollments sort them in byte order to take the
    -- key index in one order (so two enrollments of the same keys queue
    -- instead of deadlocking), and byte comparisons are what an index of
    -- identifiers should pay for, not a locale's collation.
    key               text COLLATE "C" NOT NULL,
    payload           text        NOT NULL,
    -- SHA-256 of what was enrolled: a second enrollment of the key with the
    -- same content is ALREADY_PRESENT, with other content a conflict.
    content_hash      bytea       NOT NULL,
    -- Keys of the rows this one waits for (as enrolled; the edges are in
    -- `row_deps`), and how many of them have not SUCCEEDED yet.
    depends_on        text[]      NOT NULL DEFAULT '{}',
    prompt_name       text        NOT NULL DEFAULT '',
    prompt_version    text        NOT NULL DEFAULT '',
    model             text        NOT NULL,
    status            smallint    NOT NULL,
    -- Failed attempts per budget (tally_core::status::Budget), and all
    -- attempts.
    provider_failures integer     NOT NULL DEFAULT 0,
    content_failures  integer     NOT NULL DEFAULT 0,
    infra_failures    integer     NOT NULL DEFAULT 0,
    attempts          integer     NOT NULL DEFAULT 0,
    unmet_deps        integer     NOT NULL DEFAULT 0,
    -- The rule of the latest verdict (tally_core::transition), and the
    -- latest error.
    rule              text        NOT NULL DEFAULT '',
    last_error        text        NOT NULL DEFAULT '',
    -- The valid answer, once SUCCEEDED.
    result            text,
    -- Usage summed over the row's attempts.
    input_tokens      bigint      NOT NULL DEFAULT 0,
    output_tokens     bigint      NOT NULL DEFAULT 0,
    thinking_tokens   bigint      NOT NULL DEFAULT 0,
    cached_tokens     bigint      NOT NULL DEFAULT 0,
    -- The claim that made the latest attempt: a repeat report from it is a
    -- DUPLICATE, a report from any other claim is STALE.
    last_claim_id     uuid,
    -- The job that carried the row last (`jobs.row_ids` keeps every job
    -- that carried it).
    job_id            bigint,
    -- RETRYABLE rows: when the backoff ends (the row's `runnable` entry is
    -- ready then).
    next_attempt_time timestamptz,
    create_time       timestamptz NOT NULL DEFAULT now(),
    update_time       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (ledger_id, key)
) WITH (fillfactor = 40, autovacuum_analyze_scale_factor = 0.01);

-- Rows by ledger and status, for /metrics, without counting them.
--
-- `rows` has no index on status, and a count per ledger and status reads
-- every row of the ledger: seconds at ten million rows, too much for a
-- gauge refreshed every few seconds. The planner's multivariate
-- most-common-values list on (ledger_id, status), kept by ANALYZE, gives
-- each pair's share of a sample of the table; times `reltuples` it is an
-- estimate of the pair's rows (exact while the table is smaller than the
-- sample, 300 × the statistics target). A statistics target of 1000 keeps
-- up to 1000 pairs (about 160 ledgers with every status).
CREATE STATISTICS rows_ledger_status (mcv) ON ledger_id, status FROM rows;
ALTER STATISTICS rows_ledger_status SET STATISTICS 1000;

-- Edges of the dependency DAG: `row_id` waits for `dep_id`.
CREATE TABLE row_deps (
    dep_id    bigint NOT NULL,
    row_id    bigint NOT NULL,
    ledger_id bigint NOT NULL,
    PRIMARY KEY (dep_id, row_id)
);

-- The runnable queue: rows that a claim may take once `ready_time` has
-- passed (PENDING or RETRYABLE, every dependency SUCCEEDED, held by no
-- claim). A row is on the queue at most once, and only while no claim holds
-- it, which is what makes a claim's take exclusive; a claim is the only
-- reader, and deletes the entries it takes.
--
-- It is its own narrow table so that a claim deletes a few narrow entries
-- instead of scanning a partial index of wide rows that fills with dead
-- entries; autovacuum visits it after every 5000 dead entries, whatever the
-- table's size, and the server vacuums it too when dead entries pile up.
--
-- An entry is one row (`row_ids` NULL) or a chunk: an enrollment queues its
-- claimable rows in chunks (`row_ids`, ascending), the call's ids that fall
-- in one aligned block of 128 ids (`id / 128`), so at most 128 to a chunk;
-- `row_id` is the first of them, so a chunk sorts where its first row
-- would. Rows that become claimable one by one (retries, releases, freed
-- dependants, redrives) get single entries.
CREATE TABLE runnable (
    ledger_id  bigint      NOT NULL,
    model      text        NOT NULL,
    ready_time timestamptz NOT NULL,
    row_id     bigint      NOT NULL,
    row_ids    bigint[]
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


-- =========================================================================
-- Claims and attempts
-- =========================================================================

-- A claim: rows of one ledger and model leased to a worker until
-- `expire_time`.
--
-- A claim holds its rows without writing them: it takes them off the
-- runnable queue and records them in `row_ids`, the set of rows it still
-- holds, and nothing else. Every settlement (report, release, rescue, job
-- failure, FinishJob) removes the rows it settles from `row_ids` under the
-- claim's row lock, in the statement that writes them. So
-- `held = cardinality(row_ids)` for every claim, and a claim that is not
-- ACTIVE holds nothing.
CREATE TABLE claims (
    -- The claim's public id and its fencing token.
    token       uuid        PRIMARY KEY,
    ledger_id   bigint      NOT NULL,
    worker      text        NOT NULL DEFAULT '',
    model       text        NOT NULL,
    -- The caller's idempotency key: a ClaimRows retried with the same
    -- request id answers the same claim again.
    request_id  text,
    -- The rows the claim still holds (`held` counts them), and how many it
    -- took (`row_count`).
    row_ids     bigint[]    NOT NULL,
    row_count   integer     NOT NULL,
    held        integer     NOT NULL,
    -- 1 active, 2 done (every row reported or released), 3 expired.
    state       smallint    NOT NULL DEFAULT 1,
    -- The job made from the claim (CreateJob), if any.
    job_id      bigint,
    create_time timestamptz NOT NULL DEFAULT now(),
    -- The lease.
    expire_time timestamptz NOT NULL,
    UNIQUE (ledger_id, request_id)
);
-- The rescue finds expired leases.
CREATE INDEX claims_active_expiry ON claims (expire_time) WHERE state = 1;
-- Readers find the rows held in a ledger through its active claims.
CREATE INDEX claims_active_by_ledger ON claims (ledger_id) WHERE state = 1;
CREATE INDEX claims_by_job ON claims (job_id) WHERE job_id IS NOT NULL;

-- tally_claim_runnable(p_ledger, p_model, p_max, p_token, p_max_bytes,
--                      p_row_overhead)
--
-- Takes rows of one ledger and model off the runnable queue for a claim,
-- oldest ready first, and returns them as the claim answers with them. The
-- claim statement (services/store, claims) calls it and records the claim
-- itself.
--
-- Parameters:
-- * p_ledger:       the ledger's id (`ledgers.id`).
-- * p_model:        the model; NULL takes nothing (the caller passes NULL
--                   when the ledger is paused, has claims to rescue first, or
--                   has no ready row of any model).
-- * p_max:          at most this many rows; NULL or <= 0 takes nothing.
-- * p_token:        the token of the claim being made. The function does not
--                   use it: the calling statement inserts the claim with it.
-- * p_max_bytes:    at most this many bytes of rows (NULL: no byte limit),
--                   each row counted as its key, payload, prompt and model
--                   bytes plus `p_row_overhead` (its framing in the answer).
--                   The first row is always taken: the server refuses a
--                   budget smaller than one largest row.
-- * p_row_overhead: see p_max_bytes.
--
-- Returns one row per row taken: its id, key, payload, prompt, model,
-- failures per budget and attempts, and `held_back` (the same on every row
-- returned): how many claimable rows were put back for the byte budget, so
-- the answer can say it stopped short.
--
-- How:
-- * It locks entries in queue order (SKIP LOCKED: concurrent claimers never
--   wait for, nor get, the same entry), deletes them, and puts back the part
--   of a chunk it did not need, under the chunk's place in the queue.
-- * The size of a row is not known until the row is read, and the queue
--   holds ids only, so it takes up to `p_max` rows off the queue; the
--   statement that reads the rows measures them in queue order
--   (`octet_length` reads a TOASTed value's size without fetching it) and
--   puts back, in the same statement, every entry or part of an entry past
--   the cut, at its old place in the queue (its ready time and first id).
--   The rows put back were never claimed: nothing was written to them and no
--   attempt is counted.
-- * The rows are read here, after the queue was read, and not in the
--   statement that calls the function: each statement in a function sees
--   the database as of its own start, so an entry put on the queue by a
--   report that committed while the calling statement was already running
--   would be visible to the function but its row's new status not to the
--   caller, and the row would leave the queue unclaimed.
CREATE FUNCTION tally_claim_runnable(p_ledger bigint, p_model text, p_max integer,
                                     p_token uuid, p_max_bytes bigint,
                                     p_row_overhead integer)
RETURNS TABLE (id bigint, key text, payload text, prompt_name text, prompt_version text,
               model text, provider_failures integer, content_failures integer,
               infra_failures integer, attempts integer, held_back integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    -- One entry per FETCH (a FOR loop would prefetch, and lock, ten).
    head CURSOR FOR
        SELECT q.ctid AS tid, q.ready_time, q.row_id, q.row_ids FROM runnable q
        WHERE q.ledger_id = p_ledger AND q.model = p_model AND q.ready_time <= now()
        ORDER BY q.ready_time, q.row_id
        LIMIT p_max
        FOR UPDATE SKIP LOCKED;
    e record;
    ids bigint[];
    taken bigint[] := '{}';
    need integer := p_max;
    -- The entries taken, in queue order: ready time, first position in
    -- `taken`, number of ids (to put back what does not fit).
    e_ready timestamptz[] := '{}';
    e_start integer[] := '{}';
    e_len integer[] := '{}';
    total bigint := 0;
BEGIN
    IF p_model IS NULL OR p_max IS NULL OR p_max <= 0 THEN
        RETURN;
    END IF;
    OPEN head;
    LOOP
        FETCH head INTO e;
        EXIT WHEN NOT FOUND;
        ids := coalesce(e.row_ids, ARRAY[e.row_id]);
        DELETE FROM runnable WHERE ctid = e.tid;
        IF cardinality(ids) > need THEN
            INSERT INTO runnable (ledger_id, model, ready_time, row_id, row_ids)
            VALUES (p_ledger, p_model, e.ready_time, ids[need + 1], ids[need + 1:]);
            ids := ids[1:need];
        END IF;
        e_ready := e_ready || e.ready_time;
        e_start := e_start || (cardinality(taken) + 1);
        e_len := e_len || cardinality(ids);
        taken := taken || ids;
        need := need - cardinality(ids);
        EXIT WHEN need <= 0;
    END LOOP;
    CLOSE head;
    -- The queue only ever holds claimable rows (every writer that makes a
    -- row claimable queues it once, and a claim is the only reader); the
    -- condition is a second look, not the fence.
    --
    -- Most claims fit their budget: one look at the sizes (no ordering)
    -- decides that, and the rows are returned as they always were. Only a
    -- claim over its budget pays for measuring in queue order and putting
    -- rows back.
    IF p_max_bytes IS NOT NULL THEN
        SELECT coalesce(sum(octet_length(r.key) + octet_length(r.payload)
                            + octet_length(r.prompt_name) + octet_length(r.prompt_version)
                            + octet_length(r.model) + p_row_overhead), 0)
        INTO total
        FROM rows r
        WHERE r.id = ANY(taken) AND r.status IN (1, 3) AND r.unmet_deps = 0;
    END IF;
    IF p_max_bytes IS NULL OR total <= p_max_bytes THEN
        RETURN QUERY
            SELECT r.id, r.key, r.payload, r.prompt_name, r.prompt_version, r.model,
                   r.provider_failures, r.content_failures, r.infra_failures, r.attempts, 0
            FROM rows r
            WHERE r.id = ANY(taken) AND r.status IN (1, 3) AND r.unmet_deps = 0;
        RETURN;
    END IF;
    RETURN QUERY
        WITH t AS (
            SELECT u.id, u.ord::int AS ord FROM unnest(taken) WITH ORDINALITY u(id, ord)
        ),
        sized AS MATERIALIZED (
            SELECT r.id, r.key, r.payload, r.prompt_name, r.prompt_version, r.model,
                   r.provider_failures, r.content_failures, r.infra_failures, r.attempts,
                   t.ord,
                   sum(octet_length(r.key) + octet_length(r.payload)
                       + octet_length(r.prompt_name) + octet_length(r.prompt_version)
                       + octet_length(r.model) + p_row_overhead)
                       OVER (ORDER BY t.ord) AS upto
            FROM rows r JOIN t ON t.id = r.id
            WHERE r.id = ANY(taken) AND r.status IN (1, 3) AND r.unmet_deps = 0
        ),
        -- The last position kept: before the first row (but the first
        -- found) that passes the budget; sizes only add up, so every row
        -- after it passes too. Without such a row, all of `taken`.
        cut AS (
            SELECT z.k, (SELECT count(*) FROM sized x WHERE x.ord > z.k)::int AS held_back
            FROM (SELECT coalesce(
                      (SELECT min(s.ord) - 1 FROM sized s
                       WHERE p_max_bytes IS NOT NULL AND s.upto > p_max_bytes
                         AND s.ord > (SELECT min(f.ord) FROM sized f)),
                      cardinality(taken)) AS k) z
        ),
        -- Runs whether or not it is read (a data-modifying CTE always does).
        back AS (
            INSERT INTO runnable (ledger_id, model, ready_time, row_id, row_ids)
            SELECT p_ledger, p_model, q.ready, taken[greatest(q.start, c.k + 1)],
                   CASE WHEN q.start + q.len - 1 > greatest(q.start, c.k + 1)
                        THEN taken[greatest(q.start, c.k + 1):q.start + q.len - 1] END
            FROM unnest(e_ready, e_start, e_len) q(ready, start, len), cut c
            WHERE q.start + q.len - 1 > c.k
            RETURNING 1
        )
        SELECT s.id, s.key, s.payload, s.prompt_name, s.prompt_version, s.model,
               s.provider_failures, s.content_failures, s.infra_failures, s.attempts,
               c.held_back
        FROM sized s, cut c
        WHERE s.ord <= c.k;
END
$$;

-- Every attempt of every row, with its provenance.
CREATE TABLE attempts (
    ledger_id       bigint      NOT NULL,
    row_id          bigint      NOT NULL,
    -- 1 for the row's first attempt (the row's `attempts` after it).
    number          integer     NOT NULL,
    -- The claim and job that made it.
    claim_id        uuid,
    job_id          bigint,
    model           text        NOT NULL,
    prompt_name     text        NOT NULL DEFAULT '',
    prompt_version  text        NOT NULL DEFAULT '',
    -- The row's status after the attempt (a tally.v1.RowStatus number, as
    -- `rows.status`), and the rule that gave it.
    outcome         smallint    NOT NULL,
    rule            text        NOT NULL,
    -- The budget a failure counted against: 1 provider, 2 content, 3 infra
    -- (tally.v1.Budget); NULL for an attempt that counted against none.
    budget          smallint,
    input_tokens    bigint      NOT NULL DEFAULT 0,
    output_tokens   bigint      NOT NULL DEFAULT 0,
    thinking_tokens bigint      NOT NULL DEFAULT 0,
    cached_tokens   bigint      NOT NULL DEFAULT 0,
    error           text        NOT NULL DEFAULT '',
    -- Who settled it: the reporting worker, whoever ended the claim's job,
    -- or `system` for settlements tally makes itself (releases, expiries).
    actor           text        NOT NULL DEFAULT '',
    time            timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ledger_id, row_id, number)
);

-- tally_assert(ok, what): a statement that must write all or nothing
-- asserts its fence with this: a false (or NULL) `ok` raises SQLSTATE TL001
-- with `what` as the message, and the statement, with its transaction,
-- rolls back; true otherwise.
--
-- The one-statement report (services/store, report) decides each row from
-- what its claim found, writes only rows still held by the claim, and
-- asserts that it wrote every row it was given; when it did not (the lease
-- ran out, a row was released or already reported), nothing is kept and the
-- report reads the rows and decides again.
CREATE FUNCTION tally_assert(ok boolean, what text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF ok IS NOT TRUE THEN
        RAISE EXCEPTION '%', what USING ERRCODE = 'TL001';
    END IF;
    RETURN true;
END
$$;


-- =========================================================================
-- Redrives
-- =========================================================================

-- Operator redrives (PERMANENT and BLOCKED rows made claimable again), kept
-- for the record: what was targeted (the filter, as JSON), how many rows
-- were redriven, and how many dependants that unblocked.
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
-- The purge finds a ledger's redrives.
CREATE INDEX redrives_by_ledger ON redrives (ledger_id);


-- =========================================================================
-- Jobs, job events and run locks (JobService)
-- =========================================================================

-- Jobs: the provider batch made from a claim. The job record exists apart
-- from the rows: rows say what is true of each row, jobs say what was sent,
-- when, under which batch name, and what became of it.
--
-- A job is open while `end_time` is NULL; closing sets it (RECONCILED, or
-- CANCELLED before submission) and a closed job is never written again.
-- Open jobs count against the ledger's max_active_jobs.
CREATE TABLE jobs (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    public_id           text        NOT NULL UNIQUE,
    ledger_id           bigint      NOT NULL,
    -- The claim the job was made from (one job per claim).
    origin              uuid        NOT NULL UNIQUE,
    -- The claim fencing the job's reports now (changes on adoption); its
    -- expire_time is the owner's lease.
    claim_token         uuid        NOT NULL,
    -- 1 preparing, 2 submitted, 3 running, 4 succeeded, 5 failed,
    -- 6 cancelled, 7 expired, 8 reconciled, 9 creating (tally.v1.JobState;
    -- the transitions are tally_core::job). CREATING: the batch create may
    -- have reached the provider, so the job's rows are never released until
    -- the provider was searched for the batch.
    state               smallint    NOT NULL DEFAULT 1,
    -- The batch's final state as FinishJob reported it (4-7).
    final_state         smallint,
    model               text        NOT NULL,
    owner               text        NOT NULL DEFAULT '',
    -- Normalized `batches/{id}`; a batch carries one job. The job's
    -- operation is the `operations` row of this name.
    batch               text        UNIQUE,
    input_file          text        NOT NULL DEFAULT '',
    output_file         text        NOT NULL DEFAULT '',
    error               text        NOT NULL DEFAULT '',
    adoptions           integer     NOT NULL DEFAULT 0,
    -- The rows it carries, and how they ended.
    row_count           integer     NOT NULL,
    succeeded           integer     NOT NULL DEFAULT 0,
    retryable           integer     NOT NULL DEFAULT 0,
    permanent           integer     NOT NULL DEFAULT 0,
    missing             integer     NOT NULL DEFAULT 0,
    summary             text        NOT NULL DEFAULT '',
    create_time         timestamptz NOT NULL DEFAULT now(),
    submit_time         timestamptz,
    end_time            timestamptz,
    update_time         timestamptz NOT NULL DEFAULT now(),
    -- When the batch create was first attempted: bounds the search for a
    -- CREATING job's batch (the provider's list lag is measured from it).
    create_attempt_time timestamptz,
    -- The rows the job was made with (RowFilter.in_job): the claim's rows
    -- when CreateJob made the job from it. Unlike rows.job_id (the row's
    -- latest job) this never changes, so a job's table still lists a row
    -- that a later job carried again. Written once.
    row_ids             bigint[]    NOT NULL DEFAULT '{}',
    -- The input tokens the job was estimated to send when it was made, so
    -- admission (tally_core::quota) can sum what every model has enqueued
    -- at the provider.
    est_tokens          bigint      NOT NULL DEFAULT 0,
    -- Made to carry the ledger's golden rows (see "Golden rows").
    golden              boolean     NOT NULL DEFAULT false
);
CREATE INDEX jobs_by_ledger ON jobs (ledger_id, id DESC);
CREATE INDEX jobs_open ON jobs (ledger_id) WHERE end_time IS NULL;
-- The jobs admission reads: open ones (few; bounded by the provider's
-- limits), by model.
CREATE INDEX jobs_open_by_model ON jobs (model) WHERE end_time IS NULL;
-- How long a model's recent batches took (the RetryInfo of a refusal).
CREATE INDEX jobs_closed_by_model ON jobs (model, id)
    WHERE end_time IS NOT NULL AND batch IS NOT NULL;

-- Append-only log of job and ledger events, read by WatchJobs by sequence
-- number.
--
-- Gap safety: a reader that has seen sequence N must never later see a
-- smaller one commit. Sequences are therefore assigned in commit order:
-- every writer takes one transaction-scoped advisory lock right before it
-- inserts its events (as the last statement before COMMIT) and holds it
-- until the commit is visible, so the next writer's numbers are drawn only
-- after this one's rows can be seen. Rolled-back numbers leave permanent
-- gaps, which readers skip harmlessly.
CREATE TABLE job_events (
    seq       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ledger_id bigint      NOT NULL,
    -- The job (NULL for a ledger event).
    job_id    bigint,
    -- 1 created, 2 state changed, 3 progress, 4 adopted, 5 ledger paused,
    -- 6 ledger resumed (tally.v1.JobEventType).
    type      smallint    NOT NULL,
    actor     text        NOT NULL DEFAULT '',
    -- The job as of the event (NULL for a ledger event).
    job       jsonb,
    time      timestamptz NOT NULL DEFAULT now(),
    -- A ledger event (pause, resume): {"reason": …, "message": …}, reason
    -- null for a resume. NULL for a job event.
    ledger    jsonb
);
-- Every event is about a job or about the ledger, never both. The
-- constraint is NOT VALID (PostgreSQL checks it on every insert and update
-- all the same; only its catalogue flag says the table was never scanned),
-- which is why it is added here and not in CREATE TABLE, where NOT VALID is
-- ignored.
ALTER TABLE job_events
    ADD CONSTRAINT job_events_subject CHECK ((job IS NULL) <> (ledger IS NULL)) NOT VALID;
CREATE INDEX job_events_by_ledger ON job_events (ledger_id, seq);

-- Named run locks with an owner token. Expiry is on the database clock; an
-- expired lock stays until someone takes it over (new token) or its owner
-- releases it.
CREATE TABLE locks (
    name         text        PRIMARY KEY,
    owner        text        NOT NULL DEFAULT '',
    token        uuid        NOT NULL,
    acquire_time timestamptz NOT NULL DEFAULT now(),
    expire_time  timestamptz NOT NULL
);


-- =========================================================================
-- Operations and their events
-- =========================================================================

-- Provider operations (the batches behind jobs) and every event about them.
--
-- Every path that changes an operation (webhooks, the poller, an operator)
-- goes through the reducer in tally-core; the store reads the operation,
-- asks the reducer, and writes back conditioned on the version it read
-- (compare-and-swap).
--
-- Codes (tally.v1 enum numbers):
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

-- Every event, applied or not, append-only. `sequence` is global, drawn
-- from `operation_event_seq`, and is assigned in commit order: the writer
-- takes a transaction-scoped advisory lock just before inserting the event
-- and holds it to commit, so an event with a higher sequence never becomes
-- visible before one with a lower sequence. A reader that has seen sequence
-- N and resumes after N therefore misses nothing (a plain sequence default
-- would let a later number commit first, and a watcher that saw it would
-- skip the earlier one for good). Numbers may have holes (a rolled-back
-- insert), never late arrivals.
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


-- =========================================================================
-- Alerts
-- =========================================================================

-- Per ledger: whether its PERMANENT count is at or above its review
-- threshold, how often it crossed it, and when an alert was last queued.
-- Replicas race to move `above` with guarded UPDATEs; the one that wins
-- queues the alert, so a crossing queues exactly one.
CREATE TABLE ledger_alerts (
    ledger_id       bigint      PRIMARY KEY,
    above           boolean     NOT NULL DEFAULT false,
    crossings       integer     NOT NULL DEFAULT 0,
    last_alert_time timestamptz,
    update_time     timestamptz NOT NULL DEFAULT now()
);

-- Alerts to deliver to a ledger's alert_url (at least once, same `msg_id`
-- on every try so the receiver can deduplicate). A sender leases a row
-- (`lease_until`), POSTs, and records the result: `sent_time` on success;
-- a failure is retried with backoff (`next_attempt_time`) until the
-- sender gives up, which sets `failed_time`.
CREATE TABLE alert_outbox (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ledger_id         bigint      NOT NULL,
    msg_id            text        NOT NULL UNIQUE,
    -- `threshold_crossed`, `daily_reminder` (review threshold),
    -- `spend_cap_warning`, `spend_cap_reached` (spend), `model_drift`
    -- (golden rows).
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
-- The purge finds a ledger's alerts.
CREATE INDEX alert_outbox_by_ledger ON alert_outbox (ledger_id);


-- =========================================================================
-- Spend
-- =========================================================================

-- Spend caps (tally_core::spend). `ledger_spend` holds what the reported
-- rows of a capped ledger spent (actual usage, priced) and the highest spend
-- alert sent; `claim_reservations` holds each capped claim's estimated spend
-- per row. What is reserved now is read through the claims: a claim's
-- share times the rows it still holds (`claims.held`, 0 once it is done or
-- expired), so rows reported, released or rescued stop being reserved in
-- the statements that already move them.
CREATE TABLE ledger_spend (
    ledger_id     bigint           PRIMARY KEY REFERENCES ledgers (id) ON DELETE CASCADE,
    cost_usd      double precision NOT NULL DEFAULT 0,
    input_tokens  bigint           NOT NULL DEFAULT 0,
    output_tokens bigint           NOT NULL DEFAULT 0,
    -- 0 no alert yet, 1 the warning was sent, 2 the cap-reached alert was
    -- sent (back to 0 when a claim finds the spend below the warning again:
    -- the cap was raised).
    alerted       smallint         NOT NULL DEFAULT 0
);

CREATE TABLE claim_reservations (
    token         uuid             PRIMARY KEY REFERENCES claims (token) ON DELETE CASCADE,
    ledger_id     bigint           NOT NULL,
    -- Per row the claim holds.
    cost_usd      double precision NOT NULL,
    input_tokens  bigint           NOT NULL,
    output_tokens bigint           NOT NULL
);
CREATE INDEX claim_reservations_ledger ON claim_reservations (ledger_id);


-- =========================================================================
-- Pause
-- =========================================================================

-- Pausing ledgers (LedgerService.PauseLedger and ResumeLedger) has no table
-- of its own. A paused ledger hands out no claims and makes no jobs; claims
-- and jobs already out run to their end (tally_core::pause has the rules).
-- The pause is the four `pause_*` columns of `ledgers`: the claim statement
-- checks `pause_reason` on the ledger row it already reads by primary key,
-- so a pause takes effect on every replica at once. Pauses and resumes are
-- events of `job_events` (types 5 and 6), so watchers see them in sequence
-- with the jobs'.


-- =========================================================================
-- Cool-downs
-- =========================================================================

-- Shared provider cool-downs: a batch create the provider refused for quota
-- (429) puts its model here until the time its RetryInfo named; CreateJob
-- for that model answers RESOURCE_EXHAUSTED with RetryInfo until then, so
-- every worker waits instead of each retrying the provider.
CREATE TABLE model_cooldowns (
    model       text        PRIMARY KEY,
    until       timestamptz NOT NULL,
    update_time timestamptz NOT NULL DEFAULT now()
);


-- =========================================================================
-- Golden rows
-- =========================================================================

-- Golden rows (tally_core::golden): a ledger's requests with known answers,
-- sent along with some of its batches (`jobs.golden`) to catch the model
-- behind an alias changing. Kept apart from `rows`: never claimed, counted,
-- attempted or priced as rows.
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
-- Drift reads a ledger's latest results.
CREATE INDEX golden_results_latest ON golden_results (ledger_id, id DESC);


-- =========================================================================
-- Scopes
-- =========================================================================

-- tally_in_scope(id, exact, prefixes): whether `id` is inside a caller's
-- team scope (tally_core::scope), given as exact ids and prefixes (`*` is
-- the empty prefix). Lists that a scoped caller reads (ListLedgers,
-- ListOperations) filter with it; everything else checks the one name a
-- request carries before it reaches the database.
CREATE FUNCTION tally_in_scope(id text, exact text[], prefixes text[])
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT id = ANY (exact)
        OR EXISTS (SELECT 1 FROM unnest(prefixes) AS p WHERE starts_with(id, p))
$$;
