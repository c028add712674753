-- One batch of a ledger's jobs with the provider operations behind them
-- (an operation belongs to the job whose `batch` it is; jobs.batch is
-- UNIQUE), their event logs and delivery ids.
-- $1 ledger id, $2 jobs at most. Answers (jobs, operations, operation
-- events, deliveries) deleted.
WITH batch AS (
    SELECT id, batch FROM jobs WHERE ledger_id = $1 ORDER BY id DESC LIMIT $2
), events AS (
    DELETE FROM operation_events e USING batch b WHERE e.operation = b.batch
    RETURNING 1
), deliveries AS (
    DELETE FROM operation_deliveries d USING batch b WHERE d.operation = b.batch
    RETURNING 1
), ops AS (
    DELETE FROM operations o USING batch b WHERE o.name = b.batch
    RETURNING 1
), gone AS (
    DELETE FROM jobs j USING batch b WHERE j.id = b.id
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone)::int8, (SELECT count(*) FROM ops)::int8,
       (SELECT count(*) FROM events)::int8, (SELECT count(*) FROM deliveries)::int8
