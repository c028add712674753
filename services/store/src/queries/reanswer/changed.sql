-- The edges out of the rows $1 (ids, just settled) whose dependant
-- SUCCEEDED with an answer made from another result than the one the row
-- has now: the dependant's input changed. Answers each edge (dependency,
-- dependant) with the dependency's key.
SELECT e.dep_id, e.row_id, r.key
FROM row_deps e
JOIN rows r ON r.id = e.dep_id
JOIN rows d ON d.id = e.row_id
WHERE e.dep_id = ANY($1) AND r.status = {{SUCCEEDED}} AND d.status = {{SUCCEEDED}}
  AND e.used_hash IS NOT NULL
  AND e.used_hash <> sha256(convert_to(coalesce(r.result, ''), 'UTF8'))
ORDER BY e.row_id, e.dep_id
