-- What a claim asking for a whole batch sees of the queue (see `fill.rs`):
-- the rows runnable now (counted up to the claim's size), how long the
-- oldest of them has been runnable and the newest enrolled one (an
-- enrollment's entries carry `row_ids`; retries and freed dependants are
-- single entries: nothing more is arriving with them), how soon the next
-- retry becomes runnable, and whether rows of the ledger are at the
-- provider. Ages are in milliseconds on the database clock.
--
-- Parameters: $1 ledger id; $2 model (NULL: any of the ledger's); $3
-- provider (NULL: any); $4 the claim's size in rows.
WITH models AS (
    SELECT m.model FROM ledger_models m
    WHERE m.ledger_id = $1 AND ($2::text IS NULL OR m.model = $2)
      AND ($3::text IS NULL OR m.provider = $3)
),
head AS (
    SELECT q.ready_time, coalesce(cardinality(q.row_ids), 1) AS n,
           q.row_ids IS NOT NULL AS enrolled
    FROM models m CROSS JOIN LATERAL (
        SELECT r.ready_time, r.row_ids FROM runnable r
        WHERE r.ledger_id = $1 AND r.model = m.model AND r.ready_time <= now()
        ORDER BY r.ready_time LIMIT $4) q
),
seen AS (
    SELECT coalesce(sum(n), 0)::int8 AS runnable, min(ready_time) AS oldest,
           max(ready_time) FILTER (WHERE enrolled) AS newest
    FROM head
),
next AS (
    SELECT min(q.ready_time) AS ready_time
    FROM models m CROSS JOIN LATERAL (
        SELECT r.ready_time FROM runnable r
        WHERE r.ledger_id = $1 AND r.model = m.model AND r.ready_time > now()
        ORDER BY r.ready_time LIMIT 1) q
)
SELECT s.runnable,
       coalesce((extract(epoch FROM now() - s.oldest) * 1000)::int8, 0) AS oldest_ms,
       (extract(epoch FROM now() - s.newest) * 1000)::int8 AS newest_ms,
       (extract(epoch FROM (SELECT ready_time FROM next) - now()) * 1000)::int8 AS next_ms,
       EXISTS (SELECT 1 FROM claims c
               WHERE c.ledger_id = $1 AND c.state = {{CLAIM_ACTIVE}} AND c.job_id IS NOT NULL
                 AND c.held > 0) AS at_provider
FROM seen s
