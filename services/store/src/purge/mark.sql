-- The mark of DeleteLedger, after its checks, in their transaction: the
-- ledger becomes DELETING, every claim still ACTIVE is expired holding
-- nothing (no row is written: the rows are about to go), every open job is
-- closed as abandoned, and the purge is queued.
-- $1 ledger id, $2 forced, $3 actor.
-- Answers (claims expired, jobs abandoned).
WITH marked AS (
    UPDATE ledgers SET delete_time = now(), etag = etag + 1, update_time = now()
    WHERE id = $1
    RETURNING id
), claims_closed AS (
    UPDATE claims SET state = {{CLAIM_EXPIRED}}, row_ids = '{}', held = 0
    WHERE ledger_id = $1 AND state = {{CLAIM_ACTIVE}}
    RETURNING (expire_time > now()) AS live
), jobs_closed AS (
    UPDATE jobs SET end_time = now(), update_time = now(),
                    error = CASE WHEN error = '' THEN 'abandoned: its ledger was deleted'
                                 ELSE error END
    WHERE ledger_id = $1 AND end_time IS NULL
    RETURNING 1
), counts AS (
    SELECT (SELECT count(*) FILTER (WHERE live) FROM claims_closed)::int4 AS claims,
           (SELECT count(*) FROM jobs_closed)::int4 AS jobs
)
INSERT INTO ledger_purges (ledger_id, forced, actor, claims_expired, jobs_abandoned)
SELECT m.id, $2, $3, c.claims, c.jobs FROM marked m, counts c
RETURNING claims_expired, jobs_abandoned
