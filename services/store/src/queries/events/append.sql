-- Appends job events in commit order (see `append` in events.rs; the caller
-- holds the event sequence lock): one per (job, type), each with a snapshot of
-- its job as the job read model shows it, then wakes watchers.
--
-- Parameters: $1 job ids; $2 event types (JobEventKind codes), in order;
-- $3 actor.
WITH e AS (
    SELECT * FROM unnest($1::int8[], $2::int2[]) WITH ORDINALITY AS e(job_id, type, n)
),
ins AS (
    INSERT INTO job_events (ledger_id, job_id, type, actor, job)
    SELECT x.ledger_id, x.id, e.type, $3, to_jsonb(x)
    FROM e JOIN ({{JOB_SELECT}}) x ON x.id = e.job_id
    ORDER BY e.n
    RETURNING seq
)
SELECT pg_notify('{{CHANNEL}}', coalesce(max(seq), 0)::text) FROM ins
