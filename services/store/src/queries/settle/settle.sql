-- The one statement that settles rows of one claim (settle.rs, `Settlement`):
-- writes each row's next state, records its attempt, requeues what is claimable
-- again, counts down or BLOCKs dependants, and takes the rows out of the claim.
-- It writes every row given or none: only when the claim is live and holds each
-- of them. Codes in double braces come from tally-core (codes.rs).
--
-- Parameters (one array element per row written, from `$3`):
--   $1 ledger id, $2 claim token,
--   $3 ids, $4 new statuses, $5 $6 $7 provider/content/infra failures,
--   $8 attempt counts, $9 rules, $10 errors, $11 results,
--   $12..$15 usage deltas (input, output, thinking, cached tokens),
--   $16 retry delays (ms), $17 whether an attempt is recorded, $18 its budget,
--   $19 whether rows remember the claim as their last, $20 the actor,
--   $21 the provider's responses (kept with results),
--   $22 how many rows are given,
--   $23 NULL when the caller holds the claim's lock and read what it holds;
--       otherwise the claim's `held` as the caller last saw it (the claim
--       cache): the claim must then be ACTIVE, in its lease, without a job
--       and hold exactly that many rows (no settlement the caller does not
--       know of happened),
--   $24 $25 each attempt's provider request id and granted tier (empty
--       arrays: none; the attempt's lane is the claim's),
--   $26 where an attempt answered from the result cache got its answer
--       (JSON; empty array: none was).
--
-- Answers `settled`, the rows written ($22, or 0 when the fence missed),
-- `held`, what the claim holds after (NULL when nothing was written), the
-- time, and the rows finished with their result versions (the results log).
WITH RECURSIVE c AS (
    -- By token only (the primary key): a condition on expire_time in the
    -- WHERE could send the planner through the index of every active claim.
    SELECT token, row_ids, held, job_id, lane,
           ($23::int4 IS NULL OR (state = {{CLAIM_ACTIVE}} AND expire_time > now()
                                  AND job_id IS NULL AND held = $23)) AS live
    FROM claims WHERE token = $2 AND ledger_id = $1
    FOR UPDATE
),
w AS (
    SELECT * FROM unnest($3::int8[], $4::int2[], $5::int4[], $6::int4[], $7::int4[],
                         $8::int4[], $9::text[], $10::text[], $11::text[], $12::int8[],
                         $13::int8[], $14::int8[], $15::int8[], $16::int8[], $17::bool[],
                         $18::int2[], $21::text[], $24::text[], $25::text[], $26::text[])
        AS w(id, status, pf, cf, inf, attempts, rule, err, result, d_in, d_out,
             d_think, d_cached, delay_ms, recorded, a_budget, response, request_id, tier,
             cached)
),
-- The fence: a live claim holding every row given (all or nothing).
fenced AS (
    SELECT c.live AND (SELECT count(*) FROM w
                       WHERE w.id IN (SELECT unnest(c.row_ids))) = $22 AS ok
    FROM c
),
upd AS (
    UPDATE rows r SET
        status = w.status,
        provider_failures = coalesce(w.pf, 0),
        content_failures = coalesce(w.cf, 0),
        infra_failures = coalesce(w.inf, 0),
        attempts = w.attempts,
        rule = coalesce(w.rule, r.rule),
        last_error = coalesce(w.err, r.last_error),
        result = coalesce(w.result, r.result),
        response = coalesce(w.response, r.response),
        -- running totals saturate at the int8 maximum, never overflow (in
        -- int8: numeric arithmetic cost a third of a millisecond a 500-row
        -- report; a delta is never negative, the server refuses one)
        input_tokens = CASE WHEN w.d_in > 0 AND r.input_tokens > 9223372036854775807 - w.d_in
            THEN 9223372036854775807 ELSE r.input_tokens + coalesce(w.d_in, 0) END,
        output_tokens = CASE WHEN w.d_out > 0 AND r.output_tokens > 9223372036854775807 - w.d_out
            THEN 9223372036854775807 ELSE r.output_tokens + coalesce(w.d_out, 0) END,
        thinking_tokens = CASE WHEN w.d_think > 0 AND r.thinking_tokens > 9223372036854775807 - w.d_think
            THEN 9223372036854775807 ELSE r.thinking_tokens + coalesce(w.d_think, 0) END,
        cached_tokens = CASE WHEN w.d_cached > 0 AND r.cached_tokens > 9223372036854775807 - w.d_cached
            THEN 9223372036854775807 ELSE r.cached_tokens + coalesce(w.d_cached, 0) END,
        last_claim_id = CASE WHEN $19 THEN $2 ELSE r.last_claim_id END,
        job_id = coalesce((SELECT job_id FROM c), r.job_id),
        next_attempt_time = CASE WHEN w.status = {{RETRYABLE}}
            THEN now() + coalesce(w.delay_ms, 0) * interval '1 millisecond' END,
        update_time = now()
    FROM w
    WHERE r.id = w.id AND r.status IN ({{CLAIMABLE}})
      AND coalesce((SELECT ok FROM fenced), false)
    RETURNING r.id, r.status, r.rule, r.model, r.next_attempt_time, r.prompt_name,
              r.prompt_version, r.attempts, r.last_error, w.d_in, w.d_out, w.d_think,
              w.d_cached, w.recorded, w.a_budget, w.request_id, w.tier, r.depth,
              r.result_version, w.cached
),
counted AS (
    SELECT d.row_id AS id, count(*)::int AS n FROM row_deps d
    WHERE d.dep_id IN (SELECT id FROM upd WHERE status = {{SUCCEEDED}})
    GROUP BY d.row_id
),
doomed(id) AS (
    SELECT d.row_id FROM row_deps d WHERE d.dep_id IN (SELECT id FROM upd WHERE status = {{PERMANENT}})
    UNION
    SELECT d.row_id FROM row_deps d JOIN doomed x ON d.dep_id = x.id
),
-- Mirrors Event::DependencyFailed: only BLOCKABLE rows become BLOCKED.
deps AS (
    UPDATE rows r SET
        unmet_deps = r.unmet_deps - coalesce(t.n, 0),
        status = CASE WHEN t.doomed AND r.status IN ({{BLOCKABLE}}) THEN {{BLOCKED}} ELSE r.status END,
        rule = CASE WHEN t.doomed AND r.status IN ({{BLOCKABLE}})
            THEN {{BLOCKED_RULE}} ELSE r.rule END,
        last_error = CASE WHEN t.doomed AND r.status IN ({{BLOCKABLE}})
            THEN {{BLOCKED_MESSAGE}} ELSE r.last_error END,
        update_time = now()
    FROM (SELECT coalesce(c.id, x.id) AS id, c.n, x.id IS NOT NULL AS doomed
          FROM counted c FULL JOIN doomed x ON x.id = c.id) t
    WHERE r.id = t.id AND (t.n IS NOT NULL OR r.status IN ({{BLOCKABLE}}))
    RETURNING r.id, r.status, r.unmet_deps, r.model, r.depth
),
queued AS (
    INSERT INTO runnable (ledger_id, model, ready_time, row_id, depth)
    SELECT $1, model, coalesce(next_attempt_time, now()), id, depth
    FROM upd WHERE status IN ({{CLAIMABLE}})
    UNION ALL
    SELECT $1, model, now(), id, depth FROM deps WHERE status = {{PENDING}} AND unmet_deps = 0
),
recorded AS (
    INSERT INTO attempts (ledger_id, row_id, number, claim_id, job_id, model,
                          prompt_name, prompt_version, outcome, rule, budget,
                          input_tokens, output_tokens, thinking_tokens, cached_tokens,
                          error, actor, lane, request_id, tier, cached)
    SELECT $1, id, attempts, $2, (SELECT job_id FROM c), model, prompt_name,
           prompt_version, status, rule, a_budget, coalesce(d_in, 0), coalesce(d_out, 0),
           coalesce(d_think, 0), coalesce(d_cached, 0), last_error, $20,
           (SELECT lane FROM c), coalesce(request_id, ''), coalesce(tier, ''),
           cached::jsonb
    FROM upd WHERE recorded
),
kept AS MATERIALIZED (
    SELECT ARRAY(SELECT x FROM unnest(c.row_ids) x EXCEPT SELECT id FROM upd) AS ids
    FROM c, fenced WHERE fenced.ok AND (SELECT count(*) FROM upd) = $22
),
-- Every claim without a job is DONE once it holds nothing; a claim
-- with one stays ACTIVE (its lease is the job owner's) until the job
-- is finished, adopted or abandoned.
dropped AS (
    UPDATE claims k SET row_ids = kept.ids, held = cardinality(kept.ids),
           state = CASE WHEN cardinality(kept.ids) = 0 AND k.state = {{CLAIM_ACTIVE}}
                             AND k.job_id IS NULL THEN {{CLAIM_DONE}} ELSE k.state END
    FROM kept
    WHERE k.token = $2
    RETURNING k.held
)
SELECT (SELECT count(*) FROM upd) AS settled, (SELECT held FROM dropped) AS held, now(),
       -- The rows finished and their result versions, for the results log.
       ARRAY(SELECT id FROM upd WHERE status IN ({{FINISHED}}) ORDER BY id) AS finished,
       ARRAY(SELECT result_version FROM upd WHERE status IN ({{FINISHED}}) ORDER BY id)
           AS versions
