-- Makes the job of a claim (see `create_job` in jobs.rs): the job holds the
-- claim's rows, and the claim points at its job.
--
-- Parameters: $1 the claim's token; $2 the job's public id; $3 the owner when
-- the claim names no worker; $4 the job's estimated input tokens; $5 the
-- provider account; $6 the team.
WITH c AS (
    SELECT token, ledger_id, model, worker, held, row_ids FROM claims WHERE token = $1
),
j AS (
    INSERT INTO jobs (public_id, ledger_id, origin, claim_token, model, owner, row_count, row_ids,
                      est_tokens, provider_account, team)
    SELECT $2, ledger_id, token, token, model,
           CASE WHEN worker <> '' THEN worker ELSE $3 END, held, row_ids, $4, $5, $6
    FROM c RETURNING id
),
-- The job's rows are the claim's: readers find the job of
-- a held row through its claim, and settling it records it.
cl AS (UPDATE claims SET job_id = (SELECT id FROM j) WHERE token = $1)
SELECT id FROM j
