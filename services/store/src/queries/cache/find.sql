-- Cached answers for requests (see cache.rs): for each request, the newest
-- answer to exactly that request (hash and text) the caller's team may be
-- served, younger than the ledger's maximum age, answered by the version of
-- the model its provider last reported, and not before golden rows last saw
-- the model drift. The caller's own team's answers first.
--
-- A row being asked again (not final, the result of its previous version
-- kept as superseded) is never answered: it wants a new answer, not the one
-- it had. That check is skipped whole, by one probe of the ledger's index,
-- when the ledger never asked a row again.
--
-- Parameters: $1 hashes; $2 the canonical requests (same order); $3 the
-- team; $4 whether the ledger shares; $5 the maximum age in milliseconds;
-- $6 the ledger id; $7 the rows' keys (same order).
-- Answers the 1-based position of each request found.
WITH q AS (
    SELECT * FROM unnest($1::bytea[], $2::text[], $7::text[]) WITH ORDINALITY
        AS q(hash, request, key, n)
)
SELECT DISTINCT ON (q.n) q.n, e.result, e.response, e.cost_usd, e.source_row,
       e.source_attempt, (extract(epoch FROM e.answer_time) * 1000)::int8 AS answer_ms,
       e.model_version, e.model, e.provider
FROM q
JOIN result_cache e ON e.hash = q.hash AND e.request = q.request
LEFT JOIN model_snapshots s ON s.provider = e.provider AND s.model = e.model
WHERE (e.team = $3 OR ($4 AND e.shared))
  AND e.answer_time > now() - $5 * interval '1 millisecond'
  AND (s.drift_time IS NULL OR e.answer_time > s.drift_time)
  AND (coalesce(s.version, '') = '' OR e.model_version = s.version)
  AND NOT EXISTS (
      SELECT 1 FROM rows r JOIN superseded_results x
          ON x.row_id = r.id AND x.result_version = r.result_version - 1
      WHERE EXISTS (SELECT 1 FROM superseded_results WHERE ledger_id = $6)
        AND r.ledger_id = $6 AND r.key = q.key AND r.status NOT IN ({{FINISHED}}))
ORDER BY q.n, (e.team = $3) DESC, e.answer_time DESC
