-- Queues the reopened rows $1 (ids) of ledger $2 that wait for no
-- dependency (the others are queued when their last one SUCCEEDS).
INSERT INTO runnable (ledger_id, model, ready_time, row_id, depth)
SELECT $2, r.model, now(), r.id, r.depth FROM rows r
WHERE r.id = ANY($1) AND r.status = {{PENDING}} AND r.unmet_deps = 0
