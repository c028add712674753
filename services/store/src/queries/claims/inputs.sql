-- The dependency results given to the rows a claim took (see `give_inputs`
-- in claims.rs): every edge of the rows $2 (keys) of ledger $1, with the
-- dependency's key and result and the name the dependant gave it. Each edge
-- records the hash of the result given (`used_hash`): the inputs the row's
-- answer is made from (and no longer `changed`).
UPDATE row_deps e SET used_hash = sha256(convert_to(coalesce(d.result, ''), 'UTF8')),
                      changed = false
FROM rows c, rows d
WHERE c.ledger_id = $1 AND c.key = ANY($2::text[]) AND e.row_id = c.id AND d.id = e.dep_id
RETURNING c.key AS row_key, d.key, e.name, coalesce(d.result, '') AS result,
          encode(e.used_hash, 'hex') AS result_hash
