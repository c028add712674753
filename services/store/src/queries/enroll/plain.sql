-- Enrolls rows that have no dependencies, prompt or own model (the common
-- case): inserts them PENDING, queues them in chunks of one aligned block of
-- 128 ids, and lists the ledger's new models.
--
-- Parameters: $1 ledger id; $2 keys, $3 payloads, $4 content hashes (in key
-- order); $5 the ledger's model; $6 models not yet listed for the ledger;
-- $7 the number of rows given (fewer inserted: the ids inserted come back).
WITH ins AS (
    INSERT INTO rows (ledger_id, key, payload, content_hash, model, status)
    SELECT $1, t.key, t.payload, t.content_hash, $5, {{PENDING}}
    FROM unnest($2::text[], $3::text[], $4::bytea[]) AS t(key, payload, content_hash)
    ON CONFLICT (ledger_id, key) DO NOTHING
    RETURNING id
),
queued AS (
    INSERT INTO runnable (ledger_id, model, ready_time, row_id, row_ids)
    SELECT $1, $5, now(), min(id), array_agg(id)
    FROM ins GROUP BY id / 128
    RETURNING cardinality(row_ids) AS n
),
models AS (
    INSERT INTO ledger_models (ledger_id, model)
    SELECT $1, m FROM unnest($6::text[]) AS m
    ON CONFLICT DO NOTHING
)
-- Every row inserted is queued, so the queue's chunks count them
-- without another pass over `ins`.
SELECT q.n, CASE WHEN q.n < $7 THEN (SELECT array_agg(id) FROM ins) END
FROM (SELECT coalesce(sum(n), 0)::int8 AS n FROM queued) q
