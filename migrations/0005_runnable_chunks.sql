-- The runnable queue holds chunks as well as single rows.
--
-- An enrollment queued one entry per new row: a heap tuple and an index
-- entry each, all at the right edge of `runnable_order` where concurrent
-- enrollers meet, and later one dead entry per row at the queue head for
-- every claim to walk past. Now an enrollment queues its claimable rows in
-- chunks (`row_ids`, ascending): the call's ids that fall in one aligned
-- block of 128 ids (`id / 128`), so at most 128 to a chunk; `row_id` is the
-- first of them, so a chunk sorts where its first row would. Rows that become
-- claimable one by one (retries, releases, freed dependants, redrives) still
-- get single entries (`row_ids` NULL).
--
-- A claim goes through `tally_claim_runnable`, which locks entries in queue
-- order (SKIP LOCKED), deletes them, puts back the part of a chunk it did
-- not need under the chunk's place in the queue, and marks the rows RUNNING
-- under the claim's token. The guarded UPDATE of `rows` stays what decides
-- whether a row is claimed, exactly as with single entries.
--
-- The UPDATE must run here, after the queue was read, and not in the
-- statement that calls the function: each statement in a function sees the
-- database as of its own start, so an entry put on the queue by a report
-- that committed while the calling statement was already running would be
-- visible to the function but its row's new status not to the caller, and
-- the row would leave the queue unclaimed.

ALTER TABLE runnable ADD COLUMN row_ids bigint[];

-- Claims up to `p_max` rows of one ledger and model for claim `p_token`,
-- oldest ready first, and returns what the claim answers with.
CREATE FUNCTION tally_claim_runnable(p_ledger bigint, p_model text, p_max integer, p_token uuid)
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
    RETURN QUERY
        UPDATE rows r SET status = 2, claim_id = p_token, update_time = now()
        WHERE r.id = ANY(taken) AND r.status IN (1, 3) AND r.unmet_deps = 0
        RETURNING r.id, r.key, r.payload, r.prompt_name, r.prompt_version, r.model,
                  r.provider_failures, r.content_failures, r.infra_failures, r.attempts;
END
$$;
