-- The results after a consumer's cursor, in position order, with what
-- their rows are now and what each adds to an answer (see consumers.rs,
-- `receive`).
--
-- Parameters:
--   $1 ledger id, $2 the cursor (a position), $3 at most this many,
--   $4 whether payloads are sent, $5 bytes per result besides its texts.
--
-- Entries are picked by their sizes alone (`n`, not the TOASTed arrays):
-- those holding a result after the cursor (the cursor's own entry only when
-- it is not used up), until they hold $3 such results (each holds at least
-- one, so $3 entries always do). Only those are unnested, and only the
-- results kept are joined to rows.
WITH picked AS MATERIALIZED (
    SELECT w.seq FROM (
        SELECT t.seq, sum(t.n) OVER (ORDER BY t.seq) - t.n AS before
        FROM (SELECT e.seq, e.n FROM result_log e
              WHERE e.ledger_id = $1 AND e.seq >= $2::int8 >> {{ORDINAL_BITS}}
                AND ((e.seq << {{ORDINAL_BITS}}) | e.n) > $2
              ORDER BY e.seq LIMIT $3) t
    ) w
    WHERE w.before < $3 + ($2::int8 & {{ORDINAL_MASK}})
), after AS MATERIALIZED (
    SELECT (e.seq << {{ORDINAL_BITS}}) | x.ord AS position, x.row_id, x.version
    FROM result_log e
    JOIN picked p ON e.ledger_id = $1 AND e.seq = p.seq
    CROSS JOIN LATERAL unnest(e.row_ids, e.versions) WITH ORDINALITY AS x(row_id, version, ord)
    WHERE ((e.seq << {{ORDINAL_BITS}}) | x.ord) > $2
    ORDER BY 1
    LIMIT $3
)
SELECT a.position, a.row_id, a.version, r.status, r.result_version,
       {{RESULT_SIZE}} AS size
FROM after a LEFT JOIN rows r ON r.id = a.row_id
ORDER BY a.position
