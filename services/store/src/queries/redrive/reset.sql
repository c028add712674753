-- Redrives the rows $1 (ids, each REDRIVABLE) back to PENDING with fresh
-- budgets (Event::Redrive), and every row they transitively BLOCKED
-- (Event::Unblock). Answers each row touched, and whether it was a target.
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
       update_time = now()
FROM affected a
WHERE r.id = a.id AND (a.target OR r.status = {{BLOCKED}})
RETURNING r.id, a.target
