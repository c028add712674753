-- The requests of a claim's rows that missed (see cache.rs): kept with each
-- row still held by the live claim, so that its answer is cached once the
-- claim reports it SUCCEEDED. A row's earlier request is replaced.
--
-- Parameters: $1 ledger id; $2 claim token; $3 keys; $4 hashes; $5 the
-- canonical requests; $6 the team; $7 whether the ledger shares.
WITH c AS (
    SELECT row_ids FROM claims
    WHERE token = $2 AND ledger_id = $1 AND state = {{CLAIM_ACTIVE}} AND expire_time > now()
)
INSERT INTO cache_requests (ledger_id, row_id, claim_id, hash, request, provider, model, team, shared)
SELECT $1, r.id, $2, q.hash, q.request, coalesce(m.provider, ''), r.model, $6, $7
FROM unnest($3::text[], $4::bytea[], $5::text[]) AS q(key, hash, request)
JOIN rows r ON r.ledger_id = $1 AND r.key = q.key
LEFT JOIN ledger_models m ON m.ledger_id = $1 AND m.model = r.model
WHERE r.id = ANY((SELECT row_ids FROM c)::bigint[])
ON CONFLICT (ledger_id, row_id) DO UPDATE SET
    claim_id = excluded.claim_id, hash = excluded.hash, request = excluded.request,
    provider = excluded.provider, model = excluded.model, team = excluded.team,
    shared = excluded.shared, time = now()
