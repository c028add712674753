-- Dependency answers as prompt inputs (issue 49). A row may name each of its
-- dependencies for its prompt template (`row_deps.name`, '' for none); a
-- claim gives each row it takes its dependencies' results, and each edge
-- keeps the SHA-256 of the result the dependant's latest claim was given
-- (`used_hash`, NULL until then): the inputs the row's answer was made from.
-- A claim reads a row's dependencies by `row_id`, hence the index (the
-- primary key leads with `dep_id`).
--
-- `tally_claim_runnable` counts those results in a claim's byte budget, and
-- says which rows taken have dependencies (only those are read again).

ALTER TABLE row_deps ADD COLUMN name text NOT NULL DEFAULT '',
                     ADD COLUMN used_hash bytea;
CREATE INDEX row_deps_row ON row_deps (row_id);

-- The bytes the dependency results of row `p_row` add to a claim's answer
-- (`p_depends_on` empty: none, and nothing is read).
CREATE FUNCTION tally_dependency_bytes(p_row bigint, p_depends_on text[])
RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p_depends_on = '{}' THEN 0 ELSE (
        SELECT coalesce(sum(octet_length(d.key) + octet_length(e.name)
                            + coalesce(octet_length(d.result), 0) + 96), 0)
        FROM row_deps e JOIN rows d ON d.id = e.dep_id
        WHERE e.row_id = p_row) END
$$;

DROP FUNCTION tally_claim_runnable(bigint, text, integer, uuid, bigint, integer, integer, integer);

CREATE FUNCTION tally_claim_runnable(p_ledger bigint, p_model text, p_max integer,
                                     p_token uuid, p_max_bytes bigint,
                                     p_row_overhead integer, p_depth_min integer,
                                     p_depth_max integer)
RETURNS TABLE (id bigint, key text, payload text, prompt_name text, prompt_version text,
               model text, provider_failures integer, content_failures integer,
               infra_failures integer, attempts integer, held_back integer,
               has_deps boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    -- One entry per FETCH (a FOR loop would prefetch, and lock, ten).
    head CURSOR FOR
        SELECT q.ctid AS tid, q.ready_time, q.row_id, q.row_ids, q.depth FROM runnable q
        WHERE q.ledger_id = p_ledger AND q.model = p_model AND q.ready_time <= now()
          AND q.depth BETWEEN p_depth_min AND p_depth_max
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
    e_depth integer[] := '{}';
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
            INSERT INTO runnable (ledger_id, model, ready_time, row_id, row_ids, depth)
            VALUES (p_ledger, p_model, e.ready_time, ids[need + 1], ids[need + 1:], e.depth);
            ids := ids[1:need];
        END IF;
        e_ready := e_ready || e.ready_time;
        e_start := e_start || (cardinality(taken) + 1);
        e_len := e_len || cardinality(ids);
        e_depth := e_depth || e.depth;
        taken := taken || ids;
        need := need - cardinality(ids);
        EXIT WHEN need <= 0;
    END LOOP;
    CLOSE head;
    IF cardinality(taken) = 0 THEN
        RETURN;
    END IF;
    -- The queue only ever holds claimable rows (every writer that makes a
    -- row claimable queues it once, and a claim is the only reader); the
    -- condition is a second look, not the fence.
    --
    -- Most claims fit their budget: the rows are read once, measured as
    -- they are read (no ordering), and returned whole when their sum fits.
    -- Only a claim over its budget (nothing returned here) pays for
    -- measuring in queue order and putting rows back.
    IF p_max_bytes IS NULL THEN
        RETURN QUERY
            SELECT r.id, r.key, r.payload, r.prompt_name, r.prompt_version, r.model,
                   r.provider_failures, r.content_failures, r.infra_failures, r.attempts, 0,
                   r.depends_on <> '{}'
            FROM rows r
            WHERE r.id = ANY(taken) AND r.status IN (1, 3) AND r.unmet_deps = 0;
        RETURN;
    END IF;
    RETURN QUERY
        WITH got AS MATERIALIZED (
            SELECT r.id, r.key, r.payload, r.prompt_name, r.prompt_version, r.model,
                   r.provider_failures, r.content_failures, r.infra_failures, r.attempts,
                   r.depends_on <> '{}' AS has_deps,
                   octet_length(r.key) + octet_length(r.payload)
                       + octet_length(r.prompt_name) + octet_length(r.prompt_version)
                       + octet_length(r.model) + p_row_overhead
                       + tally_dependency_bytes(r.id, r.depends_on) AS size
            FROM rows r
            WHERE r.id = ANY(taken) AND r.status IN (1, 3) AND r.unmet_deps = 0
        )
        SELECT g.id, g.key, g.payload, g.prompt_name, g.prompt_version, g.model,
               g.provider_failures, g.content_failures, g.infra_failures, g.attempts, 0,
               g.has_deps
        FROM got g
        WHERE (SELECT sum(x.size) FROM got x) <= p_max_bytes;
    IF FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
        WITH t AS (
            SELECT u.id, u.ord::int AS ord FROM unnest(taken) WITH ORDINALITY u(id, ord)
        ),
        sized AS MATERIALIZED (
            SELECT r.id, r.key, r.payload, r.prompt_name, r.prompt_version, r.model,
                   r.provider_failures, r.content_failures, r.infra_failures, r.attempts,
                   r.depends_on <> '{}' AS has_deps, t.ord,
                   sum(octet_length(r.key) + octet_length(r.payload)
                       + octet_length(r.prompt_name) + octet_length(r.prompt_version)
                       + octet_length(r.model) + p_row_overhead
                       + tally_dependency_bytes(r.id, r.depends_on))
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
            INSERT INTO runnable (ledger_id, model, ready_time, row_id, row_ids, depth)
            SELECT p_ledger, p_model, q.ready, taken[greatest(q.start, c.k + 1)],
                   CASE WHEN q.start + q.len - 1 > greatest(q.start, c.k + 1)
                        THEN taken[greatest(q.start, c.k + 1):q.start + q.len - 1] END,
                   q.depth
            FROM unnest(e_ready, e_start, e_len, e_depth) q(ready, start, len, depth), cut c
            WHERE q.start + q.len - 1 > c.k
            RETURNING 1
        )
        SELECT s.id, s.key, s.payload, s.prompt_name, s.prompt_version, s.model,
               s.provider_failures, s.content_failures, s.infra_failures, s.attempts,
               c.held_back, s.has_deps
        FROM sized s, cut c
        WHERE s.ord <= c.k;
END
$$;

