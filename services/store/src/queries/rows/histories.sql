-- The attempts of several rows (see `histories` in rows.rs): the newest of
-- each row while their text adds up to a budget (the newest always), oldest
-- first; `total` counts them all, so the caller knows how many were left out.
--
-- Parameters: $1 ledger id; $2 row ids; $3 bytes counted per attempt on top
-- of its text; $4 the byte budget per row.
SELECT * FROM (
    SELECT a.row_id, a.number, a.claim_id, j.public_id AS job, j.batch, a.model,
           a.prompt_name, a.prompt_version, a.outcome, a.rule, a.budget,
           a.input_tokens, a.output_tokens, a.thinking_tokens, a.cached_tokens,
           a.error, a.actor, a.time, a.lane, a.request_id, a.tier, a.cached,
           sum(octet_length(a.error) + octet_length(a.model)
               + octet_length(a.prompt_name) + octet_length(a.prompt_version)
               + octet_length(a.rule) + octet_length(a.actor)
               + octet_length(a.request_id) + octet_length(a.tier)
               + coalesce(octet_length(a.cached::text), 0)
               + coalesce(octet_length(j.public_id), 0)
               + coalesce(octet_length(j.batch), 0) + $3)
               OVER (PARTITION BY a.row_id ORDER BY a.number DESC) AS upto,
           row_number() OVER (PARTITION BY a.row_id ORDER BY a.number DESC) AS nth,
           count(*) OVER (PARTITION BY a.row_id) AS total
    FROM attempts a LEFT JOIN jobs j ON j.id = a.job_id
    WHERE a.ledger_id = $1 AND a.row_id = ANY($2)) h
WHERE h.nth = 1 OR h.upto <= $4
ORDER BY h.row_id, h.number
