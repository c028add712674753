-- The usage of the last successful attempt of each of the rows $2 (ids)
-- of ledger $1, with its model and lane: what asking it again costs.
SELECT DISTINCT ON (a.row_id) a.model, a.lane, a.input_tokens, a.output_tokens,
       a.thinking_tokens, a.cached_tokens
FROM attempts a
WHERE a.ledger_id = $1 AND a.row_id = ANY($2) AND a.outcome = {{SUCCEEDED}}
ORDER BY a.row_id, a.number DESC
