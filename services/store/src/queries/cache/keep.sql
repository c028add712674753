-- Answers reported SUCCEEDED by the claim whose lookup missed (see
-- cache.rs): each is cached under the request its row remembered for that
-- claim (an answer to another request with the same hash never replaces
-- one; rows that made the same request keep one answer), and the model version its provider reported becomes the model's
-- current one.
--
-- Parameters: $1 ledger id; $2 claim token; $3 the ledger's name; $4 keys;
-- $5 the model versions reported; $6..$9 usage (input, output, thinking,
-- cached tokens); $10 each answer's cost.
WITH i AS (
    SELECT * FROM unnest($4::text[], $5::text[], $6::int8[], $7::int8[], $8::int8[],
                         $9::int8[], $10::float8[])
        AS i(key, version, d_in, d_out, d_think, d_cached, cost)
),
q AS (
    DELETE FROM cache_requests q USING rows r, i
    WHERE q.ledger_id = $1 AND r.ledger_id = $1 AND r.key = i.key AND q.row_id = r.id
      AND q.claim_id = $2
    RETURNING q.team, q.shared, q.hash, q.request, q.provider, q.model, i.version, i.d_in,
              i.d_out, i.d_think, i.d_cached, i.cost, r.result, r.response, r.key,
              r.attempts, r.status
),
kept AS (
    INSERT INTO result_cache (team, shared, hash, request, provider, model, model_version,
                              result, response, input_tokens, output_tokens, thinking_tokens,
                              cached_tokens, cost_usd, source_row, source_attempt, bytes)
    -- Rows of one report may have made the same request: one answer each.
    SELECT DISTINCT ON (hash, team) team, shared, hash, request, provider, model, version,
           result, response, d_in, d_out, d_think, d_cached, cost,
           'ledgers/' || $3 || '/rows/' || key, attempts,
           octet_length(request) + octet_length(result) + coalesce(octet_length(response), 0)
    FROM q WHERE status = {{SUCCEEDED}} AND result IS NOT NULL
    ON CONFLICT (hash, team) DO UPDATE SET
        shared = excluded.shared, provider = excluded.provider, model = excluded.model,
        model_version = excluded.model_version, result = excluded.result,
        response = excluded.response, input_tokens = excluded.input_tokens,
        output_tokens = excluded.output_tokens, thinking_tokens = excluded.thinking_tokens,
        cached_tokens = excluded.cached_tokens, cost_usd = excluded.cost_usd,
        source_row = excluded.source_row, source_attempt = excluded.source_attempt,
        answer_time = now(), bytes = excluded.bytes
    WHERE result_cache.request = excluded.request
    RETURNING provider, model, model_version
)
INSERT INTO model_snapshots (provider, model, version, version_time)
SELECT DISTINCT ON (provider, model) provider, model, model_version, now()
FROM kept WHERE model_version <> ''
ON CONFLICT (provider, model) DO UPDATE SET version = excluded.version,
    version_time = excluded.version_time
