-- The rows $1 (ids) were reopened: each of their dependants waits for them
-- again (`unmet_deps` counts the dependencies not SUCCEEDED). A row
-- reopened with one of its dependencies waits for it too.
UPDATE rows d SET unmet_deps = d.unmet_deps + x.n
FROM (SELECT e.row_id, count(*)::int AS n FROM row_deps e
      WHERE e.dep_id = ANY($1) GROUP BY e.row_id) x
WHERE d.id = x.row_id
