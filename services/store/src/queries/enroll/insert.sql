-- Enrolls rows (the one enrollment statement; `insert` in enroll.rs binds it
-- from `Columns`): the rows, with their dependencies (edges to rows of this
-- call or already stored), prompts, per-row models and the status each row
-- starts with (planned by the caller with RowStatus::enrolled); queue chunks
-- for the claimable ones; the ledger's new models.
--
-- Parameters: $1 ledger id; one element per row, in key order: $2 keys,
-- $3 payloads, $4 content hashes, $5 dependency keys (comma-separated),
-- $6 prompt names, $7 prompt versions, $8 models, $9 statuses, $10 unmet
-- dependency counts (an empty array: all defaults); one element per edge:
-- $11 child keys, $12 dependency keys, $13 dependency ids (stored rows);
-- $14 models not yet listed for the ledger; $15 the ledger's model; $16 the
-- number of rows given (fewer inserted: the keys inserted come back); $17
-- the provider of each of $14; $18 each row's depth within the call (an empty
-- array: all 1); $19 each edge's name (an empty array: none named).
--
-- A stored row a new row depends on, and its unfinished ancestors, are made
-- at least as deep as the chains now behind them (`lifted`, `up`), on the row
-- and on its queue entry.
WITH RECURSIVE ins AS (
    INSERT INTO rows (ledger_id, key, payload, content_hash, depends_on, prompt_name,
                      prompt_version, model, status, unmet_deps, rule, last_error, depth)
    SELECT $1, t.key, t.payload, t.content_hash,
           coalesce(string_to_array(nullif(t.deps_csv, ''), ','), '{}'),
           coalesce(t.prompt_name, ''), coalesce(t.prompt_version, ''),
           coalesce(t.model, $15), coalesce(t.status, {{PENDING}}), coalesce(t.unmet, 0),
           -- Born BLOCKED reads like blocked later (settle::block_dependants).
           CASE WHEN t.status = {{BLOCKED}} THEN {{BLOCKED_RULE}} ELSE '' END,
           CASE WHEN t.status = {{BLOCKED}} THEN {{BLOCKED_MESSAGE}} ELSE '' END,
           coalesce(t.depth, 1)
    -- In array order: keys sorted (see above). Ids, and so claim
    -- order within one call, follow key order.
    FROM unnest($2::text[], $3::text[], $4::bytea[], $5::text[], $6::text[],
                $7::text[], $8::text[], $9::int2[], $10::int4[], $18::int4[])
        AS t(key, payload, content_hash, deps_csv, prompt_name, prompt_version,
             model, status, unmet, depth)
    ON CONFLICT (ledger_id, key) DO NOTHING
    RETURNING id, key, status, unmet_deps, model, depth
),
edges AS (
    INSERT INTO row_deps (dep_id, row_id, ledger_id, name)
    SELECT coalesce(e.dep_id, p.id), c.id, $1, coalesce(e.name, '')
    FROM unnest($11::text[], $12::text[], $13::int8[], $19::text[])
        AS e(child, dep_key, dep_id, name)
    JOIN ins c ON c.key = e.child
    LEFT JOIN ins p ON p.key = e.dep_key
    WHERE coalesce(e.dep_id, p.id) IS NOT NULL
),
-- Claimable rows go on the queue in chunks: this call's ids of one depth in
-- one aligned block of 128 ids go together (see `runnable` in the
-- baseline; a claim takes the depths its lane is routed).
queued AS (
    INSERT INTO runnable (ledger_id, model, ready_time, row_id, row_ids, depth)
    SELECT $1, model, now(), min(id), array_agg(id ORDER BY id), depth
    FROM ins WHERE status = {{PENDING}} AND unmet_deps = 0
    GROUP BY model, id / 128, depth
),
-- Stored dependencies of the new rows, each one deeper than its deepest new
-- dependant (finished ones keep theirs: nothing waits on a finished row).
lifted AS (
    SELECT e.dep_id AS id, max(c.depth) + 1 AS d
    FROM unnest($11::text[], $12::text[], $13::int8[]) AS e(child, dep_key, dep_id)
    JOIN ins c ON c.key = e.child
    JOIN rows r ON r.id = e.dep_id AND r.status <> {{SUCCEEDED}}
    GROUP BY e.dep_id
),
up(id, d) AS (
    SELECT id, d FROM lifted
    UNION
    SELECT rd.dep_id, up.d + 1 FROM up
    JOIN row_deps rd ON rd.row_id = up.id
    JOIN rows r ON r.id = rd.dep_id AND r.status <> {{SUCCEEDED}}
),
deepened AS (
    UPDATE rows r SET depth = b.d
    FROM (SELECT id, max(d) AS d FROM up GROUP BY id) b
    WHERE r.id = b.id AND r.depth < b.d
    RETURNING r.id, r.depth
),
requeued AS (
    UPDATE runnable q SET depth = x.depth
    FROM deepened x
    WHERE q.ledger_id = $1 AND q.depth < x.depth AND (q.row_id = x.id OR x.id = ANY(q.row_ids))
),
models AS (
    INSERT INTO ledger_models (ledger_id, model, provider)
    SELECT $1, m, p FROM unnest($14::text[], $17::text[]) AS t(m, p)
    ON CONFLICT DO NOTHING
)
SELECT (SELECT count(*) FROM ins),
       CASE WHEN (SELECT count(*) FROM ins) < $16 THEN (SELECT array_agg(key) FROM ins) END
