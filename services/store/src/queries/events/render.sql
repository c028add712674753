-- The snapshots of the job events about to be appended (see `append` in
-- events.rs): each job as the job read model shows it, as of the calling
-- transaction. Read before the event sequence lock is taken, so that the
-- lock is held for the insert and the commit only.
--
-- Parameters: $1 job ids, in event order. Returns each event's place in
-- that order (from 1), its job's ledger id and id, and the snapshot.
SELECT e.n, x.ledger_id, x.id, to_jsonb(x)::text
FROM unnest($1::int8[]) WITH ORDINALITY AS e(job_id, n)
JOIN ({{JOB_SELECT}}) x ON x.id = e.job_id
ORDER BY e.n
