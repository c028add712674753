-- The claim statement (see `take_rows` in claims.rs): unless the ledger is
-- paused or ($8) expired claims of the ledger wait to be rescued, choose the
-- model, take queue entries and their rows with `tally_claim_runnable`, and
-- record the claim holding them. One row back, with one array per column.
--
-- Parameters: $1 ledger id; $2 model (NULL: that of the oldest ready row);
-- $3 max rows; $4 the new claim's token; $5 worker; $6 request id (or NULL);
-- $7 lease (ms); $8 whether to look for expired claims first; $9 byte budget
-- (NULL: none); $10 bytes counted per row on top of its own; $11 provider
-- (NULL: any): only models of the ledger listed with it.
WITH {{CHOOSE}},
upd AS (
    SELECT * FROM tally_claim_runnable($1, (SELECT model FROM chosen), $3::int4, $4,
                                       $9::int8, $10::int4)
),
made AS (
    INSERT INTO claims (token, ledger_id, worker, model, request_id, row_ids,
                        row_count, held, expire_time)
    SELECT $4, $1, $5, (SELECT model FROM chosen), $6, array_agg(id ORDER BY id),
           count(*), count(*), now() + $7 * interval '1 millisecond'
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
       array_agg(u.attempts) AS attempts, max(u.held_back) AS held_back,
       (SELECT create_time FROM made) AS create_time,
       (SELECT expire_time FROM made) AS expire_time
FROM (SELECT * FROM upd ORDER BY id) u
