-- Which of the rows $2 (keys) of ledger $1 are being asked again: not
-- final, with the result of their previous version kept as superseded.
SELECT r.key FROM rows r
WHERE r.ledger_id = $1 AND r.key = ANY($2) AND r.status NOT IN ({{FINISHED}})
  AND EXISTS (SELECT 1 FROM superseded_results s
              WHERE s.row_id = r.id AND s.result_version = r.result_version - 1)
