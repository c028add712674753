-- Asks again the SUCCEEDED rows $2 (ids) of ledger $1 (Event::Reanswer):
-- each row's result and response are kept in `superseded_results` under the
-- version they were delivered as, and the row goes back to PENDING with
-- fresh budgets, its next result a new version (tally_core::delivery).
-- A row is asked again only while none of its dependants is queued or held
-- (CLAIMABLE with every dependency met): each row is on the run queue at
-- most once, and no dependant is sent with an answer about to be replaced.
-- $3 the rule shown until it is answered, $4 its message, $5 the reason
-- recorded, $6 the actor. Answers the rows reopened.
WITH target AS (
    SELECT r.id FROM rows r
    WHERE r.id = ANY($2) AND r.ledger_id = $1 AND r.status = {{SUCCEEDED}}
      AND NOT EXISTS (
          SELECT 1 FROM row_deps e JOIN rows d ON d.id = e.row_id
          WHERE e.dep_id = r.id AND d.status IN ({{CLAIMABLE}}) AND d.unmet_deps = 0)
),
kept AS (
    INSERT INTO superseded_results (row_id, ledger_id, result_version, result, response,
                                    rule, reason, actor)
    SELECT r.id, $1, r.result_version, r.result, r.response, $3, $5, $6
    FROM rows r JOIN target t ON t.id = r.id
)
UPDATE rows r SET status = {{PENDING}}, provider_failures = 0, content_failures = 0,
       infra_failures = 0, rule = $3, last_error = $4, next_attempt_time = NULL,
       result = NULL, response = NULL, result_version = r.result_version + 1,
       update_time = now()
FROM target t
WHERE r.id = t.id
RETURNING r.id
