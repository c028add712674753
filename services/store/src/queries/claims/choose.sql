-- The first two CTEs of both claim statements (take.sql, take_group.sql):
-- `due` (expired claims of the ledger wait to be rescued, when
-- {{CHECK_DUE}} asks; the ledger is paused) and `chosen` (the model: given, or
-- that of the oldest ready row; with a provider, only models of the ledger
-- listed with it). {{LEDGER}}, {{CHECK_DUE}}, {{MODEL}} and {{PROVIDER}} are
-- the statement's parameters.
due AS (
    SELECT {{CHECK_DUE}} AND EXISTS (
        SELECT 1 FROM claims c WHERE c.ledger_id = {{LEDGER}} AND {{RESCUE_DUE}}) AS due,
           coalesce((SELECT l.pause_reason IS NOT NULL FROM ledgers l
                     WHERE l.id = {{LEDGER}}), false) AS paused
),
chosen AS (
    SELECT CASE WHEN (SELECT due OR paused FROM due) THEN NULL
        WHEN {{PROVIDER}}::text IS NULL THEN coalesce({{MODEL}}::text, (
            SELECT m.model FROM ledger_models m
            CROSS JOIN LATERAL (
                SELECT r.ready_time FROM runnable r
                WHERE r.ledger_id = m.ledger_id AND r.model = m.model
                  AND r.ready_time <= now()
                ORDER BY r.ready_time LIMIT 1) first
            WHERE m.ledger_id = {{LEDGER}}
            ORDER BY first.ready_time LIMIT 1))
        ELSE (
            SELECT m.model FROM ledger_models m
            CROSS JOIN LATERAL (
                SELECT r.ready_time FROM runnable r
                WHERE r.ledger_id = m.ledger_id AND r.model = m.model
                  AND r.ready_time <= now()
                ORDER BY r.ready_time LIMIT 1) first
            WHERE m.ledger_id = {{LEDGER}} AND m.provider = {{PROVIDER}}
              AND ({{MODEL}}::text IS NULL OR m.model = {{MODEL}})
            ORDER BY first.ready_time LIMIT 1) END AS model
)
