-- The bytes of the rows a held-back whole-batch claim would take (see
-- `fill.rs`): when they fill the claim's byte budget the batch is full by
-- bytes, however few the rows. Read only for a claim about to wait.
--
-- Parameters: $1 ledger id; $2 model (NULL: any of the ledger's); $3
-- provider (NULL: any); $4 the claim's size in rows; $5 bytes counted per
-- row on top of its own.
WITH models AS (
    SELECT m.model FROM ledger_models m
    WHERE m.ledger_id = $1 AND ($2::text IS NULL OR m.model = $2)
      AND ($3::text IS NULL OR m.provider = $3)
),
head AS (
    SELECT coalesce(q.row_ids, ARRAY[q.row_id]) AS ids
    FROM models m CROSS JOIN LATERAL (
        SELECT r.row_ids, r.row_id FROM runnable r
        WHERE r.ledger_id = $1 AND r.model = m.model AND r.ready_time <= now()
        ORDER BY r.ready_time LIMIT $4) q
)
SELECT coalesce(sum(octet_length(r.key) + octet_length(r.payload) + $5), 0)::int8
FROM head h CROSS JOIN LATERAL unnest(h.ids) AS i(id)
JOIN rows r ON r.id = i.id
