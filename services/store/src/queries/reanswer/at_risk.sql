-- The SUCCEEDED rows that used, directly or through other such rows, an
-- answer of the rows $1 (ids): what answering them differently may ask
-- again (where the ledger re-runs dependants) or mark as changed; with
-- their keys.
WITH RECURSIVE used(id) AS (
    SELECT e.row_id FROM row_deps e JOIN rows d ON d.id = e.row_id
    WHERE e.dep_id = ANY($1) AND e.used_hash IS NOT NULL AND d.status = {{SUCCEEDED}}
    UNION
    SELECT e.row_id FROM row_deps e JOIN used u ON e.dep_id = u.id
    JOIN rows d ON d.id = e.row_id
    WHERE e.used_hash IS NOT NULL AND d.status = {{SUCCEEDED}}
)
SELECT u.id, r.key FROM used u JOIN rows r ON r.id = u.id
WHERE u.id <> ALL($1) ORDER BY u.id
