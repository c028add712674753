-- The snapshots of the job events about to be appended (see `append` in
-- events.rs): each job as the job read model shows it, as of the calling
-- transaction. Read before the event sequence lock is taken, so that the
-- lock is held for the insert and the commit only.
--
-- Parameters: $1 job ids, $2 event types (JobEventKind codes), one element
-- per event, in order. Returns one row of arrays, in that order, as
-- append.sql takes them: ledger ids, job ids, types, snapshots (NULL when
-- there is no event).
SELECT array_agg(x.ledger_id ORDER BY e.n), array_agg(x.id ORDER BY e.n),
       array_agg(e.type ORDER BY e.n), array_agg(to_jsonb(x)::text ORDER BY e.n)
FROM unnest($1::int8[], $2::int2[]) WITH ORDINALITY AS e(job_id, type, n)
JOIN ({{JOB_SELECT}}) x ON x.id = e.job_id
