-- Redrives the rows $1 (ids, each REDRIVABLE) back to PENDING with fresh
-- budgets (Event::Redrive), and every row they transitively BLOCKED
-- (Event::Unblock). Answers each row touched, and whether it was a target.
-- A target that was final (PERMANENT) moves its result version on, so its
-- next final result is delivered as a new version (tally_core::delivery).
WITH RECURSIVE dependants(id) AS (
    SELECT row_id FROM row_deps WHERE dep_id = ANY($1)
    UNION
    SELECT d.row_id FROM row_deps d JOIN dependants x ON d.dep_id = x.id
),
affected AS (
    SELECT id, true AS target FROM unnest($1::int8[]) AS t(id)
    UNION ALL
    SELECT id, false FROM dependants WHERE id <> ALL($1)
)
UPDATE rows r SET status = {{PENDING}}, provider_failures = 0, content_failures = 0,
       infra_failures = 0, rule = '', last_error = '', next_attempt_time = NULL,
       result_version = r.result_version
           + CASE WHEN r.status IN ({{FINISHED}}) THEN 1 ELSE 0 END,
       update_time = now()
FROM affected a
WHERE r.id = a.id AND (a.target OR r.status = {{BLOCKED}})
RETURNING r.id, a.target
