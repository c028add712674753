-- The spend of capped ledgers (see spend.rs): spent so far, and what live
-- claims hold reserved (each claim's per-row reservation times the rows it
-- still holds).
--
-- Parameters: $1 ledger ids.
SELECT l.id, l.policy->'spend_cap',
       coalesce(s.cost_usd, 0), coalesce(s.input_tokens, 0), coalesce(s.output_tokens, 0),
       coalesce(r.cost_usd, 0)::float8, coalesce(r.input_tokens, 0)::int8,
       coalesce(r.output_tokens, 0)::int8
FROM ledgers l
LEFT JOIN ledger_spend s ON s.ledger_id = l.id
LEFT JOIN (
    SELECT r.ledger_id, sum(r.cost_usd * c.held) AS cost_usd,
           sum(r.input_tokens * c.held) AS input_tokens,
           sum(r.output_tokens * c.held) AS output_tokens
    FROM claim_reservations r JOIN claims c ON c.token = r.token
    WHERE r.ledger_id = ANY($1) AND c.held > 0 GROUP BY 1) r ON r.ledger_id = l.id
WHERE l.id = ANY($1) AND jsonb_typeof(l.policy->'spend_cap') = 'object'
