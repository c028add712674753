-- The claim statement for a group of single-row claims (see `take_group` in
-- claims.rs and claim_group.rs): what take.sql does for one claim, done once
-- for several callers of the same ledger, model and provider, each of whom
-- asked for one row. Rows are taken once, in id order, and the nth row goes
-- to the nth caller; a caller left without a row gets no claim record. One
-- result row per caller, in caller order, with take.sql's columns.
--
-- Parameters: $1 ledger id; $2 model (NULL: that of the oldest ready row);
-- $3 the callers' new claim tokens; $4 their workers; $5 their leases (ms);
-- $6 whether to look for expired claims first; $7 provider (NULL: any):
-- only models of the ledger listed with it.
WITH {{CHOOSE}},
callers AS (
    SELECT k.ord, k.token, k.worker, k.lease_ms
    FROM unnest($3::uuid[], $4::text[], $5::int8[]) WITH ORDINALITY
        AS k(token, worker, lease_ms, ord)
),
upd AS MATERIALIZED (
    SELECT t.*, row_number() OVER (ORDER BY t.id) AS ord
    FROM tally_claim_runnable($1, (SELECT model FROM chosen),
                              cardinality($3::uuid[]), NULL::uuid, NULL::int8,
                              0) t
),
made AS (
    INSERT INTO claims (token, ledger_id, worker, model, row_ids, row_count, held,
                        expire_time)
    SELECT k.token, $1, k.worker, (SELECT model FROM chosen), ARRAY[u.id], 1, 1,
           now() + k.lease_ms * interval '1 millisecond'
    FROM upd u JOIN callers k ON k.ord = u.ord
    RETURNING token, create_time, expire_time
)
SELECT (SELECT due FROM due) AS due, (SELECT paused FROM due) AS paused,
       CASE WHEN u.id IS NULL THEN NULL ELSE ARRAY[u.id] END AS ids,
       CASE WHEN u.id IS NULL THEN NULL ELSE ARRAY[u.key] END AS keys,
       CASE WHEN u.id IS NULL THEN NULL ELSE ARRAY[u.payload] END AS payloads,
       CASE WHEN u.id IS NULL THEN NULL ELSE ARRAY[u.prompt_name] END AS prompt_names,
       CASE WHEN u.id IS NULL THEN NULL ELSE ARRAY[u.prompt_version] END AS prompt_versions,
       CASE WHEN u.id IS NULL THEN NULL ELSE ARRAY[u.model] END AS models,
       CASE WHEN u.id IS NULL THEN NULL ELSE ARRAY[u.provider_failures] END
           AS provider_failures,
       CASE WHEN u.id IS NULL THEN NULL ELSE ARRAY[u.content_failures] END
           AS content_failures,
       CASE WHEN u.id IS NULL THEN NULL ELSE ARRAY[u.infra_failures] END AS infra_failures,
       CASE WHEN u.id IS NULL THEN NULL ELSE ARRAY[u.attempts] END AS attempts,
       0 AS held_back, m.create_time, m.expire_time
FROM callers k
LEFT JOIN upd u ON u.ord = k.ord
LEFT JOIN made m ON m.token = k.token
ORDER BY k.ord
