-- A claim stops at a byte budget.
--
-- A ClaimRows answer larger than the client's receive limit never arrives:
-- the rows stay leased to a claim nobody works, and come back with an infra
-- attempt counted when the lease runs out, only to be claimed into an answer
-- just as large. So a claim now takes rows, oldest ready first, only while
-- their encoded size fits `p_max_bytes` (the first row always: the server
-- refuses a budget smaller than one largest row).
--
-- The size of a row is not known until the row is read, and the queue holds
-- ids only, so the function still takes up to `p_max` entries off the queue;
-- the statement that reads the rows measures them in queue order
-- (`octet_length` reads a TOASTed value's size without fetching it) and puts
-- back, in the same statement, every entry or part of an entry past the cut,
-- at its old place in the queue (its ready time and first id). The rows put
-- back were never claimed: nothing was written to them and no attempt is
-- counted. A claim that fits (the usual case) only reads its rows' sizes
-- once more (from the same pages, in memory by then) and writes nothing more
-- than before.
--
-- `held_back` (the same on every row returned) says how many claimable rows
-- were put back, so the answer can say it stopped short.

DROP FUNCTION tally_claim_runnable(bigint, text, integer, uuid);

-- Claims up to `p_max` rows of one ledger and model, oldest ready first,
-- and at most `p_max_bytes` of them (NULL: no byte limit), each row
-- counted as its key, payload, prompt and model bytes plus `p_row_overhead`
-- (its framing in the answer).
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
