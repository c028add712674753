-- The claim statement (see `take_rows` in claims.rs): unless the ledger is
-- paused or ($8) expired claims of the ledger wait to be rescued, choose the
-- model, take queue entries and their rows with `tally_claim_runnable`, and
-- record the claim holding them. One row back, with one array per column.
--
-- Parameters: $1 ledger id; $2 model (NULL: that of the oldest ready row);
-- $3 max rows; $4 the new claim's token; $5 worker; $6 request id (or NULL);
-- $7 lease (ms); $8 whether to look for expired claims first; $9 byte budget
-- (NULL: none); $10 bytes counted per row on top of its own; $11 provider
-- (NULL: any): only models of the ledger listed with it; $12 the lane's code;
-- $13 $14 the depths the lane takes now (tally_core::route::band).
WITH due AS (
    SELECT $8 AND EXISTS (
        SELECT 1 FROM claims c WHERE c.ledger_id = $1 AND {{RESCUE_DUE}}) AS due,
           coalesce((SELECT l.pause_reason IS NOT NULL FROM ledgers l
                     WHERE l.id = $1), false) AS paused
),
chosen AS (
    SELECT CASE WHEN (SELECT due OR paused FROM due) THEN NULL
        WHEN $11::text IS NULL THEN coalesce($2::text, (
            SELECT m.model FROM ledger_models m
            CROSS JOIN LATERAL (
                SELECT r.ready_time FROM runnable r
                WHERE r.ledger_id = m.ledger_id AND r.model = m.model
                  AND r.ready_time <= now() AND r.depth BETWEEN $13 AND $14
                ORDER BY r.ready_time LIMIT 1) first
            WHERE m.ledger_id = $1
            ORDER BY first.ready_time LIMIT 1))
        ELSE (
            SELECT m.model FROM ledger_models m
            CROSS JOIN LATERAL (
                SELECT r.ready_time FROM runnable r
                WHERE r.ledger_id = m.ledger_id AND r.model = m.model
                  AND r.ready_time <= now() AND r.depth BETWEEN $13 AND $14
                ORDER BY r.ready_time LIMIT 1) first
            WHERE m.ledger_id = $1 AND m.provider = $11
              AND ($2::text IS NULL OR m.model = $2)
            ORDER BY first.ready_time LIMIT 1) END AS model
),
upd AS (
    SELECT * FROM tally_claim_runnable($1, (SELECT model FROM chosen), $3::int4, $4,
                                       $9::int8, $10::int4, $13::int4, $14::int4)
),
made AS (
    INSERT INTO claims (token, ledger_id, worker, model, request_id, row_ids,
                        row_count, held, expire_time, lane)
    SELECT $4, $1, $5, (SELECT model FROM chosen), $6, array_agg(id ORDER BY id),
           count(*), count(*), now() + $7 * interval '1 millisecond', $12
    FROM upd HAVING count(*) > 0
    RETURNING create_time, expire_time
)
SELECT (SELECT due FROM due) AS due, (SELECT paused FROM due) AS paused,
       array_agg(u.id) AS ids, array_agg(u.key) AS keys,
       array_agg(u.payload) AS payloads, array_agg(u.prompt_name) AS prompt_names,
       array_agg(u.prompt_version) AS prompt_versions, array_agg(u.model) AS models,
       array_agg(u.provider_failures) AS provider_failures,
       array_agg(u.content_failures) AS content_failures,
       array_agg(u.infra_failures) AS infra_failures,
       array_agg(u.attempts) AS attempts, array_agg(u.has_deps) AS has_deps,
       max(u.held_back) AS held_back,
       (SELECT create_time FROM made) AS create_time,
       (SELECT expire_time FROM made) AS expire_time
FROM (SELECT * FROM upd ORDER BY id) u
