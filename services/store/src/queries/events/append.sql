-- Appends job events in commit order (see `append` in events.rs; the caller
-- holds the event sequence lock): one per (job, type), each with the
-- snapshot of its job render.sql read, then wakes watchers.
--
-- Parameters: $1 ledger ids, $2 job ids, $3 event types (JobEventKind
-- codes), $4 snapshots (jsonb as text), one element per event, in order;
-- $5 actor.
WITH ins AS (
    INSERT INTO job_events (ledger_id, job_id, type, actor, job)
    SELECT e.ledger_id, e.job_id, e.type, $5, e.job::jsonb
    FROM unnest($1::int8[], $2::int8[], $3::int2[], $4::text[])
        WITH ORDINALITY AS e(ledger_id, job_id, type, job, n)
    ORDER BY e.n
    RETURNING seq
)
SELECT pg_notify('{{CHANNEL}}', coalesce(max(seq), 0)::text) FROM ins
