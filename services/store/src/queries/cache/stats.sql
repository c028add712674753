-- What the result cache did for a ledger (see cache.rs): rows answered from
-- it (an attempt each), what those answers cost first, how many of them
-- were cached before golden rows last saw their model drift, and the
-- lookups that missed.
--
-- Parameters: $1 ledger id.
SELECT count(a.*) AS hits,
       coalesce(sum((a.cached->>'cost_usd')::float8), 0) AS saved_usd,
       count(a.*) FILTER (WHERE s.drift_time IS NOT NULL AND (a.cached->>'answer_ms')::int8
                          < (extract(epoch FROM s.drift_time) * 1000)::int8) AS stale,
       coalesce((SELECT misses FROM cache_misses WHERE ledger_id = $1), 0) AS misses
FROM attempts a
LEFT JOIN model_snapshots s ON s.provider = a.cached->>'provider' AND s.model = a.cached->>'model'
WHERE a.ledger_id = $1 AND a.cached IS NOT NULL
