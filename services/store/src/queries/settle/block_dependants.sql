-- BLOCKs every transitive dependant of the rows $1 (ids) that just became
-- PERMANENT, as Event::DependencyFailed does: only BLOCKABLE rows move.
WITH RECURSIVE dependants(id) AS (
    SELECT row_id FROM row_deps WHERE dep_id = ANY($1)
    UNION
    SELECT d.row_id FROM row_deps d JOIN dependants x ON d.dep_id = x.id
)
UPDATE rows SET status = {{BLOCKED}}, rule = {{BLOCKED_RULE}},
       last_error = {{BLOCKED_MESSAGE}}, update_time = now()
WHERE id IN (SELECT id FROM dependants) AND status IN ({{BLOCKABLE}})
