-- One batch of a ledger's rows, with their attempts, dependency edges and
-- superseded results.
-- $1 ledger id, $2 the purge cursor (last key deleted; '' to start over),
-- $3 rows at most. Answers (rows deleted, last key deleted, attempts
-- deleted). Rows go in key order through the (ledger_id, key) index from
-- the cursor on, so no batch walks past the dead entries of earlier ones.
-- Every edge of the DAG joins two rows of one ledger; deleting the edges
-- out of each purged row (`dep_id`, the primary key's lead) removes them all.
WITH batch AS (
    SELECT id, key FROM rows
    WHERE ledger_id = $1 AND key > $2
    ORDER BY key LIMIT $3
), edges AS (
    DELETE FROM row_deps d USING batch b WHERE d.dep_id = b.id
), superseded AS (
    DELETE FROM superseded_results s USING batch b WHERE s.row_id = b.id
), tried AS (
    DELETE FROM attempts a USING batch b
    WHERE a.ledger_id = $1 AND a.row_id = b.id
    RETURNING 1
), gone AS (
    DELETE FROM rows r USING batch b WHERE r.id = b.id
    RETURNING r.key
)
SELECT count(*)::int8, max(key), (SELECT count(*) FROM tried)::int8 FROM gone
