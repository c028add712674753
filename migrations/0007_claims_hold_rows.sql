-- A claim holds its rows without writing them.
--
-- A claim used to mark each row it took RUNNING under its token: one more
-- version of every (wide) row per attempt, written at claim time and again
-- by the report. Now the claim's `row_ids` is the set of rows it still
-- holds, and nothing else: a claim takes its rows off the runnable queue
-- (which is what makes the take exclusive: a row is on the queue at most
-- once, and only while no claim holds it) and records them here; every
-- settlement (report, release, rescue, job failure, FinishJob) removes the
-- rows it settles from `row_ids` under the claim's row lock, in the
-- statement that writes them. While held, a row keeps the status it had
-- when it was claimed (PENDING or RETRYABLE); readers show it RUNNING under
-- the ACTIVE claim whose `row_ids` holds it.
--
-- So `held = cardinality(row_ids)` for every claim, and a claim that is not
-- ACTIVE holds nothing.

-- Claims that hold rows now: exactly the rows RUNNING under them.
UPDATE claims c
SET row_ids = coalesce(
        (SELECT array_agg(r.id ORDER BY r.id) FROM rows r
         WHERE r.claim_id = c.token AND r.status = 2), '{}'),
    held = (SELECT count(*) FROM rows r WHERE r.claim_id = c.token AND r.status = 2)
WHERE c.state = 1;
UPDATE claims SET row_ids = '{}', held = 0 WHERE state <> 1 AND cardinality(row_ids) > 0;

-- Their rows go back to the status a claim finds (the claim holds them).
UPDATE rows SET status = CASE WHEN attempts = 0 THEN 1 ELSE 3 END WHERE status = 2;

ALTER TABLE rows DROP COLUMN claim_id;

-- Readers find the rows held in a ledger through its active claims.
CREATE INDEX claims_active_by_ledger ON claims (ledger_id) WHERE state = 1;

-- As in migration 0005, without marking the rows: returns them as found.
CREATE OR REPLACE FUNCTION tally_claim_runnable(p_ledger bigint, p_model text, p_max integer,
                                                p_token uuid)
RETURNS TABLE (id bigint, key text, payload text, prompt_name text, prompt_version text,
               model text, provider_failures integer, content_failures integer,
               infra_failures integer, attempts integer)
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
        taken := taken || ids;
        need := need - cardinality(ids);
        EXIT WHEN need <= 0;
    END LOOP;
    CLOSE head;
    -- The queue only ever holds claimable rows (every writer that makes a
    -- row claimable queues it once, and a claim is the only reader); the
    -- condition is a second look, not the fence.
    RETURN QUERY
        SELECT r.id, r.key, r.payload, r.prompt_name, r.prompt_version, r.model,
               r.provider_failures, r.content_failures, r.infra_failures, r.attempts
        FROM rows r
        WHERE r.id = ANY(taken) AND r.status IN (1, 3) AND r.unmet_deps = 0;
END
$$;
